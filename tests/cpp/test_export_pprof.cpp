// to_pprof, read back by a protobuf decoder written from profile.proto's
// field numbers (pprof_decode.h; not the encoder's code), after gunzip. `go tool pprof`
// reading real captures is tests/python/test_export_pprof.py; here it reads
// the agent's sample types (off_cpu, runq), which only the agent produces.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "export_fixture.h"
#include "formats/export.h"
#include "kernel_fixture.h"
#include "pprof_decode.h"
#include "profile_builder.h"
#include "util/file_io.h"

namespace mlprof {
namespace {

using test::decode;
using test::PprofFunction;
using test::PprofProfile;
using test::PprofSample;

class PprofTest : public ::testing::Test {
 protected:
  Profile p = test::export_profile_fixture();
  PprofProfile pb = decode(to_pprof(p));

  const PprofSample* sample_of(const std::string& leaf) const {
    for (const PprofSample& s : pb.samples) {
      if (pb.stack(s).front() == leaf) return &s;
    }
    return nullptr;
  }
};

TEST_F(PprofTest, GzipWithStringTableStartingEmpty) {
  EXPECT_TRUE(is_gzip(to_pprof(p)));
  ASSERT_FALSE(pb.strings.empty());
  EXPECT_EQ(pb.strings[0], "");
  EXPECT_EQ(std::set<std::string>(pb.strings.begin(), pb.strings.end()).size(), pb.strings.size());
}

TEST_F(PprofTest, SampleTypesCallsAndWallNanoseconds) {
  EXPECT_EQ(pb.sample_types, (std::vector<std::pair<std::string, std::string>>{
                                 {"calls", "count"}, {"wall", "nanoseconds"}}));
  EXPECT_EQ(pb.default_sample_type, "wall");
  EXPECT_EQ(pb.period, 1);
  EXPECT_EQ(pb.duration_nanos, 20'000);
  EXPECT_EQ(pb.time_nanos, 1'700'000'000'000'000'000);  // meta start_unix_ns
}

TEST_F(PprofTest, OneSamplePerSpanWithSelfWallTime) {
  ASSERT_EQ(pb.samples.size(), p.spans.size());
  const std::map<std::string, int64_t> self = {
      {"predict", 11'999}, {"preprocess", 1'500}, {"produce", 2'000}, {"consume", 2'000},
      {"my label", 500},   {"fetch", 3'000},      {"work", 3'500}};
  int64_t total = 0;
  for (const PprofSample& s : pb.samples) {
    ASSERT_EQ(s.values.size(), 2u);
    EXPECT_EQ(s.values[0], 1);
    EXPECT_EQ(s.values[1], self.at(pb.stack(s).front())) << pb.stack(s).front();
    total += s.values[1];
  }
  EXPECT_EQ(total, 11'999 + 1'500 + 2'000 + 2'000 + 500 + 3'000 + 3'500);
}

TEST_F(PprofTest, StacksLeafFirstAcrossLanes) {
  EXPECT_EQ(pb.stack(*sample_of("predict")), (std::vector<std::string>{"predict"}));
  EXPECT_EQ(pb.stack(*sample_of("produce")), (std::vector<std::string>{"produce", "predict"}));
  // A task's and a thread's spans continue the stack of the span they hang under.
  EXPECT_EQ(pb.stack(*sample_of("fetch")), (std::vector<std::string>{"fetch", "predict"}));
  EXPECT_EQ(pb.stack(*sample_of("work")), (std::vector<std::string>{"work", "predict"}));
}

TEST_F(PprofTest, FunctionsCarryFileAndLine) {
  std::map<std::string, PprofFunction> by_name;
  for (const auto& [id, f] : pb.functions) {
    EXPECT_GT(id, 0u);
    by_name[f.name] = f;
  }
  EXPECT_EQ(by_name["predict"].filename, "/app/model.py");
  EXPECT_EQ(by_name["predict"].start_line, 10);
  EXPECT_EQ(by_name["predict"].system_name, "predict");
  // A labelled span is named after its label; its code stays as system_name.
  EXPECT_EQ(by_name["my label"].system_name, "fail");
  EXPECT_EQ(by_name["my label"].start_line, 50);
  for (const auto& [loc, fn] : pb.location_function) {
    EXPECT_GT(loc, 0u);
    EXPECT_TRUE(pb.functions.count(fn));
  }
}

TEST_F(PprofTest, LabelsForThreadTaskSpanLabelAndFlags) {
  EXPECT_EQ(sample_of("predict")->labels,
            (std::map<std::string, std::string>{{"thread", "MainThread"}}));
  EXPECT_EQ(sample_of("fetch")->labels,
            (std::map<std::string, std::string>{{"thread", "MainThread"}, {"task", "1"}}));
  EXPECT_EQ(sample_of("work")->labels, (std::map<std::string, std::string>{{"thread", "Worker"}}));
  EXPECT_EQ(sample_of("my label")->labels,
            (std::map<std::string, std::string>{
                {"thread", "MainThread"}, {"label", "my label"}, {"flags", "exception, caught"}}));
}

TEST_F(PprofTest, ProvenanceInComments) {
  const std::set<std::string> comments(pb.comments.begin(), pb.comments.end());
  EXPECT_TRUE(comments.count("mlflow-profiler"));
  EXPECT_TRUE(comments.count("captured_depth=3"));
  EXPECT_TRUE(comments.count("pid=777"));
}

TEST(Pprof, FunctionsAndLocationsAreShared) {
  // The same function called from many places is one function, one location.
  const Profile p = test::random_profile(7, 2'000, 6, true);
  const PprofProfile pb = decode(to_pprof(p));
  std::set<std::string> names;
  for (const Span& s : p.spans) names.insert(p.display_name(s));
  EXPECT_EQ(pb.functions.size(), names.size());
  EXPECT_EQ(pb.location_function.size(), names.size());
  ASSERT_EQ(pb.samples.size(), p.spans.size());
  for (size_t i = 0; i < p.spans.size(); ++i) {
    EXPECT_EQ(pb.samples[i].locations.size(), p.spans[i].depth + 1);
  }
}

TEST(Pprof, SameProfileSameBytes) {
  const Profile p = test::export_profile_fixture();
  EXPECT_EQ(to_pprof(p), to_pprof(p));
}

TEST(Pprof, EmptyProfile) {
  Profile p;
  build_tree(p);
  const PprofProfile pb = decode(to_pprof(p));
  EXPECT_TRUE(pb.samples.empty());
  EXPECT_EQ(pb.strings.at(0), "");
  EXPECT_EQ(pb.time_nanos, 0);
}

class PprofKernelTest : public ::testing::Test {
 protected:
  Profile p = test::kernel_profile_fixture();
  PprofProfile pb = decode(to_pprof(p));

  const PprofSample* sample_of(const std::string& leaf) const {
    for (const PprofSample& s : pb.samples) {
      if (pb.stack(s).front() == leaf) return &s;
    }
    return nullptr;
  }
};

TEST_F(PprofKernelTest, OffCpuAndRunQueueAreSampleTypesNextToWall) {
  EXPECT_EQ(pb.sample_types,
            (std::vector<std::pair<std::string, std::string>>{{"calls", "count"},
                                                              {"wall", "nanoseconds"},
                                                              {"off_cpu", "nanoseconds"},
                                                              {"runq", "nanoseconds"}}));
  EXPECT_EQ(pb.default_sample_type, "wall");
  // Self values: the inclusive figures less the children's (kernel_fixture.h).
  const std::map<std::string, std::pair<int64_t, int64_t>> self = {
      {"predict", {500, 500}}, {"preprocess", {800, 100}}, {"produce", {0, 0}},
      {"consume", {0, 0}},     {"my label", {100, 50}},    {"fetch", {0, 0}},
      {"work", {1'600, 100}}};
  int64_t off = 0, runq = 0;
  for (const PprofSample& s : pb.samples) {
    ASSERT_EQ(s.values.size(), 4u);
    const auto& want = self.at(pb.stack(s).front());
    EXPECT_EQ(s.values[2], want.first) << pb.stack(s).front();
    EXPECT_EQ(s.values[3], want.second) << pb.stack(s).front();
    off += s.values[2];
    runq += s.values[3];
  }
  EXPECT_EQ(off, p.kernel.spans[0].off_cpu_ns);  // the root's inclusive figure
  EXPECT_EQ(runq, p.kernel.spans[0].runq_ns);
  EXPECT_NE(std::find(pb.comments.begin(), pb.comments.end(), "lost_kernel_events=3"),
            pb.comments.end());
}

TEST_F(PprofKernelTest, LanesOfTheAgentAreLabelledWithPidAndSession) {
  p.lanes[2].pid = 777;
  p.lanes[2].session = 5;
  pb = decode(to_pprof(p));
  EXPECT_EQ(
      sample_of("work")->labels,
      (std::map<std::string, std::string>{{"thread", "Worker"}, {"pid", "777"}, {"session", "5"}}));
  EXPECT_EQ(sample_of("predict")->labels,
            (std::map<std::string, std::string>{{"thread", "MainThread"}}));
}

TEST(PprofKernel, AnUnattributedProfileHasOnlyWall) {
  Profile p = test::kernel_profile_fixture();
  p.kernel.spans.clear();
  EXPECT_EQ(decode(to_pprof(p)).sample_types.size(), 2u);
}

// `go tool pprof` (the Go toolchain's): a skip when Go is not installed, a
// failure under MLPROF_REQUIRE_TOOLS=1 (CI installs it).
std::string go_binary() {
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    for (size_t at = 0; at <= dirs.size();) {
      const size_t end = std::min(dirs.find(':', at), dirs.size());
      const std::string candidate = dirs.substr(at, end - at) + "/go";
      if (end > at && ::access(candidate.c_str(), X_OK) == 0) return candidate;
      at = end + 1;
    }
  }
  return ::access("/usr/local/go/bin/go", X_OK) == 0 ? "/usr/local/go/bin/go" : "";
}

std::string run(const std::string& command) {
  std::string out;
  FILE* f = ::popen(command.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int status = ::pclose(f);
  EXPECT_EQ(status, 0) << command << "\n" << out;
  return out;
}

// The flat value pprof -top gives a function, in ns (-unit=ns), -1 if absent.
int64_t flat_ns(const std::string& top, const std::string& name) {
  size_t at = 0;
  while ((at = top.find(name, at)) != std::string::npos) {
    const size_t line = top.rfind('\n', at) + 1;
    const size_t end = top.find('\n', at);
    if (top.compare(end - name.size(), name.size(), name) == 0) {
      return std::strtoll(top.c_str() + top.find_first_not_of(' ', line), nullptr, 10);
    }
    at = end;
  }
  return -1;
}

TEST(PprofKernel, GoToolPprofReadsOffCpuAndRunQueue) {
  const std::string go = go_binary();
  if (go.empty()) {
    const char* require = std::getenv("MLPROF_REQUIRE_TOOLS");
    if (require != nullptr && std::string(require) == "1") {
      FAIL() << "the Go toolchain (go tool pprof) is required here (MLPROF_REQUIRE_TOOLS=1)";
    }
    GTEST_SKIP() << "the Go toolchain is not installed (Go at /usr/local/go or on PATH)";
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mlprof-pprof-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "agent.pb.gz";
  std::ofstream(file, std::ios::binary) << to_pprof(test::kernel_profile_fixture());
  const std::string base = "PPROF_TMPDIR=" + dir.string() + " " + go + " tool pprof -top -unit=ns ";
  const std::string off = run(base + "-sample_index=off_cpu " + file.string() + " 2>&1");
  EXPECT_NE(off.find("Type: off_cpu"), std::string::npos) << off;
  EXPECT_EQ(flat_ns(off, "work"), 1'600) << off;
  EXPECT_EQ(flat_ns(off, "preprocess"), 800) << off;
  EXPECT_EQ(flat_ns(off, "predict"), 500) << off;
  EXPECT_EQ(flat_ns(off, "my label"), 100) << off;
  EXPECT_NE(off.find("of 3000ns total"), std::string::npos) << off;
  const std::string runq = run(base + "-sample_index=runq " + file.string() + " 2>&1");
  EXPECT_NE(runq.find("Type: runq"), std::string::npos) << runq;
  EXPECT_EQ(flat_ns(runq, "predict"), 500) << runq;
  EXPECT_NE(runq.find("of 750ns total"), std::string::npos) << runq;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlprof
