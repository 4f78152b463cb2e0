#pragma once
// The versioned JSON profile document (docs/format.md). It holds everything
// captured, at full captured depth; to_json(depth) is a view of it.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/tree.h"
#include "views/view.h"

namespace mlprof {

inline constexpr int kDocumentVersion = 2;

// The kernel figures of a span (SpanKernel) as long-form span values
// ("span_values": span, type, unit, value), in the order they are written.
struct SpanValueType {
  std::string_view type;
  std::string_view unit;
  uint64_t max;  // the largest value the field holds
  uint64_t (*get)(const SpanKernel&);
  void (*set)(SpanKernel&, uint64_t);
};
extern const std::array<SpanValueType, 14> kSpanValueTypes;

// Writes the document. opts.depth limits spans (a view); the default writes all.
std::string to_json_document(const Profile& p, const ViewOptions& opts = {});

}  // namespace mlprof
