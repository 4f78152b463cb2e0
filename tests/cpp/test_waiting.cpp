#include "views/waiting.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "model/tree.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

class WaitingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p.start_ns = 0;
    p.end_ns = 10'000;
    a = test::user_fn(p, "a");
    b = test::user_fn(p, "b");
    c = test::user_fn(p, "c");
  }
  Profile p;
  uint32_t a = 0, b = 0, c = 0;
};

// a [0, 1000] calls b [100, 700] (which slept 400 below the ceiling) and
// c [700, 900] (busy): the off-CPU reading at b's return counts for b and a.
TEST_F(WaitingTest, AnOffCpuReadingCountsForTheSpansRunningBeforeItsEvent) {
  Lane lane = make_lane({call(0, a), call(100, b), ret(700), call(700, c), ret(900), ret(1000)});
  lane.off_cpu = {{700, 400}, {1000, 30}};  // 30: a's own, after c
  p.lanes.push_back(lane);
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.spans[0].waiting_ns, 430);
  EXPECT_EQ(p.spans[1].waiting_ns, 400);
  EXPECT_EQ(p.spans[2].waiting_ns, 0);
  EXPECT_EQ(p.spans[0].running_ns(), 570);
}

// A coroutine suspended for 500 waits 500 however little ran; its consumer
// does not wait for it, and off-CPU time during the pause is not counted
// twice for the coroutine.
TEST_F(WaitingTest, SuspendedTimeIsWaitingAndOffCpuInAPauseIsNotCountedAgain) {
  Lane lane = make_lane({call(0, a), call(100, b), suspend(200, 1), call(250, c), ret(800),
                         resume(800, 1), ret(900), ret(1000)});
  lane.off_cpu = {{800, 500}};  // c slept
  p.lanes.push_back(lane);
  build_tree(p);
  EXPECT_EQ(p.spans[1].duration_ns(), 800);
  EXPECT_EQ(p.spans[1].waiting_ns, 600);  // suspended [200, 800]
  EXPECT_EQ(p.spans[2].waiting_ns, 500);  // c
  EXPECT_EQ(p.spans[0].waiting_ns, 500);  // a ran throughout; c's sleep is its
}

TEST_F(WaitingTest, AReadingPlacedBeforeASpanStartedCountsOnlyWithinIt) {
  Lane lane = make_lane({call(0, a), call(100, b), ret(200), call(200, c), ret(400), ret(1000)});
  lane.off_cpu = {{200, 5000}, {400, 150}};  // the first: placed before a started, clipped
  p.lanes.push_back(lane);
  build_tree(p);
  EXPECT_EQ(p.spans[1].waiting_ns, 100);
  EXPECT_EQ(p.spans[2].waiting_ns, 150);
  EXPECT_EQ(p.spans[0].waiting_ns, 350);  // 200 of the first, clipped at its start
  for (const Span& s : p.spans) EXPECT_LE(s.waiting_ns, s.duration_ns());
}

TEST_F(WaitingTest, TheKernelsOffCpuTimeReplacesTheReadings) {
  Lane lane = make_lane({call(0, a), call(100, b), ret(700), ret(1000)});
  lane.off_cpu = {{700, 400}};
  p.lanes.push_back(lane);
  build_tree(p);
  p.kernel.present = true;
  p.kernel.spans.resize(2);
  p.kernel.spans[0].own_off_cpu_ns = 250;
  p.kernel.spans[1].own_off_cpu_ns = 200;
  compute_waiting(p);
  EXPECT_EQ(p.spans[0].waiting_ns, 250);
  EXPECT_EQ(p.spans[1].waiting_ns, 200);
}

TEST_F(WaitingTest, TheDocumentKeepsItAndAnOlderOneGetsTheSuspendedTime) {
  Lane lane =
      make_lane({call(0, a), call(100, b), suspend(200, 1), resume(800, 1), ret(900), ret(1000)});
  lane.off_cpu = {{1000, 50}};
  p.lanes.push_back(lane);
  build_tree(p);
  ASSERT_EQ(p.spans[0].waiting_ns, 50);
  Result<Profile> back = read_json_document(to_json_document(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().spans[0].waiting_ns, 50);
  EXPECT_EQ(back.value().spans[1].waiting_ns, 600);
  // Written before the column: the suspended time is all that can be known.
  rapidjson::Document d;
  d.Parse(to_json_document(p).c_str());
  ASSERT_EQ(std::string(d["span_fields"][10].GetString()), "waiting_ns");
  ASSERT_EQ(d["span_fields"].Size(), 12u);  // and resource after it
  d["span_fields"].PopBack();
  d["span_fields"].PopBack();
  for (auto& row : d["spans"].GetArray()) {
    row.PopBack();
    row.PopBack();
  }
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  d.Accept(w);
  Result<Profile> old = read_json_document(out.GetString());
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old.value().spans[0].waiting_ns, 0);
  EXPECT_EQ(old.value().spans[1].waiting_ns, 600);
}

// A group node's members may overlap in time (generators consumed in turn,
// or what a hostile target's probes described): their waits summed would be
// more than the group's wall. A group waits at most what its members did
// not run, and a group inside a group is whole before it is counted.
TEST_F(WaitingTest, AGroupWaitsAtMostTheWallItsMembersDidNotRun) {
  auto span = [&](int32_t parent, uint32_t depth, uint32_t flags, int64_t start, int64_t end,
                  int64_t active) {
    Span s;
    s.parent = parent;
    s.function = a;
    s.depth = depth;
    s.flags = flags;
    s.start_ns = start;
    s.end_ns = end;
    s.active_ns = active;
    p.spans.push_back(s);
  };
  span(-1, 0, kSpanGroup, 0, 1000, 1000);
  span(0, 1, 0, 0, 1000, 100);  // waits 900, runs 100
  span(0, 1, 0, 0, 1000, 100);  // the same stretch again
  span(0, 1, kSpanGroup, 0, 1000, 1000);
  span(3, 2, 0, 0, 1000, 50);  // waits 950, runs 50
  span(3, 2, 0, 0, 1000, 50);
  compute_waiting(p);
  EXPECT_EQ(p.spans[1].waiting_ns, 900);
  EXPECT_EQ(p.spans[3].waiting_ns, 900);  // 1900 summed; 1000 less the 100 its members ran
  EXPECT_EQ(p.spans[0].waiting_ns, 700);  // 2700 summed; 1000 less 100 + 100 + 100 run
  for (const Span& s : p.spans) EXPECT_LE(s.waiting_ns, s.duration_ns());
  compute_waiting(p);  // idempotent
  EXPECT_EQ(p.spans[0].waiting_ns, 700);
}

}  // namespace
}  // namespace mlprof
