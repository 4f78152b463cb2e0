#pragma once
// Runs of several releases with a known step, for the change-point and
// trend tests.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace mlprof::test {

struct Series {
  std::vector<double> values;
  std::vector<size_t> group_of;
};

// `groups` releases of `runs` runs each, lognormal noise of `sigma` (log
// scale: 0.05 is about 5% between runs) around 1 ms, times `factor` from
// release `step_at` on (no step when step_at >= groups).
inline Series make_series(uint64_t seed, size_t groups, size_t runs, double sigma, size_t step_at,
                          double factor) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> noise(0.0, sigma);
  Series s;
  for (size_t g = 0; g < groups; ++g) {
    for (size_t r = 0; r < runs; ++r) {
      s.values.push_back(1e6 * std::exp(noise(gen)) * (g >= step_at ? factor : 1.0));
      s.group_of.push_back(g);
    }
  }
  return s;
}

}  // namespace mlprof::test
