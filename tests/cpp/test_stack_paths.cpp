#include "views/stack_paths.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace mlprof {
namespace {

// Sampled stacks from (frames root first, values) pairs.
StackSamples samples(
    std::vector<std::pair<std::string, std::string>> types,
    std::vector<std::pair<std::vector<std::string>, std::vector<int64_t>>> stacks) {
  StackSamples ss;
  ss.value_types = std::move(types);
  ss.threads.push_back({"main", 1});
  for (auto& [frames, values] : stacks) {
    StackSamples::Sample s;
    for (const std::string& name : frames) {
      s.frames.push_back({ss.functions.add(name, "", "", 0, FunctionKind::kPython, false), 0});
    }
    s.values = values;
    ss.samples.push_back(std::move(s));
  }
  return ss;
}

std::map<std::string, StackPathTotals::Row> by_path(const StackPathTotals& t) {
  std::map<std::string, StackPathTotals::Row> out;
  for (auto& r : t.rows()) {
    std::string key;
    for (const auto& n : r.path) key += (key.empty() ? "" : ";") + n;
    out.emplace(key, r);
  }
  return out;
}

TEST(StackPathTotals, SelfIsTheLeafsTotalIsEverythingUnder) {
  StackPathTotals t;
  t.add(samples({{"samples", "count"}}, {{{"main", "a", "b"}, {3}},
                                         {{"main", "a"}, {2}},
                                         {{"main", "c"}, {5}},
                                         {{"main", "a", "b"}, {1}}}));
  const auto rows = by_path(t);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows.at("main").self, (std::vector<int64_t>{0}));
  EXPECT_EQ(rows.at("main").total, (std::vector<int64_t>{11}));
  EXPECT_EQ(rows.at("main;a").self, (std::vector<int64_t>{2}));
  EXPECT_EQ(rows.at("main;a").total, (std::vector<int64_t>{6}));
  EXPECT_EQ(rows.at("main;a;b").self, (std::vector<int64_t>{4}));
  EXPECT_EQ(rows.at("main;c").total, (std::vector<int64_t>{5}));
  EXPECT_EQ(t.samples(), 11u);  // each sample counts as its count
  EXPECT_EQ(t.sources(), 1u);
}

TEST(StackPathTotals, DeeperFramesFoldIntoTheirAncestorAtTheDepth) {
  const auto ss = samples({{"samples", "count"}}, {{{"main", "a", "b"}, {3}},
                                                   {{"main", "a"}, {2}},
                                                   {{"main", "c", "d", "e"}, {5}},
                                                   {{"main"}, {1}}});
  StackPathTotals t;
  t.add(ss, 1);  // main is depth 0
  const auto rows = by_path(t);
  ASSERT_EQ(rows.size(), 3u);  // no path deeper than main;x
  EXPECT_EQ(rows.at("main").self, (std::vector<int64_t>{1}));
  EXPECT_EQ(rows.at("main;a").self, (std::vector<int64_t>{5}));  // b's 3 folded in
  EXPECT_EQ(rows.at("main;c").self, (std::vector<int64_t>{5}));  // d and e's
  EXPECT_EQ(rows.at("main").total, (std::vector<int64_t>{11}));  // totals unchanged
  StackPathTotals root;
  root.add(ss, 0);
  ASSERT_EQ(by_path(root).size(), 1u);
  EXPECT_EQ(by_path(root).at("main").self, (std::vector<int64_t>{11}));
}

TEST(StackPathTotals, TypesAreTheUnionAndAMissingValueIsZero) {
  StackPathTotals t;
  t.add(samples({{"samples", "count"}, {"cpu", "nanoseconds"}}, {{{"main", "a"}, {2, 20}}}));
  t.add(samples({{"cpu", "nanoseconds"}, {"wall", "nanoseconds"}},
                {{{"main", "a"}, {7, 9}}, {{"main"}, {1, 1}}}));
  ASSERT_EQ(t.value_types().size(), 3u);
  EXPECT_EQ(t.value_types()[2], (std::pair<std::string, std::string>{"wall", "nanoseconds"}));
  const auto rows = by_path(t);
  EXPECT_EQ(rows.at("main;a").self, (std::vector<int64_t>{2, 27, 9}));
  EXPECT_EQ(rows.at("main").self, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(rows.at("main").total, (std::vector<int64_t>{2, 28, 10}));
  // A recursive name is a new path at each depth; a sample with no frames adds to none.
  t.add(samples({{"samples", "count"}}, {{{"f", "f"}, {1}}, {{}, {4}}}));
  EXPECT_EQ(by_path(t).at("f;f").self, (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(by_path(t).at("f").total, (std::vector<int64_t>{1, 0, 0}));
}

}  // namespace
}  // namespace mlprof
