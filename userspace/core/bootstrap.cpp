#include "core/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace mlprof {

namespace {

// The q-quantile of one resample of `sorted` (see bootstrap_quantile_delta).
int64_t resampled_quantile(const std::vector<int64_t>& sorted, double q, std::mt19937_64& rng) {
  const auto n = static_cast<int64_t>(sorted.size());
  const int64_t k = static_cast<int64_t>(q * static_cast<double>(n - 1)) + 1;
  // Beta(k, n-k+1) as X/(X+Y), X ~ Gamma(k), Y ~ Gamma(n-k+1).
  const double x = std::gamma_distribution<double>(static_cast<double>(k))(rng);
  const double y = std::gamma_distribution<double>(static_cast<double>(n - k + 1))(rng);
  const double u = x + y > 0 ? x / (x + y) : 0.0;
  const auto at = static_cast<int64_t>(std::ceil(u * static_cast<double>(n))) - 1;
  return sorted[static_cast<size_t>(std::clamp<int64_t>(at, 0, n - 1))];
}

}  // namespace

int64_t lower_quantile(const std::vector<int64_t>& sorted, double q) {
  const auto n = static_cast<double>(sorted.size() - 1);
  return sorted[static_cast<size_t>(std::clamp(q, 0.0, 1.0) * n)];
}

std::pair<int64_t, int64_t> bootstrap_quantile_delta(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                                     double q, int replicates, double confidence, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> deltas(static_cast<size_t>(std::max(replicates, 1)));
  for (int64_t& d : deltas) {
    const int64_t qa = resampled_quantile(a, q, rng);
    d = resampled_quantile(b, q, rng) - qa;
  }
  std::sort(deltas.begin(), deltas.end());
  return {lower_quantile(deltas, (1 - confidence) / 2), lower_quantile(deltas, (1 + confidence) / 2)};
}

}  // namespace mlprof
