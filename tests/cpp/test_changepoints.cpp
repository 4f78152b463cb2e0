// E-divisive change points (analysis/changepoints.h) on series whose truth is
// known: steps of a given size at a given release, and pure noise. The
// false-alarm rate and the power are measured over 100 seeded series each
// and printed, not taken from one draw.

#include "analysis/changepoints.h"
#include "release_series.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace mlprof {
namespace {

using test::make_series;
using test::Series;

TEST(ChangePoints, StepOfKnownSizeFoundWhereItStarts) {
  // 8 releases of 5 runs, 5% noise, +20% from release 5 on.
  const Series s = make_series(1, 8, 5, 0.05, 5, 1.20);
  ChangePointOptions o;
  const auto found = find_change_points(s.values, s.group_of, o);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].group, 5u);
  EXPECT_EQ(found[0].run, 25u);
  EXPECT_LE(found[0].p_value, o.alpha);
  EXPECT_EQ(found[0].change.runs_a, 25u);
  EXPECT_EQ(found[0].change.runs_b, 15u);
  // The size: +20% within the interval, the estimate within 5 points of it.
  EXPECT_NEAR(found[0].change.change, 0.20, 0.05);
  EXPECT_LT(found[0].change.ci_lo, 0.20);
  EXPECT_GT(found[0].change.ci_hi, 0.20);
  EXPECT_GT(found[0].change.ci_lo, 0.0);
}

TEST(ChangePoints, TwoStepsBothFoundWithTheirDirections) {
  // +30% at release 3, back down (-25%: 1.3 * 0.75 ~ 0.98) at release 7.
  Series s = make_series(2, 10, 5, 0.05, 3, 1.30);
  for (size_t i = 0; i < s.values.size(); ++i) {
    if (s.group_of[i] >= 7) s.values[i] *= 0.75;
  }
  const auto found = find_change_points(s.values, s.group_of, ChangePointOptions{});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].group, 3u);
  EXPECT_EQ(found[1].group, 7u);
  EXPECT_GT(found[0].change.change, 0.2);
  EXPECT_LT(found[1].change.change, -0.15);
}

TEST(ChangePoints, FalseAlarmsOnPureNoiseAtMostFivePercent) {
  // 100 seeded series of noise only (8 releases of 5 runs, 10% noise).
  int alarms = 0;
  for (uint64_t seed = 1000; seed < 1100; ++seed) {
    const Series s = make_series(seed, 8, 5, 0.10, 99, 1.0);
    ChangePointOptions o;
    o.seed = seed;
    alarms += find_change_points(s.values, s.group_of, o).empty() ? 0 : 1;
  }
  std::printf("e-divisive false alarms at alpha 0.01: %d of 100 noise series\n", alarms);
  EXPECT_LE(alarms, 5);
}

TEST(ChangePoints, PowerOnStepsMeasured) {
  // A step of +10% and +20% at release 4 of 8, 5 runs a release, 5% noise:
  // found at release 4 (and nowhere else) in how many of 100 series.
  for (const double factor : {1.10, 1.20}) {
    int hit = 0;
    for (uint64_t seed = 2000; seed < 2100; ++seed) {
      const Series s = make_series(seed, 8, 5, 0.05, 4, factor);
      ChangePointOptions o;
      o.seed = seed;
      const auto found = find_change_points(s.values, s.group_of, o);
      hit += found.size() == 1 && found[0].group == 4 ? 1 : 0;
    }
    std::printf("e-divisive power, +%.0f%% step, 5%% noise, 8 releases of 5 runs: %d of 100\n",
                100 * (factor - 1), hit);
    EXPECT_GE(hit, factor > 1.15 ? 95 : 80);
  }
}

TEST(ChangePoints, SeededAndReproducible) {
  const Series s = make_series(3, 6, 4, 0.05, 3, 1.15);
  ChangePointOptions o;
  o.seed = 7;
  const auto a = find_change_points(s.values, s.group_of, o);
  const auto b = find_change_points(s.values, s.group_of, o);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].run, b[i].run);
    EXPECT_EQ(a[i].p_value, b[i].p_value);
    EXPECT_EQ(a[i].permutations, b[i].permutations);
  }
}

TEST(ChangePoints, RunsWithoutValueLeftOut) {
  Series s = make_series(4, 6, 5, 0.05, 3, 1.5);
  // Release 1 has no value at all; two runs of release 4 neither.
  for (size_t i = 0; i < s.values.size(); ++i) {
    if (s.group_of[i] == 1 || i == 20 || i == 21)
      s.values[i] = std::numeric_limits<double>::quiet_NaN();
  }
  const auto found = find_change_points(s.values, s.group_of, ChangePointOptions{});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].group, 3u);
  EXPECT_EQ(found[0].run, 15u);
  EXPECT_EQ(found[0].change.runs_a, 10u);
  EXPECT_EQ(found[0].change.runs_b, 13u);
}

TEST(ChangePoints, OneGroupOrNoneHasNoChangePoint) {
  EXPECT_TRUE(find_change_points({}, {}, ChangePointOptions{}).empty());
  EXPECT_TRUE(find_change_points({1e6, 2e6, 3e6}, {0, 0, 0}, ChangePointOptions{}).empty());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(find_change_points({1e6, 1e6, nan, nan}, {0, 0, 1, 1}, ChangePointOptions{}).empty());
}

TEST(ChangePoints, TooFewRunsCannotReachSignificance) {
  // One run a release: a split of the last release from 9 others has 10
  // arrangements, so no test can reach 0.01 however large the step.
  EXPECT_DOUBLE_EQ(min_split_p_value(9, 1), 0.1);
  EXPECT_NEAR(min_split_p_value(5, 5), 1.0 / 252, 1e-15);
  EXPECT_NEAR(min_split_p_value(30, 10), 1.0 / 847660528.0, 1e-20);
  std::vector<double> v;
  std::vector<size_t> g;
  for (size_t i = 0; i < 10; ++i) {
    v.push_back(i < 9 ? 1e6 : 1e7);
    g.push_back(i);
  }
  EXPECT_TRUE(find_change_points(v, g, ChangePointOptions{}).empty());
}

TEST(ChangePoints, BadArgumentsRefused) {
  ChangePointOptions o;
  EXPECT_THROW(find_change_points({1, 2}, {0}, o), std::invalid_argument);
  EXPECT_THROW(find_change_points({1, 2}, {1, 0}, o), std::invalid_argument);
  o.alpha = 0;
  EXPECT_THROW(find_change_points({1, 2}, {0, 1}, o), std::invalid_argument);
}

}  // namespace
}  // namespace mlprof
