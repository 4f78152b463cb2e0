#pragma once
// The text tree of spec 000 section 4:
//   predict: 48.12ms
//     preprocess: 2.31ms
// Two spaces per level. Notes (dropped calls, depth clamped, open spans) follow
// the tree.

#include <string>

#include "core/tree.h"
#include "core/view.h"

namespace mlprof {

// With more than one lane contributing roots, each such lane's roots follow a
// header line (lane_title); lanes nested under a span render inside it.
std::string render_text(const Profile& p, const ViewOptions& opts);

// "thread MainThread" for a lane of task 0, "thread MainThread, task 2"
// otherwise; a lane with no thread name is named by its thread_id.
std::string lane_title(const Lane& lane);

// "48.12ms", "0.03ms", "4.20us": the duration format the renderers share.
std::string format_duration(int64_t ns);

}  // namespace mlprof
