// to_speedscope against speedscope's evented importer (jlfwong/speedscope,
// src/lib/file-format.ts importEventedProfile -> CallTreeProfileBuilder in
// src/lib/profile.ts). It throws when an event's "at" goes back ("Samples
// must be provided in increasing order of cumulative value"), when a close
// names another frame than the one on top ("Tried to leave frame ..."), when
// the stack is empty at a close, and when frames are left open at the end
// ("non-empty stack"). replay() below applies those rules. The eBPF agent's
// off-CPU profile is "sampled" (importSpeedscopeProfile's sampled branch:
// samples of frame indices, root first, and as many weights); a profile with
// it was checked once by hand in speedscope 1.25's own page (imported, no
// errors); tests/python/test_speedscope_import.py does that for our other
// profiles, which in-process captures produce.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <map>
#include <string>
#include <vector>

#include "export_fixture.h"
#include "formats/export.h"
#include "json_parse.h"
#include "kernel_fixture.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::parse_json;

// Replays one evented profile the way speedscope imports it. Returns the
// first error, or "" with the time each frame index spent on the stack
// (counted once per open frame: a recursive frame counts twice).
std::string replay(const rapidjson::Value& profile, std::map<int, int64_t>* open_time = nullptr) {
  std::vector<std::pair<int, int64_t>> stack;
  int64_t last = 0;
  for (const auto& ev : profile["events"].GetArray()) {
    const std::string type = ev["type"].GetString();
    const int frame = ev["frame"].GetInt();
    const int64_t at = ev["at"].GetInt64();
    if (at < last) return "at goes back: " + std::to_string(at) + " < " + std::to_string(last);
    last = at;
    if (type == "O") {
      stack.emplace_back(frame, at);
    } else if (type == "C") {
      if (stack.empty()) return "close on an empty stack";
      if (stack.back().first != frame) return "close of a frame not on top";
      if (open_time != nullptr) (*open_time)[frame] += at - stack.back().second;
      stack.pop_back();
    } else {
      return "unknown event type " + type;
    }
  }
  if (!stack.empty()) return "frames left open";
  if (last > profile["endValue"].GetInt64()) return "events after endValue";
  return "";
}

class SpeedscopeTest : public ::testing::Test {
 protected:
  Profile p = test::export_profile_fixture();
  rapidjson::Document doc = parse_json(to_speedscope(p));

  int frame_index(const std::string& name) const {
    const auto& frames = doc["shared"]["frames"];
    for (rapidjson::SizeType i = 0; i < frames.Size(); ++i) {
      if (name == frames[i]["name"].GetString()) return static_cast<int>(i);
    }
    return -1;
  }
};

TEST_F(SpeedscopeTest, FileHeader) {
  EXPECT_STREQ(doc["$schema"].GetString(), "https://www.speedscope.app/file-format-schema.json");
  EXPECT_STREQ(doc["exporter"].GetString(), "mlflow-profiler");
  EXPECT_STREQ(doc["name"].GetString(), "mlflow-profiler, pid 777");
  EXPECT_EQ(doc["activeProfileIndex"].GetInt(), 0);
}

TEST_F(SpeedscopeTest, OneEventedProfilePerLaneInNanoseconds) {
  const auto& profiles = doc["profiles"];
  ASSERT_EQ(profiles.Size(), 3u);
  std::vector<std::string> names;
  for (const auto& prof : profiles.GetArray()) {
    names.emplace_back(prof["name"].GetString());
    EXPECT_STREQ(prof["type"].GetString(), "evented");
    EXPECT_STREQ(prof["unit"].GetString(), "nanoseconds");
    EXPECT_EQ(prof["startValue"].GetInt64(), 0);
    EXPECT_EQ(prof["endValue"].GetInt64(), 20'000);  // session end - origin: lanes line up
    EXPECT_EQ(replay(prof), "");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"thread MainThread", "thread MainThread, task 1",
                                             "thread Worker"}));
}

TEST_F(SpeedscopeTest, FramesHaveNameFileAndLine) {
  const int predict = frame_index("predict");
  ASSERT_GE(predict, 0);
  const auto& f = doc["shared"]["frames"][predict];
  EXPECT_STREQ(f["file"].GetString(), "/app/model.py");
  EXPECT_EQ(f["line"].GetInt(), 10);
  EXPECT_GE(frame_index("my label"), 0);
  EXPECT_EQ(frame_index("fail"), -1);  // a labelled span shows its label
  EXPECT_EQ(doc["shared"]["frames"].Size(), 7u);
}

TEST_F(SpeedscopeTest, GeneratorsOpenPerSegmentUnderWhateverRuns) {
  const auto& main = doc["profiles"][0];
  std::map<int, int64_t> open_time;
  ASSERT_EQ(replay(main, &open_time), "");
  EXPECT_EQ(open_time[frame_index("produce")], 2'000);  // active, not its 5'000 of wall
  EXPECT_EQ(open_time[frame_index("predict")], 17'999);
  // The second segment opens inside consume: O consume, O produce, C produce, C consume.
  std::vector<std::string> around_consume;
  bool in = false;
  for (const auto& ev : main["events"].GetArray()) {
    const int frame = ev["frame"].GetInt();
    if (frame == frame_index("consume") && std::string(ev["type"].GetString()) == "O") in = true;
    if (in) {
      around_consume.push_back(std::string(ev["type"].GetString()) +
                               doc["shared"]["frames"][frame]["name"].GetString() + "@" +
                               std::to_string(ev["at"].GetInt64()));
    }
    if (frame == frame_index("consume") && std::string(ev["type"].GetString()) == "C") break;
  }
  EXPECT_EQ(around_consume, (std::vector<std::string>{"Oconsume@6000", "Oproduce@6500",
                                                      "Cproduce@7000", "Cconsume@8000"}));
}

TEST(Speedscope, RandomCapturesImport) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const Profile p = test::random_profile(seed, 400, 6, true);
    const rapidjson::Document doc = parse_json(to_speedscope(p));
    ASSERT_EQ(doc["profiles"].Size(), 1u);
    std::map<int, int64_t> open_time;
    ASSERT_EQ(replay(doc["profiles"][0], &open_time), "") << "seed " << seed;
    // Every span's running time is on the stack once (recursion counts per frame).
    int64_t drawn = 0, running = 0;
    for (const auto& [frame, t] : open_time) drawn += t;
    for (const Span& s : p.spans)
      running += (s.flags & kSpanGenerator) ? s.active_ns : s.duration_ns();
    EXPECT_EQ(drawn, running) << "seed " << seed;
  }
}

TEST(Speedscope, SameProfileSameBytes) {
  const Profile p = test::export_profile_fixture();
  EXPECT_EQ(to_speedscope(p), to_speedscope(p));
}

TEST(SpeedscopeKernel, OffCpuTimeIsOneMoreSampledProfile) {
  const Profile p = test::kernel_profile_fixture();
  const rapidjson::Document doc = parse_json(to_speedscope(p));
  const auto& profiles = doc["profiles"];
  ASSERT_EQ(profiles.Size(), 4u);  // three lanes, then off-CPU
  for (rapidjson::SizeType i = 0; i < 3; ++i) EXPECT_EQ(replay(profiles[i]), "");
  const auto& off = profiles[3];
  EXPECT_STREQ(off["type"].GetString(), "sampled");
  EXPECT_STREQ(off["name"].GetString(), "off-CPU time (all threads)");
  EXPECT_STREQ(off["unit"].GetString(), "nanoseconds");
  EXPECT_EQ(off["startValue"].GetInt64(), 0);
  EXPECT_EQ(off["endValue"].GetInt64(), 3'000);
  const auto& frames = doc["shared"]["frames"];
  std::map<std::string, int64_t> weight_of_leaf;
  ASSERT_EQ(off["samples"].Size(), off["weights"].Size());
  for (rapidjson::SizeType i = 0; i < off["samples"].Size(); ++i) {
    const auto& stack = off["samples"][i];
    EXPECT_STREQ(frames[stack[0].GetUint()]["name"].GetString(), "predict");  // root first
    const std::string leaf = frames[stack[stack.Size() - 1].GetUint()]["name"].GetString();
    weight_of_leaf[leaf] += off["weights"][i].GetInt64();
  }
  EXPECT_EQ(weight_of_leaf,
            (std::map<std::string, int64_t>{
                {"predict", 500}, {"preprocess", 800}, {"my label", 100}, {"work", 1'600}}));
}

TEST(SpeedscopeKernel, NoOffCpuProfileWithoutOffCpuTime) {
  Profile p = test::kernel_profile_fixture();
  p.kernel.off_cpu.clear();
  p.kernel.threads.clear();
  attribute_kernel(p);
  EXPECT_EQ(parse_json(to_speedscope(p))["profiles"].Size(), 3u);
  EXPECT_EQ(to_speedscope(test::export_profile_fixture()), to_speedscope(p));
}

}  // namespace
}  // namespace mlprof
