#include "model/profile_check.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::ret;

// Two lanes, three spans (a root, its child, a second lane's root), a
// segment, an I/O summary, a mark, an off-CPU interval and a thread: every
// table the checks read, all valid.
Profile valid_profile() {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 100;
  const uint32_t f = p.functions.add("f", "m", "/app/m.py", 1, FunctionKind::kPython, true);
  p.lanes.push_back(test::make_lane({call(0, f), call(10, f), ret(20), ret(90)}));
  p.lanes.push_back(test::make_lane({call(30, f), ret(40)}, "worker"));
  p.lanes[1].parent_lane = 0;
  build_tree(p);
  p.segments.push_back(Segment{1, 10, 20});
  SpanIO io;
  io.span = 1;
  p.io.push_back(io);
  p.marks.push_back(Mark{0, 15, 1, 0, 0});
  OffCpuInterval iv;
  iv.start_ns = 50;
  iv.wake_ns = 60;
  iv.end_ns = 70;
  p.kernel.off_cpu.push_back(iv);
  ThreadLifetime t;
  t.start_ns = 25;
  t.end_ns = 45;
  t.started_under = 0;
  p.kernel.threads.push_back(t);
  return p;
}

TEST(ProfileCheck, AValidProfileHasNoDefect) {
  const Profile p = valid_profile();
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(profile_defect(p), "");
}

// Each rule broken alone, and the words both readers refuse it in.
TEST(ProfileCheck, EachRuleIsNamedWithItsTableRowAndColumn) {
  const std::vector<std::pair<std::function<void(Profile&)>, std::string>> cases = {
      {[](Profile& p) { p.end_ns = -1; }, "meta.end_ns: is before start_ns"},
      {[](Profile& p) { p.captured_depth = -2; },
       "meta.captured_depth: must be -1 (unlimited) or >= 0"},
      {[](Profile& p) { p.start_ns = kMaxTimeNs + 1; },
       "meta.start_ns: is out of range (|t| >= 2^62 ns)"},
      {[](Profile& p) { p.lanes[1].parent_lane = 2; },
       "lanes[1].parent_lane: 2 is neither -1 nor a lane"},
      {[](Profile& p) { p.spans[1].parent = 1; }, "spans[1]: parent 1 is not an earlier span"},
      {[](Profile& p) { p.spans[1].depth = 3; },
       "spans[1]: depth 3 does not match its parent's (expected 1)"},
      {[](Profile& p) { p.spans[2].lane = 5; },
       "spans[2].lane: id 5 is out of range (lanes has 2 entries)"},
      {[](Profile& p) { p.spans[0].end_ns = kMaxTimeNs + 1; },
       "spans[0].end_ns: is out of range (|t| >= 2^62 ns)"},
      {[](Profile& p) { p.spans[1].end_ns = 5; }, "spans[1]: ends before it starts"},
      {[](Profile& p) { p.spans[1].waiting_ns = 11; },
       "spans[1].waiting_ns: is not within the span's wall time"},
      {[](Profile& p) { p.spans[1].waiting_ns = -1; },
       "spans[1].waiting_ns: is not within the span's wall time"},
      {[](Profile& p) { p.segments[0].span = 3; },
       "segments[0].span: id 3 is out of range (spans has 3 entries)"},
      {[](Profile& p) {
         p.segments.push_back(Segment{0, 0, 5});
       },
       "segments[1]: not in span order"},
      {[](Profile& p) { p.segments[0].end_ns = 9; }, "segments[0]: ends before it starts"},
      {[](Profile& p) { p.segments[0].paused_ns = 11; },
       "segments[0].paused_ns: is not within the segment's length"},
      {[](Profile& p) { p.io[0].role = static_cast<IORole>(7); },
       "io[0].role: must be 0 (argument) or 1 (return value)"},
      {[](Profile& p) { p.io.push_back(p.io[0]), p.io[1].span = 0; }, "io[1]: not in span order"},
      {[](Profile& p) { p.marks[0].span = 3; }, "marks[0].span: is not -1 or a span"},
      {[](Profile& p) {
         p.marks.push_back(Mark{0, 14, -1, 0, 0});
       },
       "marks[1]: not in time order"},
      {[](Profile& p) { p.kernel.off_cpu[0].end_ns = 40; },
       "kernel.off_cpu[0]: ends before it starts"},
      {[](Profile& p) { p.kernel.off_cpu[0].wake_ns = -kMaxTimeNs - 1; },
       "kernel.off_cpu[0].wake_ns: is out of range (|t| >= 2^62 ns)"},
      {[](Profile& p) { p.kernel.off_cpu[0].syscall = -2; }, "kernel.off_cpu[0].syscall: below -1"},
      {[](Profile& p) { p.kernel.threads[0].started_under = 3; },
       "kernel.threads[0].started_under: 3 is neither -1 nor a span"},
      {[](Profile& p) { p.kernel.threads[0].end_ns = 20; },
       "kernel.threads[0]: ends before it starts"},
  };
  for (const auto& [breaks, expected] : cases) {
    Profile p = valid_profile();
    breaks(p);
    EXPECT_EQ(profile_defect(p), expected);
  }
}

// A lane's parent may come after it (the document reader always took one),
// and a thread's unknown start or end (0) is not "ends before it starts".
TEST(ProfileCheck, WhatIsNotADefect) {
  Profile p = valid_profile();
  p.lanes[0].parent_lane = 1;
  p.kernel.threads[0].start_ns = 0;
  p.kernel.threads[0].end_ns = 0;
  p.spans[1].waiting_ns = 10;  // all of its wall time
  EXPECT_EQ(profile_defect(p), "");
}

// Past 2^53 ns (104 days of a monotonic clock) a double cannot hold every
// nanosecond: a wait of all of a span's wall time there must still be
// within it, and one nanosecond more must not.
TEST(ProfileCheck, WaitsAreComparedExactlyAtAnyTime) {
  Profile p = valid_profile();
  const int64_t base = int64_t{1} << 60;  // a double's step here: 256 ns
  p.end_ns = base + 1000;
  for (Span& s : p.spans) s.start_ns += base, s.end_ns += base;
  Span& s = p.spans[1];
  s.start_ns = base + 129;  // as doubles, start and end are the same
  s.end_ns = base + 383;
  s.waiting_ns = 254;
  p.segments[0] = Segment{1, s.start_ns, s.end_ns};
  p.segments[0].paused_ns = 254;
  EXPECT_EQ(profile_defect(p), "");
  const auto back = read_json_document(to_json_document(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().spans[1].waiting_ns, 254);
  s.waiting_ns = 255;
  EXPECT_EQ(profile_defect(p), "spans[1].waiting_ns: is not within the span's wall time");
}

// The document reader refuses with the same check: a profile the store
// would refuse is refused in a document too, in the same words.
TEST(ProfileCheck, TheDocumentReaderRefusesInTheSameWords) {
  Profile p = valid_profile();
  const std::string doc = to_json_document(p);
  const auto back = read_json_document(doc);
  ASSERT_TRUE(back.ok()) << back.error().message;
  p.spans[1].waiting_ns = 11;
  EXPECT_EQ(profile_defect(p), "spans[1].waiting_ns: is not within the span's wall time");
  const auto refused = read_json_document(to_json_document(p));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "corrupt profile document: spans[1].waiting_ns: is not within the span's wall time");
}

}  // namespace
}  // namespace mlprof
