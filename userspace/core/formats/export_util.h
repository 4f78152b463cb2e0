#pragma once
// Helpers shared by the timeline and stack exporters (Chrome trace, pprof,
// speedscope, folded stacks). Private to userspace/core: not part of the
// exporter API in export.h.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tree.h"

namespace mlprof::export_util {

// Time zero of the timeline formats: the session start, or the earliest span
// or segment start if one lies before it, so that no offset is negative.
int64_t time_origin(const Profile& p);

// Self wall time of each span (parallel to p.spans): its active_ns minus the
// active_ns of its children in the same lane, never negative. Children in
// other lanes (a thread or task hung under the span) ran concurrently and are
// not subtracted.
std::vector<int64_t> self_times(const Profile& p);

// A stretch of time in which a span ran on its lane: the whole span, or one
// segment of a generator span (kSpanGenerator).
struct RunInterval {
  int32_t span = -1;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t segment = 0;   // 1-based index of the segment; 0 for a whole span
  uint32_t segments = 0;  // segments of the span; 0 for a whole span
  // A coalesced segment (Segment::resumes): drawn whole, its pauses (the
  // consumer's unrecorded code) inside it.
  uint32_t folded_resumes = 0;
  int64_t paused_ns = 0;
};

// The running intervals of each lane (indexed like p.lanes), in the order a
// stack opens them: start ascending, then longer first, then shallower first.
// Within a lane they nest or are disjoint, since they come from one stack of
// calls; a profile that breaks this (a hand-edited document) is repaired:
// an interval is clipped to the end of the one it starts inside, and an end
// before its start becomes the start. Every consumer of a timeline format
// then sees strictly nested stretches with non-negative lengths.
std::vector<std::vector<RunInterval>> lane_intervals(const Profile& p);

// Whether `top`, open on a lane's stack, is still open when `next` (a later
// interval of lane_intervals) starts: `next` starts inside it, or is empty
// and sits at its very end. Otherwise `top` ends at or before next's start.
inline bool stays_open(const RunInterval& top, const RunInterval& next) {
  const bool starts_inside = next.start_ns >= top.start_ns && next.start_ns < top.end_ns;
  const bool empty_at_end = next.start_ns == top.end_ns && next.end_ns == next.start_ns;
  return starts_inside || empty_at_end;
}

// Lanes that hold at least one span.
std::vector<bool> lanes_with_spans(const Profile& p);

// The span flags a reader cares about, as words: "exception, open at end".
// Empty when none is set.
std::string flag_text(uint32_t flags);

// Appends `ns` as a JSON number of microseconds that keeps every nanosecond
// through both ways JSON readers turn it back into nanoseconds:
// - textually (Perfetto's CoerceToTs of a string: drop the '.', keep three
//   fractional digits, truncate the rest), and
// - as a double multiplied by 1000 and truncated (Perfetto's CoerceToTs of a
//   JSON real, which reads "dur").
// "1.5" for 1500 ns. Where the double of the three-digit text would truncate
// one nanosecond low (1001 ns: 1.001 * 1000 = 1000.99999...), a fourth digit
// 1 is added ("1.0011"): textual readers drop it, double readers land at
// n + 0.1 and truncate to n. Floating-point viewers see 0.1 ns more.
void append_us(std::string& out, int64_t ns);

// The display name of span `s` as a string-table id (label if set, else the
// function's name): equal ids, equal names.
uint32_t display_name_id(const Profile& p, const Span& s);

}  // namespace mlprof::export_util
