// to_chrome_trace against the rules of Perfetto's JSON importer, as its source
// (google/perfetto, src/trace_processor/) states them:
// - json_trace_tokenizer.cc: the outer object's keys are read in order and
//   anything after a key other than traceEvents, displayTimeUnit, otherData,
//   metadata or systemTraceEvents is ignored; within an event, "ts" is found
//   by scanning keys in order, and an array value before it fails the file.
// - json_trace_parser_impl.cc: pid/tid are uint32 (json_utils CoerceToUint32;
//   otherwise tid falls back to pid); 'X' needs "dur"; 'M' thread_name and
//   process_name take args.name; 'C' needs an args object of numbers.
// - json_utils.cc CoerceToTs: ts of a string is read textually, three
//   fractional digits kept; a JSON real (dur) is double * 1000, truncated.
// - sorter/trace_sorter.h: at equal ts, complete events sort longer first.
// - common/slice_tracker.cc MaybeCloseStack: on a track, a slice ending at or
//   before the next one's ts is closed; a slice that starts inside the open
//   one and ends after it is dropped (slice_drop_overlapping_complete_event).
// perfetto_drops() below replays the last two on our output.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "analysis/sched.h"
#include "export_fixture.h"
#include "formats/export.h"
#include "json_parse.h"
#include "kernel_fixture.h"
#include "perfetto_ts.h"
#include "profile_builder.h"
#include "views/merge.h"

namespace mlprof {
namespace {

using test::parse_json;

// The number's text as written, to read it the way Perfetto does.
std::string raw_number(const std::string& text, size_t event_start, const std::string& key) {
  const size_t at = text.find("\"" + key + "\":", event_start);
  const size_t begin = at + key.size() + 3;
  const size_t end = text.find_first_of(",}", begin);
  return text.substr(begin, end - begin);
}

using test::double_ns;
using test::textual_ns;

struct Slice {
  int64_t ts = 0, dur = 0;
  std::string name;
  std::string args_segment;
};

// Complete events per tid, with ts read textually and dur as a double (what
// Perfetto does), in file order.
std::map<uint32_t, std::vector<Slice>> slices_by_tid(const std::string& text) {
  std::map<uint32_t, std::vector<Slice>> out;
  size_t pos = 0;
  while ((pos = text.find("{\"ph\":\"X\"", pos)) != std::string::npos) {
    rapidjson::Document one;  // this event only: parsing stops after its object
    one.Parse<rapidjson::kParseStopWhenDoneFlag>(text.c_str() + pos);
    Slice s;
    s.ts = textual_ns(raw_number(text, pos, "ts"));
    s.dur = double_ns(raw_number(text, pos, "dur"));
    s.name = one["name"].GetString();
    if (one["args"].HasMember("segment")) s.args_segment = one["args"]["segment"].GetString();
    out[one["tid"].GetUint()].push_back(s);
    ++pos;
  }
  return out;
}

// Replays Perfetto's sorter and SliceTracker::MaybeCloseStack on one track:
// the number of slices it would drop or find with a negative duration.
int perfetto_drops(std::vector<Slice> slices) {
  std::stable_sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
  });
  int drops = 0;
  std::vector<Slice> stack;
  for (const Slice& s : slices) {
    if (s.dur < 0) {
      ++drops;
      continue;
    }
    while (!stack.empty()) {
      const Slice& top = stack.back();
      const int64_t end = top.ts + top.dur;
      const bool ends_before = end < s.ts;
      const bool ends_same = end == s.ts && !(top.dur == 0 && s.dur == 0);
      if (!ends_before && !ends_same) break;
      stack.pop_back();
    }
    bool overlaps = false;
    for (const Slice& open : stack) {
      const int64_t end = open.ts + open.dur;
      overlaps = overlaps || (s.ts < end && s.ts + s.dur > end);
    }
    if (overlaps) {
      ++drops;
      continue;
    }
    stack.push_back(s);
  }
  return drops;
}

class ChromeTraceTest : public ::testing::Test {
 protected:
  Profile p = test::export_profile_fixture();
  std::string text = to_chrome_trace(p);
  rapidjson::Document doc = parse_json(text);

  std::vector<const rapidjson::Value*> events(const char* ph, const char* name = nullptr) const {
    std::vector<const rapidjson::Value*> out;
    for (const auto& ev : doc["traceEvents"].GetArray()) {
      if (std::string(ev["ph"].GetString()) != ph) continue;
      if (name != nullptr && std::string(ev["name"].GetString()) != name) continue;
      out.push_back(&ev);
    }
    return out;
  }
};

TEST_F(ChromeTraceTest, ObjectFormWithTraceEventsFirst) {
  EXPECT_TRUE(text.starts_with("{\"traceEvents\":["));
  EXPECT_STREQ(doc["displayTimeUnit"].GetString(), "ms");
  const auto& other = doc["otherData"];
  EXPECT_STREQ(other["clock"].GetString(), "CLOCK_MONOTONIC");
  EXPECT_EQ(other["session_start_ns"].GetInt64(), 1'000);
  EXPECT_EQ(other["session_end_ns"].GetInt64(), 21'000);
  EXPECT_EQ(other["ts_origin_ns"].GetInt64(), 1'000);
  EXPECT_STREQ(other["host"].GetString(), "box");
  EXPECT_STREQ(other["engine"].GetString(), "test");
  // "ts" right after "ph" in every event, and no arrays anywhere in events.
  for (const auto& ev : doc["traceEvents"].GetArray()) {
    auto it = ev.MemberBegin();
    EXPECT_STREQ(it->name.GetString(), "ph");
    ++it;
    EXPECT_STREQ(it->name.GetString(), "ts");
    EXPECT_TRUE(it->value.IsNumber());
  }
  const size_t end = text.find("],\"displayTimeUnit\"");
  EXPECT_EQ(text.substr(0, end).find('[', 16), std::string::npos);
}

TEST_F(ChromeTraceTest, ProcessAndThreadMetadata) {
  const auto process = events("M", "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ((*process[0])["pid"].GetUint(), 777u);
  EXPECT_STREQ((*process[0])["args"]["name"].GetString(), "mlflow-profiler, pid 777 on box");

  std::map<std::string, uint32_t> tid_of;
  for (const auto* ev : events("M", "thread_name")) {
    EXPECT_EQ((*ev)["pid"].GetUint(), 777u);
    tid_of[(*ev)["args"]["name"].GetString()] = (*ev)["tid"].GetUint();
  }
  ASSERT_EQ(tid_of.size(), 3u);
  EXPECT_EQ(tid_of["thread MainThread"], 4242u);  // the kernel tid of the thread
  EXPECT_EQ(tid_of["thread Worker"], 5000u);
  // The task runs on MainThread too, but its spans overlap MainThread's
  // without nesting: it gets a track of its own, on a tid no thread has,
  // named by its coroutine.
  EXPECT_GE(tid_of["thread MainThread, task 1: fetch"], 1u << 22);
  std::map<uint32_t, int> sort_index;
  for (const auto* ev : events("M", "thread_sort_index")) {
    sort_index[(*ev)["tid"].GetUint()] = (*ev)["args"]["sort_index"].GetInt();
  }
  EXPECT_EQ(sort_index[4242], 0);
  EXPECT_EQ(sort_index[5000], 2);
}

TEST_F(ChromeTraceTest, CompleteEventsInMicrosecondsWithNanosecondPrecision) {
  const auto predict = events("X", "predict");
  ASSERT_EQ(predict.size(), 1u);
  // 1'001 ns after the origin: "1.001" would read back as 1'000 ns through a double.
  const size_t at = text.find("\"name\":\"predict\"");
  const size_t start = text.rfind("{\"ph\":\"X\"", at);
  EXPECT_EQ(raw_number(text, start, "ts"), "1.0011");
  EXPECT_EQ(textual_ns(raw_number(text, start, "ts")), 1'001);
  EXPECT_EQ(double_ns(raw_number(text, start, "ts")), 1'001);
  EXPECT_EQ(double_ns(raw_number(text, start, "dur")), 17'999);
  EXPECT_EQ((*predict[0])["pid"].GetUint(), 777u);
  EXPECT_EQ((*predict[0])["tid"].GetUint(), 4242u);
  EXPECT_STREQ((*predict[0])["cat"].GetString(), "python");
  EXPECT_STREQ((*predict[0])["args"]["module"].GetString(), "app.model");
  EXPECT_STREQ((*predict[0])["args"]["file"].GetString(), "/app/model.py:10");
}

TEST_F(ChromeTraceTest, ArgsCarryIOFlagsAndLabels) {
  const auto pre = events("X", "preprocess");
  ASSERT_EQ(pre.size(), 1u);
  const auto& args = (*pre[0])["args"];
  EXPECT_STREQ(args["in"]["df"].GetString(),
               "(DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)");
  EXPECT_STREQ(args["out"].GetString(), "(ndarray, shape=(1000, 50))");
  EXPECT_FALSE(args.HasMember("flags"));

  const auto failed = events("X", "my label");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_STREQ((*failed[0])["args"]["flags"].GetString(), "exception, caught");
  EXPECT_STREQ((*failed[0])["args"]["function"].GetString(), "fail");
}

TEST_F(ChromeTraceTest, GeneratorsAreDrawnBySegment) {
  const auto produce = events("X", "produce");
  ASSERT_EQ(produce.size(), 3u);  // never one event for its 5us of wall time
  const std::vector<double> ts = {4.0, 6.5, 8.5}, dur = {1.0, 0.5, 0.5};
  for (size_t i = 0; i < 3; ++i) {
    const auto& ev = *produce[i];
    EXPECT_DOUBLE_EQ(ev["ts"].GetDouble(), ts[i]);
    EXPECT_DOUBLE_EQ(ev["dur"].GetDouble(), dur[i]);
    EXPECT_EQ(ev["args"]["segment"].GetString(), std::to_string(i + 1) + " of 3");
    EXPECT_STREQ(ev["args"]["wall"].GetString(), "5.00us");
    EXPECT_STREQ(ev["args"]["active"].GetString(), "2.00us");
    EXPECT_EQ(ev["args"]["resumes"].GetInt(), 2);
  }
}

TEST_F(ChromeTraceTest, PerfettoKeepsEverySlice) {
  const auto tracks = slices_by_tid(text);
  ASSERT_EQ(tracks.size(), 3u);
  size_t total = 0;
  for (const auto& [tid, slices] : tracks) {
    EXPECT_EQ(perfetto_drops(slices), 0) << "tid " << tid;
    total += slices.size();
  }
  EXPECT_EQ(total, p.spans.size() + 2);  // produce: 3 segments for 1 span
}

TEST_F(ChromeTraceTest, ActiveLanesCounter) {
  std::vector<std::pair<double, int>> series;
  for (const auto* ev : events("C", "active lanes")) {
    EXPECT_EQ((*ev)["pid"].GetUint(), 777u);
    series.emplace_back((*ev)["ts"].GetDouble(), (*ev)["args"]["count"].GetInt());
  }
  // MainThread from 1.001us, the task from 11us, Worker from 11.5us; the
  // task ends at 14us, Worker at 15us, MainThread at 19us.
  EXPECT_EQ(series, (std::vector<std::pair<double, int>>{
                        {1.0011, 1}, {11.0, 2}, {11.5, 3}, {14.0, 2}, {15.0, 1}, {19.0, 0}}));
}

TEST(ChromeTrace, NoCounterForOneLane) {
  const Profile p = test::random_profile(3, 50, 4, false);
  const rapidjson::Document doc = parse_json(to_chrome_trace(p));
  for (const auto& ev : doc["traceEvents"].GetArray()) EXPECT_STRNE(ev["ph"].GetString(), "C");
}

TEST(ChromeTrace, RandomCapturesImportWithoutDrops) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const Profile p = test::random_profile(seed, 400, 6, true);
    const std::string text = to_chrome_trace(p);
    parse_json(text);
    int64_t drawn_generator_time = 0, generator_active = 0;
    for (const auto& [tid, slices] : slices_by_tid(text)) {
      ASSERT_EQ(perfetto_drops(slices), 0) << "seed " << seed;
      for (const Slice& s : slices) {
        if (!s.args_segment.empty()) drawn_generator_time += s.dur;
      }
    }
    for (const Span& s : p.spans) {
      if (s.flags & kSpanGenerator) generator_active += s.active_ns;
    }
    // A generator's segments add up to its running time.
    EXPECT_EQ(drawn_generator_time, generator_active) << "seed " << seed;
  }
}

TEST(ChromeTrace, SameProfileSameBytes) {
  const Profile p = test::export_profile_fixture();
  EXPECT_EQ(to_chrome_trace(p), to_chrome_trace(p));
}

TEST(ChromeTrace, NamesAreEscaped) {
  Profile p;
  const uint32_t f = test::user_fn(p, "weird \"name\"\n\\");
  p.lanes.push_back(test::make_lane({test::call(0, f), test::ret(10)}));
  build_tree(p);
  const rapidjson::Document doc = parse_json(to_chrome_trace(p));
  bool found = false;
  for (const auto& ev : doc["traceEvents"].GetArray()) {
    if (std::string(ev["ph"].GetString()) == "X") {
      EXPECT_STREQ(ev["name"].GetString(), "weird \"name\"\n\\");
      EXPECT_EQ(ev["pid"].GetUint(), 1u);  // no pid in meta
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

// Complete events per (pid, tid) track, read as slices_by_tid does.
std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>> slices_by_track(
    const std::string& text) {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>> out;
  const rapidjson::Document doc = parse_json(text);
  size_t pos = 0;
  for (const auto& ev : doc["traceEvents"].GetArray()) {
    if (std::string(ev["ph"].GetString()) != "X") continue;
    pos = text.find("{\"ph\":\"X\"", pos);
    Slice s;
    s.ts = textual_ns(raw_number(text, pos, "ts"));
    s.dur = double_ns(raw_number(text, pos, "dur"));
    s.name = ev["name"].GetString();
    out[{ev["pid"].GetUint(), ev["tid"].GetUint()}].push_back(s);
    ++pos;
  }
  return out;
}

class ChromeKernelTest : public ::testing::Test {
 protected:
  Profile p = test::kernel_profile_fixture();
  std::string text = to_chrome_trace(p);
  rapidjson::Document doc = parse_json(text);

  std::vector<const rapidjson::Value*> events(const char* ph, const char* name) const {
    std::vector<const rapidjson::Value*> out;
    for (const auto& ev : doc["traceEvents"].GetArray()) {
      if (std::string(ev["ph"].GetString()) == ph && std::string(ev["name"].GetString()) == name) {
        out.push_back(&ev);
      }
    }
    return out;
  }
};

TEST_F(ChromeKernelTest, OffCpuIntervalsAreSlicesOnTheirThreadsTrack) {
  const auto blocked = events("X", "off-CPU (blocked)");
  ASSERT_EQ(blocked.size(), 3u);
  // In file order: preprocess's (tid 4242), work's (5000), helper's (6000).
  const auto& pre = *blocked[0];
  EXPECT_EQ(pre["pid"].GetUint(), 777u);
  EXPECT_EQ(pre["tid"].GetUint(), 4242u);
  EXPECT_DOUBLE_EQ(pre["ts"].GetDouble(), 2.2);  // 3'200 - 1'000 ns
  EXPECT_DOUBLE_EQ(pre["dur"].GetDouble(), 0.8);
  EXPECT_STREQ(pre["cat"].GetString(), "off_cpu");
  EXPECT_STREQ(pre["args"]["off_cpu"].GetString(), "0.80us");
  EXPECT_STREQ(pre["args"]["blocked"].GetString(), "0.70us");
  EXPECT_STREQ(pre["args"]["runq"].GetString(), "0.10us");
  EXPECT_EQ(pre["args"]["waker_tid"].GetUint64(), 5000u);
  EXPECT_STREQ(pre["args"]["waker"].GetString(), "Worker");
  EXPECT_STREQ(pre["args"]["counts_for"].GetString(), "preprocess");
  EXPECT_EQ((*blocked[1])["tid"].GetUint(), 5000u);
  EXPECT_STREQ((*blocked[1])["args"]["counts_for"].GetString(), "work");
  EXPECT_STREQ((*blocked[1])["args"]["waker"].GetString(), "MainThread");
  // The thread without a lane: its own track, counted for the span that started it.
  EXPECT_EQ((*blocked[2])["tid"].GetUint(), 6000u);
  EXPECT_STREQ((*blocked[2])["args"]["counts_for"].GetString(), "my label");

  const auto preempted = events("X", "off-CPU (preempted)");
  ASSERT_EQ(preempted.size(), 1u);
  EXPECT_EQ((*preempted[0])["tid"].GetUint(), 4242u);
  EXPECT_DOUBLE_EQ((*preempted[0])["dur"].GetDouble(), 0.5);
  EXPECT_FALSE((*preempted[0])["args"].HasMember("blocked"));
  EXPECT_STREQ((*preempted[0])["args"]["runq"].GetString(), "0.50us");
  EXPECT_EQ(doc["otherData"]["lost_kernel_events"].GetUint64(), 3u);
}

TEST_F(ChromeKernelTest, ThreadStartAndExitAreInstantsOnTheThreadsTrack) {
  const auto starts = events("i", "thread start");
  const auto exits = events("i", "thread exit");
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(exits.size(), 2u);
  const auto& helper = *starts[1];
  EXPECT_EQ(helper["tid"].GetUint(), 6000u);
  EXPECT_EQ(helper["pid"].GetUint(), 777u);
  EXPECT_STREQ(helper["s"].GetString(), "t");
  EXPECT_DOUBLE_EQ(helper["ts"].GetDouble(), 10.2);
  EXPECT_STREQ(helper["args"]["thread"].GetString(), "helper");
  EXPECT_EQ(helper["args"]["parent_tid"].GetUint64(), 4242u);
  EXPECT_STREQ(helper["args"]["started_under"].GetString(), "my label");
  EXPECT_EQ((*exits[1])["args"]["exit_code"].GetInt(), 3);
  EXPECT_DOUBLE_EQ((*exits[1])["ts"].GetDouble(), 10.4);
  EXPECT_STREQ((*starts[0])["args"]["started_under"].GetString(), "fetch");
  // The lane-less thread's track is named after its comm.
  bool named = false;
  for (const auto* ev : events("M", "thread_name")) {
    if ((*ev)["tid"].GetUint() == 6000u) {
      EXPECT_STREQ((*ev)["args"]["name"].GetString(), "thread helper");
      named = true;
    }
  }
  EXPECT_TRUE(named);
}

TEST_F(ChromeKernelTest, PerfettoKeepsEverySliceWithTheOffCpuOnes) {
  const auto tracks = slices_by_track(text);
  size_t off = 0;
  for (const auto& [track, slices] : tracks) {
    EXPECT_EQ(perfetto_drops(slices), 0) << "tid " << track.second;
    for (const Slice& s : slices) off += s.name.starts_with("off-CPU");
  }
  EXPECT_EQ(off, 4u);
}

TEST_F(ChromeKernelTest, AnInProcessProfileHasNoKernelEvents) {
  const std::string plain = to_chrome_trace(test::export_profile_fixture());
  EXPECT_EQ(plain.find("off-CPU"), std::string::npos);
  EXPECT_EQ(plain.find("thread start"), std::string::npos);
  EXPECT_EQ(plain.find("lost_kernel_events"), std::string::npos);
}

// The kernel fixture as process `pid`, its times shifted by `dt`.
Profile fixture_as(uint32_t pid, int64_t dt) {
  Profile p = test::kernel_profile_fixture();
  p.meta["pid"] = std::to_string(pid);
  p.start_ns += dt;
  p.end_ns += dt;
  for (Span& s : p.spans) {
    s.start_ns += dt;
    s.end_ns += dt;
  }
  for (Segment& seg : p.segments) {
    seg.start_ns += dt;
    seg.end_ns += dt;
  }
  for (OffCpuInterval& iv : p.kernel.off_cpu) {
    iv.pid = pid;
    iv.start_ns += dt;
    iv.wake_ns += dt;
    iv.end_ns += dt;
  }
  for (ThreadLifetime& t : p.kernel.threads) {
    t.pid = pid;
    t.start_ns += dt;
    t.end_ns += dt;
  }
  attribute_kernel(p);
  return p;
}

TEST(ChromeKernel, ProcessesAreNamedByTheLanesPid) {
  Profile m;
  append_profile(m, fixture_as(777, 0));
  append_profile(m, fixture_as(888, 0));  // the same tids, at the same times
  const std::string text = to_chrome_trace(m);
  const rapidjson::Document doc = parse_json(text);
  std::map<uint32_t, std::string> processes;
  std::set<uint32_t> predict_pids;
  for (const auto& ev : doc["traceEvents"].GetArray()) {
    const std::string name = ev["name"].GetString();
    if (name == "process_name") processes[ev["pid"].GetUint()] = ev["args"]["name"].GetString();
    if (name == "predict") {
      predict_pids.insert(ev["pid"].GetUint());
      EXPECT_EQ(ev["tid"].GetUint(), 4242u);
    }
  }
  EXPECT_EQ(processes, (std::map<uint32_t, std::string>{{777, "mlflow-profiler, pid 777 on box"},
                                                        {888, "mlflow-profiler, pid 888 on box"}}));
  EXPECT_EQ(predict_pids, (std::set<uint32_t>{777, 888}));
  const auto tracks = slices_by_track(text);
  for (const auto& [track, slices] : tracks) {
    EXPECT_EQ(perfetto_drops(slices), 0) << track.first << "/" << track.second;
  }
  EXPECT_EQ(tracks.count({888, 6000}), 1u);  // the helper thread of each
  EXPECT_EQ(tracks.count({777, 6000}), 1u);
}

TEST(ChromeKernel, SessionsOfOneThreadShareItsTrack) {
  Profile m;
  append_profile(m, fixture_as(777, 0));
  Profile later = fixture_as(777, 100'000);
  later.meta["session"] = "2";
  append_profile(m, later);
  const std::string text = to_chrome_trace(m);
  const rapidjson::Document doc = parse_json(text);
  int main_names = 0;
  for (const auto& ev : doc["traceEvents"].GetArray()) {
    const std::string name = ev["name"].GetString();
    if (name == "thread_name" && ev["tid"].GetUint() == 4242u) {
      ++main_names;
      EXPECT_STREQ(ev["args"]["name"].GetString(), "thread MainThread");
    }
  }
  EXPECT_EQ(main_names, 1);
  const auto tracks = slices_by_track(text);
  const auto& main = tracks.at({777, 4242});
  EXPECT_EQ(
      std::count_if(main.begin(), main.end(), [](const Slice& s) { return s.name == "predict"; }),
      2);
  for (const auto& [track, slices] : tracks) EXPECT_EQ(perfetto_drops(slices), 0);
}

TEST(ChromeKernel, RandomCapturesWithOffCpuIntervalsImportWithoutDrops) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE(seed);
    Profile p = test::random_profile(seed, 300, 6, true);
    p.kernel.present = true;
    std::mt19937 rng(seed);
    int64_t total = 0;
    for (int64_t t = 0; t < p.end_ns;) {
      t += 1 + static_cast<int64_t>(rng() % 15'000);
      const int64_t end = t + static_cast<int64_t>(rng() % 9'000);
      p.kernel.off_cpu.push_back(test::fixture_interval(4242, t, t, end, rng() % 2 == 0, 0));
      p.kernel.off_cpu.back().pid = 0;  // the profile's process
      total += end - t;
      t = end;
    }
    attribute_kernel(p);
    const std::string text = to_chrome_trace(p);
    int64_t drawn = 0;
    for (const auto& [track, slices] : slices_by_track(text)) {
      ASSERT_EQ(perfetto_drops(slices), 0);
      for (const Slice& s : slices) {
        if (s.name.starts_with("off-CPU")) drawn += s.dur;
      }
    }
    EXPECT_EQ(drawn, total);  // every interval drawn whole, in pieces
  }
}

}  // namespace
}  // namespace mlprof
