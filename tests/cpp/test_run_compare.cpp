#include "analysis/run_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mlprof {
namespace {

std::vector<double> lognormal_runs(std::mt19937_64& rng, size_t n, double median, double sigma) {
  std::normal_distribution<double> z(0, sigma);
  std::vector<double> out(n);
  for (double& v : out) v = median * std::exp(z(rng));
  return out;
}

TEST(RunCompare, SeparatedSidesGiveTheExactSmallestPValue) {
  // Every B above every A: U = 25 of 25, P(U >= 25) = 1 / C(10, 5).
  const std::vector<double> a{10, 11, 12, 13, 14}, b{20, 21, 22, 23, 24};
  const RunComparison c = compare_runs(a, b, 0.95);
  EXPECT_TRUE(c.exact);
  EXPECT_NEAR(c.p_greater, 1.0 / 252, 1e-12);
  EXPECT_NEAR(c.p_less, 1.0, 1e-12);
  // 5 and 5 runs at 95%: the interval drops the 2 most extreme pairwise
  // differences at each end (P(U <= 2) = 4/252 <= 0.025 < P(U <= 3) = 7/252).
  std::vector<double> d;
  for (double x : a) {
    for (double y : b) d.push_back(std::log(y) - std::log(x));
  }
  std::sort(d.begin(), d.end());
  EXPECT_NEAR(c.ci_lo, std::expm1(d[2]), 1e-12);
  EXPECT_NEAR(c.ci_hi, std::expm1(d[22]), 1e-12);
  EXPECT_NEAR(c.change, std::expm1(d[12]), 1e-12);
}

TEST(RunCompare, ExactAndNormalPValuesAgreeOnLargerSides) {
  std::mt19937_64 rng(3);
  const auto a = lognormal_runs(rng, 25, 100, 0.1), b = lognormal_runs(rng, 25, 105, 0.1);
  const RunComparison exact = compare_runs(a, b, 0.95);
  std::vector<double> a2(a);
  a2.push_back(a[0]);  // a tie: the normal approximation
  const RunComparison approx = compare_runs(a2, b, 0.95);
  ASSERT_TRUE(exact.exact);
  ASSERT_FALSE(approx.exact);
  EXPECT_NEAR(exact.p_greater, approx.p_greater, 0.02);
}

TEST(RunCompare, AScaledCopyIsMeasuredExactly) {
  const std::vector<double> a{100, 103, 98, 101, 99, 102, 97, 104};
  std::vector<double> b;
  for (double x : a) b.push_back(x * 1.2);
  const RunComparison c = compare_runs(a, b, 0.95);
  EXPECT_NEAR(c.change, 0.2, 1e-9);
  EXPECT_LT(c.ci_lo, 0.2);
  EXPECT_GT(c.ci_hi, 0.2);
}

TEST(RunCompare, TooFewRunsHaveNoInterval) {
  const RunComparison c = compare_runs({1, 2, 3}, {4, 5, 6}, 0.95);
  EXPECT_TRUE(std::isinf(c.ci_lo));
  EXPECT_TRUE(std::isinf(c.ci_hi));
  EXPECT_EQ(gate_verdict(c, c.p_greater, c.p_less, 0.1, 0.05), Verdict::kInconclusive);
  // 1/C(6,3) = 0.05 is not below 0.05; the fewest runs that can be: 4 a side (1/70).
  EXPECT_EQ(runs_needed(c, 0.1, 0.05, 1), 4u);
  // Three gated paths: 1/C(2r, r) < 0.05/3 needs 4 too (1/70 = 0.014); ten: 5 (1/252).
  EXPECT_EQ(runs_needed(c, 0.1, 0.05, 10), 5u);
}

// The rates the gate promises, measured on 2,000 seeded A/A and A/B pairs
// of 10 runs a side (per-run values lognormal, 5% between-run noise).
TEST(RunCompare, FalseAlarmsCoverageAndPower) {
  std::mt19937_64 rng(11);
  int false_alarms = 0, covered = 0, caught = 0, wrong_pass = 0;
  const int pairs = 2000;
  for (int i = 0; i < pairs; ++i) {
    const auto a = lognormal_runs(rng, 10, 1000, 0.05), a2 = lognormal_runs(rng, 10, 1000, 0.05);
    const RunComparison aa = compare_runs(a, a2, 0.95);
    false_alarms += aa.p_greater < 0.05;
    covered += aa.ci_lo <= 0 && 0 <= aa.ci_hi;
    const auto b = lognormal_runs(rng, 10, 1150, 0.05);
    const RunComparison ab = compare_runs(a, b, 0.95);
    const Verdict v = gate_verdict(ab, ab.p_greater, ab.p_less, 0.10, 0.05);
    caught += v == Verdict::kRegression;
    wrong_pass += v == Verdict::kPass;
  }
  EXPECT_LE(false_alarms, pairs * 0.06);  // one-sided 5%
  EXPECT_GE(covered, pairs * 0.93);       // 95% intervals
  EXPECT_GE(caught, pairs * 0.90);        // +15% against a 10% threshold
  EXPECT_LE(wrong_pass, pairs * 0.025);   // never "pass" a +15% change
}

TEST(RunCompare, HolmAdjustsInOrder) {
  const auto adj = holm_adjust({0.01, 0.04, 0.03, 0.5});
  EXPECT_NEAR(adj[0], 0.04, 1e-12);  // 4 * 0.01
  EXPECT_NEAR(adj[2], 0.09, 1e-12);  // 3 * 0.03
  EXPECT_NEAR(adj[1], 0.09, 1e-12);  // max(2 * 0.04, 0.09)
  EXPECT_NEAR(adj[3], 0.5, 1e-12);
}

TEST(RunCompare, GatePathsAdjustsOnlyTheGatedAndNamesTheRegression) {
  std::mt19937_64 rng(5);
  const auto a = lognormal_runs(rng, 10, 1000, 0.02);
  const auto slow = lognormal_runs(rng, 10, 1400, 0.02);
  const auto same = lognormal_runs(rng, 10, 1000, 0.02);
  const auto gates =
      gate_paths({{a, slow}, {a, same}, {a, slow}, {a, {}}}, {true, true, false, true}, 0.10, 0.95);
  EXPECT_EQ(gates[0].verdict, Verdict::kRegression);
  EXPECT_EQ(gates[1].verdict, Verdict::kPass);
  EXPECT_FALSE(gates[2].gated);  // not in the family, whatever its change
  EXPECT_FALSE(gates[3].gated);  // one side empty
  EXPECT_NEAR(gates[0].holm_greater, 2 * gates[0].comparison.p_greater, 1e-12);
}

}  // namespace
}  // namespace mlprof
