#pragma once
// Two sets of runs compared path by path, and the verdict of a release gate
// (mlprof diff; docs/store.md "diff"). Each side gives one value per run
// (analysis/run_values.h), so the variance between runs, which on a shared
// machine is far larger than between calls, is what the test sees.
//
// - The change is the Hodges-Lehmann estimate of the ratio B/A: the median
//   over all (a, b) pairs of log(b) - log(a), as a percentage.
// - Its interval is the distribution-free one that goes with the
//   Mann-Whitney test (Hollander & Wolfe, ch. 4): the k-th smallest and
//   largest pairwise differences, k from U's null distribution. With too few
//   runs there is no such interval (k = 0): it is infinite.
// - p-values are the one-sided Mann-Whitney tests (B greater, B less): exact
//   when the sides hold at most 50 runs together and no value is tied, the
//   normal approximation with tie and continuity corrections otherwise.
// - Holm's step-down adjusts them over the gated paths (family-wise error).
// A rank test on per-run values, rather than a bootstrap, because it is
// exact with 5-10 runs a side, where the bootstrap's intervals are too
// narrow, and one run spoiled by a loaded machine moves it by one rank.

#include <cstdint>
#include <string>
#include <vector>

namespace mlprof {

struct RunComparison {
  size_t runs_a = 0, runs_b = 0;
  double change = 0;                 // B/A - 1 (Hodges-Lehmann); 0 with a side empty
  double ci_lo = 0, ci_hi = 0;       // of the change; -inf / +inf when too few runs
  double p_greater = 1, p_less = 1;  // one-sided, unadjusted
  bool exact = false;                // p-values and interval from U's exact distribution
};

// Compares per-run values (ns, > 0; values below 1 ns count as 1 ns, so a
// run where the path took no time compares as very fast). Both sides must
// hold a value; confidence in (0, 1) sizes the interval.
RunComparison compare_runs(const std::vector<double>& a, const std::vector<double>& b,
                           double confidence);

// Holm's adjusted p-values, in the order given.
std::vector<double> holm_adjust(const std::vector<double>& p);

enum class Verdict { kPass, kRegression, kImprovement, kInconclusive };
const char* verdict_name(Verdict v);

// The gate for one path (threshold: the change that matters, as a fraction;
// alpha = 1 - confidence):
// - regression: B greater at the Holm-adjusted level alpha and the change
//   above the threshold;
// - improvement: B less the same way, the change below -threshold;
// - pass: the interval's upper end below the threshold (no regression of
//   that size is left plausible);
// - inconclusive otherwise: too few runs, or too noisy to tell.
Verdict gate_verdict(const RunComparison& c, double holm_greater, double holm_less,
                     double threshold, double alpha);

// For an inconclusive path, the runs a side that would likely settle it:
// the interval's width shrinks as 1/sqrt(runs), so the runs that make its
// half-width (log scale) as small as the distance between the change and
// the threshold; without an interval, the fewest runs that can give one and
// reach significance over `tests` gated paths. Capped at 100,000.
uint64_t runs_needed(const RunComparison& c, double threshold, double alpha, size_t tests);

// Every path's comparison and, for the gated ones (both sides non-empty),
// Holm's adjustment over them, the verdict and, when inconclusive, the runs
// needed. sides[i] = (A's per-run values, B's); ungated paths keep
// kPass with gated = false.
struct PathGate {
  RunComparison comparison;
  bool gated = false;
  double holm_greater = 1, holm_less = 1;
  Verdict verdict = Verdict::kPass;
  uint64_t runs_needed = 0;  // inconclusive only
};
std::vector<PathGate> gate_paths(
    const std::vector<std::pair<std::vector<double>, std::vector<double>>>& sides,
    const std::vector<bool>& gated, double threshold, double confidence);

}  // namespace mlprof
