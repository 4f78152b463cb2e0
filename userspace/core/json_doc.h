#pragma once
// The versioned JSON profile document (docs/format.md). It holds everything
// captured, at full captured depth; to_json(depth) is a view of it.

#include <string>

#include "core/tree.h"
#include "core/view.h"

namespace mlprof {

inline constexpr int kDocumentVersion = 2;

// Writes the document. opts.depth limits spans (a view); the default writes all.
std::string to_json_document(const Profile& p, const ViewOptions& opts = {});

}  // namespace mlprof
