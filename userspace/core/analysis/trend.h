#pragma once
// One call path's history over releases (mlprof trend; docs/store.md
// "trend"): its change points (analysis/changepoints.h) and the verdict on the
// latest release, by the rule of mlprof diff's gate (analysis/run_compare.h).

#include <cstdint>
#include <vector>

#include "analysis/changepoints.h"
#include "analysis/run_compare.h"

namespace mlprof {

struct PathTrend {
  // The change points of the history larger than the threshold either
  // way, in release order; `minor`: the significant ones left out as smaller.
  std::vector<ChangePoint> points;
  size_t minor = 0;
  // The latest release (the last group holding a value) against the runs
  // before it back to the previous change point. has_latest false: the
  // path has no value in the last group, or none before it.
  bool has_latest = false;
  size_t latest_group = 0;
  RunComparison latest;  // runs_a: before, runs_b: the latest release
  Verdict verdict = Verdict::kPass;
  // The smallest p-value a split of those runs can reach (min_split_p_value):
  // above the path's level, no step can be found there at all.
  double min_p_value = 0;
  uint64_t runs_needed = 0;  // inconclusive only: runs the latest release would need
};

// The change points of one path's per-run values (NaN: no value; runs in
// release order, group_of[i] their release) at the level alpha / tests
// (Bonferroni over the `tests` gated paths: each path's history is a
// sequence of tests, so Holm's step-down across paths does not apply), and
// the latest release's verdict, `last_group` being the last release of the
// selection:
// - change points within +-`threshold` (a fraction: 0.1 is +10%) are
//   dropped, the smallest (on a log scale) first, the others sized again
//   each time;
// - regression: a change point where the latest release starts, its change
//   above `threshold`; improvement: below -threshold;
// - inconclusive: the runs cannot reach the level (min_p_value), or the
//   change's interval does not exclude `threshold` (runs_needed says how
//   many runs the latest release would need);
// - pass: the interval's upper end below the threshold.
// The path is absent in the latest release: has_latest false.
PathTrend path_trend(const std::vector<double>& values, const std::vector<size_t>& group_of,
                     size_t last_group, size_t tests, double threshold,
                     const ChangePointOptions& options);

}  // namespace mlprof
