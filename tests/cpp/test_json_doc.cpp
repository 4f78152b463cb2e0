#include "formats/json_doc.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <vector>

#include "formats/json_read.h"
#include "json_parse.h"
#include "kernel_fixture.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::label;
using test::make_lane;
using test::ret;
using test::suspend;

using test::parse_json;

std::vector<std::string> string_array(const rapidjson::Value& v) {
  std::vector<std::string> out;
  for (const auto& s : v.GetArray()) out.emplace_back(s.GetString(), s.GetStringLength());
  return out;
}

class JsonDocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t predict =
        p.functions.add("predict", "__main__", "/app/model.py", 10, FunctionKind::kPython, true);
    const uint32_t len = test::c_fn(p, "len");
    const uint32_t enc = test::lib_fn(p, "encode", "tok.core");
    const uint32_t lbl = p.functions.strings().intern("my block");
    const uint32_t blk = p.functions.add("my block", "", "", 0, FunctionKind::kBlock, true);
    p.captured_depth = 2;
    p.start_ns = 1'234;
    p.end_ns = 5'678;
    p.stats.events_captured = 10;
    p.stats.events_skipped = 3;
    p.meta = {
        {"engine", "sys.monitoring"}, {"python", "3.12.1"}, {"pid", "4242"}, {"version", "99"}};
    // Tabular on purpose: one line per step of the call tree.
    // clang-format off
    Lane lane = make_lane({
        call(1'300, predict),                   // 0
        call(1'400, len, kEvCFunction), ret(1'500),
        call(1'600, enc),                       // 3
        label(lbl), call(1'700, blk, kEvBlock), ret(1'800, kEvException),
        ret(1'900),
        call(2'000, enc), suspend(2'100, 8),    // 8
        ret(5'600),
    });
    // clang-format on
    lane.thread_id = 1;
    lane.native_tid = 4242;
    lane.dropped = 2;
    p.lanes.push_back(std::move(lane));
    p.lanes.push_back(make_lane({call(1'350, enc), ret(1'360)}, "MainThread", 1, 0, 0));
    build_tree(p);
  }
  Profile p;
};

TEST_F(JsonDocTest, MetaStatsAndTables) {
  const rapidjson::Document doc = parse_json(to_json_document(p));
  const auto& meta = doc["meta"];
  EXPECT_STREQ(meta["format"].GetString(), "mlflow-profiler");
  EXPECT_EQ(meta["version"].GetInt(), kDocumentVersion);  // provenance cannot override it
  EXPECT_EQ(meta["captured_depth"].GetInt(), 2);
  EXPECT_TRUE(meta["view_depth"].IsNull());
  EXPECT_STREQ(meta["clock"].GetString(), "CLOCK_MONOTONIC");
  EXPECT_EQ(meta["start_ns"].GetInt64(), 1'234);
  EXPECT_EQ(meta["end_ns"].GetInt64(), 5'678);
  EXPECT_EQ(meta["duration_ns"].GetInt64(), 4'444);
  EXPECT_STREQ(meta["engine"].GetString(), "sys.monitoring");
  EXPECT_STREQ(meta["pid"].GetString(), "4242");
  EXPECT_EQ(meta.MemberCount(), 11u);

  const auto& stats = doc["stats"];
  EXPECT_EQ(stats["events_captured"].GetUint64(), 10u);
  EXPECT_EQ(stats["events_skipped"].GetUint64(), 3u);
  EXPECT_EQ(stats["unmatched_returns"].GetUint64(), 0u);

  const std::vector<std::string> strings = string_array(doc["strings"]);
  ASSERT_EQ(strings.size(), p.functions.strings().size());
  EXPECT_EQ(strings[0], "");
  for (uint32_t i = 0; i < strings.size(); ++i) EXPECT_EQ(strings[i], p.functions.strings().get(i));

  EXPECT_EQ(string_array(doc["function_fields"]),
            (std::vector<std::string>{"name", "module", "file", "line", "kind", "user_code"}));
  const auto& functions = doc["functions"].GetArray();
  ASSERT_EQ(functions.Size(), p.functions.size());
  const auto& f0 = functions[0].GetArray();
  EXPECT_EQ(strings[f0[0].GetUint()], "predict");
  EXPECT_EQ(strings[f0[1].GetUint()], "__main__");
  EXPECT_EQ(strings[f0[2].GetUint()], "/app/model.py");
  EXPECT_EQ(f0[3].GetInt(), 10);
  EXPECT_EQ(f0[4].GetUint(), 0u);
  EXPECT_EQ(f0[5].GetUint(), 1u);
  EXPECT_EQ(functions[1][4].GetUint(), 1u);  // C
  EXPECT_EQ(functions[1][5].GetUint(), 0u);
  EXPECT_EQ(functions[3][4].GetUint(), 2u);  // block

  const auto& lanes = doc["lanes"].GetArray();
  ASSERT_EQ(lanes.Size(), 2u);
  EXPECT_EQ(lanes[0]["thread_id"].GetUint64(), 1u);
  EXPECT_EQ(lanes[0]["native_tid"].GetUint64(), 4242u);
  EXPECT_STREQ(lanes[0]["thread_name"].GetString(), "MainThread");
  EXPECT_EQ(lanes[0]["task"].GetUint(), 0u);
  EXPECT_EQ(lanes[0]["parent_lane"].GetInt(), -1);
  EXPECT_EQ(lanes[0]["events"].GetUint64(), 11u);
  EXPECT_EQ(lanes[0]["dropped"].GetUint64(), 2u);
  EXPECT_FALSE(lanes[0]["truncated"].GetBool());
  EXPECT_EQ(lanes[1]["task"].GetUint(), 1u);
  EXPECT_EQ(lanes[1]["parent_lane"].GetInt(), 0);
  EXPECT_EQ(lanes[1]["parent_call"].GetUint(), 0u);
}

TEST_F(JsonDocTest, SpansMatchTheTreeFieldByField) {
  const rapidjson::Document doc = parse_json(to_json_document(p));
  EXPECT_EQ(
      string_array(doc["span_fields"]),
      (std::vector<std::string>{"parent", "function", "label", "lane", "depth", "flags", "start_ns",
                                "end_ns", "active_ns", "resumes", "waiting_ns", "resource"}));
  const auto& spans = doc["spans"].GetArray();
  ASSERT_EQ(spans.Size(), p.spans.size());
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    const auto& row = spans[static_cast<rapidjson::SizeType>(i)].GetArray();
    ASSERT_EQ(row.Size(), 12u);
    EXPECT_EQ(row[0].GetInt(), s.parent);
    EXPECT_EQ(row[1].GetUint(), s.function);
    EXPECT_EQ(row[2].GetUint(), s.label);
    EXPECT_EQ(row[3].GetUint(), s.lane);
    EXPECT_EQ(row[4].GetUint(), s.depth);
    EXPECT_EQ(row[5].GetUint(), s.flags);
    EXPECT_EQ(row[6].GetInt64(), s.start_ns);
    EXPECT_EQ(row[7].GetInt64(), s.end_ns);
    EXPECT_EQ(row[8].GetInt64(), s.active_ns);
    EXPECT_EQ(row[9].GetUint(), s.resumes);
    EXPECT_EQ(row[10].GetInt64(), s.waiting_ns);
    EXPECT_EQ(row[11].GetUint(), s.resource);
  }
  // Spot checks of what the builder made of the events.
  EXPECT_EQ(spans[0][5].GetUint(), static_cast<uint32_t>(kSpanChildrenDropped));
  EXPECT_EQ(spans[3][5].GetUint(), kSpanBlock | kSpanLabelled | kSpanException | kSpanCaught);
  EXPECT_EQ(spans[4][5].GetUint(), kSpanGenerator | kSpanSuspendedAtEnd);
  EXPECT_EQ(spans[5][0].GetInt(), 0);  // the task's span under predict
  EXPECT_EQ(spans[5][3].GetUint(), 1u);
}

TEST_F(JsonDocTest, DepthViewDropsDeeperSpansAndRenumbers) {
  ViewOptions opts;
  opts.depth = 1;
  const rapidjson::Document doc = parse_json(to_json_document(p, opts));
  EXPECT_EQ(doc["meta"]["view_depth"].GetInt(), 1);
  EXPECT_EQ(doc["meta"]["captured_depth"].GetInt(), 2);
  std::vector<int32_t> kept;
  for (size_t i = 0; i < p.spans.size(); ++i) {
    if (p.spans[i].depth <= 1) kept.push_back(static_cast<int32_t>(i));
  }
  ASSERT_LT(kept.size(), p.spans.size());
  const auto& spans = doc["spans"].GetArray();
  ASSERT_EQ(spans.Size(), kept.size());
  for (size_t j = 0; j < kept.size(); ++j) {
    const Span& s = p.spans[kept[j]];
    const auto& row = spans[static_cast<rapidjson::SizeType>(j)].GetArray();
    EXPECT_LE(row[4].GetUint(), 1u);
    EXPECT_EQ(row[6].GetInt64(), s.start_ns);
    const int32_t parent = row[0].GetInt();
    if (s.parent < 0) {
      EXPECT_EQ(parent, -1);
    } else {
      ASSERT_GE(parent, 0);
      ASSERT_LT(parent, static_cast<int32_t>(j));
      EXPECT_EQ(kept[parent], s.parent);
    }
  }
  // Strings, functions and lanes stay whole.
  EXPECT_EQ(doc["strings"].Size(), p.functions.strings().size());
  EXPECT_EQ(doc["functions"].Size(), p.functions.size());
  EXPECT_EQ(doc["lanes"].Size(), 2u);

  opts.depth = 0;
  const rapidjson::Document roots = parse_json(to_json_document(p, opts));
  ASSERT_EQ(roots["spans"].Size(), 1u);  // predict; the task's span hangs under it
  EXPECT_EQ(roots["spans"][0][0].GetInt(), -1);
}

TEST(JsonDoc, RenumberingOnARandomDeepTree) {
  const Profile p = test::random_profile(7, 800, 8, true);
  for (int k = 0; k <= p.max_depth(); ++k) {
    ViewOptions opts;
    opts.depth = k;
    const rapidjson::Document doc = parse_json(to_json_document(p, opts));
    std::vector<int32_t> kept;
    std::vector<int32_t> renumbered(p.spans.size(), -1);
    for (size_t i = 0; i < p.spans.size(); ++i) {
      if (static_cast<int>(p.spans[i].depth) <= k) {
        renumbered[i] = static_cast<int32_t>(kept.size());
        kept.push_back(static_cast<int32_t>(i));
      }
    }
    const auto& spans = doc["spans"].GetArray();
    ASSERT_EQ(spans.Size(), kept.size()) << k;
    for (size_t j = 0; j < kept.size(); ++j) {
      const Span& s = p.spans[kept[j]];
      const int32_t want = s.parent < 0 ? -1 : renumbered[s.parent];
      ASSERT_EQ(spans[static_cast<rapidjson::SizeType>(j)][0].GetInt(), want);
      ASSERT_EQ(spans[static_cast<rapidjson::SizeType>(j)][7].GetInt64(), s.end_ns);
    }
  }
}

TEST(JsonDoc, StringsAreEscaped) {
  Profile p;
  const std::string tricky = "say \"hi\"\\\n\ttab \x01 caf\xc3\xa9 \xe2\x9c\x93";
  const uint32_t f =
      p.functions.add(tricky, "m", "C:\\app\\model.py", 1, FunctionKind::kPython, true);
  p.meta["host"] = "a\"b";
  p.lanes.push_back(make_lane({call(0, f), ret(1)}, "Thread \"1\""));
  build_tree(p);
  const rapidjson::Document doc = parse_json(to_json_document(p));
  const std::vector<std::string> strings = string_array(doc["strings"]);
  EXPECT_EQ(strings[p.functions.get(f).name], tricky);
  EXPECT_EQ(strings[p.functions.get(f).file], "C:\\app\\model.py");
  EXPECT_STREQ(doc["meta"]["host"].GetString(), "a\"b");
  EXPECT_STREQ(doc["lanes"][0]["thread_name"].GetString(), "Thread \"1\"");
}

TEST(JsonDoc, EmptyProfileAndUnlimitedCapture) {
  Profile p;
  p.captured_depth = -1;
  build_tree(p);
  const rapidjson::Document doc = parse_json(to_json_document(p));
  EXPECT_EQ(doc["meta"]["captured_depth"].GetInt(), -1);
  EXPECT_EQ(doc["spans"].Size(), 0u);
  EXPECT_EQ(doc["lanes"].Size(), 0u);
  EXPECT_EQ(doc["functions"].Size(), 0u);
  EXPECT_EQ(string_array(doc["strings"]), (std::vector<std::string>{""}));
}

TEST_F(JsonDocTest, AnInProcessDocumentHasNoKernelSectionsAndNoLanePids) {
  const rapidjson::Document doc = parse_json(to_json_document(p));
  EXPECT_FALSE(doc.HasMember("kernel"));
  EXPECT_FALSE(doc.HasMember("span_values"));
  EXPECT_FALSE(doc.HasMember("span_value_fields"));
  EXPECT_FALSE(doc["lanes"][0].HasMember("pid"));
  EXPECT_FALSE(doc["lanes"][0].HasMember("session"));
}

// The value of `type` for span `span` in the long-form rows; -1 when absent.
int64_t span_value(const rapidjson::Value& rows, int span, const char* type, const char* unit) {
  int64_t found = -1;
  for (const auto& r : rows.GetArray()) {
    if (r[0].GetInt() != span || std::string(r[1].GetString()) != type) continue;
    EXPECT_STREQ(r[2].GetString(), unit) << type;
    EXPECT_EQ(found, -1) << "twice: " << type;
    found = r[3].GetInt64();
  }
  return found;
}

TEST(JsonDocKernel, SpanValuesAreLongFormWithUnits) {
  Profile p = test::kernel_profile_fixture();
  p.lanes[0].pid = 777;
  p.lanes[0].session = 12;
  const rapidjson::Document doc = parse_json(to_json_document(p));
  EXPECT_EQ(doc["meta"]["version"].GetInt(), 2);
  EXPECT_EQ(doc["lanes"][0]["pid"].GetUint(), 777u);
  EXPECT_EQ(doc["lanes"][0]["session"].GetUint64(), 12u);
  EXPECT_FALSE(doc["lanes"][1].HasMember("pid"));
  EXPECT_EQ(string_array(doc["span_value_fields"]),
            (std::vector<std::string>{"span", "type", "unit", "value"}));
  const rapidjson::Value& v = doc["span_values"];
  EXPECT_EQ(span_value(v, 1, "cpu", "ns"), 700);
  EXPECT_EQ(span_value(v, 1, "off_cpu", "ns"), 800);
  EXPECT_EQ(span_value(v, 1, "blocked", "ns"), 700);
  EXPECT_EQ(span_value(v, 1, "runq", "ns"), 100);
  EXPECT_EQ(span_value(v, 1, "voluntary_switches", "count"), 1);
  EXPECT_EQ(span_value(v, 1, "involuntary_switches", "count"), -1);  // 0: not written
  EXPECT_EQ(span_value(v, 1, "waker", "tid"), 5000);
  EXPECT_EQ(span_value(v, 1, "waker_blocked", "ns"), 700);
  EXPECT_EQ(span_value(v, 0, "off_cpu", "ns"), 3'000);
  EXPECT_EQ(span_value(v, 0, "cpu", "ns"), 16'699);
  EXPECT_EQ(span_value(v, 0, "involuntary_switches", "count"), 1);
  EXPECT_EQ(span_value(v, 3, "off_cpu", "ns"), -1);
  // Its own thread apart: predict's 3'000 less the worker's 1'600 and the
  // helper's 100; "my label" started the helper and has none of its own.
  EXPECT_EQ(span_value(v, 0, "own_off_cpu", "ns"), 1'300);
  EXPECT_EQ(span_value(v, 0, "own_blocked", "ns"), 700);
  EXPECT_EQ(span_value(v, 0, "own_runq", "ns"), 600);
  EXPECT_EQ(span_value(v, 4, "off_cpu", "ns"), 100);
  EXPECT_EQ(span_value(v, 4, "own_off_cpu", "ns"), -1);
  EXPECT_EQ(span_value(v, 0, "waker_kind", "kind"), -1);  // a task

  const rapidjson::Value& k = doc["kernel"];
  EXPECT_EQ(k["lost_events"].GetUint64(), 3u);
  EXPECT_EQ(string_array(k["off_cpu_fields"]),
            (std::vector<std::string>{"tid", "pid", "start_ns", "wake_ns", "end_ns", "blocked",
                                      "waker_tid", "prev_state", "syscall", "waker_kind",
                                      "waker_name", "wait"}));
  ASSERT_EQ(k["off_cpu"].Size(), 4u);
  EXPECT_EQ(k["off_cpu"][0][8].GetInt(), -1);
  EXPECT_STREQ(k["off_cpu"][0][9].GetString(), "task");
  EXPECT_STREQ(k["off_cpu"][0][10].GetString(), "");
  EXPECT_STREQ(k["off_cpu"][0][11].GetString(), "");  // not a futex wait
  // Waits: the own thread's blocked time by syscall and state (the fixture's
  // syscalls are not known: -1, "").
  EXPECT_EQ(string_array(k["wait_fields"]),
            (std::vector<std::string>{"span", "syscall", "syscall_name", "state", "blocked_ns",
                                      "count", "wait", "waker", "waker_ns"}));
  ASSERT_GE(k["waits"].Size(), 1u);
  const auto& w = k["waits"][0];
  EXPECT_EQ(w[0].GetInt(), 0);
  EXPECT_EQ(w[1].GetInt(), -1);
  EXPECT_STREQ(w[2].GetString(), "");
  EXPECT_STREQ(w[3].GetString(), "S");
  EXPECT_EQ(w[4].GetInt64(), 700);
  EXPECT_EQ(w[5].GetUint(), 1u);
  const auto& iv = k["off_cpu"][0];
  EXPECT_EQ(iv[0].GetUint64(), 4242u);
  EXPECT_EQ(iv[1].GetUint(), 777u);
  EXPECT_EQ(iv[2].GetInt64(), 3'200);
  EXPECT_EQ(iv[3].GetInt64(), 3'900);
  EXPECT_EQ(iv[4].GetInt64(), 4'000);
  EXPECT_TRUE(iv[5].GetBool());
  EXPECT_EQ(iv[6].GetUint64(), 5000u);
  EXPECT_EQ(iv[7].GetUint(), 1u);
  EXPECT_EQ(string_array(k["thread_fields"]),
            (std::vector<std::string>{"tid", "pid", "parent_tid", "start_ns", "end_ns", "name",
                                      "started_under", "exit_code"}));
  ASSERT_EQ(k["threads"].Size(), 2u);
  const auto& helper = k["threads"][1];
  EXPECT_EQ(helper[0].GetUint64(), 6000u);
  EXPECT_EQ(helper[2].GetUint64(), 4242u);
  EXPECT_STREQ(helper[5].GetString(), "helper");
  EXPECT_EQ(helper[6].GetInt(), 4);
  EXPECT_EQ(helper[7].GetInt(), 3);
}

TEST(JsonDocKernel, AViewKeepsTheValuesOfItsSpansAndMovesThreadsUp) {
  const Profile p = test::kernel_profile_fixture();
  ViewOptions opts;
  opts.depth = 0;
  const rapidjson::Document doc = parse_json(to_json_document(p, opts));
  ASSERT_EQ(doc["spans"].Size(), 1u);
  for (const auto& r : doc["span_values"].GetArray()) EXPECT_EQ(r[0].GetInt(), 0);
  EXPECT_EQ(span_value(doc["span_values"], 0, "off_cpu", "ns"), 3'000);
  // "helper" was started under "my label" (depth 1): predict stands for it.
  EXPECT_EQ(doc["kernel"]["threads"][1][6].GetInt(), 0);
  EXPECT_EQ(doc["kernel"]["off_cpu"].Size(), 4u);  // the intervals are raw data: all kept
}

// --- values measured in process (cpu_time, alloc_bytes) ----------------------

TEST(JsonDocValues, WrittenLongFormAndReadBackToTheSameTable) {
  Profile p;
  p.end_ns = 100;
  const uint32_t a = test::user_fn(p, "a"), b = test::user_fn(p, "b");
  p.lanes.push_back(make_lane({call(0, a), call(10, b), ret(20), ret(30)}));
  p.lanes[0].readings = {{0, ValueKind::kCpuNs, 1000}, {0, ValueKind::kAllocBytes, 0},
                         {1, ValueKind::kCpuNs, 1010}, {1, ValueKind::kAllocBytes, 0},
                         {2, ValueKind::kCpuNs, 1015}, {2, ValueKind::kAllocBytes, 0},
                         {3, ValueKind::kCpuNs, 1030}, {3, ValueKind::kAllocBytes, 4096}};
  build_tree(p);
  const std::string text = to_json_document(p);
  const rapidjson::Document doc = parse_json(text);
  EXPECT_FALSE(doc.HasMember("kernel"));
  const rapidjson::Value& v = doc["span_values"];
  EXPECT_EQ(span_value(v, 0, "cpu", "ns"), 30);
  EXPECT_EQ(span_value(v, 0, "alloc", "bytes"), 4096);
  EXPECT_EQ(span_value(v, 1, "cpu", "ns"), 5);
  EXPECT_EQ(span_value(v, 1, "alloc", "bytes"), 0);  // a value of 0 is written: it was taken
  Result<Profile> back = read_json_document(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().values, p.values);
  EXPECT_FALSE(back.value().kernel.present);
  EXPECT_TRUE(back.value().kernel.spans.empty());
  // A view keeps the values of the spans it keeps.
  ViewOptions shallow;
  shallow.depth = 0;
  const rapidjson::Document view = parse_json(to_json_document(p, shallow));
  EXPECT_EQ(view["span_values"].Size(), 2u);
  EXPECT_EQ(span_value(view["span_values"], 0, "alloc", "bytes"), 4096);
}

TEST(JsonDocValues, WithKernelDataTheAgentsCpuWinsAndAllocStays) {
  Profile p = test::kernel_profile_fixture();
  p.values = {{0, ValueKind::kCpuNs, 1}, {0, ValueKind::kAllocBytes, 77}};
  const std::string text = to_json_document(p);
  const rapidjson::Document doc = parse_json(text);
  EXPECT_EQ(span_value(doc["span_values"], 0, "cpu", "ns"), 16'699);  // the agent's, once
  EXPECT_EQ(span_value(doc["span_values"], 0, "alloc", "bytes"), 77);
  Result<Profile> back = read_json_document(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().kernel.spans.at(0).on_cpu_ns, 16'699);
  EXPECT_EQ(back.value().values, (std::vector<SpanValue>{{0, ValueKind::kAllocBytes, 77}}));
}

}  // namespace
}  // namespace mlprof
