#include "analysis/run_values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::ret;

// A one-lane profile whose functions are made from `names` in order; `events`
// gets their ids.
template <class F>
std::unique_ptr<Profile> profile_of(const std::vector<std::string>& names, F events) {
  auto p = std::make_unique<Profile>();
  std::vector<uint32_t> id;
  for (const std::string& n : names) id.push_back(test::user_fn(*p, n));
  p->start_ns = 0;
  p->end_ns = 100000;
  p->lanes.push_back(make_lane(events(id)));
  build_tree(*p);
  return p;
}

std::map<std::string, std::vector<double>> by_path(const RunPathValues& v,
                                                   RunPathValues::Statistic s) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& p : v.values(s, RunPathValues::Quantity::kWall)) {
    std::string key;
    for (const std::string& n : p.path) key += (key.empty() ? "" : "/") + n;
    out[key] = p.values;
  }
  return out;
}

TEST(RunValues, TimePerRootCallCountsEveryCallOfTheStep) {
  // Run a: two predicts, each calling step once for 10 ns.
  // clang-format off
  const auto one = profile_of({"predict", "step"}, [](auto f) { return std::vector<Event>{
      call(0, f[0]), call(10, f[1]), ret(20), ret(100), call(200, f[0]), call(210, f[1]), ret(220), ret(300)}; });
  // Run b: two predicts, each calling step twice for 10 ns: 20 ns per predict.
  const auto two = profile_of({"predict", "step"}, [](auto f) { return std::vector<Event>{
      call(0, f[0]), call(10, f[1]), ret(20), call(30, f[1]), ret(40), ret(100),
      call(200, f[0]), call(210, f[1]), ret(220), call(230, f[1]), ret(240), ret(300)}; });
  // clang-format on
  RunPathValues v;
  v.add(*one, v.run("a"));
  v.add(*two, v.run("b"));
  const auto mean = by_path(v, RunPathValues::Statistic::kMean);
  EXPECT_EQ(mean.at("predict/step"), (std::vector<double>{10, 20}));
  EXPECT_EQ(mean.at("predict"), (std::vector<double>{100, 100}));
  EXPECT_EQ(v.root_calls(), (std::vector<uint64_t>{2, 2}));
}

TEST(RunValues, RootCallsWithoutTheStepCountAsZero) {
  // Four predicts; only the last calls cache_miss (40 ns).
  // clang-format off
  const auto one = profile_of({"predict", "cache_miss"}, [](auto f) { return std::vector<Event>{
      call(0, f[0]), ret(10), call(20, f[0]), ret(30), call(40, f[0]), ret(50),
      call(60, f[0]), call(61, f[1]), ret(101), ret(110)}; });
  // clang-format on
  RunPathValues v;
  v.add(*one, v.run("a"));
  EXPECT_EQ(by_path(v, RunPathValues::Statistic::kMean).at("predict/cache_miss"),
            std::vector<double>{10});
  EXPECT_EQ(by_path(v, RunPathValues::Statistic::kP50).at("predict/cache_miss"),
            std::vector<double>{0});
  // p95 of (0, 0, 0, 40): rank floor(0.95 * 3) = 2, a 0.
  EXPECT_EQ(by_path(v, RunPathValues::Statistic::kP95).at("predict/cache_miss"),
            std::vector<double>{0});
  EXPECT_EQ(by_path(v, RunPathValues::Statistic::kP50).at("predict"), std::vector<double>{10});
}

TEST(RunValues, ARunWithoutTheRootHasNoValue) {
  const auto one = profile_of({"predict"}, [](auto f) {
    return std::vector<Event>{call(0, f[0]), ret(10)};
  });
  const auto two = profile_of({"load"}, [](auto f) {
    return std::vector<Event>{call(0, f[0]), ret(10)};
  });
  RunPathValues v;
  v.add(*one, v.run("a"));
  v.add(*two, v.run("b"));
  const auto mean = by_path(v, RunPathValues::Statistic::kMean);
  EXPECT_EQ(mean.at("predict")[0], 10);
  EXPECT_TRUE(std::isnan(mean.at("predict")[1]));
  EXPECT_TRUE(std::isnan(mean.at("load")[0]));
}

TEST(RunValues, AnOpenRootCallIsLeftOut) {
  // The second predict is still open at the end: neither it nor its step counts.
  const auto one = profile_of({"predict", "step"}, [](auto f) {
    return std::vector<Event>{call(0, f[0]),  call(1, f[1]),  ret(5), ret(10),
                              call(20, f[0]), call(21, f[1]), ret(90)};
  });
  RunPathValues v;
  v.add(*one, v.run("a"));
  EXPECT_EQ(by_path(v, RunPathValues::Statistic::kMean).at("predict/step"), std::vector<double>{4});
  EXPECT_EQ(v.root_calls(), std::vector<uint64_t>{1});
  EXPECT_EQ(v.dropped(), 2u);  // the open predict and its step
}

}  // namespace
}  // namespace mlprof
