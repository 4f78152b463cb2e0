#include "analysis/trend.h"

#include <algorithm>
#include <cmath>

namespace mlprof {

namespace {

constexpr uint64_t kMaxRuns = 100000;

}  // namespace

PathTrend path_trend(const std::vector<double>& values, const std::vector<size_t>& group_of,
                     size_t last_group, size_t tests, double threshold,
                     const ChangePointOptions& options) {
  ChangePointOptions o = options;
  o.alpha = options.alpha / static_cast<double>(std::max<size_t>(tests, 1));
  PathTrend t;
  t.points = find_change_points(values, group_of, o);
  // A significant step smaller than the threshold is not the change that
  // matters (Otava's minimum magnitude): the smallest such goes first, its
  // neighbours are sized again over the merged runs, until none is left.
  while (true) {
    size_t smallest = t.points.size();
    double magnitude = 0;
    for (size_t c = 0; c < t.points.size(); ++c) {
      const double change = t.points[c].change.change;
      const double m = std::fabs(std::log1p(change));
      if (change <= threshold && change >= -threshold &&
          (smallest == t.points.size() || m < magnitude)) {
        smallest = c;
        magnitude = m;
      }
    }
    if (smallest == t.points.size()) break;
    t.points.erase(t.points.begin() + static_cast<std::ptrdiff_t>(smallest));
    ++t.minor;
    size_change_points(values, t.points, o.confidence);
  }

  // The latest release against the level before it: back to the last change
  // point that starts before the latest release.
  size_t from = 0;
  const ChangePoint* at_latest = nullptr;
  for (const ChangePoint& cp : t.points) {
    if (cp.group < last_group) from = cp.run;
    if (cp.group == last_group) at_latest = &cp;
  }
  std::vector<double> before, latest;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    if (group_of[i] == last_group) {
      latest.push_back(values[i]);
    } else if (i >= from && group_of[i] < last_group) {
      before.push_back(values[i]);
    }
  }
  if (before.empty() || latest.empty()) return t;
  t.has_latest = true;
  t.latest_group = last_group;
  t.latest = compare_runs(before, latest, o.confidence);
  t.min_p_value = min_split_p_value(before.size(), latest.size());
  double p_greater = 1, p_less = 1;
  if (at_latest) (at_latest->change.change > 0 ? p_greater : p_less) = at_latest->p_value;
  // The detector accepts p <= level; gate_verdict asks p < level.
  t.verdict = gate_verdict(t.latest, p_greater, p_less, threshold, std::nextafter(o.alpha, 1.0));
  if (t.verdict == Verdict::kRegression || t.verdict == Verdict::kImprovement) return t;
  if (t.min_p_value > o.alpha) {
    // No step could be found here at all: the runs the latest release needs.
    uint64_t k = latest.size();
    while (k < kMaxRuns && min_split_p_value(before.size(), k) > o.alpha) ++k;
    t.verdict = Verdict::kInconclusive;
    t.runs_needed = std::max<uint64_t>(k, runs_needed(t.latest, threshold, options.alpha, tests));
  } else if (t.verdict == Verdict::kInconclusive) {
    t.runs_needed = runs_needed(t.latest, threshold, options.alpha, tests);
  }
  return t;
}

}  // namespace mlprof
