#pragma once
// Sums that stop at int64's ends rather than wrap: totals over many spans
// of a hostile document (each time within +-2^62) must not overflow.

#include <cstdint>
#include <limits>

namespace mlprof {

// a + b, or the int64 end it passes.
constexpr int64_t saturating_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace mlprof
