#include "core/bootstrap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace mlprof {
namespace {

std::vector<int64_t> lognormal(size_t n, double mu, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> d(mu, 0.3);
  std::vector<int64_t> out(n);
  for (auto& v : out) v = static_cast<int64_t>(d(rng));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Bootstrap, LowerQuantileIsNumpysLower) {
  const std::vector<int64_t> v{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(lower_quantile(v, 0.0), 1);
  EXPECT_EQ(lower_quantile(v, 0.5), 5);    // rank floor(0.5 * 9) = 4
  EXPECT_EQ(lower_quantile(v, 0.95), 9);   // rank floor(0.95 * 9) = 8
  EXPECT_EQ(lower_quantile(v, 1.0), 10);
}

TEST(Bootstrap, AnIntervalHoldsTheTrueChangeAndExcludesZeroWhenItIsLarge) {
  // B is A's distribution scaled by e^0.5 (about +65%): the p95's change is
  // far from zero; A against a second draw of itself has an interval on 0.
  const auto a = lognormal(400, 10, 1), a2 = lognormal(400, 10, 2), b = lognormal(400, 10.5, 3);
  const auto [lo, hi] = bootstrap_quantile_delta(a, b, 0.95, 2000, 0.95, 7);
  const int64_t observed = lower_quantile(b, 0.95) - lower_quantile(a, 0.95);
  EXPECT_GT(lo, 0);
  EXPECT_LE(lo, observed);
  EXPECT_GE(hi, observed);
  const auto [lo0, hi0] = bootstrap_quantile_delta(a, a2, 0.5, 2000, 0.95, 7);
  EXPECT_LE(lo0, 0);
  EXPECT_GE(hi0, 0);
}

TEST(Bootstrap, TheSameSeedGivesTheSameIntervalAndIdenticalSidesGiveZeroAtOneValue) {
  const auto a = lognormal(50, 10, 4), b = lognormal(50, 10.2, 5);
  EXPECT_EQ(bootstrap_quantile_delta(a, b, 0.5, 500, 0.9, 11), bootstrap_quantile_delta(a, b, 0.5, 500, 0.9, 11));
  const std::vector<int64_t> one{42};
  EXPECT_EQ(bootstrap_quantile_delta(one, one, 0.95, 100, 0.95, 1), (std::pair<int64_t, int64_t>{0, 0}));
}

}  // namespace
}  // namespace mlprof
