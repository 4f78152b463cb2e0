// PprofAggregate: many sources into one pprof, read back by the test decoder
// (pprof_decode.h, written from profile.proto, not from the writer). The
// single-profile export (to_pprof) is the reference for what one span source
// contributes.

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "export_fixture.h"
#include "formats/export.h"
#include "formats/pprof_aggregate.h"
#include "kernel_fixture.h"
#include "pprof_decode.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::decode;
using test::PprofProfile;
using test::PprofSample;
using Types = std::vector<std::pair<std::string, std::string>>;

// "predict;preprocess" (root first) -> the sample's values, one per type.
// Fails the test if two samples share a path and labels.
std::map<std::string, std::vector<int64_t>> by_path(const PprofProfile& pb,
                                                    const std::string& label_key = "") {
  std::map<std::string, std::vector<int64_t>> out;
  for (const PprofSample& s : pb.samples) {
    std::vector<std::string> names = pb.stack(s);
    std::string key;
    for (auto it = names.rbegin(); it != names.rend(); ++it) key += (key.empty() ? "" : ";") + *it;
    if (!label_key.empty()) key += " @" + (s.labels.count(label_key) ? s.labels.at(label_key) : "");
    EXPECT_TRUE(out.emplace(key, s.values).second) << "two samples for " << key;
  }
  return out;
}

// The per-path sums of to_pprof(p) (a sample per span): what the aggregate
// must hold for one source.
std::map<std::string, std::vector<int64_t>> summed_per_span(const Profile& p) {
  std::map<std::string, std::vector<int64_t>> out;
  const PprofProfile pb = decode(to_pprof(p));
  for (const PprofSample& s : pb.samples) {
    std::vector<std::string> names = pb.stack(s);
    std::string key;
    for (auto it = names.rbegin(); it != names.rend(); ++it) key += (key.empty() ? "" : ";") + *it;
    auto& values = out[key];
    values.resize(s.values.size(), 0);
    for (size_t i = 0; i < s.values.size(); ++i) values[i] += s.values[i];
  }
  return out;
}

TEST(PprofAggregate, TwoSourcesWithTheSamePathsGiveOneSamplePerPathWithSummedValues) {
  const Profile p = test::export_profile_fixture();
  PprofAggregate agg;
  agg.add(p);
  agg.add(p);
  const PprofProfile pb = decode(agg.to_pprof());
  EXPECT_EQ(pb.sample_types, (Types{{"calls", "count"}, {"wall", "nanoseconds"}}));
  EXPECT_EQ(pb.default_sample_type, "wall");
  const auto got = by_path(pb);
  const auto one = summed_per_span(p);
  ASSERT_EQ(got.size(), one.size());
  ASSERT_EQ(got.size(), 7u);  // the fixture's seven spans have seven paths
  for (const auto& [path, values] : one) {
    ASSERT_TRUE(got.count(path)) << path;
    EXPECT_EQ(got.at(path), (std::vector<int64_t>{2 * values[0], 2 * values[1]})) << path;
  }
  EXPECT_EQ(got.at("predict;preprocess"), (std::vector<int64_t>{2, 3'000}));
  EXPECT_EQ(agg.total("wall", "nanoseconds"),
            2 * (11'999 + 1'500 + 2'000 + 2'000 + 500 + 3'000 + 3'500));
  EXPECT_EQ(agg.sources(), 2u);
  EXPECT_EQ(agg.samples(), 7u);
}

// Sums stop at int64's end: three spans of one path, each as long as a
// time can be (a hostile document's), overflowed the wall value.
TEST(PprofAggregate, SumsPastInt64StopAtItsEnd) {
  const Profile p = test::int64_overflow_fixture();
  PprofAggregate agg;
  agg.add(p);
  agg.add(p);
  EXPECT_EQ(agg.total("wall", "nanoseconds"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(agg.total("calls", "count"), 6);
}

TEST(PprofAggregate, RepeatedPathsOfOneSourceMergeAndTheSumsStay) {
  // 5,000 calls over 10 functions to depth 2: at most 1,110 paths.
  const Profile p = test::random_profile(7, 5'000, 2, true);
  PprofAggregate agg;
  agg.add(p);
  const auto got = by_path(decode(agg.to_pprof()));
  const auto want = summed_per_span(p);
  EXPECT_EQ(got, want);
  EXPECT_LE(got.size(), 1'110u);
  EXPECT_LT(got.size(), p.spans.size() / 4);
  int64_t calls = 0;
  for (const auto& [path, values] : got) calls += values[0];
  EXPECT_EQ(calls, static_cast<int64_t>(p.spans.size()));
}

TEST(PprofAggregate, LabelsKeepSourcesApart) {
  const Profile p = test::export_profile_fixture();
  PprofAggregate agg;
  agg.add(p, {{"source", "1"}});
  agg.add(p, {{"source", "2"}});
  agg.add(p, {{"source", "2"}});
  const auto got = by_path(decode(agg.to_pprof()), "source");
  EXPECT_EQ(got.size(), 14u);
  EXPECT_EQ(got.at("predict;preprocess @1"), (std::vector<int64_t>{1, 1'500}));
  EXPECT_EQ(got.at("predict;preprocess @2"), (std::vector<int64_t>{2, 3'000}));
}

// A sampler's view of the fixture's predict (same name, file and line) and
// of a function the spans never saw.
StackSamples sampled() {
  StackSamples s;
  s.value_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
  s.threads = {{"MainThread", 1}};
  const uint32_t predict =
      s.functions.add("predict", "", "/app/model.py", 10, FunctionKind::kPython, true);
  const uint32_t gemm =
      s.functions.add("gemm", "", "/usr/lib/libblas.so", 0, FunctionKind::kC, false);
  s.samples.push_back({0, {{predict, 10}}, {3, 30'000}});
  s.samples.push_back({0, {{predict, 10}, {gemm, 0}}, {2, 20'000}});
  s.samples.push_back({0, {{predict, 10}, {gemm, 0}}, {1, 10'000}});
  return s;
}

TEST(PprofAggregate, SampledStacksAddTheirOwnTypesAndTheUnionIsWritten) {
  PprofAggregate agg;
  agg.add(test::export_profile_fixture());
  agg.add(sampled());
  const PprofProfile pb = decode(agg.to_pprof());
  EXPECT_EQ(pb.sample_types, (Types{{"calls", "count"},
                                    {"wall", "nanoseconds"},
                                    {"samples", "count"},
                                    {"cpu", "nanoseconds"}}));
  const auto got = by_path(pb);
  // The same path from both: one sample with both sources' values.
  EXPECT_EQ(got.at("predict"), (std::vector<int64_t>{1, 11'999, 3, 30'000}));
  // A span-only path has 0 for the sampler's types, and the other way.
  EXPECT_EQ(got.at("predict;preprocess"), (std::vector<int64_t>{1, 1'500, 0, 0}));
  EXPECT_EQ(got.at("predict;gemm"), (std::vector<int64_t>{0, 0, 3, 30'000}));
  EXPECT_EQ(agg.total("cpu", "nanoseconds"), 60'000);
  EXPECT_EQ(agg.total("samples", "count"), 6);
}

TEST(PprofAggregate, SampledStacksFirstThenSpansStillPadTheEarlierSamples) {
  PprofAggregate agg;
  agg.add(sampled());
  agg.add(test::export_profile_fixture());
  const PprofProfile pb = decode(agg.to_pprof());
  EXPECT_EQ(pb.sample_types, (Types{{"samples", "count"},
                                    {"cpu", "nanoseconds"},
                                    {"calls", "count"},
                                    {"wall", "nanoseconds"}}));
  EXPECT_EQ(pb.default_sample_type, "wall");
  const auto got = by_path(pb);
  EXPECT_EQ(got.at("predict;gemm"), (std::vector<int64_t>{3, 30'000, 0, 0}));
  EXPECT_EQ(got.at("predict"), (std::vector<int64_t>{3, 30'000, 1, 11'999}));
}

TEST(PprofAggregate, KernelFiguresAreTypesOfTheirOwnAndZeroForOtherSources) {
  PprofAggregate agg;
  agg.add(test::kernel_profile_fixture());
  agg.add(test::export_profile_fixture());
  const PprofProfile pb = decode(agg.to_pprof());
  EXPECT_EQ(pb.sample_types, (Types{{"calls", "count"},
                                    {"wall", "nanoseconds"},
                                    {"off_cpu", "nanoseconds"},
                                    {"runq", "nanoseconds"}}));
  const auto got = by_path(pb);
  // preprocess: self off-CPU 800, run queue 100 (kernel_fixture.h) from the first only.
  EXPECT_EQ(got.at("predict;preprocess"), (std::vector<int64_t>{2, 3'000, 800, 100}));
}

TEST(PprofAggregate, ASourceNeedNotOutliveItsAdd) {
  PprofAggregate agg;
  {
    const Profile p = test::export_profile_fixture();
    agg.add(p);
  }
  {
    const StackSamples s = sampled();
    agg.add(s);
  }
  const PprofProfile pb = decode(agg.to_pprof());
  EXPECT_EQ(by_path(pb).size(), 8u);
  std::map<std::string, std::string> files;
  for (const auto& [id, f] : pb.functions) files[f.name] = f.filename;
  EXPECT_EQ(files.at("predict"), "/app/model.py");
  EXPECT_EQ(files.at("gemm"), "/usr/lib/libblas.so");
}

TEST(PprofAggregate, WindowCommentsAndDeterministicBytes) {
  auto build = [] {
    PprofAggregate agg;
    Profile later = test::export_profile_fixture();
    later.meta["start_unix_ns"] = "1700000000000100000";  // 100 us after the first
    agg.add(test::export_profile_fixture());
    agg.add(later);
    agg.add_comment("source 1: in-process");
    return agg.to_pprof();
  };
  const std::string bytes = build();
  EXPECT_EQ(bytes, build());
  const PprofProfile pb = decode(bytes);
  EXPECT_EQ(pb.time_nanos, 1'700'000'000'000'000'000);
  EXPECT_EQ(pb.duration_nanos, 100'000 + 20'000);  // the later session's end
  EXPECT_EQ(pb.comments, (std::vector<std::string>{"mlflow-profiler", "source 1: in-process"}));
}

TEST(PprofAggregate, NothingAddedIsAnEmptyValidProfile) {
  PprofAggregate agg;
  const PprofProfile pb = decode(agg.to_pprof());
  EXPECT_TRUE(pb.samples.empty());
  EXPECT_TRUE(pb.sample_types.empty());
  ASSERT_FALSE(pb.strings.empty());
  EXPECT_EQ(pb.strings[0], "");
}

}  // namespace
}  // namespace mlprof
