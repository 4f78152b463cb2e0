#pragma once
// Combining profiles (docs/design/store.md, "Combining profiles"): several sessions, processes or
// hosts into one Profile, with ids remapped and provenance kept per lane.

#include <vector>

#include "model/tree.h"

namespace mlprof {

// Appends `from` to `into`, as if both had been captured into one profile:
// - functions and strings are interned into into's tables (labels remapped);
// - lanes are appended (parent_lane shifted) and keep where they came from:
//   a lane with pid 0 takes its profile's meta["pid"], a lane with session 0
//   its profile's meta["session"] (into's own lanes too, before meta is
//   combined), so the lanes still say which process and session they are;
// - spans, roots, I/O summaries and segments are appended with span, lane
//   and parent indices shifted; roots and child links are rebuilt
//   (link_tree);
// - kernel data: intervals and thread lifetimes appended (pid 0 filled in as
//   for lanes, started_under shifted), intervals re-sorted by (tid, start_ns),
//   lost_events summed, present if either is; per-span figures appended when
//   both sides have them, else attribute_kernel recomputes them all;
// - stats summed; start_ns/end_ns widened; captured_depth the deeper of the
//   two (-1, unlimited, wins);
// - meta keeps the keys both have with equal values; an `into` with no
//   lanes, spans or meta takes from's meta as it is. An `into` with no lanes
//   or spans (kernel data or meta set ahead, say) takes from's start_ns,
//   end_ns and captured_depth as they are.
// `from` may be `into` itself (the profile then holds its sessions twice).
void append_profile(Profile& into, const Profile& from);

// The same for many parts at once, in order: the whole-profile steps (child
// links and roots, the interval sort, attribution) run once, so combining n
// sessions costs O(total log total), where n append_profile calls would
// redo them n times.
void append_profiles(Profile& into, const std::vector<const Profile*>& parts);

}  // namespace mlprof
