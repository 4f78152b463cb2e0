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

std::string render_text(const Profile& p, const ViewOptions& opts);

// "48.12ms", "0.03ms", "4.20us": the duration format the renderers share.
std::string format_duration(int64_t ns);

}  // namespace mlprof
