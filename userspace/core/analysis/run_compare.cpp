#include "analysis/run_compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mlprof {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kExactMaxRuns = 50;  // C(50, 25) < 2^53: the counts stay exact in doubles
constexpr uint64_t kMaxRunsNeeded = 100000;

// P(U <= u) for u = 0..m*n under H0 (no ties): the coefficients of the
// Gaussian binomial [m+n choose m]_q, made by multiplying in (1 - q^(n+i))
// and dividing out (1 - q^i) for i = 1..m, over C(m+n, m).
std::vector<double> exact_cdf(size_t m, size_t n) {
  const size_t top = m * n;
  std::vector<double> c(top + m + 2, 0.0);  // room for the product before each division
  c[0] = 1;
  size_t degree = 0;
  for (size_t i = 1; i <= m; ++i) {
    const size_t up = n + i;
    const size_t grown = degree + up;
    for (size_t d = grown; d >= up; --d) {  // times (1 - q^(n+i))
      c[d] -= c[d - up];
      if (d == up) break;
    }
    for (size_t d = i; d <= grown; ++d) c[d] += c[d - i];  // divided by (1 - q^i): exact
    degree += n;
  }
  c.resize(top + 1);
  const double total = std::accumulate(c.begin(), c.end(), 0.0);
  double run = 0;
  for (double& x : c) {
    run += x;
    x = run / total;
  }
  return c;
}

double normal_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// The z with normal_sf(z) = p, p in (0, 1), by bisection (60 halvings: exact to a double).
double normal_isf(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = (lo + hi) / 2;
    (normal_sf(mid) > p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

double log_value(double v) { return std::log(std::max(v, 1.0)); }

}  // namespace

RunComparison compare_runs(const std::vector<double>& a, const std::vector<double>& b,
                           double confidence) {
  RunComparison c;
  c.runs_a = a.size();
  c.runs_b = b.size();
  c.ci_lo = -kInf;
  c.ci_hi = kInf;
  const size_t m = a.size(), n = b.size();
  if (m == 0 || n == 0) return c;
  const double alpha = 1 - confidence;
  // Pairwise differences on the log scale, and U (pairs with b above a).
  std::vector<double> d;
  d.reserve(m * n);
  double u = 0;
  for (const double x : a) {
    for (const double y : b) {
      d.push_back(log_value(y) - log_value(x));
      u += y > x ? 1.0 : (y == x ? 0.5 : 0.0);
    }
  }
  std::sort(d.begin(), d.end());
  const size_t total = d.size();
  const double median = total % 2 ? d[total / 2] : (d[total / 2 - 1] + d[total / 2]) / 2;
  c.change = std::expm1(median);

  // Ties among all values (for the exact path and the variance's correction).
  std::vector<double> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  double tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    const auto t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  const double mn = static_cast<double>(m * n);
  size_t k = 0;  // differences trimmed from each end for the interval
  if (m + n <= kExactMaxRuns && tie_term == 0) {
    c.exact = true;
    const std::vector<double> cdf = exact_cdf(m, n);
    const auto ui = static_cast<size_t>(u);
    c.p_greater = ui == 0 ? 1.0 : 1.0 - cdf[ui - 1];    // P(U >= u)
    c.p_less = cdf[ui];                                 // P(U <= u)
    while (k < cdf.size() && cdf[k] <= alpha / 2) ++k;  // P(U <= k - 1) <= alpha/2
  } else {
    // NOLINTNEXTLINE(readability-identifier-naming): the formula's N
    const auto N = static_cast<double>(m + n);
    const double var = mn / 12.0 * ((N + 1) - tie_term / (N * (N - 1)));
    const double sd = std::sqrt(std::max(var, 0.0));
    if (sd > 0) {
      c.p_greater = normal_sf((u - mn / 2 - 0.5) / sd);
      c.p_less = 1 - normal_sf((u - mn / 2 + 0.5) / sd);
    }
    const double kk = std::floor(mn / 2 - normal_isf(alpha / 2) * std::sqrt(mn * (N + 1) / 12.0));
    k = kk > 0 ? static_cast<size_t>(kk) : 0;
  }
  if (k >= 1 && k <= total) {
    c.ci_lo = std::expm1(d[k - 1]);
    c.ci_hi = std::expm1(d[total - k]);
  }
  return c;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p[x] < p[y]; });
  std::vector<double> out(p.size());
  double running = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    running = std::max(running, std::min(1.0, static_cast<double>(p.size() - i) * p[order[i]]));
    out[order[i]] = running;
  }
  return out;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kRegression:
      return "regression";
    case Verdict::kImprovement:
      return "improvement";
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kPass:
      break;
  }
  return "pass";
}

Verdict gate_verdict(const RunComparison& c, double holm_greater, double holm_less,
                     double threshold, double alpha) {
  if (c.runs_a == 0 || c.runs_b == 0) return Verdict::kInconclusive;
  if (holm_greater < alpha && c.change > threshold) return Verdict::kRegression;
  if (holm_less < alpha && c.change < -threshold) return Verdict::kImprovement;
  if (c.ci_hi < threshold) return Verdict::kPass;
  return Verdict::kInconclusive;
}

uint64_t runs_needed(const RunComparison& c, double threshold, double alpha, size_t tests) {
  // The fewest runs a side with which an exact test can reach alpha / tests
  // (Holm's first step) at all, and that give an interval.
  uint64_t floor_runs = 2;
  const double level = alpha / static_cast<double>(std::max<size_t>(tests, 1));
  while (floor_runs < kMaxRunsNeeded) {
    // 1 / C(2r, r): the smallest one-sided p-value with r runs a side.
    double comb = 1;
    for (uint64_t i = 1; i <= floor_runs; ++i)
      comb = comb * static_cast<double>(floor_runs + i) / static_cast<double>(i);
    if (1.0 / comb < std::min(level, alpha / 2)) break;
    ++floor_runs;
  }
  const uint64_t have = std::min(c.runs_a, c.runs_b);
  if (!std::isfinite(c.ci_lo) || !std::isfinite(c.ci_hi) || have == 0)
    return std::max(floor_runs, have + 1);
  const double half = (std::log1p(c.ci_hi) - std::log1p(std::max(c.ci_lo, -0.999999))) / 2;
  const double gap = std::fabs(std::log1p(c.change) - std::log1p(threshold));
  if (gap <= 0) return kMaxRunsNeeded;
  const double need = std::ceil(static_cast<double>(have) * (half / gap) * (half / gap));
  return std::clamp<uint64_t>(
      need >= static_cast<double>(kMaxRunsNeeded) ? kMaxRunsNeeded : static_cast<uint64_t>(need),
      std::max(floor_runs, have + 1), kMaxRunsNeeded);
}

std::vector<PathGate> gate_paths(
    const std::vector<std::pair<std::vector<double>, std::vector<double>>>& sides,
    const std::vector<bool>& gated, double threshold, double confidence) {
  std::vector<PathGate> out(sides.size());
  std::vector<size_t> family;
  std::vector<double> greater, less;
  for (size_t i = 0; i < sides.size(); ++i) {
    out[i].comparison = compare_runs(sides[i].first, sides[i].second, confidence);
    if (i < gated.size() && gated[i] && !sides[i].first.empty() && !sides[i].second.empty()) {
      out[i].gated = true;
      family.push_back(i);
      greater.push_back(out[i].comparison.p_greater);
      less.push_back(out[i].comparison.p_less);
    }
  }
  const std::vector<double> hg = holm_adjust(greater), hl = holm_adjust(less);
  const double alpha = 1 - confidence;
  for (size_t j = 0; j < family.size(); ++j) {
    PathGate& g = out[family[j]];
    g.holm_greater = hg[j];
    g.holm_less = hl[j];
    g.verdict = gate_verdict(g.comparison, hg[j], hl[j], threshold, alpha);
    if (g.verdict == Verdict::kInconclusive)
      g.runs_needed = runs_needed(g.comparison, threshold, alpha, family.size());
  }
  return out;
}

}  // namespace mlprof
