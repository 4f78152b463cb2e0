// append_profile: sessions of two processes combined into one profile, with
// functions, strings, lanes, spans, I/O, segments and kernel data remapped
// and each lane keeping its process and session.

#include "views/merge.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "analysis/sched.h"
#include "model/tree.h"
#include "profile_builder.h"
#include "views/view.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

// One predict() session of process `pid` on thread 4242, shifted by `t0`:
//   predict t0+0..t0+10'000
//     produce (generator) t0+1'000..t0+2'000 and t0+5'000..t0+6'000
//     "step" (label on `extra_name`) t0+3'000..t0+4'000, with an I/O summary
// and, with kernel data, one blocked interval in "step".
Profile session(uint32_t pid, uint64_t serial, int64_t t0, const std::string& extra_name,
                bool kernel) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), produce = test::user_fn(p, "produce"),
                 extra = test::user_fn(p, extra_name);
  const uint32_t step = p.functions.strings().intern("step");
  const uint32_t hit = p.functions.strings().intern("hit in " + extra_name);
  p.start_ns = t0;
  p.end_ns = t0 + 10'000;
  p.captured_depth = pid == 100 ? 2 : 3;
  p.meta = {{"pid", std::to_string(pid)},
            {"session", std::to_string(serial)},
            {"host", "box"},
            {"source", pid == 100 ? "ebpf" : "in-process"}};
  p.stats.events_captured = 8;
  p.stats.events_skipped = pid;
  Lane lane = make_lane({call(t0, predict), call(t0 + 1'000, produce), suspend(t0 + 2'000, 1),
                         test::label(step), call(t0 + 3'000, extra),
                         Event{t0 + 3'500, hit, EventKind::kMark, 0, 0}, ret(t0 + 4'000),
                         resume(t0 + 5'000, 1), ret(t0 + 6'000), ret(t0 + 10'000)});
  IOSummary arr;
  arr.type_name = "numpy.ndarray";
  lane.io.push_back({4, IORole::kArgument, "x", arr});
  p.lanes.push_back(std::move(lane));
  build_tree(p);
  if (kernel) {
    p.kernel.present = true;
    OffCpuInterval iv;
    iv.tid = 4242;
    iv.start_ns = t0 + 3'100;
    iv.wake_ns = t0 + 3'600;
    iv.end_ns = t0 + 3'700;
    iv.blocked = true;
    iv.waker_tid = 9;
    p.kernel.off_cpu.push_back(iv);
    ThreadLifetime t;
    t.tid = 7000;
    t.parent_tid = 4242;
    t.start_ns = t0 + 3'200;
    p.kernel.threads.push_back(t);
    p.kernel.lost_events = 2;
    attribute_kernel(p);
  }
  return p;
}

std::vector<std::string> paths(const Profile& p) {
  std::vector<std::string> out;
  for (size_t i = 0; i < p.spans.size(); ++i) out.push_back(call_path(p, static_cast<int32_t>(i)));
  return out;
}

TEST(Merge, IntoAnEmptyProfileGivesTheSameProfileWithItsPidOnTheLanes) {
  const Profile a = session(100, 1, 1'000, "load", true);
  Profile m;
  append_profile(m, a);
  EXPECT_EQ(paths(m), paths(a));
  EXPECT_EQ(m.meta, a.meta);
  EXPECT_EQ(m.start_ns, a.start_ns);
  EXPECT_EQ(m.end_ns, a.end_ns);
  EXPECT_EQ(m.captured_depth, 2);
  ASSERT_EQ(m.lanes.size(), 1u);
  EXPECT_EQ(m.lanes[0].pid, 100u);
  EXPECT_EQ(m.lanes[0].session, 1u);
  EXPECT_EQ(m.roots, a.roots);
  EXPECT_EQ(m.segments, a.segments);
  ASSERT_EQ(m.kernel.spans.size(), a.kernel.spans.size());
  EXPECT_EQ(m.kernel.spans[2].off_cpu_ns, 600);
  EXPECT_EQ(m.kernel.off_cpu[0].pid, 100u);
  EXPECT_EQ(m.kernel.threads[0].pid, 100u);
}

TEST(Merge, AnIntoWithoutTimelineTakesFromsTimesDepthAndKeepsItsKernelCounts) {
  Profile m;
  m.kernel.present = true;  // lost events recorded before any session ended
  m.kernel.lost_events = 5;
  const Profile a = session(100, 1, 1'000, "load", true);
  append_profile(m, a);
  EXPECT_EQ(m.start_ns, 1'000);
  EXPECT_EQ(m.end_ns, 11'000);
  EXPECT_EQ(m.captured_depth, 2);
  EXPECT_EQ(m.meta, a.meta);
  EXPECT_EQ(m.kernel.lost_events, 7u);
  ASSERT_EQ(m.kernel.spans.size(), 3u);
  EXPECT_EQ(m.kernel.spans[2].off_cpu_ns, 600);

  Profile preset;
  preset.meta = {{"host", "box"}, {"agent", "1.0"}};
  append_profile(preset, a);
  EXPECT_EQ(preset.meta, (std::map<std::string, std::string>{{"host", "box"}}));
  EXPECT_EQ(preset.start_ns, 1'000);
}

class MergeTwo : public ::testing::Test {
 protected:
  void SetUp() override {
    append_profile(m, a);
    append_profile(m, b);
  }
  const Profile a = session(100, 1, 1'000, "load", true);
  const Profile b = session(200, 5, 50'000, "score", true);
  Profile m;
};

TEST_F(MergeTwo, FunctionsAndLabelsAreRemappedByWhatTheyName) {
  ASSERT_EQ(m.spans.size(), 6u);
  // predict and produce are the same functions in both; load and score are not.
  EXPECT_EQ(m.functions.size(), 4u);
  EXPECT_EQ(m.spans[3].function, m.spans[0].function);
  EXPECT_EQ(m.spans[4].function, m.spans[1].function);
  EXPECT_EQ(m.functions.name(m.spans[5].function), "score");
  EXPECT_EQ(m.display_name(m.spans[5]), "step");
  EXPECT_EQ(m.spans[5].label, m.spans[2].label);
  std::vector<std::string> want = paths(a);
  for (const std::string& s : paths(b)) want.push_back(s);
  EXPECT_EQ(paths(m), want);
}

TEST_F(MergeTwo, SpansLanesIoAndSegmentsAreReindexed) {
  ASSERT_EQ(m.lanes.size(), 2u);
  EXPECT_EQ(m.lanes[1].pid, 200u);
  EXPECT_EQ(m.lanes[1].session, 5u);
  EXPECT_EQ(m.spans[3].parent, -1);
  EXPECT_EQ(m.spans[4].parent, 3);
  EXPECT_EQ(m.spans[5].parent, 3);
  EXPECT_EQ(m.spans[5].lane, 1u);
  EXPECT_EQ(m.roots, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(m.spans[3].first_child, 4);
  EXPECT_EQ(m.spans[4].next_sibling, 5);
  ASSERT_EQ(m.io.size(), 2u);
  EXPECT_EQ(m.io[1].span, 5);
  auto [first, last] = m.io_of(5);
  EXPECT_EQ(last - first, 1);
  auto [s0, s1] = m.segments_of(4);
  ASSERT_EQ(s1 - s0, 2);
  EXPECT_EQ(s0->start_ns, 51'000);
}

TEST_F(MergeTwo, MarksAreReindexedAndRenamed) {
  ASSERT_EQ(a.marks.size(), 1u);
  ASSERT_EQ(m.marks.size(), 2u);
  const Mark& second = m.marks[1];
  EXPECT_EQ(second.lane, 1u);
  EXPECT_EQ(second.span, 5);
  EXPECT_EQ(second.ts_ns, 53'500);
  EXPECT_EQ(m.functions.strings().get(second.name), "hit in score");
  EXPECT_EQ(m.functions.strings().get(m.marks[0].name), "hit in load");
  // The merged lanes' events name the same strings: a rebuild gives the same marks.
  const std::vector<Mark> merged = m.marks;
  build_tree(m);
  EXPECT_EQ(m.marks, merged);
}

TEST_F(MergeTwo, StatsSumAndMetaKeepsWhatBothSay) {
  EXPECT_EQ(m.stats.events_captured, 16u);
  EXPECT_EQ(m.stats.events_skipped, 300u);
  EXPECT_EQ(m.meta, (std::map<std::string, std::string>{{"host", "box"}}));
  EXPECT_EQ(m.start_ns, 1'000);
  EXPECT_EQ(m.end_ns, 60'000);
  EXPECT_EQ(m.captured_depth, 3);
}

TEST_F(MergeTwo, KernelDataIsReindexedAndAgreesWithAFreshAttribution) {
  EXPECT_TRUE(m.kernel.present);
  EXPECT_EQ(m.kernel.lost_events, 4u);
  ASSERT_EQ(m.kernel.off_cpu.size(), 2u);
  EXPECT_EQ(m.kernel.off_cpu[1].pid, 200u);
  ASSERT_EQ(m.kernel.threads.size(), 2u);
  EXPECT_EQ(m.kernel.threads[0].started_under, 2);
  EXPECT_EQ(m.kernel.threads[1].started_under, 5);
  EXPECT_EQ(m.kernel.threads[1].pid, 200u);
  ASSERT_EQ(m.kernel.spans.size(), 6u);
  EXPECT_EQ(m.kernel.spans[5].off_cpu_ns, 600);
  EXPECT_EQ(m.kernel.spans[3].off_cpu_ns, 600);
  // Both processes' main threads are tid 4242; pids keep them apart.
  const std::vector<SpanKernel> appended = m.kernel.spans;
  attribute_kernel(m);
  for (size_t i = 0; i < appended.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(m.kernel.spans[i].off_cpu_ns, appended[i].off_cpu_ns);
    EXPECT_EQ(m.kernel.spans[i].blocked_ns, appended[i].blocked_ns);
    EXPECT_EQ(m.kernel.spans[i].on_cpu_ns, appended[i].on_cpu_ns);
    EXPECT_EQ(m.kernel.spans[i].top_waker_tid, appended[i].top_waker_tid);
  }
  EXPECT_EQ(m.kernel.threads[1].started_under, 5);
}

TEST(Merge, AnInProcessProfileNextToAnAgentOneGetsFiguresComputed) {
  Profile m = session(100, 1, 1'000, "load", true);
  const Profile in_process = session(200, 1, 50'000, "score", false);
  append_profile(m, in_process);
  ASSERT_EQ(m.kernel.spans.size(), m.spans.size());
  EXPECT_EQ(m.kernel.spans[2].off_cpu_ns, 600);
  EXPECT_EQ(m.kernel.spans[5].off_cpu_ns, 0);
  EXPECT_EQ(m.kernel.spans[5].on_cpu_ns, 1'000);
  EXPECT_EQ(m.lanes[0].pid, 100u);  // pinned before meta dropped the pid
  EXPECT_EQ(m.meta.count("pid"), 0u);
}

TEST(Merge, TwoInProcessProfilesHaveNoKernelFigures) {
  Profile m = session(100, 1, 1'000, "load", false);
  append_profile(m, session(100, 2, 50'000, "load", false));
  EXPECT_FALSE(m.kernel.present);
  EXPECT_TRUE(m.kernel.spans.empty());
  EXPECT_EQ(m.meta.at("pid"), "100");  // equal: kept
  EXPECT_EQ(m.meta.count("session"), 0u);
  EXPECT_EQ(m.lanes[0].session, 1u);
  EXPECT_EQ(m.lanes[1].session, 2u);
  EXPECT_EQ(m.functions.size(), 3u);
}

TEST(Merge, AProfileAppendedToItselfHoldsItsSessionsTwice) {
  Profile m = session(100, 1, 1'000, "load", true);
  append_profile(m, m);
  ASSERT_EQ(m.spans.size(), 6u);
  EXPECT_EQ(m.lanes.size(), 2u);
  EXPECT_EQ(m.functions.size(), 3u);
  EXPECT_EQ(m.spans[3].parent, -1);
  EXPECT_EQ(m.spans[5].parent, 3);
  EXPECT_EQ(m.kernel.off_cpu.size(), 2u);
  EXPECT_EQ(m.kernel.spans.size(), 6u);
  EXPECT_EQ(m.stats.events_captured, 16u);
  EXPECT_EQ(m.meta.at("pid"), "100");
}

TEST(Merge, ManyPartsAtOnceGiveWhatAppendingThemOneByOneGives) {
  // Sessions out of start order, two processes, kernel data: the batch
  // (what the agent's -o uses) and the one-by-one appends must agree.
  std::vector<Profile> parts;
  for (int i = 0; i < 12; ++i) {
    parts.push_back(session(i % 2 ? 200 : 100, static_cast<uint64_t>(i + 1),
                            1'000 + 20'000 * ((i * 7) % 12), i % 3 ? "load" : "score", true));
  }
  Profile one_by_one;
  for (const Profile& p : parts) append_profile(one_by_one, p);
  Profile batch;
  std::vector<const Profile*> ptrs;
  for (const Profile& p : parts) ptrs.push_back(&p);
  append_profiles(batch, ptrs);
  EXPECT_EQ(paths(batch), paths(one_by_one));
  EXPECT_EQ(batch.roots, one_by_one.roots);
  ASSERT_EQ(batch.spans.size(), one_by_one.spans.size());
  for (size_t i = 0; i < batch.spans.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(batch.spans[i].first_child, one_by_one.spans[i].first_child);
    EXPECT_EQ(batch.spans[i].next_sibling, one_by_one.spans[i].next_sibling);
    EXPECT_EQ(batch.kernel.spans[i].off_cpu_ns, one_by_one.kernel.spans[i].off_cpu_ns);
  }
  ASSERT_EQ(batch.kernel.off_cpu.size(), one_by_one.kernel.off_cpu.size());
  for (size_t i = 0; i < batch.kernel.off_cpu.size(); ++i) {
    EXPECT_EQ(batch.kernel.off_cpu[i].start_ns, one_by_one.kernel.off_cpu[i].start_ns);
    EXPECT_EQ(batch.kernel.off_cpu[i].pid, one_by_one.kernel.off_cpu[i].pid);
  }
  EXPECT_EQ(batch.kernel.lost_events, 24u);
  EXPECT_EQ(batch.meta, one_by_one.meta);
  EXPECT_EQ(batch.start_ns, one_by_one.start_ns);
  EXPECT_EQ(batch.end_ns, one_by_one.end_ns);
  EXPECT_EQ(batch.captured_depth, one_by_one.captured_depth);
}

TEST(Merge, ParentLanesAreShifted) {
  Profile a = session(100, 1, 1'000, "load", false);
  Profile b;
  const uint32_t work = test::user_fn(b, "work"), run = test::user_fn(b, "run");
  b.lanes.push_back(make_lane({call(0, run), ret(900)}));
  b.lanes.push_back(make_lane({call(100, work), ret(200)}, "Worker", 0, 0, 0));
  b.end_ns = 1'000;
  build_tree(b);
  append_profile(a, b);
  ASSERT_EQ(a.lanes.size(), 3u);
  EXPECT_EQ(a.lanes[2].parent_lane, 1);
  EXPECT_EQ(a.spans[4].parent, 3);
  EXPECT_EQ(a.roots, (std::vector<int32_t>{3, 0}));  // by start
  // Rebuilding from the events gives the same tree.
  const std::vector<std::string> before = paths(a);
  build_tree(a);
  EXPECT_EQ(paths(a), before);
  EXPECT_EQ(a.start_ns, 0);
}

// The agent's sessions of one process start on their process's names
// (FunctionTable's shared base): merged, the names are those the sessions
// use, each once, whatever else the base holds.
TEST(Merge, PartsOnOneSharedBaseGiveTheNamesTheyUseOnce) {
  auto names = std::make_shared<FunctionTable>();
  names->add("unused", "app", "/srv/app.py", 1, FunctionKind::kPython, true);
  const uint32_t base_predict =
      names->add("predict", "app.model", "/app/model.py", 1, FunctionKind::kPython, true);
  names->strings().intern("unused label");
  auto part = [&](int64_t t0, const std::string& child) {
    Profile p;
    p.functions = FunctionTable(names);
    const uint32_t predict = test::user_fn(p, "predict"), c = test::user_fn(p, child);
    EXPECT_EQ(predict, base_predict);  // the base's
    p.start_ns = t0;
    p.end_ns = t0 + 100;
    p.meta = {{"pid", "100"}, {"session", std::to_string(t0)}};
    p.lanes.push_back(
        make_lane({call(t0, predict), call(t0 + 10, c), ret(t0 + 20), ret(t0 + 100)}));
    build_tree(p);
    return p;
  };
  const Profile a = part(0, "load"), b = part(1'000, "score"), c = part(2'000, "load");
  Profile m;
  append_profiles(m, {&a, &b, &c});
  ASSERT_EQ(m.spans.size(), 6u);
  EXPECT_EQ(m.functions.size(), 3u);  // predict, load, score; not "unused"
  EXPECT_FALSE(m.functions.strings().find("unused").has_value());
  EXPECT_FALSE(m.functions.strings().find("unused label").has_value());
  EXPECT_EQ(m.spans[0].function, m.spans[2].function);
  EXPECT_EQ(m.spans[1].function, m.spans[5].function);
  EXPECT_EQ(m.functions.name(m.spans[3].function), "score");
  std::vector<std::string> want = paths(a);
  for (const Profile* p : {&b, &c})
    for (const std::string& s : paths(*p)) want.push_back(s);
  EXPECT_EQ(paths(m), want);
}

}  // namespace
}  // namespace mlprof
