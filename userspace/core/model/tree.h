#pragma once
// The span tree, built once after capture from the lanes' events, in O(n).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analysis/sched.h"
#include "model/event.h"
#include "model/functions.h"

namespace mlprof {

enum SpanFlag : uint32_t {
  kSpanException = 1u << 0,        // exited by an exception
  kSpanOpenAtEnd = 1u << 1,        // still running when the session ended; end = session end
  kSpanSuspendedAtEnd = 1u << 2,   // a generator/coroutine suspended when the session ended
  kSpanChildrenDropped = 1u << 3,  // some calls under it were dropped (buffer full)
  kSpanCFunction = 1u << 4,        // a C function (capture_c_calls)
  kSpanBlock = 1u << 5,            // a profile_block region
  kSpanLabelled = 1u << 6,         // label set by profile_span/profile_block
  kSpanContinued = 1u << 7,        // a coroutine whose start was not seen in this lane
  kSpanGenerator = 1u << 8,        // was suspended at least once (generator/coroutine)
  kSpanTruncated = 1u << 9,        // the lane stopped recording while it was open
  // Derived (link_tree): exited by an exception that a caller caught (pandas
  // probing an attribute, say): the caller went on, calling something else or
  // returning normally. Renderers show no error for it; one that left the
  // lane's root is the model's error.
  kSpanCaught = 1u << 10,
  // Derived (views/group.h): not a call but a run of MLflow's own calls, its children.
  kSpanGroup = 1u << 11,
  // A selector's select waiting (kEvWait): its thread was idle in it,
  // recorded whatever the depth ceiling (docs/capture.md, "Waiting").
  kSpanWait = 1u << 12,
};

// Every span flag, defined once: its bit, its name (documents, Python's
// SpanRecord.flags, the report; docs/format.md), the words a reader is shown,
// and whether exports list it in a span's flags text (the others are told by
// another field: a C function's kind, a generator's segments).
struct SpanFlagName {
  uint32_t bit;
  const char* name;
  const char* words;
  bool listed;
};
inline constexpr SpanFlagName kSpanFlagNames[] = {
    {kSpanException, "exception", "exception", true},
    {kSpanOpenAtEnd, "open_at_end", "open at end", true},
    {kSpanSuspendedAtEnd, "suspended_at_end", "suspended at end", true},
    {kSpanChildrenDropped, "children_dropped", "calls dropped below", true},
    {kSpanCFunction, "c_function", "C function", false},
    {kSpanBlock, "block", "profile_block", false},
    {kSpanLabelled, "labelled", "labelled", false},
    {kSpanContinued, "continued", "continued", true},
    {kSpanGenerator, "generator", "generator/coroutine", false},
    {kSpanTruncated, "truncated", "truncated", true},
    {kSpanCaught, "caught", "caught", true},  // by a caller: no error
    {kSpanGroup, "group", "MLflow's calls, grouped", false},
    {kSpanWait, "wait", "waiting in select", true},
};

struct Span {
  int32_t parent = -1;       // index into Profile::spans, -1 for a root
  uint32_t function = 0;     // FunctionTable id
  uint32_t label = 0;        // string id of the profile_span label, 0 if none
  uint32_t lane = 0;         // index into Profile::lanes
  uint32_t depth = 0;        // tree depth, root = 0
  uint32_t flags = 0;        // SpanFlag
  int64_t start_ns = 0;      // first start
  int64_t end_ns = 0;        // final return (or session end, see flags)
  int64_t active_ns = 0;     // time actually running (< end-start for suspended spans)
  uint32_t resumes = 0;      // times a suspended span was resumed
  int64_t waiting_ns = 0;    // of the wall, suspended or off the CPU (views/waiting.h)
  uint32_t resource = 0;     // string id of the resource it uses, 0 if none (model/resources.h)
  int32_t first_child = -1;  // children in start order
  int32_t next_sibling = -1;

  int64_t duration_ns() const { return end_ns - start_ns; }
  // Of the wall time, the time its code (and its callees') ran.
  int64_t running_ns() const { return duration_ns() - waiting_ns; }
};

// A stretch of time in which a suspended-and-resumed span was running: one
// per start or resume of a span flagged kSpanGenerator. Timeline exporters
// draw these instead of the span's whole wall time, which overlaps the
// consumer's other calls. A coalesced segment (model/resume.h: resumes that
// went straight back to the consumer, folded) also holds `resumes` pauses of
// `paused_ns` in all, during which only the consumer's unrecorded code ran:
// the span ran running_ns() of it.
struct Segment {
  int32_t span = -1;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t resumes = 0;   // resumes folded into the segment; 0: a plain segment
  int64_t paused_ns = 0;  // time paused within it, in all

  int64_t running_ns() const { return end_ns - start_ns - paused_ns; }
  bool operator==(const Segment&) const = default;
};

// An instant of a lane (EventKind::kMark): a rate limit hit, a retry.
struct Mark {
  uint32_t lane = 0;
  int64_t ts_ns = 0;
  int32_t span = -1;      // the innermost span open in its lane then; -1: none
  uint32_t name = 0;      // string id
  uint32_t resource = 0;  // string id of the resource it concerns; 0: none
  bool operator==(const Mark&) const = default;
};

// Per-session figures reported by ProfileSession.statistics().
struct CaptureStats {
  uint64_t events_captured = 0;    // events written to lanes
  uint64_t events_skipped = 0;     // frame events below the depth ceiling
  uint64_t unmatched_returns = 0;  // returns the builder had no open span for
};

// Every time in a Profile (ns) lies within +-kMaxTimeNs (2^62 - 1), so the
// difference of any two fits in int64: CLOCK_MONOTONIC reaches it after 146
// years up. The readers (document, store, the agent's records) refuse more.
inline constexpr int64_t kMaxTimeNs = (int64_t{1} << 62) - 1;
constexpr bool is_time(int64_t ns) { return ns >= -kMaxTimeNs && ns <= kMaxTimeNs; }

struct Profile {
  FunctionTable functions;
  std::vector<Lane> lanes;
  std::vector<Span> spans;        // grouped by lane, in start order within a lane
  std::vector<int32_t> roots;     // root span indices, in start order
  std::vector<SpanIO> io;         // by span, then arguments in order, then the return value
  std::vector<Segment> segments;  // by span, then start (generator spans only)
  std::vector<SpanValue> values;  // by span, then kind (cpu_time, alloc_bytes; model/span_value.h)
  std::vector<Mark> marks;        // instants, in time order
  int captured_depth = 2;         // the ceiling; -1 = unlimited
  int64_t start_ns = 0;           // session activation
  int64_t end_ns = 0;             // session end
  CaptureStats stats;
  std::map<std::string, std::string> meta;  // provenance: engine, python, pid, host ...
  KernelData kernel;  // the eBPF agent's figures (analysis/sched.h); empty in process

  // Label if set, else the function's name.
  const std::string& display_name(const Span& s) const;
  // Deepest tree depth present (-1 if no spans).
  int max_depth() const;
  // The I/O summaries of span `s`: [first, last) in io.
  std::pair<const SpanIO*, const SpanIO*> io_of(int32_t s) const;
  // The running segments of a kSpanGenerator span: [first, last) in segments.
  std::pair<const Segment*, const Segment*> segments_of(int32_t s) const;
  // Span `s`'s value of `kind`, or nullptr when it has none.
  const uint64_t* value_of(int32_t s, ValueKind kind) const;
};

// Builds spans, roots and child links from profile.lanes. Lanes with a parent_lane hang their roots
// under that span (which must come earlier in profile.lanes). Spans still open at the end of a lane
// are closed at profile.end_ns and flagged; returns with no open span are counted in
// stats.unmatched_returns and ignored.
//
// Details the events leave open, settled here:
// - Rebuilding is allowed: spans, roots and stats.unmatched_returns are reset.
// - A lane whose parent_lane is not an earlier lane, or whose parent_call is
//   not a recorded kCall there, keeps its roots as roots.
// - kFold/kFoldCount (coalesced resumes, model/resume.h) of a running span
//   count the resumes and take the paused total out of active_ns and out of
//   each value (the kFold's readings: what the counters grew while paused)
//   for the span and every span above it in the lane; its segment carries
//   both (Segment::resumes, paused_ns). A kFold of a span that is not
//   running, or not followed by its kFoldCount, is ignored.
// - kSuspend/kResume for a span that is not open (resp. not suspended by its
//   own kSuspend) are ignored. Every span of a suspended segment (the
//   generator and, say, a profile_block open inside it) gets kSpanGenerator,
//   loses the suspended time from active_ns and counts the resume.
// - Spans left open or suspended when the lane ends get end_ns =
//   max(profile.end_ns, the lane's last timestamp), never before their start;
//   kSpanTruncated goes on both kinds when the lane is truncated.
// - children_dropped: where the hook marks the span (kEvChildrenDropped on its
//   kReturn or kSuspend) that flag is used. A lane with dropped > 0 and no such
//   mark gets kSpanChildrenDropped on all its top-level spans (roots, or the
//   spans adopted under parent_lane): the events cannot say which parent lost
//   the calls, only that they were under one of those.
// - I/O records become Profile::io; a record whose `call` is not a kCall of
//   its lane is dropped. Segments are recorded for kSpanGenerator spans only;
//   the last segment of a span still suspended at the end ends at its suspend.
// - Readings (Lane::readings, in event order) become Profile::values: a span's
//   value of a kind sums, over its running stretches (call or resume to
//   return or suspend), the end reading less the start reading, negative
//   differences counted as 0. A span left open or suspended at the end runs
//   to the lane's last reading of that kind. A span with no start reading of
//   a kind has no value of it; readings whose event is not a kCall, kReturn,
//   kSuspend or kResume that the builder used are ignored.
// - lane.recorded is set to lane.events.size().
// - Suspending, resuming and folding cost the depth of the segment they
//   move. Past stack_move_budget(events) such moves in one build, a lane
//   stops where it is, flagged truncated (its open spans as above): events
//   from a hostile or broken writer cannot make the build quadratic.
void build_tree(Profile& profile);

// Span moves (one span of a segment suspended, resumed or folded) that
// build_tree, and the agent's joiner on its own stack, allow for `events`
// events: linear in the events (at most 16 segments, 640 bytes, an event),
// and above real programs' (a chain 1,000 deep suspended 2,000 times).
constexpr size_t stack_move_budget(size_t events) { return (size_t{1} << 22) + 32 * events; }

// Removes a session's task lanes (task > 0) that hold nothing: no event, no
// drop, not truncated. A capture mechanism may report a context's frames
// below the ceiling (the lane is opened, nothing is recorded) or not report
// them at all; which one is a cost decision, not part of the profile, so such
// lanes are left out and the lanes agree across CPython versions and engines.
// Task numbers are kept (they may have gaps). A lane adopted under a removed
// one becomes a root (none can be: an empty lane opens no span). Call before
// build_tree, on a session's own lanes only.
void drop_empty_lanes(Profile& profile);

// Sets first_child/next_sibling and roots from the spans' parent links, as
// build_tree does: children in start order (index order within a lane, sorted
// by start where a span adopted another lane's spans), roots by start; and
// kSpanCaught from the exception flags. Used by build_tree and by the
// document reader.
void link_tree(Profile& profile);

}  // namespace mlprof
