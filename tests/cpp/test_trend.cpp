// One path's history (analysis/trend.h): the latest release's verdict from its
// change points, on series whose truth is known.

#include "analysis/trend.h"
#include "release_series.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace mlprof {
namespace {

using test::make_series;
using test::Series;

ChangePointOptions options() {
  ChangePointOptions o;
  o.alpha = 0.05;
  o.permutations = 1999;
  return o;
}

TEST(Trend, StepAtTheLatestReleaseIsARegression) {
  const Series s = make_series(1, 4, 5, 0.03, 3, 1.30);
  const PathTrend t = path_trend(s.values, s.group_of, 3, 4, 0.10, options());
  ASSERT_EQ(t.points.size(), 1u);
  EXPECT_EQ(t.points[0].group, 3u);
  ASSERT_TRUE(t.has_latest);
  EXPECT_EQ(t.verdict, Verdict::kRegression);
  EXPECT_EQ(t.latest.runs_a, 15u);
  EXPECT_EQ(t.latest.runs_b, 5u);
  EXPECT_NEAR(t.latest.change, 0.30, 0.05);
}

TEST(Trend, SmallerThanTheThresholdIsNotARegression) {
  // +30% is found, but the gate asks for more than +50%: it is left out as
  // minor, and the latest release's interval against all before it
  // (30% give or take a few points) excludes +50%: pass.
  const Series s = make_series(1, 4, 5, 0.03, 3, 1.30);
  const PathTrend t = path_trend(s.values, s.group_of, 3, 4, 0.50, options());
  EXPECT_TRUE(t.points.empty());
  EXPECT_EQ(t.minor, 1u);
  EXPECT_EQ(t.verdict, Verdict::kPass);
  EXPECT_EQ(t.latest.runs_a, 15u);
}

TEST(Trend, NoiseOnlyPasses) {
  const Series s = make_series(2, 4, 5, 0.02, 99, 1.0);
  const PathTrend t = path_trend(s.values, s.group_of, 3, 4, 0.10, options());
  EXPECT_TRUE(t.points.empty());
  ASSERT_TRUE(t.has_latest);
  EXPECT_EQ(t.verdict, Verdict::kPass);
  EXPECT_EQ(t.latest.runs_a, 15u);
  EXPECT_LT(t.latest.ci_hi, 0.10);
}

TEST(Trend, EarlierStepSetsTheBaseline) {
  // +40% at release 2 of 5: release 4 is judged against releases 2 and 3.
  const Series s = make_series(3, 5, 5, 0.03, 2, 1.40);
  const PathTrend t = path_trend(s.values, s.group_of, 4, 4, 0.10, options());
  ASSERT_EQ(t.points.size(), 1u);
  EXPECT_EQ(t.points[0].group, 2u);
  EXPECT_GT(t.points[0].change.change, 0.30);
  ASSERT_TRUE(t.has_latest);
  EXPECT_EQ(t.latest.runs_a, 10u);
  EXPECT_EQ(t.verdict, Verdict::kPass);
}

TEST(Trend, StepsWithinTheThresholdAreLeftOut) {
  // +4% at release 2 (significant with 1% noise) and +30% at release 4:
  // only the second is a change point, sized against releases 0-3 merged.
  Series s = make_series(6, 6, 5, 0.01, 2, 1.04);
  for (size_t i = 0; i < s.values.size(); ++i) {
    if (s.group_of[i] >= 4) s.values[i] *= 1.30;
  }
  const auto all = find_change_points(s.values, s.group_of, options());
  ASSERT_EQ(all.size(), 2u);  // the detector sees both
  const PathTrend t = path_trend(s.values, s.group_of, 5, 1, 0.10, options());
  ASSERT_EQ(t.points.size(), 1u);
  EXPECT_EQ(t.minor, 1u);
  EXPECT_EQ(t.points[0].group, 4u);
  EXPECT_EQ(t.points[0].change.runs_a, 20u);
  EXPECT_NEAR(t.points[0].change.change, 1.04 * 1.30 / 1.02 - 1, 0.04);
  EXPECT_EQ(t.verdict, Verdict::kPass);  // release 5 against release 4
}

TEST(Trend, OneRunAReleaseIsInconclusive) {
  // Three releases of one run: a split of 2 + 1 runs has 3 arrangements, so
  // even a doubling cannot reach 0.05 / 4.
  const Series s = make_series(4, 3, 1, 0.02, 2, 2.0);
  const PathTrend t = path_trend(s.values, s.group_of, 2, 4, 0.10, options());
  EXPECT_TRUE(t.points.empty());
  ASSERT_TRUE(t.has_latest);
  EXPECT_EQ(t.verdict, Verdict::kInconclusive);
  EXPECT_NEAR(t.min_p_value, 1.0 / 3, 1e-12);
  // C(2 + k, k) >= 80 first at k = 12 (C(14, 2) = 91).
  EXPECT_GE(t.runs_needed, 12u);
}

TEST(Trend, AbsentFromTheLatestReleaseHasNoVerdict) {
  Series s = make_series(5, 3, 4, 0.02, 99, 1.0);
  for (size_t i = 8; i < 12; ++i) s.values[i] = std::numeric_limits<double>::quiet_NaN();
  const PathTrend t = path_trend(s.values, s.group_of, 2, 1, 0.10, options());
  EXPECT_FALSE(t.has_latest);
}

}  // namespace
}  // namespace mlprof
