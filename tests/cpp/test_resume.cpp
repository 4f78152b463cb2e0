#include "model/resume.h"

#include <gtest/gtest.h>

#include <vector>

#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "model/tree.h"
#include "profile_builder.h"
#include "views/view.h"

namespace mlprof {
namespace {

using test::call;
using test::ret;
using test::suspend;

// One lane written twice, event by event: through append_resume (folded) and
// with a plain kResume for every resume (what the events were before folds).
// The plain one is the oracle: every figure of the folded tree must equal it.
struct Twin {
  Lane folded, plain;
  void add(const Event& e) {
    folded.events.push_back(e);
    plain.events.push_back(e);
  }
  void resume(int64_t ts, uint32_t call_index) {
    append_resume(folded, call_index, ts, true);
    plain.events.push_back(test::make_event(EventKind::kResume, ts, call_index, 0));
  }
  // Index the next kCall gets in the folded lane (what a writer hands out).
  uint32_t next() const { return static_cast<uint32_t>(folded.events.size()); }
};

// A profile of the fixture's functions (added in the same order: the same ids).
Profile base_profile() {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 10'000'000;
  test::user_fn(p, "predict");
  test::user_fn(p, "<genexpr>");
  test::c_fn(p, "sum");
  test::user_fn(p, "f");
  return p;
}

Profile built(Lane lane) {
  Profile p = base_profile();
  p.lanes.push_back(std::move(lane));
  build_tree(p);
  return p;
}

void expect_same_spans(const Profile& a, const Profile& b) {
  ASSERT_EQ(a.spans.size(), b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a.spans[i].parent, b.spans[i].parent);
    EXPECT_EQ(a.spans[i].function, b.spans[i].function);
    EXPECT_EQ(a.spans[i].flags, b.spans[i].flags);
    EXPECT_EQ(a.spans[i].start_ns, b.spans[i].start_ns);
    EXPECT_EQ(a.spans[i].end_ns, b.spans[i].end_ns);
    EXPECT_EQ(a.spans[i].active_ns, b.spans[i].active_ns);
    EXPECT_EQ(a.spans[i].resumes, b.spans[i].resumes);
  }
}

// The time each node of the full view stands for ("Times add up").
std::vector<int64_t> shown(const Profile& p) {
  std::vector<int64_t> out;
  for (const ViewNode& n : make_view(p, ViewOptions{}).nodes) out.push_back(n.duration_ns);
  return out;
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The ids base_profile() gives (the same additions, in the same order).
    Profile p;
    consumer = test::user_fn(p, "predict");
    gen = test::user_fn(p, "<genexpr>");
    sum = test::c_fn(p, "sum");
    f = test::user_fn(p, "f");
  }
  uint32_t consumer = 0, gen = 0, sum = 0, f = 0;
};

// sum(i * i for i in range(n)): the generator goes straight back to sum (a
// C function below the ceiling) and is resumed from there, n times.
TEST_F(ResumeTest, AGeneratorResumedStraightFromItsConsumerIsThreeEventsAndOneSegment) {
  constexpr int kResumes = 20000;
  Twin t;
  t.add(call(0, consumer));
  const uint32_t g = t.next();
  t.add(call(100, gen));
  int64_t ts = 100;
  for (int i = 0; i < kResumes; ++i) {
    t.add(suspend(ts + 7, g));        // runs 7 ns
    t.resume(ts + 7 + 3 + i % 5, g);  // paused 3-7 ns in sum
    ts += 10 + i % 5;
  }
  t.add(ret(ts + 7));
  t.add(ret(ts + 20));

  // kCall, kCall, kFold, kFoldCount, kReturn, kReturn.
  ASSERT_EQ(t.folded.events.size(), 6u);
  EXPECT_EQ(t.folded.events[2].kind, EventKind::kFold);
  EXPECT_EQ(t.folded.events[2].id, g);
  EXPECT_EQ(t.folded.events[3].kind, EventKind::kFoldCount);
  EXPECT_EQ(t.folded.events[3].id, static_cast<uint32_t>(kResumes));
  for (size_t i = 1; i < t.folded.events.size(); ++i) {
    EXPECT_LE(t.folded.events[i - 1].ts_ns, t.folded.events[i].ts_ns) << "event " << i;
  }

  const Profile folded = built(t.folded);
  const Profile plain = built(t.plain);
  expect_same_spans(folded, plain);
  EXPECT_EQ(folded.spans[1].resumes, static_cast<uint32_t>(kResumes));
  EXPECT_EQ(folded.spans[1].active_ns, int64_t{7} * (kResumes + 1));
  ASSERT_EQ(folded.segments.size(), 1u);
  EXPECT_EQ(plain.segments.size(), static_cast<size_t>(kResumes + 1));
  const Segment& seg = folded.segments[0];
  EXPECT_EQ(seg.start_ns, 100);
  EXPECT_EQ(seg.end_ns, folded.spans[1].end_ns);
  EXPECT_EQ(seg.resumes, static_cast<uint32_t>(kResumes));
  EXPECT_EQ(seg.running_ns(), folded.spans[1].active_ns);
  EXPECT_EQ(shown(folded), shown(plain));

  // The document and its reader carry the fold.
  const Result<Profile> back = read_json_document(to_json_document(folded));
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back.value().segments.size(), 1u);
  EXPECT_EQ(back.value().segments[0], seg);
  EXPECT_EQ(shown(back.value()), shown(plain));
}

// Resumed from inside a sibling (a helper the consumer calls runs next()):
// the folded segment lies inside the helper, whose time holds it.
TEST_F(ResumeTest, ASegmentFoldedInsideASiblingAddsUpAsThePlainOnes) {
  Twin t;
  t.add(call(0, consumer));
  const uint32_t g = t.next();
  t.add(call(10, gen));
  t.add(suspend(20, g));
  t.add(call(30, f));  // the helper: it resumes the generator 3 times
  t.resume(40, g);
  t.add(suspend(45, g));
  t.resume(50, g);
  t.add(suspend(58, g));
  t.resume(60, g);
  t.add(suspend(70, g));
  t.add(ret(80));
  t.resume(90, g);  // the consumer's own resume, after the helper
  t.add(ret(95));
  t.add(ret(100));

  const Profile folded = built(t.folded);
  const Profile plain = built(t.plain);
  expect_same_spans(folded, plain);
  EXPECT_EQ(folded.spans[1].resumes, 4u);
  EXPECT_EQ(folded.spans[1].active_ns, 10 + 5 + 8 + 10 + 5);
  EXPECT_EQ(folded.segments.size(), 3u);  // [10,20], [40,70] folded twice, [90,95]
  EXPECT_EQ(plain.segments.size(), 5u);
  EXPECT_EQ(shown(folded), shown(plain));
}

// A call recorded between resumes (the generator calls f) starts a new fold:
// the tree is still exact, and each resume still costs no kSuspend/kResume.
TEST_F(ResumeTest, ACallBetweenResumesStartsANewFold) {
  Twin t;
  t.add(call(0, consumer));
  const uint32_t g = t.next();
  t.add(call(10, gen));
  int64_t ts = 10;
  for (int i = 0; i < 10; ++i) {
    t.add(call(ts + 1, f));
    t.add(ret(ts + 3));
    t.add(suspend(ts + 5, g));
    t.resume(ts + 9, g);
    ts += 10;
  }
  t.add(ret(ts + 5));
  t.add(ret(ts + 9));
  const Profile folded = built(t.folded);
  const Profile plain = built(t.plain);
  expect_same_spans(folded, plain);
  EXPECT_EQ(folded.segments.size(), 1u);
  EXPECT_EQ(folded.spans[1].resumes, 10u);
  EXPECT_EQ(shown(folded), shown(plain));
  EXPECT_EQ(t.folded.events.size(), t.plain.events.size());
}

// Counter readings: the consumer's CPU while the generator is paused stays
// out of the generator's value, as with plain resumes.
TEST_F(ResumeTest, ReadingsTakeThePausesOutOfTheGeneratorsValue) {
  Lane folded, plain;
  int64_t cpu = 1000;
  auto write = [&](Lane& lane, const Event& e) {
    lane.events.push_back(e);
    lane.readings.push_back(
        {static_cast<uint32_t>(lane.events.size() - 1), ValueKind::kCpuNs, cpu});
  };
  for (Lane* lane : {&folded, &plain}) {
    cpu = 1000;
    write(*lane, call(0, consumer));
    cpu += 50;
    write(*lane, call(10, gen));
    for (int i = 0; i < 100; ++i) {
      cpu += 7;  // the generator runs
      write(*lane, suspend(20 + i * 10, 1));
      cpu += 3;  // the consumer runs
      const Reading now{0, ValueKind::kCpuNs, cpu};
      if (lane == &folded) {
        append_resume(*lane, 1, 25 + i * 10, true, &now, 1);
      } else {
        write(*lane, test::make_event(EventKind::kResume, 25 + i * 10, 1, 0));
      }
    }
    cpu += 7;
    write(*lane, ret(2000));
    cpu += 11;
    write(*lane, ret(2100));
  }
  EXPECT_LE(folded.readings.size(), 6u);
  const Profile a = built(folded);
  const Profile b = built(plain);
  expect_same_spans(a, b);
  ASSERT_NE(a.value_of(1, ValueKind::kCpuNs), nullptr);
  EXPECT_EQ(*a.value_of(1, ValueKind::kCpuNs), 7u * 101);
  EXPECT_EQ(*a.value_of(1, ValueKind::kCpuNs), *b.value_of(1, ValueKind::kCpuNs));
  EXPECT_EQ(*a.value_of(0, ValueKind::kCpuNs), *b.value_of(0, ValueKind::kCpuNs));
}

// Nothing folds that is not straight after its own kSuspend: another span's
// suspend, a flagged suspend, or a resume after some other event.
TEST_F(ResumeTest, OnlyAResumeRightAfterItsOwnSuspendFolds) {
  Lane lane;
  lane.events = {call(0, consumer), call(1, gen), suspend(2, 1)};
  EXPECT_EQ(append_resume(lane, 0, 3, true), ResumeWrite::kAppended);  // not its suspend
  lane.events = {call(0, consumer), call(1, gen), suspend(2, 1, kEvChildrenDropped)};
  EXPECT_EQ(append_resume(lane, 1, 3, true), ResumeWrite::kAppended);  // flagged
  lane.events = {call(0, consumer), call(1, gen), suspend(2, 1), call(3, f), ret(4)};
  EXPECT_EQ(append_resume(lane, 1, 5, true), ResumeWrite::kAppended);
  EXPECT_EQ(lane.events.back().kind, EventKind::kResume);
  lane.events = {call(0, consumer), call(1, gen), suspend(2, 1)};
  EXPECT_EQ(append_resume(lane, 1, 5, false),
            ResumeWrite::kAppended);  // the writer says no (an await)
  lane.events = {call(0, consumer), call(1, gen), suspend(2, 1)};
  EXPECT_EQ(append_resume(lane, 1, 5, true), ResumeWrite::kFolded);
  ASSERT_EQ(lane.events.size(), 4u);
  EXPECT_EQ(lane.events[2].ts_ns, 2);  // the pause: 5 - 2
  EXPECT_EQ(lane.events[3].ts_ns, 5);
}

}  // namespace
}  // namespace mlprof
