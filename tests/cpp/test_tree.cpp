#include "model/tree.h"

#include <gtest/gtest.h>

#include <vector>

#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::label;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

// Children of `span` (or the roots for -1) through the child links.
std::vector<int32_t> children(const Profile& p, int32_t span) {
  std::vector<int32_t> out;
  for (int32_t c = p.spans[span].first_child; c >= 0; c = p.spans[c].next_sibling) out.push_back(c);
  return out;
}

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p.start_ns = 0;
    p.end_ns = 1000;
    a = test::user_fn(p, "a");
    b = test::user_fn(p, "b");
    c = test::user_fn(p, "c");
    d = test::user_fn(p, "d");
  }
  void build(std::vector<Event> events) {
    p.lanes.push_back(make_lane(std::move(events)));
    build_tree(p);
  }
  Profile p;
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

TEST_F(TreeTest, NestingGivesParentsDepthsAndChildLinks) {
  build({call(0, a), call(10, b), ret(20), call(30, c), call(40, d), ret(50), ret(60), ret(100)});
  ASSERT_EQ(p.spans.size(), 4u);
  const auto& s = p.spans;
  EXPECT_EQ(s[0].function, a);
  EXPECT_EQ(s[0].parent, -1);
  EXPECT_EQ(s[1].parent, 0);
  EXPECT_EQ(s[2].parent, 0);
  EXPECT_EQ(s[3].parent, 2);
  EXPECT_EQ(s[0].depth, 0u);
  EXPECT_EQ(s[1].depth, 1u);
  EXPECT_EQ(s[3].depth, 2u);
  EXPECT_EQ(s[0].start_ns, 0);
  EXPECT_EQ(s[0].end_ns, 100);
  EXPECT_EQ(s[3].duration_ns(), 10);
  for (const Span& span : s) {
    EXPECT_EQ(span.active_ns, span.duration_ns());
    EXPECT_EQ(span.flags, 0u);
    EXPECT_EQ(span.resumes, 0u);
    EXPECT_EQ(span.lane, 0u);
  }
  EXPECT_EQ(children(p, 0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(children(p, 2), (std::vector<int32_t>{3}));
  EXPECT_EQ(s[1].first_child, -1);
  EXPECT_EQ(p.roots, (std::vector<int32_t>{0}));
  EXPECT_EQ(p.max_depth(), 2);
  EXPECT_EQ(p.stats.unmatched_returns, 0u);
}

TEST_F(TreeTest, RecursionNestsTheSameFunction) {
  build({call(0, a), call(1, a), call(2, a), ret(3), ret(4), ret(5), call(6, a), ret(7)});
  ASSERT_EQ(p.spans.size(), 4u);
  EXPECT_EQ(p.spans[1].parent, 0);
  EXPECT_EQ(p.spans[2].parent, 1);
  EXPECT_EQ(p.spans[2].depth, 2u);
  EXPECT_EQ(p.spans[3].parent, -1);
  EXPECT_EQ(p.roots, (std::vector<int32_t>{0, 3}));
}

TEST_F(TreeTest, ExceptionFlagsOnlyTheFrameThatRaised) {
  build({call(0, a), call(10, b), ret(20, kEvException), ret(30)});
  // a returned normally: it caught b's exception
  EXPECT_EQ(p.spans[1].flags, static_cast<uint32_t>(kSpanException | kSpanCaught));
  EXPECT_EQ(p.spans[0].flags, 0u);
}

TEST_F(TreeTest, AnExceptionPassedOnToTheRootIsNotCaught) {
  build({call(0, a), call(10, b), ret(20, kEvException), ret(30, kEvException)});
  EXPECT_EQ(p.spans[1].flags, static_cast<uint32_t>(kSpanException));
  EXPECT_EQ(p.spans[0].flags, static_cast<uint32_t>(kSpanException));
}

TEST_F(TreeTest, AnExceptionFollowedByAnotherCallWasCaught) {
  // a caught b's exception, called c, then raised one of its own
  build({call(0, a), call(10, b), ret(20, kEvException), call(25, c), ret(26),
         ret(30, kEvException)});
  EXPECT_EQ(p.spans[1].flags, static_cast<uint32_t>(kSpanException | kSpanCaught));
  EXPECT_EQ(p.spans[0].flags, static_cast<uint32_t>(kSpanException));
}

TEST_F(TreeTest, ExceptionUnwindingSeveralFrames) {
  build({call(0, a), call(10, b), call(15, c), ret(20, kEvException), ret(21, kEvException),
         ret(30)});
  EXPECT_TRUE(p.spans[2].flags & kSpanException);
  EXPECT_TRUE(p.spans[1].flags & kSpanException);
  EXPECT_FALSE(p.spans[0].flags & kSpanException);
  EXPECT_EQ(p.spans[1].end_ns, 21);
}

TEST_F(TreeTest, ReturnsWithNoOpenSpanAreCountedAndIgnored) {
  build({ret(1), call(5, a), call(6, b), ret(7), ret(8), ret(9), call(10, c), ret(11)});
  EXPECT_EQ(p.stats.unmatched_returns, 2u);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.spans[0].end_ns, 8);
  EXPECT_EQ(p.roots, (std::vector<int32_t>{0, 2}));
  // Building again resets what the builder counts.
  build_tree(p);
  EXPECT_EQ(p.stats.unmatched_returns, 2u);
  EXPECT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.roots.size(), 2u);
}

TEST_F(TreeTest, LabelAttachesToTheNextCallOnly) {
  const uint32_t l = p.functions.strings().intern("encode step");
  build({call(0, a), label(l), call(10, b), ret(20), call(30, c), ret(40), ret(50)});
  EXPECT_EQ(p.spans[1].label, l);
  EXPECT_TRUE(p.spans[1].flags & kSpanLabelled);
  EXPECT_EQ(p.display_name(p.spans[1]), "encode step");
  EXPECT_EQ(p.spans[2].label, 0u);
  EXPECT_EQ(p.display_name(p.spans[2]), "c");
  EXPECT_FALSE(p.spans[0].flags & kSpanLabelled);
}

TEST_F(TreeTest, RelabelNamesTheInnermostOpenSpan) {
  // A fold (profiling() around PyFuncModel.predict): the model's predict,
  // not recorded, names the span it is folded into; the next call keeps its name.
  const uint32_t l = p.functions.strings().intern("predict [pyfunc Scorer]");
  build({call(0, a), call(5, b), ret(8), test::make_event(EventKind::kLabel, 9, l, kEvRelabel),
         call(10, c), ret(20), ret(30)});
  EXPECT_EQ(p.display_name(p.spans[0]), "predict [pyfunc Scorer]");
  EXPECT_TRUE(p.spans[0].flags & kSpanLabelled);
  EXPECT_EQ(p.display_name(p.spans[1]), "b");
  EXPECT_EQ(p.display_name(p.spans[2]), "c");
  EXPECT_FALSE(p.spans[2].flags & kSpanLabelled);
}

TEST_F(TreeTest, CallFlagsBecomeSpanFlags) {
  build({call(0, a, kEvContinued), call(1, b, kEvCFunction), ret(2), call(3, c, kEvBlock), ret(4),
         ret(5)});
  EXPECT_EQ(p.spans[0].flags, static_cast<uint32_t>(kSpanContinued));
  EXPECT_EQ(p.spans[1].flags, static_cast<uint32_t>(kSpanCFunction));
  EXPECT_EQ(p.spans[2].flags, static_cast<uint32_t>(kSpanBlock));
}

TEST_F(TreeTest, GeneratorSuspendAndResumeWithABlockInside) {
  const uint32_t blk_label = p.functions.strings().intern("chunk");
  const uint32_t blk = p.functions.add("chunk", "", "", 0, FunctionKind::kBlock, true);
  build({
      call(0, a),               // 0 main
      call(10, b),              // 1 generator, started by main
      label(blk_label),         // 2
      call(20, blk, kEvBlock),  // 3 block inside the generator
      suspend(30, 1),           // 4 yield: detaches generator and block
      call(40, c),              // 5 main calls c meanwhile
      ret(50),                  // 6
      resume(60, 1),            // 7 next(): generator and block are back
      call(70, d),              // 8 called inside the block
      ret(80),                  // 9
      ret(90),                  // 10 block exits
      ret(100),                 // 11 generator returns
      ret(110),                 // 12 main returns
  });
  ASSERT_EQ(p.spans.size(), 5u);
  const Span& main = p.spans[0];
  const Span& gen = p.spans[1];
  const Span& block = p.spans[2];
  const Span& sib = p.spans[3];
  const Span& inner = p.spans[4];
  EXPECT_EQ(gen.start_ns, 10);
  EXPECT_EQ(gen.end_ns, 100);
  EXPECT_EQ(gen.active_ns, (30 - 10) + (100 - 60));
  EXPECT_EQ(gen.resumes, 1u);
  EXPECT_EQ(gen.flags, static_cast<uint32_t>(kSpanGenerator));
  EXPECT_EQ(block.parent, 1);
  EXPECT_EQ(block.end_ns, 90);
  EXPECT_EQ(block.active_ns, (30 - 20) + (90 - 60));
  EXPECT_EQ(block.resumes, 1u);
  EXPECT_EQ(block.flags, kSpanGenerator | kSpanBlock | kSpanLabelled);
  EXPECT_EQ(block.label, blk_label);
  // Calls made while the generator is suspended are its siblings.
  EXPECT_EQ(sib.parent, 0);
  EXPECT_EQ(sib.depth, 1u);
  EXPECT_EQ(inner.parent, 2);
  EXPECT_EQ(inner.depth, 3u);
  EXPECT_EQ(main.active_ns, 110);
  EXPECT_EQ(children(p, 0), (std::vector<int32_t>{1, 3}));
}

TEST_F(TreeTest, GeneratorSegmentsAreItsRunningStretches) {
  const uint32_t blk = p.functions.add("chunk", "", "", 0, FunctionKind::kBlock, true);
  build({call(0, a), call(10, b), call(20, blk, kEvBlock), suspend(30, 1), call(40, c), ret(50),
         resume(60, 1), ret(90), ret(100), ret(110)});
  // The generator and the block inside it ran 10..30 / 20..30, then 60..end.
  EXPECT_EQ(p.segments,
            (std::vector<Segment>{{1, 10, 30}, {1, 60, 100}, {2, 20, 30}, {2, 60, 90}}));
  auto [first, last] = p.segments_of(1);
  ASSERT_EQ(last - first, 2);
  EXPECT_EQ(first->start_ns, 10);
  EXPECT_EQ(p.segments_of(0).first, p.segments_of(0).second);  // never suspended: no segments
}

TEST_F(TreeTest, SegmentsOfSpansSuspendedOrOpenAtTheEnd) {
  // b suspended at the end keeps the segment up to its yield; d is resumed
  // and still running at the end, so its last segment ends at the session end.
  build({call(0, a), call(10, b), suspend(20, 1), call(30, d), suspend(40, 3), resume(50, 3)});
  EXPECT_EQ(p.segments,
            (std::vector<Segment>{{1, 10, 20}, {2, 30, 40}, {2, 50, 1000}}));  // d is span 2
}

TEST_F(TreeTest, IoRecordsAttachToTheSpanOfTheirCall) {
  Lane lane = make_lane({call(0, a), call(10, b), ret(20), call(30, c), ret(40), ret(50)});
  IOSummary x;
  x.type_name = "numpy.ndarray";
  IOSummary y;
  y.type_name = "int";
  lane.io = {{0, IORole::kArgument, "df", x},  {1, IORole::kArgument, "k", y},
             {1, IORole::kReturn, "", x},      {0, IORole::kReturn, "", y},
             {2, IORole::kArgument, "bad", y},  // event 2 is a return: dropped
             {99, IORole::kArgument, "bad", y}};
  p.lanes.push_back(std::move(lane));
  build_tree(p);
  ASSERT_EQ(p.io.size(), 4u);
  // By span, and in recorded order within a span.
  EXPECT_EQ(p.io[0], (SpanIO{0, IORole::kArgument, "df", x}));
  EXPECT_EQ(p.io[1], (SpanIO{0, IORole::kReturn, "", y}));
  EXPECT_EQ(p.io[2], (SpanIO{1, IORole::kArgument, "k", y}));
  EXPECT_EQ(p.io[3], (SpanIO{1, IORole::kReturn, "", x}));
  EXPECT_EQ(p.io_of(2).first, p.io_of(2).second);
  EXPECT_EQ(p.io_of(1).second - p.io_of(1).first, 2);
  // Rebuilding gives the same result: the lane keeps its records.
  build_tree(p);
  EXPECT_EQ(p.io.size(), 4u);
  EXPECT_EQ(p.lanes[0].recorded, 6u);
}

TEST_F(TreeTest, GeneratorDrivenFromAnotherCallerKeepsItsParent) {
  // main creates the generator in b, b returns, c resumes it.
  build({call(0, a), call(1, b), call(2, d), suspend(3, 2), ret(4), call(5, c), resume(6, 2),
         call(7, a), ret(8), suspend(9, 2), ret(10), resume(11, 2), ret(12), ret(13)});
  const Span& gen = p.spans[2];
  EXPECT_EQ(gen.parent, 1);
  EXPECT_EQ(gen.resumes, 2u);
  EXPECT_EQ(gen.active_ns, 1 + 3 + 1);
  EXPECT_EQ(gen.end_ns, 12);
  EXPECT_EQ(p.spans[4].parent, 2);  // called inside the generator
  EXPECT_EQ(p.spans[4].depth, 3u);
  EXPECT_EQ(p.spans[0].end_ns, 13);  // the last return closes main
  EXPECT_EQ(p.stats.unmatched_returns, 0u);
}

TEST_F(TreeTest, ResumeOrSuspendOfUnknownSpansIsIgnored) {
  build({call(0, a), call(10, b), resume(15, 99), resume(16, 1), resume(17, 0), suspend(18, 77),
         suspend(19, 3), ret(20), suspend(25, 1), resume(26, 1), ret(30)});
  ASSERT_EQ(p.spans.size(), 2u);
  EXPECT_EQ(p.spans[1].end_ns, 20);
  EXPECT_EQ(p.spans[0].end_ns, 30);
  for (const Span& s : p.spans) {
    EXPECT_EQ(s.resumes, 0u);
    EXPECT_EQ(s.flags, 0u);
    EXPECT_EQ(s.active_ns, s.duration_ns());
  }
}

TEST_F(TreeTest, SpansOpenAtTheEndCloseAtTheSessionEnd) {
  build({call(100, a), call(200, b), ret(300), call(400, c)});
  EXPECT_EQ(p.spans[0].end_ns, 1000);
  EXPECT_EQ(p.spans[0].flags, static_cast<uint32_t>(kSpanOpenAtEnd));
  EXPECT_EQ(p.spans[0].active_ns, 900);
  EXPECT_EQ(p.spans[1].flags, 0u);
  EXPECT_EQ(p.spans[2].flags, static_cast<uint32_t>(kSpanOpenAtEnd));
  EXPECT_EQ(p.spans[2].end_ns, 1000);
}

TEST_F(TreeTest, SuspendedAtTheEndKeepsOnlyItsRunningTime) {
  build({call(100, a), call(200, b), suspend(250, 1), ret(300)});
  const Span& gen = p.spans[1];
  EXPECT_EQ(gen.flags, kSpanGenerator | kSpanSuspendedAtEnd);
  EXPECT_EQ(gen.end_ns, 1000);
  EXPECT_EQ(gen.active_ns, 50);
  EXPECT_EQ(gen.resumes, 0u);
  EXPECT_EQ(p.spans[0].flags, 0u);
}

TEST_F(TreeTest, SessionEndBeforeTheLastEventNeverEndsASpanEarly) {
  p.end_ns = 0;  // not set by the caller
  build({call(100, a), call(200, b)});
  EXPECT_EQ(p.spans[0].end_ns, 200);
  EXPECT_EQ(p.spans[1].end_ns, 200);
  EXPECT_GE(p.spans[1].duration_ns(), 0);
}

TEST_F(TreeTest, TruncatedLaneFlagsItsOpenSpans) {
  Lane lane = make_lane(
      {call(100, a), call(150, d), suspend(160, 1), call(200, b), ret(300), call(400, c)});
  lane.truncated = true;
  lane.dropped = 7;
  p.lanes.push_back(std::move(lane));
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 4u);
  EXPECT_EQ(p.spans[0].flags, kSpanOpenAtEnd | kSpanTruncated | kSpanChildrenDropped);
  EXPECT_EQ(p.spans[1].flags, kSpanGenerator | kSpanSuspendedAtEnd | kSpanTruncated);
  EXPECT_EQ(p.spans[2].flags, 0u);
  EXPECT_EQ(p.spans[3].flags, kSpanOpenAtEnd | kSpanTruncated);
}

TEST_F(TreeTest, DroppedCallsFlagEveryTopLevelSpanOfTheLane) {
  Lane lane = make_lane({call(0, a), call(1, b), ret(2), ret(3), call(4, c), ret(5)});
  lane.dropped = 3;
  p.lanes.push_back(std::move(lane));
  p.lanes.push_back(make_lane({call(0, d), ret(9)}, "Worker"));
  build_tree(p);
  EXPECT_TRUE(p.spans[0].flags & kSpanChildrenDropped);
  EXPECT_FALSE(p.spans[1].flags & kSpanChildrenDropped);
  EXPECT_TRUE(p.spans[2].flags & kSpanChildrenDropped);
  EXPECT_FALSE(p.spans[3].flags & kSpanChildrenDropped);  // other lane
}

TEST_F(TreeTest, HookMarkedDropsFlagExactlyThoseSpans) {
  Lane lane =
      make_lane({call(0, a), call(1, b), ret(2, kEvChildrenDropped), ret(3), call(4, c), ret(5)});
  lane.dropped = 3;
  p.lanes.push_back(std::move(lane));
  build_tree(p);
  EXPECT_FALSE(p.spans[0].flags & kSpanChildrenDropped);
  EXPECT_TRUE(p.spans[1].flags & kSpanChildrenDropped);
  EXPECT_FALSE(p.spans[2].flags & kSpanChildrenDropped);
}

TEST_F(TreeTest, NestedLanesHangUnderTheirParentCall) {
  p.lanes.push_back(make_lane({call(0, a), call(10, b), ret(90), ret(100)}));
  // Two tasks created by b (event 1 of lane 0); the second one starts first.
  p.lanes.push_back(make_lane({call(20, c), call(25, d), ret(30), ret(50)}, "MainThread", 1, 0, 1));
  p.lanes.push_back(make_lane({call(15, c), ret(60)}, "MainThread", 2, 0, 1));
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 5u);
  // Grouped by lane, parents first.
  EXPECT_EQ(p.spans[2].lane, 1u);
  EXPECT_EQ(p.spans[4].lane, 2u);
  EXPECT_EQ(p.spans[2].parent, 1);
  EXPECT_EQ(p.spans[2].depth, 2u);
  EXPECT_EQ(p.spans[3].parent, 2);
  EXPECT_EQ(p.spans[3].depth, 3u);
  EXPECT_EQ(p.spans[4].parent, 1);
  EXPECT_EQ(p.roots, (std::vector<int32_t>{0}));
  // Children of b in start order across lanes.
  EXPECT_EQ(children(p, 1), (std::vector<int32_t>{4, 2}));
}

TEST_F(TreeTest, EmptyTaskLanesAreLeftOutAndParentsRenumbered) {
  p.lanes.push_back(make_lane({}));                   // the session's own lane: kept
  p.lanes.push_back(make_lane({}, "MainThread", 1));  // a task that recorded nothing
  p.lanes.push_back(make_lane({call(0, a), call(10, b), ret(90), ret(100)}, "MainThread", 2));
  p.lanes.push_back(make_lane({call(20, c), ret(30)}, "MainThread", 3, 2, 1));  // adopted by b
  Lane lost = make_lane({}, "MainThread", 4);
  lost.dropped = 2;  // lost calls: kept
  p.lanes.push_back(lost);
  drop_empty_lanes(p);
  build_tree(p);
  ASSERT_EQ(p.lanes.size(), 4u);
  EXPECT_EQ(p.lanes[0].task, 0u);
  EXPECT_EQ(p.lanes[1].task, 2u);  // task numbers are kept
  EXPECT_EQ(p.lanes[2].parent_lane, 1);
  EXPECT_EQ(p.lanes[3].task, 4u);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.spans[2].parent, 1);  // c still hangs under b
  EXPECT_EQ(p.spans[2].depth, 2u);
}

TEST_F(TreeTest, BadParentLaneLeavesRootsAsRoots) {
  p.lanes.push_back(make_lane({call(0, a), ret(100)}));
  p.lanes.push_back(make_lane({call(10, b), ret(20)}, "T", 1, 1, 0));  // itself
  p.lanes.push_back(make_lane({call(30, c), ret(40)}, "T", 2, 5, 0));  // later/missing
  p.lanes.push_back(make_lane({call(50, d), ret(60)}, "T", 3, 0, 1));  // not a kCall
  p.lanes.push_back(make_lane({call(70, d), ret(80)}, "T", 4, 0, 9));  // out of range
  build_tree(p);
  for (size_t i = 1; i < p.spans.size(); ++i) {
    EXPECT_EQ(p.spans[i].parent, -1) << i;
    EXPECT_EQ(p.spans[i].depth, 0u) << i;
  }
  EXPECT_EQ(p.roots, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST_F(TreeTest, RootsOfAllLanesInStartOrder) {
  p.lanes.push_back(make_lane({call(0, a), ret(10), call(50, b), ret(60)}));
  p.lanes.push_back(make_lane({call(20, c), ret(30), call(50, d), ret(55)}, "Worker-1"));
  build_tree(p);
  // Ties in start time keep index order.
  EXPECT_EQ(p.roots, (std::vector<int32_t>{0, 2, 1, 3}));
}

TEST_F(TreeTest, EmptyProfile) {
  build_tree(p);
  EXPECT_TRUE(p.spans.empty());
  EXPECT_TRUE(p.roots.empty());
  EXPECT_EQ(p.max_depth(), -1);
  build({});
  EXPECT_TRUE(p.spans.empty());
}

// --- per-span values (cpu_time, alloc_bytes readings) -------------------------

namespace {
Reading cpu_at(uint32_t event, int64_t v) { return {event, ValueKind::kCpuNs, v}; }
Reading alloc_at(uint32_t event, int64_t v) { return {event, ValueKind::kAllocBytes, v}; }
uint64_t value(const Profile& p, int32_t span, ValueKind k) {
  const uint64_t* v = p.value_of(span, k);
  EXPECT_NE(v, nullptr) << "span " << span;
  return v ? *v : 0;
}
}  // namespace

TEST_F(TreeTest, ValuesAreInclusiveDifferencesOfReadings) {
  // a { b {} c {} }: a's value covers its children's and its own.
  p.lanes.push_back(make_lane({call(0, a), call(10, b), ret(20), call(30, c), ret(40), ret(50)}));
  p.lanes[0].readings = {cpu_at(0, 100),    alloc_at(0, 5),    cpu_at(1, 110),   alloc_at(1, 5),
                         cpu_at(2, 125),    alloc_at(2, 1005), cpu_at(3, 130),   cpu_at(4, 131),
                         alloc_at(4, 2000), cpu_at(5, 160),    alloc_at(5, 2000)};
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(value(p, 0, ValueKind::kCpuNs), 60u);
  EXPECT_EQ(value(p, 0, ValueKind::kAllocBytes), 1995u);
  EXPECT_EQ(value(p, 1, ValueKind::kCpuNs), 15u);
  EXPECT_EQ(value(p, 1, ValueKind::kAllocBytes), 1000u);
  EXPECT_EQ(value(p, 2, ValueKind::kCpuNs), 1u);
  // c's call has no alloc reading: no alloc value (absent, not 0).
  EXPECT_EQ(p.value_of(2, ValueKind::kAllocBytes), nullptr);
  // Sorted by span, then kind.
  for (size_t i = 1; i < p.values.size(); ++i) {
    const SpanValue &x = p.values[i - 1], &y = p.values[i];
    EXPECT_TRUE(x.span < y.span || (x.span == y.span && x.kind < y.kind));
  }
}

TEST_F(TreeTest, ValuesOfAGeneratorSumItsRunningStretches) {
  // a { g (suspended 20..40) g resumes ... }: g counts 10..20 and 40..45 only.
  p.lanes.push_back(
      make_lane({call(0, a), call(10, b), suspend(20, 1), resume(40, 1), ret(45), ret(50)}));
  p.lanes[0].readings = {cpu_at(0, 0),  cpu_at(1, 10), cpu_at(2, 20),
                         cpu_at(3, 40), cpu_at(4, 45), cpu_at(5, 50)};
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 2u);
  EXPECT_EQ(value(p, 1, ValueKind::kCpuNs), 15u);
  EXPECT_EQ(value(p, 0, ValueKind::kCpuNs), 50u);
}

TEST_F(TreeTest, ValuesOfSpansOpenAtEndRunToTheLanesLastReading) {
  p.lanes.push_back(make_lane({call(0, a), call(10, b), ret(20)}));
  p.lanes[0].readings = {cpu_at(0, 100), cpu_at(1, 150), cpu_at(2, 170)};
  build_tree(p);
  EXPECT_TRUE(p.spans[0].flags & kSpanOpenAtEnd);
  EXPECT_EQ(value(p, 0, ValueKind::kCpuNs), 70u);
  EXPECT_EQ(value(p, 1, ValueKind::kCpuNs), 20u);
}

TEST_F(TreeTest, ValuesNeverGoNegativeAndAreAbsentWithoutReadings) {
  p.lanes.push_back(make_lane({call(0, a), ret(10), call(20, b), ret(30)}));
  p.lanes[0].readings = {cpu_at(0, 100), cpu_at(1, 90)};  // a counter that went back (never should)
  build_tree(p);
  EXPECT_EQ(value(p, 0, ValueKind::kCpuNs), 0u);
  EXPECT_EQ(p.value_of(1, ValueKind::kCpuNs), nullptr);
  // Rebuilding without readings clears them.
  p.lanes[0].readings.clear();
  build_tree(p);
  EXPECT_TRUE(p.values.empty());
}

TEST(TreeInvariants, RandomCapturesGiveAWellFormedTree) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const Profile p = test::random_profile(seed, 400, 6, /*generators=*/true);
    std::vector<int32_t> seen_children(p.spans.size(), 0);
    for (size_t i = 0; i < p.spans.size(); ++i) {
      const Span& s = p.spans[i];
      ASSERT_LE(s.start_ns, s.end_ns) << "seed " << seed;
      ASSERT_LE(s.active_ns, s.duration_ns()) << "seed " << seed;
      ASSERT_GE(s.active_ns, 0);
      if (s.parent >= 0) {
        ASSERT_LT(s.parent, static_cast<int32_t>(i));
        ASSERT_EQ(s.depth, p.spans[s.parent].depth + 1);
        ASSERT_GE(s.start_ns, p.spans[s.parent].start_ns);
      } else {
        ASSERT_EQ(s.depth, 0u);
      }
      int64_t prev = INT64_MIN;
      for (int32_t c = s.first_child; c >= 0; c = p.spans[c].next_sibling) {
        ASSERT_EQ(p.spans[c].parent, static_cast<int32_t>(i));
        ASSERT_GE(p.spans[c].start_ns, prev);
        prev = p.spans[c].start_ns;
        ++seen_children[c];
      }
      if (i > 0) {
        ASSERT_GE(s.start_ns, p.spans[i - 1].start_ns);
      }
    }
    for (size_t i = 0; i < p.spans.size(); ++i) {
      ASSERT_EQ(seen_children[i], p.spans[i].parent >= 0 ? 1 : 0);
    }
    // Segments: only generator spans, inside their span, in order, not
    // overlapping, and adding up to the span's active time.
    for (size_t i = 0; i < p.spans.size(); ++i) {
      const Span& s = p.spans[i];
      auto [first, last] = p.segments_of(static_cast<int32_t>(i));
      if (!(s.flags & kSpanGenerator)) {
        ASSERT_EQ(first, last) << "seed " << seed;
        continue;
      }
      ASSERT_NE(first, last) << "seed " << seed;
      int64_t sum = 0, prev_end = s.start_ns;
      for (const Segment* g = first; g != last; ++g) {
        ASSERT_GE(g->start_ns, prev_end);
        ASSERT_LE(g->start_ns, g->end_ns);
        ASSERT_LE(g->end_ns, s.end_ns);
        sum += g->end_ns - g->start_ns;
        prev_end = g->end_ns;
      }
      ASSERT_EQ(sum, s.active_ns) << "seed " << seed << " span " << i;
    }
    EXPECT_EQ(p.stats.unmatched_returns, 0u);
  }
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

// `depth` nested calls of `f`, then the bottom one suspended and resumed
// `pairs` times: each pair moves the whole stack.
std::vector<Event> deep_suspends(uint32_t f, uint32_t depth, uint32_t pairs) {
  std::vector<Event> events;
  for (uint32_t i = 0; i < depth; ++i) events.push_back(test::call(i, f));
  for (uint32_t i = 0; i < pairs; ++i) {
    events.push_back(test::suspend(depth + 2 * i, 0));
    events.push_back(test::resume(depth + 2 * i + 1, 0));
  }
  return events;
}

// A hostile writer's lane (audit F1): 8,192 nested calls, then the bottom
// span suspended and resumed 20,000 times. Moving the whole stack each time
// is 3.3e8 span moves and half as many segments (6.5 GB); past
// stack_move_budget the lane stops, truncated, and the build stays linear.
TEST(TreeBudget, SuspendsOfADeepStackStopTheLaneAtTheBudget) {
  Profile p;
  p.end_ns = 1;
  const uint32_t f = test::user_fn(p, "f");
  constexpr uint32_t kDepth = 8192, kPairs = 20000;
  std::vector<Event> events = deep_suspends(f, kDepth, kPairs);
  const size_t budget = stack_move_budget(events.size());
  p.lanes.push_back(test::make_lane(std::move(events)));
  build_tree(p);
  EXPECT_TRUE(p.lanes[0].truncated);
  ASSERT_EQ(p.spans.size(), kDepth);
  // Each pair moves the whole stack twice and leaves a segment per span.
  EXPECT_LE(p.segments.size(), budget / 2 + 2 * kDepth);
  EXPECT_GE(p.segments.size(), budget / 2 - 2 * kDepth);
  for (const Span& s : p.spans) EXPECT_TRUE(s.flags & kSpanTruncated);
  EXPECT_EQ(p.spans[0].resumes, p.spans[kDepth - 1].resumes);
  EXPECT_LT(p.spans[0].resumes, kPairs);
}

// A real program's generators stay below the budget: a chain of 1,000
// suspended and resumed 2,000 times keeps every segment.
TEST(TreeBudget, ADeepAsyncChainSuspendedOftenKeepsEverySegment) {
  Profile p;
  p.end_ns = 1;
  const uint32_t f = test::user_fn(p, "f");
  constexpr uint32_t kDepth = 1000, kPairs = 2000;
  std::vector<Event> events = deep_suspends(f, kDepth, kPairs);
  p.lanes.push_back(test::make_lane(std::move(events)));
  build_tree(p);
  EXPECT_FALSE(p.lanes[0].truncated);
  EXPECT_EQ(p.spans[kDepth - 1].resumes, kPairs);
  EXPECT_EQ(p.segments.size(), size_t{kDepth} * kPairs + kDepth);  // + the open stretch
}

}  // namespace
}  // namespace mlprof
