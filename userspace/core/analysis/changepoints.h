#pragma once
// Change points in a history of per-run values (mlprof trend; docs/store.md
// "trend"): E-divisive means (Matteson & James, "A Nonparametric Approach
// for Multiple Change Point Analysis of Multivariate Data", JASA 2014), the
// method Apache Otava and MongoDB's performance CI use.
//
// - The series is one value per run (analysis/run_values.h), runs in release
//   order; runs of one release are exchangeable, so a change point can only
//   fall where a release starts, and the variance between a release's runs
//   is what the test weighs a step against.
// - Values are compared as log(max(v, 1 ns)), as core/run_compare does, so a
//   step is relative: +10% weighs the same on a 1 ms path as on a 1 s one.
// - A split of a segment [lo, hi) at tau is scored by the energy statistic
//   with exponent 1: q = mn/(m+n) * (2/(mn) sum|x-y| - sum|x-x'|/C(m,2) -
//   sum|y-y'|/C(n,2)), x the m runs before tau, y the n from tau (a side of
//   one run has no within term). The segment's end is the second sample's
//   end (kappa = hi), as Otava and MongoDB's implementation do.
// - Bisection: the best split over all segments is tested by permutation
//   (the runs shuffled within each segment, the best split taken again),
//   accepted when its p-value is at most alpha, and the search goes on in
//   the pieces; it stops at the first split not accepted.
// - The permutation test stops early (Besag & Clifford 1991) once
//   `stop_after` shuffles scored at least the observed statistic: the
//   p-value is then stop_after / shuffles, far above alpha; otherwise
//   (hits + 1) / (shuffles + 1). Seeded: the same input gives the same
//   change points and p-values.
// - Each change point's size is core/run_compare's comparison of the runs
//   after it (up to the next change point) with those before it (back to
//   the previous one): the Hodges-Lehmann ratio and its distribution-free
//   interval.

#include <cstdint>
#include <vector>

#include "analysis/run_compare.h"

namespace mlprof {

struct ChangePointOptions {
  double alpha = 0.01;          // a split is accepted at p <= alpha
  uint32_t permutations = 999;  // shuffles per test, at most
  uint32_t stop_after = 10;     // shuffles reaching the statistic that end a test early
  double confidence = 0.95;     // of each change's interval
  uint64_t seed = 0;
};

struct ChangePoint {
  size_t group = 0;           // the release (group) the new level starts at
  size_t run = 0;             // its first run, an index into the values given
  double statistic = 0;       // q of the split
  double p_value = 1;         // of the permutation test that accepted it
  uint32_t permutations = 0;  // shuffles that test drew
  RunComparison change;       // runs after vs runs before (B/A - 1)
};

// The change points of `values` (per run, ns; NaN: no value, left out) whose
// runs belong to groups `group_of` (the same length, non-decreasing: runs in
// release order), in order of their run. Needs alpha in (0, 1) and
// permutations >= 1; a series with fewer than two groups holding a value
// has none.
std::vector<ChangePoint> find_change_points(const std::vector<double>& values,
                                            const std::vector<size_t>& group_of,
                                            const ChangePointOptions& options);

// Sizes each change point of `points` (in order of their run) by
// compare_runs: the runs from it to the next one against those from the
// previous one to it (NaN values left out).
void size_change_points(const std::vector<double>& values, std::vector<ChangePoint>& points,
                        double confidence);

// The smallest p-value a permutation test of a split of `before` runs from
// `after` runs can give, whatever the values: 1 / C(before + after, after)
// (only that many distinct arrangements exist). A split it cannot bring to
// alpha or below cannot be told from noise, however large the step.
double min_split_p_value(size_t before, size_t after);

}  // namespace mlprof
