#include "analysis/changepoints.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace mlprof {

namespace {

// xoshiro256** seeded by splitmix64: the same draws on every platform (the
// standard library's distributions are not specified exactly).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n), n >= 1, without modulo bias: draws below 2^64 mod n
  // are redrawn.
  size_t below(size_t n) {
    const uint64_t bound = n;
    const uint64_t threshold = -bound % bound;
    uint64_t r = next();
    while (r < threshold) r = next();
    return static_cast<size_t>(r % bound);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

struct Split {
  size_t tau = 0;  // 0: none
  double q = -std::numeric_limits<double>::infinity();
};

// The best split of x[lo, hi) at a position where a group starts
// (starts[tau]), in O((hi - lo)^2): tau moves right one run at a time and
// the three sums follow it.
Split best_split(const std::vector<double>& x, const std::vector<char>& starts, size_t lo,
                 size_t hi) {
  Split best;
  if (hi - lo < 2) return best;
  double within_left = 0, within_right = 0, between = 0;
  for (size_t j = lo + 1; j < hi; ++j) {
    between += std::fabs(x[lo] - x[j]);
    for (size_t k = j + 1; k < hi; ++k) within_right += std::fabs(x[j] - x[k]);
  }
  for (size_t tau = lo + 1; tau < hi; ++tau) {
    if (starts[tau]) {
      const double m = static_cast<double>(tau - lo), n = static_cast<double>(hi - tau);
      double e = 2 * between / (m * n);
      if (m >= 2) e -= within_left / (m * (m - 1) / 2);
      if (n >= 2) e -= within_right / (n * (n - 1) / 2);
      const double q = m * n / (m + n) * e;
      if (q > best.q) best = {tau, q};
    }
    // Run tau joins the left side.
    double to_left = 0, to_right = 0;
    for (size_t i = lo; i < tau; ++i) to_left += std::fabs(x[i] - x[tau]);
    for (size_t j = tau + 1; j < hi; ++j) to_right += std::fabs(x[tau] - x[j]);
    within_left += to_left;
    within_right -= to_right;
    between += to_right - to_left;
  }
  return best;
}

// The best split over all segments (bounds: the segments' edges, sorted).
std::pair<Split, size_t> best_of(const std::vector<double>& x, const std::vector<char>& starts,
                                 const std::vector<size_t>& bounds) {
  std::pair<Split, size_t> best{Split{}, 0};
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const Split split = best_split(x, starts, bounds[s], bounds[s + 1]);
    if (split.tau && split.q > best.first.q) best = {split, s};
  }
  return best;
}

}  // namespace

double min_split_p_value(size_t before, size_t after) {
  // 1 / C(before + after, after), by a product that stays finite.
  double p = 1;
  const size_t k = std::min(before, after), n = before + after;
  for (size_t i = 1; i <= k; ++i) p *= static_cast<double>(i) / static_cast<double>(n - k + i);
  return p;
}

std::vector<ChangePoint> find_change_points(const std::vector<double>& values,
                                            const std::vector<size_t>& group_of,
                                            const ChangePointOptions& options) {
  if (values.size() != group_of.size())
    throw std::invalid_argument("values and group_of differ in length");
  if (!(options.alpha > 0 && options.alpha < 1))
    throw std::invalid_argument("alpha must be in (0, 1)");
  if (options.permutations < 1) throw std::invalid_argument("permutations must be >= 1");
  // The runs with a value, their log, and where each group starts.
  std::vector<double> x;
  std::vector<size_t> index, group;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i && group_of[i] < group_of[i - 1])
      throw std::invalid_argument("group_of must be non-decreasing");
    if (std::isnan(values[i])) continue;
    x.push_back(std::log(std::max(values[i], 1.0)));
    index.push_back(i);
    group.push_back(group_of[i]);
  }
  std::vector<char> starts(x.size(), 0);
  for (size_t i = 1; i < x.size(); ++i) starts[i] = group[i] != group[i - 1];

  std::vector<size_t> bounds{0, x.size()};
  std::vector<ChangePoint> found;
  Rng rng(options.seed);
  std::vector<double> shuffled;
  const double tolerance = 1e-9;
  while (true) {
    const auto [split, segment] = best_of(x, starts, bounds);
    if (!split.tau) break;
    // Shuffles within every segment: the structure already found is kept.
    shuffled = x;
    uint32_t hits = 0, drawn = 0;
    while (drawn < options.permutations && hits < options.stop_after) {
      for (size_t s = 0; s + 1 < bounds.size(); ++s) {
        for (size_t i = bounds[s + 1] - 1; i > bounds[s]; --i) {
          std::swap(shuffled[i], shuffled[bounds[s] + rng.below(i - bounds[s] + 1)]);
        }
      }
      ++drawn;
      if (best_of(shuffled, starts, bounds).first.q >= split.q - tolerance * std::fabs(split.q))
        ++hits;
    }
    const double p = hits >= options.stop_after && drawn < options.permutations
                         ? static_cast<double>(hits) / drawn
                         : (hits + 1.0) / (drawn + 1.0);
    if (p > options.alpha) break;
    ChangePoint cp;
    cp.group = group[split.tau];
    cp.run = index[split.tau];
    cp.statistic = split.q;
    cp.p_value = p;
    cp.permutations = drawn;
    found.push_back(cp);
    bounds.insert(bounds.begin() + static_cast<std::ptrdiff_t>(segment) + 1, split.tau);
  }

  std::sort(found.begin(), found.end(),
            [](const ChangePoint& a, const ChangePoint& b) { return a.run < b.run; });
  size_change_points(values, found, options.confidence);
  return found;
}

void size_change_points(const std::vector<double>& values, std::vector<ChangePoint>& points,
                        double confidence) {
  for (size_t c = 0; c < points.size(); ++c) {
    const size_t from = c == 0 ? 0 : points[c - 1].run;
    const size_t to = c + 1 == points.size() ? values.size() : points[c + 1].run;
    std::vector<double> before, after;
    for (size_t i = from; i < to; ++i) {
      if (!std::isnan(values[i])) (i < points[c].run ? before : after).push_back(values[i]);
    }
    points[c].change = compare_runs(before, after, confidence);
  }
}

}  // namespace mlprof
