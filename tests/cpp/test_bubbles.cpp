#include "analysis/bubbles.h"

#include <gtest/gtest.h>

#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::ret;

// Lane 0: predict [0, 100] waits in time.sleep [20, 60]; a thread started
// under predict runs work [30, 50]. Idle: [20, 30] and [50, 60].
Profile thread_waits() {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 100;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t sleep = test::c_fn(p, "sleep", "time");
  const uint32_t work = test::user_fn(p, "work");
  p.lanes.push_back(
      make_lane({call(0, predict), call(20, sleep, kEvCFunction), ret(60), ret(100)}));
  p.lanes.push_back(make_lane({call(30, work), ret(50)}, "worker", 0, 0, 0));
  p.lanes.back().thread_id = 2;  // a thread of its own: main's sleep is not its wait
  p.lanes.back().native_tid = 4243;
  build_tree(p);
  return p;
}

TEST(Bubbles, GapsWhereNoLaneRunsAndWhatEachWaitedIn) {
  const Profile p = thread_waits();
  const BubbleReport r = find_bubbles(p, 0);
  EXPECT_TRUE(r.wait_data);
  EXPECT_EQ(r.window_start_ns, 0);
  EXPECT_EQ(r.window_end_ns, 100);
  ASSERT_EQ(r.bubbles.size(), 2u);
  EXPECT_EQ(r.bubbles[0].start_ns, 20);
  EXPECT_EQ(r.bubbles[0].end_ns, 30);
  EXPECT_EQ(r.bubbles[1].start_ns, 50);
  EXPECT_EQ(r.bubbles[1].end_ns, 60);
  EXPECT_EQ(r.bubble_ns, 20);
  ASSERT_EQ(r.bubbles[0].waiting.size(), 1u);  // the worker has nothing open yet
  EXPECT_EQ(p.display_name(p.spans[r.bubbles[0].waiting[0].second]), "sleep");
  // min_ns drops the shorter ones.
  EXPECT_TRUE(find_bubbles(p, 11).bubbles.empty());
}

TEST(Bubbles, FanOutUtilization) {
  const Profile p = thread_waits();
  const BubbleReport r = find_bubbles(p, 0);
  ASSERT_EQ(r.fan_outs.size(), 1u);
  const FanOut& f = r.fan_outs[0];
  EXPECT_EQ(p.display_name(p.spans[f.span]), "predict");
  ASSERT_EQ(f.lanes.size(), 1u);
  EXPECT_EQ(f.busy_ns[0], 20);
  EXPECT_DOUBLE_EQ(f.utilization, 0.2);
  EXPECT_EQ(f.max_concurrency, 1u);
}

TEST(Bubbles, OffCpuIntervalsOfTheKernelAreWaits) {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 100;
  const uint32_t predict = test::user_fn(p, "predict");
  p.lanes.push_back(make_lane({call(0, predict), ret(100)}));
  build_tree(p);
  EXPECT_FALSE(find_bubbles(p, 0).wait_data);
  EXPECT_TRUE(find_bubbles(p, 0).bubbles.empty());
  p.kernel.present = true;
  p.kernel.off_cpu.push_back(OffCpuInterval{p.lanes[0].native_tid, 0, 40, 45, 70, true, 0, 1});
  const BubbleReport r = find_bubbles(p, 0);
  ASSERT_EQ(r.bubbles.size(), 1u);
  EXPECT_EQ(r.bubbles[0].start_ns, 40);
  EXPECT_EQ(r.bubbles[0].end_ns, 70);
}

// The event loop's selector watched (loop_watch.cpp): predict [0, 100] runs
// the loop, whose waits are kSpanWait spans [10, 40] and [50, 90] (a leaf
// under predict, whatever the depth); a task lane works [40, 50].
TEST(Bubbles, TheWatchedSelectorsWaitsAreIdleTime) {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 100;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t select = test::lib_fn(p, "_PollLikeSelector.select", "selectors");
  const uint32_t work = test::user_fn(p, "call");
  p.lanes.push_back(make_lane({test::call(0, predict), test::call(10, select, kEvWait), ret(40),
                               test::call(50, select, kEvWait), ret(90), ret(100)}));
  p.lanes.push_back(make_lane({test::call(40, work), ret(50)}, "MainThread", 1, 0, 0));
  build_tree(p);
  EXPECT_TRUE(p.spans[1].flags & kSpanWait);
  // Without the meta saying the loop was watched, nothing says when it waited.
  EXPECT_FALSE(find_bubbles(p, 0).wait_data);
  p.meta["loop_waits"] = "selector";
  const BubbleReport r = find_bubbles(p, 0);
  EXPECT_TRUE(r.wait_data);
  ASSERT_EQ(r.bubbles.size(), 2u);
  EXPECT_EQ(r.bubbles[0].start_ns, 10);
  EXPECT_EQ(r.bubbles[0].end_ns, 40);
  EXPECT_EQ(r.bubbles[1].start_ns, 50);
  EXPECT_EQ(r.bubbles[1].end_ns, 90);
  EXPECT_EQ(p.display_name(p.spans[r.bubbles[0].waiting[0].second]), "_PollLikeSelector.select");
}

// On 3.12+ a task's coroutine below the ceiling is not seen to suspend: its
// profile_block [12, 88] has no segments and looks busy throughout. A task
// cannot run while its thread waits in the selector: the same two bubbles.
TEST(Bubbles, ATasksLaneIsIdleWhileItsThreadWaitsInTheSelector) {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 100;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t select = test::lib_fn(p, "_PollLikeSelector.select", "selectors");
  const uint32_t ask = test::user_fn(p, "ask");
  p.lanes.push_back(make_lane({test::call(0, predict), test::call(10, select, kEvWait), ret(40),
                               test::call(50, select, kEvWait), ret(90), ret(100)}));
  p.lanes.push_back(make_lane({test::call(12, ask), ret(88)}, "MainThread", 1, 0, 0));
  p.meta["loop_waits"] = "selector";
  build_tree(p);
  const BubbleReport r = find_bubbles(p, 0);
  ASSERT_EQ(r.bubbles.size(), 2u);
  EXPECT_EQ(r.bubbles[0].start_ns, 10);
  EXPECT_EQ(r.bubbles[0].end_ns, 40);
  EXPECT_EQ(r.bubbles[1].start_ns, 50);
  EXPECT_EQ(r.bubbles[1].end_ns, 90);
}

TEST(Bubbles, BlockingCallsAreNamedOnce) {
  EXPECT_TRUE(is_blocking_call("time", "sleep"));
  EXPECT_TRUE(is_blocking_call("_thread", "lock.acquire"));
  EXPECT_FALSE(is_blocking_call("builtins", "len"));
}

}  // namespace
}  // namespace mlprof
