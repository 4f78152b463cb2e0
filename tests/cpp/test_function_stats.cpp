#include "views/function_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "formats/export_util.h"
#include "model/profile_check.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::ret;

std::map<std::string, FunctionStats::SpanRow> by_name(const FunctionStats& s) {
  std::map<std::string, FunctionStats::SpanRow> out;
  for (auto& r : s.span_rows()) out.emplace(r.function.name + "@" + r.function.file, r);
  return out;
}

// f calls f calls g, then g again: the inner f adds to f's flat, not its cum.
//   f [0, 100]   self 100 - 50 - 10 = 40
//     f [10, 60] self 50 - 30 = 20
//       g [20, 50] 30
//     g [70, 80] 10
Profile recursive() {
  Profile p;
  p.end_ns = 100;
  const uint32_t f = p.functions.add("f", "m", "/app/m.py", 3, FunctionKind::kPython, true);
  const uint32_t g = p.functions.add("g", "m", "/app/m.py", 9, FunctionKind::kPython, true);
  p.lanes.push_back(test::make_lane(
      {call(0, f), call(10, f), call(20, g), ret(50), ret(60), call(70, g), ret(80), ret(100)}));
  build_tree(p);
  return p;
}

TEST(FunctionStats, RecursionCountsOnceInCum) {
  FunctionStats s;
  s.add(recursive());
  const auto rows = by_name(s);
  ASSERT_EQ(rows.size(), 2u);
  const auto& f = rows.at("f@/app/m.py");
  EXPECT_EQ(f.calls, 2u);
  EXPECT_EQ(f.flat_ns, 60);
  EXPECT_EQ(f.cum_ns, 100);  // the outer call's time, not 100 + 50
  EXPECT_EQ(f.function.line, 3);
  const auto& g = rows.at("g@/app/m.py");
  EXPECT_EQ(g.calls, 2u);
  EXPECT_EQ(g.flat_ns, 40);
  EXPECT_EQ(g.cum_ns, 40);
  EXPECT_EQ(s.profiles(), 1u);
  EXPECT_EQ(s.sessions(), 1u);
}

// fuzz_agent_records' finding (CI, stop 58): lanes each as long as a time
// may be (2^62 ns) summed past int64. Totals stop at its end, not wrap.
TEST(FunctionStats, TotalsPastInt64SaturateRatherThanWrap) {
  Profile p;
  p.start_ns = -kMaxTimeNs;
  p.end_ns = kMaxTimeNs;
  const uint32_t f = p.functions.add("f", "m", "/app/m.py", 3, FunctionKind::kPython, true);
  for (int i = 0; i < 4; ++i)
    p.lanes.push_back(test::make_lane({call(-kMaxTimeNs, f), ret(kMaxTimeNs)}));
  build_tree(p);
  ASSERT_EQ(profile_defect(p), "");
  FunctionStats s;
  s.add(p);
  const auto rows = by_name(s);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.at("f@/app/m.py").calls, 4u);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_ns, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(rows.at("f@/app/m.py").cum_ns, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(saturating_add(std::numeric_limits<int64_t>::min(), -1),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(saturating_add(-5, 3), -2);
}

// Running vs waiting (views/waiting.h): f [0, 1000] calls g [100, 900],
// which slept 600 below the depth ceiling. g's flat is what it ran (200),
// its 600 are its flat waiting; f's cum waiting holds them once.
TEST(FunctionStats, SelfIsRunningTimeAndWaitsAreKeptApart) {
  Profile p;
  p.end_ns = 1000;
  const uint32_t f = p.functions.add("f", "m", "/app/m.py", 3, FunctionKind::kPython, true);
  const uint32_t g = p.functions.add("g", "m", "/app/m.py", 9, FunctionKind::kPython, true);
  Lane lane = test::make_lane({call(0, f), call(100, g), ret(900), ret(1000)});
  lane.off_cpu = {{900, 600}};
  p.lanes.push_back(lane);
  build_tree(p);
  ASSERT_EQ(p.spans[1].waiting_ns, 600);
  FunctionStats s;
  s.add(p);
  auto rows = by_name(s);
  EXPECT_EQ(rows.at("g@/app/m.py").flat_ns, 200);
  EXPECT_EQ(rows.at("g@/app/m.py").flat_waiting_ns, 600);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_ns, 200);  // 1000 - 600 running, less g's 200
  EXPECT_EQ(rows.at("f@/app/m.py").flat_waiting_ns, 0);
  EXPECT_EQ(rows.at("f@/app/m.py").cum_ns, 400);
  EXPECT_EQ(rows.at("f@/app/m.py").cum_waiting_ns, 600);
  FunctionStats cut;
  cut.add(p, 0);  // f at the cut keeps its whole running and waiting time
  rows = by_name(cut);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_ns, 400);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_waiting_ns, 600);
}

TEST(FunctionStats, DepthFoldsDeeperCallsIntoTheCut) {
  FunctionStats root_only;
  root_only.add(recursive(), 0);
  auto rows = by_name(root_only);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_ns, 100);
  EXPECT_EQ(rows.at("f@/app/m.py").calls, 1u);

  FunctionStats two;
  two.add(recursive(), 1);  // the inner f keeps g's 30 as its own
  rows = by_name(two);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_ns, 40 + 50);
  EXPECT_EQ(rows.at("f@/app/m.py").cum_ns, 100);
  EXPECT_EQ(rows.at("g@/app/m.py").flat_ns, 10);
  EXPECT_EQ(rows.at("g@/app/m.py").calls, 1u);
}

TEST(FunctionStats, SameNameInTwoFilesIsTwoFunctionsAndALabelNamesItsSpan) {
  Profile p;
  p.end_ns = 50;
  const uint32_t enc =
      p.functions.add("forward", "enc", "/app/encoder.py", 5, FunctionKind::kPython, true);
  const uint32_t dec =
      p.functions.add("forward", "dec", "/app/decoder.py", 5, FunctionKind::kPython, true);
  const uint32_t label = p.functions.strings().intern("step");
  p.lanes.push_back(test::make_lane(
      {call(0, enc), ret(10), call(10, dec), ret(30), test::label(label), call(30, enc), ret(50)}));
  build_tree(p);
  FunctionStats s;
  s.add(p);
  const auto rows = by_name(s);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows.at("forward@/app/encoder.py").flat_ns, 10);
  EXPECT_EQ(rows.at("forward@/app/decoder.py").flat_ns, 20);
  EXPECT_EQ(rows.at("step@/app/encoder.py").flat_ns,
            20);  // as the tree and the pprof export name it
}

TEST(FunctionStats, AThreadStartedUnderACallCountsInItsCum) {
  // Lane 1's root hangs under f (lane 0's first call): its path goes through
  // f, as in the flame graph and the pprof export; f's self keeps its time.
  Profile p;
  p.end_ns = 200;
  const uint32_t f = p.functions.add("f", "m", "/app/m.py", 3, FunctionKind::kPython, true);
  const uint32_t h = p.functions.add("h", "m", "/app/m.py", 20, FunctionKind::kPython, true);
  p.lanes.push_back(test::make_lane({call(0, f), ret(100)}));
  p.lanes.push_back(
      test::make_lane({call(30, h), call(40, f), ret(60), ret(130)}, "worker", 0, 0, 0));
  build_tree(p);
  FunctionStats s;
  s.add(p);
  const auto rows = by_name(s);
  EXPECT_EQ(rows.at("f@/app/m.py").flat_ns, 100 + 20);
  EXPECT_EQ(rows.at("f@/app/m.py").cum_ns, 100 + 100);  // the worker's f is under f: once
  EXPECT_EQ(rows.at("h@/app/m.py").cum_ns, 100);
}

// The oracle: pprof's definitions applied to each span's own path
// (flat: the spans whose function it is; cum: the spans whose path holds it).
TEST(FunctionStats, RandomProfilesAgreeWithPprofsDefinitions) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    const Profile p = test::random_profile(seed, 600, 7, /*generators=*/seed % 2 == 0);
    for (const int depth : {-1, 2}) {
      FunctionStats s;
      s.add(p, depth);
      // Self time is running time: the span's less its same-lane children's.
      std::vector<int64_t> self(p.spans.size());
      for (size_t i = 0; i < p.spans.size(); ++i) self[i] = p.spans[i].running_ns();
      for (const Span& sp : p.spans) {
        if (sp.parent >= 0 && p.spans[sp.parent].lane == sp.lane)
          self[sp.parent] -= sp.running_ns();
      }
      for (int64_t& v : self) v = std::max<int64_t>(v, 0);
      std::map<std::string, int64_t> flat, cum, calls;
      for (size_t i = 0; i < p.spans.size(); ++i) {
        const Span& sp = p.spans[i];
        if (depth >= 0 && sp.depth > static_cast<uint32_t>(depth)) continue;
        const int64_t v =
            depth >= 0 && sp.depth == static_cast<uint32_t>(depth) ? sp.running_ns() : self[i];
        const std::string name = p.display_name(sp);
        flat[name] += v;
        ++calls[name];
        std::set<std::string> on_path;
        for (int32_t j = static_cast<int32_t>(i); j >= 0; j = p.spans[j].parent) {
          on_path.insert(p.display_name(p.spans[j]));
        }
        for (const auto& n : on_path) cum[n] += v;
      }
      // random_profile's functions have distinct names, so a name is a function here.
      const auto rows = s.span_rows();
      ASSERT_EQ(rows.size(), flat.size()) << "seed " << seed;
      for (const auto& r : rows) {
        EXPECT_EQ(r.flat_ns, flat.at(r.function.name)) << "seed " << seed << " " << r.function.name;
        EXPECT_EQ(r.cum_ns, cum.at(r.function.name)) << "seed " << seed << " " << r.function.name;
        EXPECT_EQ(static_cast<int64_t>(r.calls), calls.at(r.function.name));
      }
    }
  }
}

StackSamples located_samples(
    std::vector<std::pair<std::string, std::string>> types,
    std::vector<std::pair<std::vector<std::string>, std::vector<int64_t>>> stacks) {
  StackSamples ss;
  ss.value_types = std::move(types);
  ss.threads.push_back({"main", 1});
  for (auto& [frames, values] : stacks) {
    StackSamples::Sample s;
    for (const std::string& name : frames) {
      s.frames.push_back(
          {ss.functions.add(name, "", "/app/" + name + ".py", 1, FunctionKind::kPython, false), 7});
    }
    s.values = values;
    ss.samples.push_back(std::move(s));
  }
  return ss;
}

std::map<std::string, FunctionStats::SampledRow> sampled_by_name(const FunctionStats& s) {
  std::map<std::string, FunctionStats::SampledRow> out;
  for (auto& r : s.sampled_rows()) out.emplace(r.function.name, r);
  return out;
}

TEST(FunctionStats, SampledStacksFlatIsTheLeafCumOncePerSample) {
  FunctionStats s;
  s.add(located_samples({{"samples", "count"}, {"cpu", "nanoseconds"}},
                        {{{"main", "a", "a", "b"}, {3, 30}},
                         {{"main", "a"}, {2, 20}},
                         {{"main", "b", "a"}, {1, 10}}}));
  auto rows = sampled_by_name(s);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows.at("a").flat, (std::vector<int64_t>{3, 30}));
  EXPECT_EQ(rows.at("a").cum, (std::vector<int64_t>{6, 60}));  // 3 + 2 + 1, the first stack once
  EXPECT_EQ(rows.at("b").flat, (std::vector<int64_t>{3, 30}));
  EXPECT_EQ(rows.at("b").cum, (std::vector<int64_t>{4, 40}));
  EXPECT_EQ(rows.at("main").flat, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(rows.at("main").cum, (std::vector<int64_t>{6, 60}));
  EXPECT_EQ(s.samples(), 6u);  // each sample counts as its count: 3 + 2 + 1
  EXPECT_EQ(s.sampled_sources(), 1u);
  EXPECT_TRUE(s.span_rows().empty());

  FunctionStats cut;  // depth 1: two frames, the second the leaf
  cut.add(located_samples(
              {{"samples", "count"}},
              {{{"main", "a", "a", "b"}, {3}}, {{"main", "a"}, {2}}, {{"main", "b", "a"}, {1}}}),
          1);
  rows = sampled_by_name(cut);
  EXPECT_EQ(rows.at("a").flat, (std::vector<int64_t>{5}));
  EXPECT_EQ(rows.at("b").flat, (std::vector<int64_t>{1}));
  EXPECT_EQ(rows.at("b").cum, (std::vector<int64_t>{1}));
}

TEST(FunctionStats, SampledTypesAreTheUnion) {
  FunctionStats s;
  s.add(located_samples({{"samples", "count"}}, {{{"main", "a"}, {2}}}));
  s.add(located_samples({{"cpu", "nanoseconds"}, {"samples", "count"}},
                        {{{"main", "a"}, {70, 1}}, {{}, {5, 5}}}));
  ASSERT_EQ(s.value_types().size(), 2u);
  const auto rows = sampled_by_name(s);
  EXPECT_EQ(rows.at("a").flat, (std::vector<int64_t>{3, 70}));
  EXPECT_EQ(rows.at("main").cum, (std::vector<int64_t>{3, 70}));
  EXPECT_EQ(s.samples(), 8u);  // 2 + 1 + 5: the empty stack counts, of no function
}

}  // namespace
}  // namespace mlprof
