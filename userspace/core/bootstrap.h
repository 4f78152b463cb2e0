#pragma once
// Percentile-bootstrap intervals on the change of a quantile between two
// samples (mlprof diff): how sure a p95 grew.

#include <cstdint>
#include <utility>
#include <vector>

namespace mlprof {

// The sample of 0-based rank floor(q*(n-1)) (numpy's method="lower"), the
// rule of CallPathStats' quantiles. `sorted` ascending, not empty.
int64_t lower_quantile(const std::vector<int64_t>& sorted, double q);

// The (lo, hi) interval holding `confidence` of the bootstrap distribution
// of quantile_q(B*) - quantile_q(A*), A* and B* resamples (with replacement,
// same sizes) of `a` and `b` (each ascending, not empty); `replicates`
// resamples a side, seeded by `seed` (the same inputs give the same interval).
//
// Each resample costs O(1), not O(n): the k-th smallest of n uniform draws
// is Beta(k, n-k+1), and the empirical quantile function maps it to the
// k-th smallest resampled value, so no resample is drawn in full.
std::pair<int64_t, int64_t> bootstrap_quantile_delta(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                                     double q, int replicates, double confidence, uint64_t seed);

}  // namespace mlprof
