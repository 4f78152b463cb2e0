// attribute_kernel, off_cpu_pieces and top_stalls on hand-built profiles:
// each rule of analysis/sched.h pinned by a profile whose figures are worked out
// in the comments, and a randomized check against a brute-force overlap sum.

#include "analysis/sched.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernel_fixture.h"
#include "model/tree.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

constexpr uint64_t kMain = 4242;  // make_lane's native_tid

OffCpuInterval blocked(int64_t start, int64_t wake, int64_t end, uint64_t waker = 0,
                       uint64_t tid = kMain, uint32_t pid = 0) {
  OffCpuInterval iv;
  iv.tid = tid;
  iv.pid = pid;
  iv.start_ns = start;
  iv.wake_ns = wake;
  iv.end_ns = end;
  iv.blocked = true;
  iv.waker_tid = waker;
  iv.prev_state = 1;  // TASK_INTERRUPTIBLE
  return iv;
}

OffCpuInterval preempted(int64_t start, int64_t end, uint64_t tid = kMain, uint32_t pid = 0) {
  OffCpuInterval iv;
  iv.tid = tid;
  iv.pid = pid;
  iv.start_ns = start;
  iv.wake_ns = start;
  iv.end_ns = end;
  return iv;
}

ThreadLifetime lifetime(uint64_t tid, uint64_t parent, int64_t start, int64_t end,
                        uint32_t pid = 0) {
  ThreadLifetime t;
  t.tid = tid;
  t.pid = pid;
  t.parent_tid = parent;
  t.start_ns = start;
  t.end_ns = end;
  t.name = "worker";
  return t;
}

// predict 0..100'000 on the main thread:
//   load   10'000..40'000 (span 1)
//     read 20'000..30'000 (span 2)
//   score  50'000..90'000 (span 3)
class SchedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t predict = test::user_fn(p, "predict"), load = test::user_fn(p, "load"),
                   read = test::user_fn(p, "read"), score = test::user_fn(p, "score");
    p.start_ns = 0;
    p.end_ns = 100'000;
    p.meta["pid"] = "77";
    p.lanes.push_back(
        make_lane({call(0, predict), call(10'000, load), call(20'000, read), ret(30'000),
                   ret(40'000), call(50'000, score), ret(90'000), ret(100'000)}));
    build_tree(p);
    ASSERT_EQ(p.spans.size(), 4u);
    p.kernel.present = true;
  }
  const SpanKernel& k(size_t span) const { return p.kernel.spans.at(span); }
  Profile p;
};

TEST_F(SchedTest, AnIntervalCountsForTheInnermostSpanAndItsAncestors) {
  // Asleep 22'000..27'000, woken by 900, back on the CPU at 28'000: inside read.
  p.kernel.off_cpu = {blocked(22'000, 27'000, 28'000, 900)};
  attribute_kernel(p);
  ASSERT_EQ(p.kernel.spans.size(), 4u);
  for (const size_t s : {0u, 1u, 2u}) {
    SCOPED_TRACE(s);
    EXPECT_EQ(k(s).off_cpu_ns, 6'000);
    EXPECT_EQ(k(s).blocked_ns, 5'000);
    EXPECT_EQ(k(s).runq_ns, 1'000);
    EXPECT_EQ(k(s).voluntary_switches, 1u);
    EXPECT_EQ(k(s).involuntary_switches, 0u);
    EXPECT_EQ(k(s).top_waker_tid, 900u);
    EXPECT_EQ(k(s).top_waker_ns, 5'000);
  }
  EXPECT_EQ(k(2).on_cpu_ns, 10'000 - 6'000);
  EXPECT_EQ(k(1).on_cpu_ns, 30'000 - 6'000);
  EXPECT_EQ(k(0).on_cpu_ns, 100'000 - 6'000);
  // score, a sibling, saw nothing.
  EXPECT_EQ(k(3).off_cpu_ns, 0);
  EXPECT_EQ(k(3).on_cpu_ns, 40'000);
  EXPECT_EQ(k(3).voluntary_switches, 0u);
  EXPECT_EQ(k(3).top_waker_tid, 0u);
}

TEST_F(SchedTest, AnIntervalStraddlingASpansStartOrEndIsClippedToIt) {
  // 15'000..25'000 straddles read's start; 38'000..45'000 straddles load's end.
  p.kernel.off_cpu = {preempted(15'000, 25'000), preempted(38'000, 45'000)};
  attribute_kernel(p);
  EXPECT_EQ(k(2).off_cpu_ns, 5'000);   // 20'000..25'000
  EXPECT_EQ(k(1).off_cpu_ns, 12'000);  // 15'000..25'000 and 38'000..40'000
  EXPECT_EQ(k(0).off_cpu_ns, 17'000);  // both whole
  EXPECT_EQ(k(3).off_cpu_ns, 0);
  // A switch counts once for each span it overlaps (read: the first one).
  EXPECT_EQ(k(2).involuntary_switches, 1u);
  EXPECT_EQ(k(1).involuntary_switches, 2u);
  EXPECT_EQ(k(0).involuntary_switches, 2u);
  EXPECT_EQ(k(1).on_cpu_ns, 30'000 - 12'000);
  EXPECT_EQ(k(2).on_cpu_ns, 10'000 - 5'000);
}

TEST_F(SchedTest, OutsideEverySpanAnIntervalCountsForNothing) {
  p.kernel.off_cpu = {blocked(95'000, 99'000, 105'000, 900)};  // predict ends at 100'000
  attribute_kernel(p);
  EXPECT_EQ(k(0).off_cpu_ns, 5'000);
  EXPECT_EQ(k(0).blocked_ns, 4'000);
  EXPECT_EQ(k(0).runq_ns, 1'000);
  EXPECT_EQ(k(0).top_waker_ns, 4'000);
  p.kernel.off_cpu = {preempted(100'000, 110'000), preempted(-5'000, 0)};
  attribute_kernel(p);
  EXPECT_EQ(k(0).off_cpu_ns, 0);
  EXPECT_EQ(k(0).involuntary_switches, 0u);
}

TEST_F(SchedTest, PreemptedIsRunQueueAndBlockedIsSleepThenRunQueue) {
  p.kernel.off_cpu = {preempted(55'000, 58'000), blocked(60'000, 70'000, 71'000, 901),
                      preempted(80'000, 80'500)};
  attribute_kernel(p);
  EXPECT_EQ(k(3).off_cpu_ns, 3'000 + 11'000 + 500);
  EXPECT_EQ(k(3).blocked_ns, 10'000);
  EXPECT_EQ(k(3).runq_ns, 3'000 + 1'000 + 500);
  EXPECT_EQ(k(3).voluntary_switches, 1u);
  EXPECT_EQ(k(3).involuntary_switches, 2u);
  EXPECT_EQ(k(3).top_waker_tid, 901u);
  EXPECT_EQ(k(3).on_cpu_ns, 40'000 - 14'500);
}

TEST_F(SchedTest, ABlockedIntervalWhoseWakeupWasNotSeenCountsAsOffCpuOnly) {
  p.kernel.off_cpu = {blocked(60'000, 0, 70'000)};
  attribute_kernel(p);
  EXPECT_EQ(k(3).off_cpu_ns, 10'000);
  EXPECT_EQ(k(3).blocked_ns, 0);
  EXPECT_EQ(k(3).runq_ns, 0);
  EXPECT_EQ(k(3).voluntary_switches, 1u);
  EXPECT_EQ(k(3).top_waker_tid, 0u);
}

TEST_F(SchedTest, TheTopWakerEndedTheMostBlockedTimeInTheSubtree) {
  // In load: 900 ends 5'000 (read) + 1'000 (load itself); 901 ends 4'000 (load).
  // In score: 901 ends 3'000. predict: 901 7'000 > 900 6'000.
  p.kernel.off_cpu = {blocked(11'000, 12'000, 12'000, 900), blocked(13'000, 17'000, 17'000, 901),
                      blocked(21'000, 26'000, 26'000, 900), blocked(60'000, 63'000, 63'000, 901)};
  attribute_kernel(p);
  EXPECT_EQ(k(2).top_waker_tid, 900u);
  EXPECT_EQ(k(2).top_waker_ns, 5'000);
  EXPECT_EQ(k(1).top_waker_tid, 900u);
  EXPECT_EQ(k(1).top_waker_ns, 6'000);
  EXPECT_EQ(k(3).top_waker_tid, 901u);
  EXPECT_EQ(k(0).top_waker_tid, 901u);
  EXPECT_EQ(k(0).top_waker_ns, 7'000);
  // A tie goes to the lower tid.
  p.kernel.off_cpu = {blocked(61'000, 62'000, 62'000, 905), blocked(63'000, 64'000, 64'000, 903)};
  attribute_kernel(p);
  EXPECT_EQ(k(3).top_waker_tid, 903u);
  EXPECT_EQ(k(3).top_waker_ns, 1'000);
}

TEST_F(SchedTest, AThreadWithoutALaneCountsForTheSpanItWasStartedUnder) {
  // Thread 7000 started at 21'000 inside read; it starts 7001 at 23'000 (no
  // span of its own: 7001 inherits read). 8000 was started by a thread
  // nobody follows. 7000 runs on past read's end (30'000): asleep until
  // 45'000, that counts for load (to 40'000), then predict.
  p.kernel.threads = {lifetime(7000, kMain, 21'000, 0), lifetime(7001, 7000, 23'000, 0),
                      lifetime(8000, 31337, 22'000, 0)};
  p.kernel.off_cpu = {blocked(24'000, 26'000, 26'000, kMain, 7000),  // inside read
                      blocked(29'000, 45'000, 46'000, kMain, 7000),  // read ends at 30'000
                      preempted(25'000, 27'000, 7001), preempted(25'000, 27'000, 8000),
                      preempted(99'000, 101'000, 7000)};  // predict ends at 100'000
  attribute_kernel(p);
  EXPECT_EQ(p.kernel.threads[0].started_under, 2);
  EXPECT_EQ(p.kernel.threads[1].started_under, 2);
  EXPECT_EQ(p.kernel.threads[2].started_under, -1);
  EXPECT_EQ(k(2).off_cpu_ns, 2'000 + 1'000 + 2'000);
  EXPECT_EQ(k(2).blocked_ns, 2'000 + 1'000);
  EXPECT_EQ(k(2).runq_ns, 2'000);
  EXPECT_EQ(k(2).voluntary_switches, 2u);
  EXPECT_EQ(k(2).involuntary_switches, 1u);
  // Who woke read's own thread: nobody (it never slept); the threads it
  // started have wakers of their own.
  EXPECT_EQ(k(2).top_waker_tid, 0u);
  // Other threads' off-CPU time adds to off_cpu only: read's own thread ran throughout.
  EXPECT_EQ(k(2).on_cpu_ns, 10'000);
  EXPECT_EQ(k(2).own_off_cpu_ns, 0);
  EXPECT_EQ(k(2).started_off_cpu_ns(), 5'000);
  EXPECT_EQ(k(1).off_cpu_ns, 5'000 + 10'000);
  EXPECT_EQ(k(1).blocked_ns, 3'000 + 10'000);
  EXPECT_EQ(k(1).voluntary_switches, 2u);  // the long sleep counts once
  EXPECT_EQ(k(1).on_cpu_ns, 30'000);
  EXPECT_EQ(k(0).off_cpu_ns, 15'000 + 6'000 + 1'000);  // 40'000..46'000, 99'000..100'000
  EXPECT_EQ(k(0).blocked_ns, 13'000 + 5'000);
  EXPECT_EQ(k(0).runq_ns, 2'000 + 1'000 + 1'000);
  EXPECT_EQ(k(0).voluntary_switches, 2u);
  EXPECT_EQ(k(0).involuntary_switches, 2u);
  EXPECT_EQ(k(0).on_cpu_ns, 100'000);
  EXPECT_EQ(k(3).off_cpu_ns, 0);
  // The pieces say where each part went.
  std::vector<std::pair<int32_t, int64_t>> long_sleep;
  for (const OffCpuPiece& piece : off_cpu_pieces(p)) {
    if (piece.interval == 1) long_sleep.emplace_back(piece.span, piece.end_ns - piece.start_ns);
  }
  EXPECT_EQ(long_sleep,
            (std::vector<std::pair<int32_t, int64_t>>{{2, 1'000}, {1, 10'000}, {0, 6'000}}));
}

TEST_F(SchedTest, AStartedThreadWithALaneCountsOutsideItsSpansForItsCreator) {
  // A worker lane (tid 5000) hung under load, running `work` 25'000..28'000.
  const uint32_t work = test::user_fn(p, "work");
  Lane worker = make_lane({call(25'000, work), ret(28'000)}, "Worker", 0, 0, 1);
  worker.native_tid = 5000;
  worker.thread_id = 2;
  p.lanes.push_back(std::move(worker));
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 5u);
  ASSERT_EQ(p.spans[4].parent, 1);  // under load
  p.kernel.threads = {lifetime(5000, kMain, 15'000, 35'000)};
  p.kernel.off_cpu = {preempted(16'000, 18'000, 5000),  // before work: load (started under)
                      blocked(26'000, 27'000, 27'500, 0, 5000)};  // in work
  attribute_kernel(p);
  EXPECT_EQ(p.kernel.threads[0].started_under, 1);
  EXPECT_EQ(k(4).off_cpu_ns, 1'500);
  EXPECT_EQ(k(4).on_cpu_ns, 3'000 - 1'500);
  EXPECT_EQ(k(1).off_cpu_ns, 2'000 + 1'500);
  EXPECT_EQ(k(1).on_cpu_ns, 30'000);  // load's own thread never left the CPU
  EXPECT_EQ(k(2).off_cpu_ns, 0);      // read ran on the main thread meanwhile
  EXPECT_EQ(k(0).off_cpu_ns, 3'500);
}

TEST_F(SchedTest, TwoProcessesWithTheSameTidsAreKeptApartByPid) {
  // A second process (pid 88) whose main thread also has tid 4242, running
  // `other` 0..100'000; the first process's lane has pid 0 (meta pid 77).
  const uint32_t other = test::user_fn(p, "other");
  Lane lane = make_lane({call(0, other), ret(100'000)});
  lane.pid = 88;
  p.lanes.push_back(std::move(lane));
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 5u);
  p.kernel.off_cpu = {preempted(21'000, 22'000, kMain, 77), preempted(51'000, 54'000, kMain, 88),
                      preempted(61'000, 61'500, kMain, 0)};   // pid 0: the profile's (77)
  p.kernel.threads = {lifetime(7000, kMain, 55'000, 0, 88)};  // started by 88's 4242
  attribute_kernel(p);
  EXPECT_EQ(k(2).off_cpu_ns, 1'000);
  EXPECT_EQ(k(3).off_cpu_ns, 500);
  EXPECT_EQ(k(0).off_cpu_ns, 1'500);
  EXPECT_EQ(k(4).off_cpu_ns, 3'000);
  EXPECT_EQ(k(4).on_cpu_ns, 97'000);
  EXPECT_EQ(p.kernel.threads[0].started_under, 4);  // not score (pid 77's span at 55'000)
}

// A finding of fuzz_agent_records (fuzz/regressions/fuzz_agent_records/
// off-cpu-intervals-overlapping): a thread is off the CPU once at a time,
// but records can say otherwise; made-up intervals of 2^62 ns each,
// overlapping, overflowed a span's off-CPU sum (undefined behaviour). An
// interval overlapping an earlier one of its thread starts where that one
// ended; one inside it counts for nothing.
TEST_F(SchedTest, OverlappingIntervalsOfOneThreadCountTheirUnionOnce) {
  p.kernel.off_cpu = {preempted(22'000, 26'000), preempted(24'000, 28'000),   // 22'000..28'000
                      preempted(23'000, 25'000),                              // inside: nothing
                      preempted(52'000, 53'000), preempted(52'000, 53'000)};  // twice: once
  attribute_kernel(p);
  EXPECT_EQ(k(2).off_cpu_ns, 6'000);  // read
  EXPECT_EQ(k(3).off_cpu_ns, 1'000);  // score
  EXPECT_EQ(k(0).off_cpu_ns, 7'000);  // predict: the union, not the sum (13'000)
  EXPECT_EQ(k(0).on_cpu_ns, 93'000);

  // The fuzzer's case: times far apart, each within the kernel's range.
  Profile big;
  const uint32_t f = test::user_fn(big, "f");
  big.start_ns = 0;
  big.end_ns = kMaxTimeNs;
  big.meta["pid"] = "77";
  big.lanes.push_back(make_lane({call(0, f), ret(kMaxTimeNs)}));
  build_tree(big);
  big.kernel.present = true;
  big.kernel.off_cpu = {preempted(1, kMaxTimeNs - 1), preempted(2, kMaxTimeNs),
                        preempted(0, kMaxTimeNs / 2)};
  attribute_kernel(big);
  ASSERT_EQ(big.kernel.spans.size(), 1u);
  EXPECT_EQ(big.kernel.spans[0].off_cpu_ns, kMaxTimeNs);
  EXPECT_EQ(big.kernel.spans[0].on_cpu_ns, 0);
}

TEST_F(SchedTest, AttributionIsIdempotent) {
  p.kernel.threads = {lifetime(7000, kMain, 21'000, 0)};
  p.kernel.off_cpu = {blocked(22'000, 27'000, 28'000, 900), preempted(24'000, 25'000, 7000)};
  attribute_kernel(p);
  const std::vector<SpanKernel> first = p.kernel.spans;
  attribute_kernel(p);
  ASSERT_EQ(p.kernel.spans.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(p.kernel.spans[i].off_cpu_ns, first[i].off_cpu_ns);
    EXPECT_EQ(p.kernel.spans[i].on_cpu_ns, first[i].on_cpu_ns);
    EXPECT_EQ(p.kernel.spans[i].voluntary_switches, first[i].voluntary_switches);
    EXPECT_EQ(p.kernel.spans[i].top_waker_tid, first[i].top_waker_tid);
  }
  EXPECT_EQ(p.kernel.threads[0].started_under, 2);
}

TEST_F(SchedTest, UnknownParentOrStartKeepsAStartedUnderThatNamesASpan) {
  p.kernel.threads = {lifetime(7000, 0, 0, 0), lifetime(7001, 0, 0, 0)};
  p.kernel.threads[0].started_under = 3;
  p.kernel.threads[1].started_under = 99;  // no such span
  p.kernel.off_cpu = {preempted(60'000, 61'000, 7000)};
  attribute_kernel(p);
  EXPECT_EQ(p.kernel.threads[0].started_under, 3);
  EXPECT_EQ(p.kernel.threads[1].started_under, -1);
  EXPECT_EQ(k(3).off_cpu_ns, 1'000);
}

TEST(SchedGenerators, OffCpuWhileAGeneratorIsSuspendedIsNotItsOwn) {
  // predict 0..10'000; produce (generator) runs 1'000..2'000 and 5'000..6'000,
  // consume 3'000..4'000 runs while it is suspended.
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), produce = test::user_fn(p, "produce"),
                 consume = test::user_fn(p, "consume");
  p.end_ns = 10'000;
  p.lanes.push_back(
      make_lane({call(0, predict), call(1'000, produce), suspend(2'000, 1), call(3'000, consume),
                 ret(4'000), resume(5'000, 1), ret(6'000), ret(10'000)}));
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 3u);
  ASSERT_TRUE(p.spans[1].flags & kSpanGenerator);
  p.kernel.off_cpu = {preempted(1'500, 1'700), preempted(3'200, 3'400), preempted(2'500, 2'600)};
  attribute_kernel(p);
  const auto& k = p.kernel.spans;
  EXPECT_EQ(k[1].off_cpu_ns, 200);
  EXPECT_EQ(k[1].on_cpu_ns, 2'000 - 200);  // active time, not wall
  EXPECT_EQ(k[2].off_cpu_ns, 200);
  EXPECT_EQ(k[0].off_cpu_ns, 500);
  EXPECT_EQ(k[0].on_cpu_ns, 10'000 - 500);
}

TEST(SchedPieces, PiecesCoverEachIntervalInOrder) {
  Profile p;
  const uint32_t a = test::user_fn(p, "a"), b = test::user_fn(p, "b");
  p.end_ns = 100;
  p.lanes.push_back(make_lane({call(10, a), call(30, b), ret(50), ret(80)}));
  build_tree(p);
  p.kernel.off_cpu = {preempted(0, 40), preempted(45, 90), preempted(95, 95)};
  const std::vector<OffCpuPiece> pieces = off_cpu_pieces(p);
  struct Want {
    uint32_t interval;
    int32_t span;
    int64_t start, end;
  };
  const std::vector<Want> want = {{0, -1, 0, 10}, {0, 0, 10, 30},  {0, 1, 30, 40}, {1, 1, 45, 50},
                                  {1, 0, 50, 80}, {1, -1, 80, 90}, {2, -1, 95, 95}};
  ASSERT_EQ(pieces.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(pieces[i].interval, want[i].interval);
    EXPECT_EQ(pieces[i].span, want[i].span);
    EXPECT_EQ(pieces[i].start_ns, want[i].start);
    EXPECT_EQ(pieces[i].end_ns, want[i].end);
    EXPECT_EQ(pieces[i].own_thread, want[i].span >= 0);
  }
}

TEST(SchedPids, LanePidFallsBackToTheProfilesPid) {
  Profile p;
  Lane lane;
  EXPECT_EQ(profile_pid(p), 0u);
  p.meta["pid"] = "4242";
  EXPECT_EQ(profile_pid(p), 4242u);
  EXPECT_EQ(lane_pid(p, lane), 4242u);
  lane.pid = 9;
  EXPECT_EQ(lane_pid(p, lane), 9u);
  p.meta["pid"] = "12x";
  EXPECT_EQ(profile_pid(p), 0u);
  p.meta["pid"] = "-3";
  EXPECT_EQ(profile_pid(p), 0u);
}

// Random nested captures with random disjoint off-CPU intervals on the main
// thread: every span's off_cpu is its plain overlap with the intervals, and
// on_cpu its wall time less that.
TEST(SchedRandom, InclusiveFiguresEqualABruteForceOverlapSum) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    Profile p = test::random_profile(seed, 200, 5, /*generators=*/false);
    std::mt19937 rng(seed);
    int64_t t = 0;
    while (t < p.end_ns) {
      t += 1 + static_cast<int64_t>(rng() % 20'000);
      const int64_t end = t + static_cast<int64_t>(rng() % 8'000);
      if (rng() % 2) {
        p.kernel.off_cpu.push_back(blocked(t, t + (end - t) / 2, end, 100 + rng() % 3));
      } else {
        p.kernel.off_cpu.push_back(preempted(t, end));
      }
      t = end;
    }
    attribute_kernel(p);
    for (size_t s = 0; s < p.spans.size(); ++s) {
      const Span& span = p.spans[s];
      int64_t off = 0, blocked_ns = 0, runq = 0;
      uint32_t voluntary = 0, involuntary = 0;
      for (const OffCpuInterval& iv : p.kernel.off_cpu) {
        const int64_t o = std::max<int64_t>(
            0, std::min(iv.end_ns, span.end_ns) - std::max(iv.start_ns, span.start_ns));
        const int64_t b = std::max<int64_t>(
            0, std::min(iv.wake_ns, span.end_ns) - std::max(iv.start_ns, span.start_ns));
        off += o;
        // An instant off the CPU still is a switch, in the span open then.
        const bool hit = o > 0 || (iv.start_ns == iv.end_ns && iv.start_ns >= span.start_ns &&
                                   iv.start_ns < span.end_ns);
        if (iv.blocked) {
          voluntary += hit;
          blocked_ns += b;
          runq += o - b;
        } else {
          involuntary += hit;
          runq += o;
        }
      }
      ASSERT_EQ(p.kernel.spans[s].off_cpu_ns, off) << "span " << s;
      ASSERT_EQ(p.kernel.spans[s].on_cpu_ns, span.duration_ns() - off) << "span " << s;
      ASSERT_EQ(p.kernel.spans[s].blocked_ns, blocked_ns) << "span " << s;
      ASSERT_EQ(p.kernel.spans[s].runq_ns, runq) << "span " << s;
      ASSERT_EQ(p.kernel.spans[s].voluntary_switches, voluntary) << "span " << s;
      ASSERT_EQ(p.kernel.spans[s].involuntary_switches, involuntary) << "span " << s;
    }
  }
}

// The figures kernel_fixture.h promises (the exporter tests rely on them).
TEST(SchedFixture, TheKernelFixtureHasTheFiguresItsCommentGives) {
  const Profile p = test::kernel_profile_fixture();
  const auto& k = p.kernel.spans;
  ASSERT_EQ(k.size(), 7u);
  EXPECT_EQ(k[1].off_cpu_ns, 800);
  EXPECT_EQ(k[1].blocked_ns, 700);
  EXPECT_EQ(k[1].runq_ns, 100);
  EXPECT_EQ(k[1].on_cpu_ns, 700);
  EXPECT_EQ(k[1].top_waker_tid, 5000u);
  EXPECT_EQ(k[4].off_cpu_ns, 100);
  EXPECT_EQ(k[4].on_cpu_ns, 500);
  EXPECT_EQ(k[6].off_cpu_ns, 1'600);
  EXPECT_EQ(k[6].on_cpu_ns, 1'900);
  EXPECT_EQ(k[5].off_cpu_ns, 0);
  EXPECT_EQ(k[0].off_cpu_ns, 3'000);
  EXPECT_EQ(k[0].blocked_ns, 2'250);
  EXPECT_EQ(k[0].runq_ns, 750);
  EXPECT_EQ(k[0].voluntary_switches, 3u);
  EXPECT_EQ(k[0].involuntary_switches, 1u);
  EXPECT_EQ(k[0].top_waker_tid, 5000u);  // of its own thread's sleeps
  EXPECT_EQ(k[0].top_waker_ns, 700);
  EXPECT_EQ(k[0].own_off_cpu_ns, 1'300);
  EXPECT_EQ(k[0].own_blocked_ns, 700);
  EXPECT_EQ(k[0].own_runq_ns, 600);
  EXPECT_EQ(k[0].on_cpu_ns, 16'699);
  EXPECT_EQ(p.kernel.threads[0].started_under, 5);  // fetch ran on 4242 at 12'400
  EXPECT_EQ(p.kernel.threads[1].started_under, 4);
}

TEST_F(SchedTest, TopStallsNameTheSpanWhereTheTimeWasSpent) {
  // read: 6'000 off; load itself 3'000 more; score 1'000; predict itself 500.
  p.kernel.off_cpu = {blocked(22'000, 27'000, 28'000, 900), preempted(11'000, 14'000),
                      preempted(60'000, 61'000), preempted(45'000, 45'500)};
  attribute_kernel(p);
  const std::vector<Stall> stalls = top_stalls(p, 10);
  ASSERT_EQ(stalls.size(), 4u);
  EXPECT_EQ(stalls[0].span, 2);
  EXPECT_EQ(stalls[0].off_cpu_ns, 6'000);
  EXPECT_EQ(stalls[0].blocked_ns, 5'000);
  EXPECT_EQ(stalls[0].runq_ns, 1'000);
  EXPECT_EQ(stalls[0].wall_ns, 10'000);
  EXPECT_DOUBLE_EQ(stalls[0].off_fraction, 0.6);
  EXPECT_EQ(stalls[1].span, 1);
  EXPECT_EQ(stalls[1].off_cpu_ns, 3'000);
  EXPECT_EQ(stalls[1].runq_ns, 3'000);
  EXPECT_EQ(stalls[2].span, 3);
  EXPECT_EQ(stalls[3].span, 0);
  EXPECT_EQ(stalls[3].off_cpu_ns, 500);
  ASSERT_EQ(top_stalls(p, 2).size(), 2u);
  EXPECT_EQ(top_stalls(p, 2)[1].span, 1);
  // min_wall_ns: read (10'000) is ignored, load (30'000) is not.
  const std::vector<Stall> long_ones = top_stalls(p, 10, 20'000);
  ASSERT_EQ(long_ones.size(), 3u);
  EXPECT_EQ(long_ones[0].span, 1);
  EXPECT_TRUE(top_stalls(p, 0).empty());
}

TEST(SchedSelf, SelfFiguresSumBackToTheInclusiveOnes) {
  const Profile p = test::kernel_profile_fixture();
  const std::vector<SelfOffCpu> self = self_off_cpu(p);
  ASSERT_EQ(self.size(), p.spans.size());
  int64_t off = 0, blocked = 0, runq = 0;
  for (const SelfOffCpu& s : self) {
    off += s.off_cpu_ns;
    blocked += s.blocked_ns;
    runq += s.runq_ns;
  }
  EXPECT_EQ(off, p.kernel.spans[0].off_cpu_ns);  // one root
  EXPECT_EQ(blocked, p.kernel.spans[0].blocked_ns);
  EXPECT_EQ(runq, p.kernel.spans[0].runq_ns);
  EXPECT_EQ(self[0].off_cpu_ns, 500);  // predict's own preemption
  EXPECT_EQ(self[6].off_cpu_ns, 1'600);
  // Inconsistent figures (a hand-edited document) never go negative.
  Profile bad = test::kernel_profile_fixture();
  bad.kernel.spans[0].off_cpu_ns = 10;
  EXPECT_EQ(self_off_cpu(bad)[0].off_cpu_ns, 0);
  bad.kernel.spans.pop_back();
  EXPECT_TRUE(self_off_cpu(bad).empty());
}

TEST_F(SchedTest, TopStallsNeedTheAttribution) {
  p.kernel.off_cpu = {preempted(11'000, 14'000)};
  EXPECT_TRUE(top_stalls(p, 5).empty());  // attribute_kernel not run
  attribute_kernel(p);
  EXPECT_EQ(top_stalls(p, 5).size(), 1u);
}

// ---- wakers by name and kind, wait reasons, own thread apart (issue 19) ----

TEST(SchedWakers, ATaskIsNamedByItsLatestNameAndInterruptsAreOneWakerPerKind) {
  Profile p;
  const uint32_t f = test::user_fn(p, "predict");
  p.lanes.push_back(make_lane({call(10'000, f), ret(100'000)}));
  build_tree(p);
  p.kernel.present = true;
  OffCpuInterval early = blocked(20'000, 21'000, 21'000, 900);
  early.waker_name = "model-main";  // its comm when it started
  OffCpuInterval late = blocked(30'000, 33'000, 33'000, 900);
  late.waker_name = "renamed-waker";  // after prctl(PR_SET_NAME)
  p.kernel.off_cpu = {early, late};
  attribute_kernel(p);
  EXPECT_EQ(p.kernel.spans[0].top_waker_tid, 900u);
  EXPECT_EQ(p.kernel.spans[0].top_waker_name, "renamed-waker");
  EXPECT_EQ(p.kernel.spans[0].top_waker_kind, WakerKind::kTask);

  // Timer wakeups hit different tasks (a hog, idle): one waker, "timer",
  // that outweighs the task with 4'000 ns.
  OffCpuInterval t1 = blocked(40'000, 42'500, 42'500, 31337);
  t1.waker_kind = WakerKind::kTimer;
  OffCpuInterval t2 = blocked(50'000, 52'500, 52'500, 0);
  t2.waker_kind = WakerKind::kTimer;
  p.kernel.off_cpu.push_back(t1);
  p.kernel.off_cpu.push_back(t2);
  attribute_kernel(p);
  EXPECT_EQ(p.kernel.spans[0].top_waker_kind, WakerKind::kTimer);
  EXPECT_EQ(p.kernel.spans[0].top_waker_tid, 0u);
  EXPECT_EQ(p.kernel.spans[0].top_waker_ns, 5'000);
  EXPECT_EQ(p.kernel.spans[0].top_waker_name, "timer");
  EXPECT_STREQ(waker_kind_name(WakerKind::kSoftirq), "softirq");
  WakerKind kind = WakerKind::kTask;
  EXPECT_TRUE(parse_waker_kind("hardirq", kind));
  EXPECT_EQ(kind, WakerKind::kHardirq);
  EXPECT_FALSE(parse_waker_kind("nmi", kind));
}

TEST(SchedWaits, TheOwnThreadsBlockedTimeBySyscallAndStateSelfLessItsChildren) {
  // predict [10, 100] { read_it [20, 60] }; kMain sleeps in futex (S) in
  // predict and in read (D) inside read_it; a thread predict started sleeps
  // in read too, which is its own, not predict's.
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t read_it = test::user_fn(p, "read_it");
  p.lanes.push_back(
      make_lane({call(10'000, predict), call(20'000, read_it), ret(60'000), ret(100'000)}));
  build_tree(p);
  p.kernel.present = true;
  OffCpuInterval futex = blocked(70'000, 80'000, 81'000, 7000);
  futex.syscall = SYS_futex;
  OffCpuInterval disk = blocked(30'000, 34'000, 34'500, 0);
  disk.syscall = SYS_read;
  disk.prev_state = 2;  // TASK_UNINTERRUPTIBLE
  OffCpuInterval worker = blocked(72'000, 79'000, 79'000, 0, 7000);
  worker.syscall = SYS_read;
  p.kernel.off_cpu = {disk, futex, worker};
  p.kernel.threads = {lifetime(7000, kMain, 65'000, 90'000)};
  attribute_kernel(p);
  const SpanKernel& top = p.kernel.spans[0];
  ASSERT_EQ(top.waits.size(), 2u);
  EXPECT_EQ(top.waits[0].text(), syscall_name(SYS_futex) + " S");
  EXPECT_EQ(top.waits[0].blocked_ns, 10'000);
  EXPECT_EQ(top.waits[1].text(), syscall_name(SYS_read) + " D");
  EXPECT_EQ(top.waits[1].blocked_ns, 4'000);
  EXPECT_EQ(top.own_blocked_ns, 14'000);
  EXPECT_EQ(top.blocked_ns, 21'000);    // with the started thread's 7'000
  EXPECT_EQ(top.top_waker_tid, 7000u);  // woke predict's own thread
  const std::vector<WaitReason> self = self_waits(p, 0);
  ASSERT_EQ(self.size(), 1u);  // read D is read_it's
  EXPECT_EQ(self[0].text(), syscall_name(SYS_futex) + " S");
  EXPECT_EQ(self_waits(p, 1).at(0).blocked_ns, 4'000);
  EXPECT_EQ(syscall_name(-1), "");
  EXPECT_EQ(syscall_name(SYS_futex), "futex");
  EXPECT_EQ(syscall_name(99999), "syscall 99999");
  EXPECT_EQ(WaitReason{}.text(), "? -");
}

TEST(SchedWaits, GilLockAndOtherFutexWaitsAreReasonsOfTheirOwnWithTheirWakers) {
  // predict [0, 200us] { write_db [10, 150] }: its thread waits for a
  // threading.Lock 40 us (woken by "worker"), for the GIL 30 us twice (woken
  // by "python3" then "worker"), in another futex 5 us, and in fsync (D) 60 us
  // in two pieces ended by two kernel workers and once by a softirq.
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t write_db = test::user_fn(p, "write_db");
  p.lanes.push_back(
      make_lane({call(0, predict), call(10'000, write_db), ret(150'000), ret(200'000)}));
  build_tree(p);
  p.kernel.present = true;
  auto futex = [](int64_t start, int64_t wake, WaitObject what, const char* waker) {
    OffCpuInterval iv = blocked(start, wake, wake + 1'000, 900);
    iv.syscall = SYS_futex;
    iv.prev_state = 1;
    iv.wait = what;
    iv.waker_name = waker;
    return iv;
  };
  auto disk = [](int64_t start, int64_t wake, const char* waker,
                 WakerKind kind = WakerKind::kTask) {
    OffCpuInterval iv = blocked(start, wake, wake + 500, 800);
    iv.syscall = SYS_fsync;
    iv.prev_state = 2;
    iv.waker_name = waker;
    iv.waker_kind = kind;
    return iv;
  };
  p.kernel.off_cpu = {futex(12'000, 52'000, WaitObject::kLock, "worker"),
                      disk(54'000, 74'000, "kworker/u4:1"),
                      disk(75'000, 95'000, "kworker/0:2H"),
                      disk(96'000, 116'000, "", WakerKind::kSoftirq),
                      futex(118'000, 133'000, WaitObject::kGil, "python3"),
                      futex(160'000, 175'000, WaitObject::kGil, "worker"),
                      futex(180'000, 185'000, WaitObject::kFutex, "worker")};
  attribute_kernel(p);
  const SpanKernel& top = p.kernel.spans[0];
  EXPECT_EQ(top.own_gil_ns, 30'000);
  EXPECT_EQ(top.own_lock_ns, 40'000);
  EXPECT_EQ(p.kernel.spans[1].own_gil_ns, 15'000);
  EXPECT_EQ(p.kernel.spans[1].own_lock_ns, 40'000);
  ASSERT_EQ(top.waits.size(), 4u);
  EXPECT_EQ(top.waits[0].text(), "fsync D");
  EXPECT_EQ(top.waits[0].blocked_ns, 60'000);
  EXPECT_EQ(top.waits[0].waker, "kworker");  // two kernel workers, one waker: 40 us against 20
  EXPECT_EQ(top.waits[0].waker_ns, 40'000);
  EXPECT_EQ(top.waits[1].text(), "lock");
  EXPECT_EQ(top.waits[1].waker, "worker");
  EXPECT_EQ(top.waits[2].text(), "GIL");
  EXPECT_EQ(top.waits[2].blocked_ns, 30'000);
  EXPECT_EQ(top.waits[2].count, 2u);
  EXPECT_EQ(top.waits[2].waker, "python3");  // a tie (15 us each): the first name in order
  EXPECT_EQ(top.waits[3].text(), "futex S");
  EXPECT_EQ(top.waits[3].blocked_ns, 5'000);
  // predict's own: the GIL wait after write_db returned, and the other futex.
  const std::vector<WaitReason> self = self_waits(p, 0);
  ASSERT_EQ(self.size(), 2u);
  EXPECT_EQ(self[0].text(), "GIL");
  EXPECT_EQ(self[0].blocked_ns, 15'000);
  EXPECT_EQ(self[0].waker, "");  // the top waker's 15 us were write_db's: the rest's is not known
  EXPECT_EQ(self[1].text(), "futex S");
  EXPECT_EQ(self[1].waker, "worker");
  WaitObject w = WaitObject::kNone;
  EXPECT_TRUE(parse_wait_object("gil", w));
  EXPECT_EQ(w, WaitObject::kGil);
  EXPECT_TRUE(parse_wait_object("", w));
  EXPECT_EQ(w, WaitObject::kNone);
  EXPECT_FALSE(parse_wait_object("mutex", w));
  EXPECT_STREQ(wait_object_name(WaitObject::kLock), "lock");
}

TEST(SchedStalls, AStartedThreadsOffCpuIsApartAndTheShareNeverPassesTheWall) {
  // spawn [10, 20] starts two threads that sleep 8'000 ns each while spawn
  // itself waits 5'000 ns for them: 21'000 off-CPU over a 10'000 wall.
  Profile p;
  const uint32_t spawn = test::user_fn(p, "spawn");
  p.lanes.push_back(make_lane({call(10'000, spawn), ret(20'000)}));
  build_tree(p);
  p.kernel.present = true;
  p.kernel.threads = {lifetime(7000, kMain, 11'000, 19'900), lifetime(7001, kMain, 11'000, 19'900)};
  p.kernel.off_cpu = {blocked(14'000, 19'000, 19'000, 7000),
                      blocked(11'000, 19'000, 19'000, 0, 7000),
                      blocked(11'000, 19'000, 19'000, 0, 7001)};
  attribute_kernel(p);
  const SpanKernel& k = p.kernel.spans[0];
  EXPECT_EQ(k.off_cpu_ns, 21'000);
  EXPECT_EQ(k.own_off_cpu_ns, 5'000);
  EXPECT_EQ(k.on_cpu_ns + k.own_off_cpu_ns, 10'000);
  EXPECT_EQ(k.started_off_cpu_ns(), 16'000);
  const std::vector<Stall> stalls = top_stalls(p, 5);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].off_cpu_ns, 5'000);
  EXPECT_EQ(stalls[0].threads_off_cpu_ns, 16'000);
  EXPECT_DOUBLE_EQ(stalls[0].off_fraction, 0.5);
}

}  // namespace
}  // namespace mlprof
