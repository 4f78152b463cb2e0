#include "formats/json_read.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/export.h"
#include "formats/json_doc.h"
#include "kernel_fixture.h"
#include "profile_builder.h"
#include "render/render_text.h"
#include "sanitized.h"
#include "util/file_io.h"
#include "views/merge.h"

namespace mlprof {
namespace {

using test::call;
using test::label;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

// A capture with everything the document holds: a main lane with a C call, a
// generator consumed in segments, a profile_span label and a profile_block,
// an exception, I/O summaries (arguments and returns, shapes with unknown and
// no dimensions), drops; a worker thread and an asyncio task adopted under
// predict; a truncated thread with a span open at the end.
Profile rich_profile() {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t preprocess = test::user_fn(p, "preprocess");
  const uint32_t batches = test::user_fn(p, "batches");
  const uint32_t work = test::user_fn(p, "work", "app.workers");
  const uint32_t len = test::c_fn(p, "len");
  const uint32_t encode = test::lib_fn(p, "encode", "tok.core");
  const uint32_t transform =
      test::lib_fn(p, "StandardScaler.transform", "sklearn.preprocessing._data");
  const uint32_t tokenize = p.functions.strings().intern("tokenize");
  const uint32_t block_label = p.functions.strings().intern("post-process");
  const uint32_t block = p.functions.add("post-process", "", "", 0, FunctionKind::kBlock, true);
  p.captured_depth = 3;
  p.start_ns = 50;
  p.end_ns = 1'000;
  p.stats.events_captured = 31;
  p.stats.events_skipped = 12;
  p.meta = {{"engine", "PyEval_SetProfile"},
            {"python", "3.11.9"},
            {"pid", "4242"},
            {"host", "box\x01\t"}};  // escaped as \u0001 and \t

  // clang-format off
  Lane main_lane = make_lane({
      call(100, predict),                          // 0
      call(110, preprocess),                       // 1
      call(120, len, kEvCFunction), ret(130),      // 2, 3
      call(132, transform), ret(138),              // 4, 5
      ret(140),                                    // 6
      call(150, batches),                          // 7: a generator
      suspend(160, 7),                             // 8
      label(tokenize), call(170, encode),          // 9, 10
      ret(180, kEvException),                      // 11
      resume(190, 7), suspend(200, 7),             // 12, 13
      label(block_label), call(210, block, kEvBlock), ret(220),  // 14-16
      resume(230, 7), ret(240),                    // 17, 18
      ret(900),                                    // 19
  });
  // clang-format on
  main_lane.dropped = 3;
  IOSummary df;
  df.type_name = "pandas.core.frame.DataFrame";
  df.has_shape = true;
  df.shape = {1000, 50};
  df.dtype = "float64,object";
  df.size_bytes = 400'000;
  IOSummary out;
  out.type_name = "numpy.ndarray";
  out.has_shape = true;
  out.shape = {-1, 3};
  out.dtype = "int64";
  out.size_bytes = 24'000;
  out.device = "cpu";
  IOSummary scalar;
  scalar.type_name = "numpy.float64";
  scalar.has_shape = true;  // 0-d: a shape with no dimensions
  scalar.repr_short = "0.5";
  IOSummary text;
  text.type_name = "str";
  text.length = 5;
  text.repr_short = "'h\xc3\xa9llo'";
  IOSummary none;
  none.type_name = "NoneType";
  main_lane.io = {{0, IORole::kArgument, "df", df},
                  {0, IORole::kArgument, "threshold", scalar},
                  {0, IORole::kReturn, "", out},
                  {10, IORole::kArgument, "text", text},
                  {7, IORole::kReturn, "", none}};
  p.lanes.push_back(std::move(main_lane));

  Lane worker = make_lane({call(300, work), call(310, len, kEvCFunction), ret(320), ret(400)},
                          "Worker-1", 0, 0, 0);
  worker.thread_id = 2;
  worker.native_tid = 4243;
  p.lanes.push_back(std::move(worker));

  // An asyncio task of the main thread: a coroutine that awaits once.
  p.lanes.push_back(make_lane({call(125, work), suspend(135, 0), resume(500, 0), ret(600)},
                              "MainThread", 1, 0, 0));

  Lane straggler = make_lane({call(700, work), call(710, encode)}, "Straggler");
  straggler.thread_id = 3;
  straggler.native_tid = 4244;
  straggler.truncated = true;
  p.lanes.push_back(std::move(straggler));
  build_tree(p);
  return p;
}

std::vector<ViewOptions> view_options() {
  std::vector<ViewOptions> out;
  out.emplace_back();
  for (const int depth : {0, 1, 2}) {
    ViewOptions o;
    o.depth = depth;
    out.push_back(o);
  }
  ViewOptions c_calls;
  c_calls.show_c_calls = true;
  out.push_back(c_calls);
  ViewOptions collapsed;
  collapsed.collapse_frameworks = true;
  out.push_back(collapsed);
  ViewOptions collapsed_user = collapsed;
  collapsed_user.user_modules = {"tok"};
  collapsed_user.show_c_calls = true;
  collapsed_user.depth = 2;
  out.push_back(collapsed_user);
  return out;
}

void expect_same_tree(const Profile& a, const Profile& b) {
  ASSERT_EQ(a.spans.size(), b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) {
    const Span& x = a.spans[i];
    const Span& y = b.spans[i];
    SCOPED_TRACE("span " + std::to_string(i));
    EXPECT_EQ(x.parent, y.parent);
    EXPECT_EQ(x.function, y.function);
    EXPECT_EQ(x.label, y.label);
    EXPECT_EQ(x.lane, y.lane);
    EXPECT_EQ(x.depth, y.depth);
    EXPECT_EQ(x.flags, y.flags);
    EXPECT_EQ(x.start_ns, y.start_ns);
    EXPECT_EQ(x.end_ns, y.end_ns);
    EXPECT_EQ(x.active_ns, y.active_ns);
    EXPECT_EQ(x.resumes, y.resumes);
    EXPECT_EQ(x.first_child, y.first_child);
    EXPECT_EQ(x.next_sibling, y.next_sibling);
  }
  EXPECT_EQ(a.roots, b.roots);
  EXPECT_EQ(a.segments, b.segments);
  EXPECT_EQ(a.io, b.io);
  ASSERT_EQ(a.lanes.size(), b.lanes.size());
  for (size_t i = 0; i < a.lanes.size(); ++i) {
    EXPECT_EQ(a.lanes[i].recorded, b.lanes[i].recorded);
    EXPECT_EQ(a.lanes[i].thread_name, b.lanes[i].thread_name);
    EXPECT_EQ(a.lanes[i].parent_lane, b.lanes[i].parent_lane);
    EXPECT_EQ(a.lanes[i].dropped, b.lanes[i].dropped);
    EXPECT_EQ(a.lanes[i].truncated, b.lanes[i].truncated);
  }
  EXPECT_EQ(a.meta, b.meta);
  EXPECT_EQ(a.captured_depth, b.captured_depth);
  EXPECT_EQ(a.functions.size(), b.functions.size());
  EXPECT_EQ(a.functions.strings().size(), b.functions.strings().size());
}

// The round-trip property: the document of the read profile is the same
// bytes, and every view renders the same text.
void expect_round_trip(const Profile& p, bool gzip) {
  const std::string doc = to_json_document(p);
  Result<Profile> back = read_json_document(gzip ? gzip_compress(doc) : doc);
  ASSERT_TRUE(back.ok()) << back.error().message;
  const Profile& q = back.value();
  EXPECT_EQ(to_json_document(q), doc);
  for (const ViewOptions& o : view_options()) {
    EXPECT_EQ(render_text(q, o), render_text(p, o)) << "depth " << o.depth;
  }
  expect_same_tree(p, q);
}

TEST(JsonRead, RichProfileRoundTrips) {
  const Profile p = rich_profile();
  // The fixture has what it claims to have.
  uint32_t all_flags = 0;
  for (const Span& s : p.spans) all_flags |= s.flags;
  for (const uint32_t f : {kSpanException, kSpanOpenAtEnd, kSpanChildrenDropped, kSpanCFunction,
                           kSpanBlock, kSpanLabelled, kSpanGenerator, kSpanTruncated}) {
    EXPECT_TRUE(all_flags & f) << f;
  }
  EXPECT_FALSE(p.segments.empty());
  EXPECT_EQ(p.io.size(), 5u);
  expect_round_trip(p, false);
  expect_round_trip(p, true);
}

TEST(JsonRead, RandomProfilesRoundTrip) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Profile p = test::random_profile(seed, 400, 6, seed % 3 != 0);
    p.meta["engine"] = "sys.monitoring";
    expect_round_trip(p, seed % 2 == 0);
  }
}

TEST(JsonRead, EmptyProfileRoundTrips) {
  Profile p;
  p.captured_depth = -1;
  build_tree(p);
  expect_round_trip(p, false);
}

std::string serialize(const rapidjson::Document& doc) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  doc.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

struct CorruptCase {
  const char* name;
  std::function<void(rapidjson::Document&)> edit;
  const char* message;  // expected part of the message
};

void expect_same_kernel(const Profile& a, const Profile& b) {
  EXPECT_EQ(a.kernel.present, b.kernel.present);
  EXPECT_EQ(a.kernel.lost_events, b.kernel.lost_events);
  ASSERT_EQ(a.kernel.off_cpu.size(), b.kernel.off_cpu.size());
  for (size_t i = 0; i < a.kernel.off_cpu.size(); ++i) {
    const OffCpuInterval& x = a.kernel.off_cpu[i];
    const OffCpuInterval& y = b.kernel.off_cpu[i];
    SCOPED_TRACE("interval " + std::to_string(i));
    EXPECT_EQ(x.tid, y.tid);
    EXPECT_EQ(x.pid, y.pid);
    EXPECT_EQ(x.start_ns, y.start_ns);
    EXPECT_EQ(x.wake_ns, y.wake_ns);
    EXPECT_EQ(x.end_ns, y.end_ns);
    EXPECT_EQ(x.blocked, y.blocked);
    EXPECT_EQ(x.waker_tid, y.waker_tid);
    EXPECT_EQ(x.prev_state, y.prev_state);
  }
  ASSERT_EQ(a.kernel.threads.size(), b.kernel.threads.size());
  for (size_t i = 0; i < a.kernel.threads.size(); ++i) {
    const ThreadLifetime& x = a.kernel.threads[i];
    const ThreadLifetime& y = b.kernel.threads[i];
    SCOPED_TRACE("thread " + std::to_string(i));
    EXPECT_EQ(x.tid, y.tid);
    EXPECT_EQ(x.pid, y.pid);
    EXPECT_EQ(x.parent_tid, y.parent_tid);
    EXPECT_EQ(x.start_ns, y.start_ns);
    EXPECT_EQ(x.end_ns, y.end_ns);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.started_under, y.started_under);
    EXPECT_EQ(x.exit_code, y.exit_code);
  }
  ASSERT_EQ(a.kernel.spans.size(), b.kernel.spans.size());
  for (size_t i = 0; i < a.kernel.spans.size(); ++i) {
    const SpanKernel& x = a.kernel.spans[i];
    const SpanKernel& y = b.kernel.spans[i];
    SCOPED_TRACE("span " + std::to_string(i));
    EXPECT_EQ(x.on_cpu_ns, y.on_cpu_ns);
    EXPECT_EQ(x.off_cpu_ns, y.off_cpu_ns);
    EXPECT_EQ(x.blocked_ns, y.blocked_ns);
    EXPECT_EQ(x.runq_ns, y.runq_ns);
    EXPECT_EQ(x.voluntary_switches, y.voluntary_switches);
    EXPECT_EQ(x.involuntary_switches, y.involuntary_switches);
    EXPECT_EQ(x.top_waker_tid, y.top_waker_tid);
    EXPECT_EQ(x.top_waker_ns, y.top_waker_ns);
  }
  ASSERT_EQ(a.lanes.size(), b.lanes.size());
  for (size_t i = 0; i < a.lanes.size(); ++i) {
    EXPECT_EQ(a.lanes[i].pid, b.lanes[i].pid);
    EXPECT_EQ(a.lanes[i].session, b.lanes[i].session);
  }
}

// The agent's profile: kernel data, lanes of two processes and sessions.
Profile agent_profile() {
  Profile p = test::kernel_profile_fixture();
  for (Lane& lane : p.lanes) {
    lane.pid = 777;
    lane.session = 12;
  }
  p.lanes[2].session = 0xFFFF'FFFF'FFFFull;  // any uint64
  return p;
}

TEST(JsonRead, KernelDataAndLaneProvenanceRoundTrip) {
  const Profile p = agent_profile();
  ASSERT_FALSE(p.kernel.spans.empty());
  expect_round_trip(p, false);
  expect_round_trip(p, true);
  Result<Profile> back = read_json_document(to_json_document(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_kernel(p, back.value());
}

TEST(JsonRead, AKernelProfileWithoutFiguresReadsAsPresentWithZeros) {
  Profile p = test::kernel_profile_fixture();
  p.kernel.spans.clear();  // not attributed: no rows
  Result<Profile> back = read_json_document(to_json_document(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back.value().kernel.present);
  ASSERT_EQ(back.value().kernel.spans.size(), p.spans.size());
  EXPECT_EQ(back.value().kernel.spans[0].off_cpu_ns, 0);
  EXPECT_EQ(back.value().kernel.off_cpu.size(), 4u);
}

TEST(JsonRead, AnInProcessDocumentReadsWithoutKernelData) {
  Result<Profile> back = read_json_document(to_json_document(rich_profile()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_FALSE(back.value().kernel.present);
  EXPECT_TRUE(back.value().kernel.spans.empty());
  EXPECT_TRUE(back.value().kernel.off_cpu.empty());
  for (const Lane& lane : back.value().lanes) EXPECT_EQ(lane.pid, 0u);
}

std::string edited_agent(const std::function<void(rapidjson::Document&)>& edit) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(to_json_document(agent_profile()).c_str());
  edit(doc);
  return serialize(doc);
}

TEST(JsonRead, SpanValuesOfKindsItDoesNotKnowAreSkipped) {
  const std::string doc = edited_agent([](rapidjson::Document& d) {
    rapidjson::Value row(rapidjson::kArrayType);
    auto& a = d.GetAllocator();
    row.PushBack(0, a).PushBack("alloc", a).PushBack("bytes", a).PushBack(4096, a);
    d["span_values"].PushBack(row, a);
  });
  Result<Profile> back = read_json_document(doc);
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_kernel(agent_profile(), back.value());
}

TEST(JsonRead, CorruptKernelDataNamesWhatAndWhere) {
  // Rows of span_values in the fixture's order: span 0's first.
  const std::vector<CorruptCase> cases = {
      {"unit", [](auto& d) { d["span_values"][0][2].SetString("ms"); },
       "span_values[0].unit: \"ms\" for \"cpu\", expected \"ns\""},
      {"repeated",
       [](auto& d) {
         rapidjson::Value copy(d["span_values"][0], d.GetAllocator());
         d["span_values"].PushBack(copy, d.GetAllocator());
       },
       "repeats \"cpu\" of span 0"},
      {"span out of range", [](auto& d) { d["span_values"][0][0].SetInt(99); },
       "span_values[0].span: id 99 is out of range"},
      {"negative value", [](auto& d) { d["span_values"][0][3].SetInt(-5); },
       "span_values[0].value: expected a non-negative integer"},
      {"count too large",
       [](auto& d) {
         for (auto& r : d["span_values"].GetArray()) {
           if (std::string(r[1].GetString()) == "voluntary_switches") r[3].SetUint64(1ull << 33);
         }
       },
       "is too large for \"voluntary_switches\""},
      {"kernel not an object", [](auto& d) { d["kernel"].SetArray(); },
       "kernel: expected an object, found an array"},
      {"lost events missing", [](auto& d) { d["kernel"].RemoveMember("lost_events"); },
       "kernel.lost_events: missing"},
      {"off_cpu column", [](auto& d) { d["kernel"]["off_cpu_fields"][2].SetString("begin"); },
       "kernel.off_cpu_fields: no \"start_ns\" column"},
      {"off_cpu row", [](auto& d) { d["kernel"]["off_cpu"][1].PopBack(); },
       "kernel.off_cpu[1]: has 11 cells, the header names 12"},
      {"unknown wait object", [](auto& d) { d["kernel"]["off_cpu"][0][11].SetString("mutex"); },
       "kernel.off_cpu[0].wait: \"mutex\" is not a wait object"},
      {"unknown waker kind", [](auto& d) { d["kernel"]["off_cpu"][0][9].SetString("ghost"); },
       "kernel.off_cpu[0].waker_kind: \"ghost\" is not a waker kind"},
      {"wait row", [](auto& d) { d["kernel"]["waits"][0].PopBack(); },
       "kernel.waits[0]: has 8 cells, the header names 9"},
      {"wait state", [](auto& d) { d["kernel"]["waits"][0][3].SetString("DS"); },
       "kernel.waits[0].state: not one letter"},
      {"interval backwards", [](auto& d) { d["kernel"]["off_cpu"][0][4].SetInt(0); },
       "kernel.off_cpu[0]: ends before it starts"},
      {"blocked not a bool", [](auto& d) { d["kernel"]["off_cpu"][0][5].SetInt(1); },
       "kernel.off_cpu[0].blocked: expected true or false"},
      {"started_under", [](auto& d) { d["kernel"]["threads"][1][6].SetInt(50); },
       "kernel.threads[1].started_under: 50 is neither -1 nor a span"},
      {"thread backwards", [](auto& d) { d["kernel"]["threads"][1][4].SetInt(5); },
       "kernel.threads[1]: ends before it starts"},
      {"thread name", [](auto& d) { d["kernel"]["threads"][0][5].SetNull(); },
       "kernel.threads[0].name: expected a string"},
      {"lane pid", [](auto& d) { d["lanes"][0]["pid"].SetInt(-1); },
       "lanes[0].pid: expected a non-negative 32-bit integer"},
      {"lane session", [](auto& d) { d["lanes"][0]["session"].SetString("12"); },
       "lanes[0].session: expected a non-negative integer"},
  };
  for (const CorruptCase& c : cases) {
    Result<Profile> r = read_json_document(edited_agent(c.edit));
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt) << c.name << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(c.message), std::string::npos)
        << c.name << ": " << r.error().message;
  }
}

TEST(JsonRead, ALoneSurrogateEscapeIsRefusedInOneLine) {
  // A name that would read as bytes that are not UTF-8 (rapidjson 1.1.0
  // takes a lone low surrogate): refused where it is, not at the next save.
  std::string doc = to_json_document(rich_profile());
  const std::string_view strings = "\"strings\":[\"\",\"";  // before a function's name
  const size_t name = doc.find(strings);
  ASSERT_NE(name, std::string::npos) << doc.substr(0, 400);
  doc.insert(name + strings.size(), "\\udc01");
  const Result<Profile> r = read_json_document(doc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.error().message.find("invalid JSON at offset " + std::to_string(name + strings.size()) +
                             " (a \\u escape of a lone UTF-16 surrogate"),
      std::string::npos)
      << r.error().message;
}

TEST(JsonRead, AViewDocumentReadsAsTheSpansItKept) {
  const Profile p = rich_profile();
  ViewOptions o;
  o.depth = 1;
  const std::string view = to_json_document(p, o);
  Result<Profile> back = read_json_document(view);
  ASSERT_TRUE(back.ok()) << back.error().message;
  std::string expected = view;
  const std::string key = "\"view_depth\":1";
  expected.replace(expected.find(key), key.size(), "\"view_depth\":null");
  EXPECT_EQ(to_json_document(back.value()), expected);
}

TEST(JsonRead, ReadsTheVersion1ExampleOfTheFormatDoc) {
  const std::string v1 = R"({
  "meta": {
    "format": "mlflow-profiler",
    "version": 1,
    "captured_depth": 2,
    "view_depth": null,
    "clock": "CLOCK_MONOTONIC",
    "start_ns": 1234, "end_ns": 5678, "duration_ns": 4444,
    "engine": "sys.monitoring", "python": "3.12.1", "pid": "4242", "host": "..."
  },
  "stats": {"events_captured": 10, "events_skipped": 3, "unmatched_returns": 0},
  "strings": ["", "predict", "__main__", "/app/model.py"],
  "function_fields": ["name", "module", "file", "line", "kind", "user_code"],
  "functions": [[1, 2, 3, 10, 0, 1]],
  "lanes": [{"thread_id": 1, "native_tid": 4242, "thread_name": "MainThread",
             "task": 0, "parent_lane": -1, "parent_call": 0,
             "events": 10, "dropped": 0, "truncated": false}],
  "span_fields": ["parent", "function", "label", "lane", "depth", "flags",
                  "start_ns", "end_ns", "active_ns", "resumes"],
  "spans": [[-1, 0, 0, 0, 0, 0, 1300, 5600, 4300, 0]]
})";
  Result<Profile> r = read_json_document(v1);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Profile& p = r.value();
  EXPECT_EQ(p.captured_depth, 2);
  EXPECT_EQ(p.start_ns, 1234);
  EXPECT_EQ(p.meta.at("engine"), "sys.monitoring");
  EXPECT_EQ(p.stats.events_skipped, 3u);
  ASSERT_EQ(p.spans.size(), 1u);
  EXPECT_EQ(p.display_name(p.spans[0]), "predict");
  EXPECT_EQ(p.functions.module(0), "__main__");
  EXPECT_EQ(p.lanes[0].recorded, 10u);
  EXPECT_EQ(p.roots, std::vector<int32_t>{0});
  EXPECT_TRUE(p.segments.empty());
  EXPECT_TRUE(p.io.empty());
  EXPECT_EQ(render_text(p, {}), "predict: 4.30us\n");
  // Written back, it is a version 2 document.
  const std::string v2 = to_json_document(p);
  EXPECT_NE(v2.find("\"version\":2"), std::string::npos);
  EXPECT_NE(v2.find("\"segments\":[]"), std::string::npos);
}

// -- documents edited by hand -------------------------------------------------------

// The rich profile's document with one edit made to its tree.
std::string edited(const std::function<void(rapidjson::Document&)>& edit) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(to_json_document(rich_profile()).c_str());
  edit(doc);
  return serialize(doc);
}

TEST(JsonRead, Version1IsConvertedForward) {
  const Profile p = rich_profile();
  const std::string v1 = edited([](rapidjson::Document& d) {
    d["meta"]["version"].SetInt(1);
    for (const char* key : {"segments", "segment_fields", "io", "io_fields"}) d.RemoveMember(key);
  });
  Result<Profile> r = read_json_document(v1);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Profile& q = r.value();
  EXPECT_TRUE(q.segments.empty());
  EXPECT_TRUE(q.io.empty());
  Profile without = rich_profile();
  without.segments.clear();
  without.io.clear();
  EXPECT_EQ(to_json_document(q), to_json_document(without));
  // Without segments a generator shows its active time (views/view.h).
  EXPECT_EQ(render_text(q, {}), render_text(without, {}));
}

TEST(JsonRead, NewerVersionSaysWhichAndWhatToDo) {
  const std::string v3 = edited([](rapidjson::Document& d) {
    d["meta"]["version"].SetInt(kDocumentVersion + 1);
    d["spans"].SetString("a newer layout");  // must not matter: the version is checked first
  });
  Result<Profile> r = read_json_document(v3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kVersion);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("version " + std::to_string(kDocumentVersion + 1)), std::string::npos) << m;
  EXPECT_NE(m.find("newer mlflow-profiler"), std::string::npos) << m;
  EXPECT_NE(m.find("upgrade"), std::string::npos) << m;

  for (const auto& edit : std::vector<std::function<void(rapidjson::Document&)>>{
           [](rapidjson::Document& d) { d["meta"]["version"].SetString("2"); },
           [](rapidjson::Document& d) { d["meta"]["version"].SetInt(0); },
           [](rapidjson::Document& d) { d["meta"].RemoveMember("version"); },
       }) {
    Result<Profile> bad = read_json_document(edited(edit));
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().kind, Error::Kind::kVersion) << bad.error().message;
  }
}

TEST(JsonRead, CorruptDocumentsNameWhatAndWhere) {
  const std::vector<CorruptCase> cases = {
      {"parent after the span", [](auto& d) { d["spans"][2][0].SetInt(12); },
       "spans[2]: parent 12 is not an earlier span"},
      {"parent is itself", [](auto& d) { d["spans"][2][0].SetInt(2); },
       "spans[2]: parent 2 is not an earlier span"},
      {"parent below -1", [](auto& d) { d["spans"][0][0].SetInt(-7); },
       "spans[0]: parent -7 is not an earlier span"},
      {"function out of range", [](auto& d) { d["spans"][1][1].SetUint(99); },
       "spans[1].function: id 99 is out of range (functions has 8 entries)"},
      {"label out of range", [](auto& d) { d["spans"][1][2].SetUint(5000); },
       "spans[1].label: id 5000 is out of range"},
      {"lane out of range", [](auto& d) { d["spans"][1][3].SetUint(4); },
       "spans[1].lane: id 4 is out of range (lanes has 4 entries)"},
      {"time as a string", [](auto& d) { d["spans"][3][6].SetString("170"); },
       "spans[3].start_ns: expected an integer, found a string"},
      {"time as a fraction", [](auto& d) { d["spans"][3][7].SetDouble(170.5); },
       "spans[3].end_ns: expected an integer, found a number"},
      {"negative flags", [](auto& d) { d["spans"][3][5].SetInt(-1); },
       "spans[3].flags: expected a non-negative 32-bit integer"},
      {"depth not its parent's + 1", [](auto& d) { d["spans"][1][4].SetUint(7); },
       "spans[1]: depth 7 does not match its parent's (expected 1)"},
      {"ends before it starts", [](auto& d) { d["spans"][1][7].SetInt64(0); },
       "spans[1]: ends before it starts"},
      // fuzz_agent_records' finding: times near int64's ends overflowed
      // the exports' differences and the views' sums.
      {"time beyond 2^62", [](auto& d) { d["spans"][3][7].SetInt64((int64_t{1} << 62) + 1); },
       "spans[3].end_ns: is out of range"},
      {"session start near int64's end",
       [](auto& d) { d["meta"]["start_ns"].SetInt64(std::numeric_limits<int64_t>::min() + 2000); },
       "meta.start_ns: is out of range"},
      {"short row", [](auto& d) { d["spans"][4].PopBack(); },
       "spans[4]: has 11 cells, the header names 12"},
      {"row not an array", [](auto& d) { d["spans"][4].SetNull(); },
       "spans[4]: expected an array (one row)"},
      {"no parent column", [](auto& d) { d["span_fields"][0].SetString("mother"); },
       "span_fields: no \"parent\" column"},
      {"spans missing", [](auto& d) { d.RemoveMember("spans"); }, "document.spans: missing"},
      {"lanes not an array", [](auto& d) { d["lanes"].SetObject(); }, "lanes: expected an array"},
      {"lane field type", [](auto& d) { d["lanes"][1]["truncated"].SetInt(1); },
       "lanes[1].truncated: expected true or false"},
      {"parent lane out of range", [](auto& d) { d["lanes"][1]["parent_lane"].SetInt(9); },
       "lanes[1].parent_lane: 9 is neither -1 nor a lane"},
      {"function repeated",
       [](auto& d) {
         rapidjson::Value copy(d["functions"][0], d.GetAllocator());
         d["functions"].PushBack(copy, d.GetAllocator());
       },
       "functions[8]: repeats functions[0]"},
      {"function string out of range", [](auto& d) { d["functions"][0][2].SetUint(777); },
       "functions[0].file: id 777 is out of range"},
      {"function kind", [](auto& d) { d["functions"][0][4].SetUint(9); },
       "functions[0].kind: unknown kind 9"},
      {"string repeated", [](auto& d) { d["strings"][2].SetString("predict"); },
       "strings[2]: repeats strings[1]"},
      {"strings[0] not empty", [](auto& d) { d["strings"][0].SetString("x"); },
       "strings[0]: must be the empty string"},
      {"string not a string", [](auto& d) { d["strings"][3].SetInt(3); },
       "strings[3]: expected a string, found an integer"},
      {"segment span out of range", [](auto& d) { d["segments"][0][0].SetInt(1000); },
       "segments[0].span: id 1000 is out of range"},
      {"segments out of order",
       [](auto& d) {
         auto& segs = d["segments"];
         segs[segs.Size() - 1][0].SetInt(0);
       },
       "not in span order"},
      {"io role", [](auto& d) { d["io"][0][1].SetUint(2); },
       "io[0].role: must be 0 (argument) or 1 (return value)"},
      {"io shape", [](auto& d) { d["io"][0][4].SetString("(1000, 50)"); },
       "io[0].shape: expected an array or null"},
      {"io negative length", [](auto& d) { d["io"][3][6].SetInt(-3); },
       "io[3].length: expected a non-negative integer or null"},
      {"provenance not a string", [](auto& d) { d["meta"]["pid"].SetInt(4242); },
       "meta.pid: expected a string, found an integer"},
      {"start_ns missing", [](auto& d) { d["meta"].RemoveMember("start_ns"); },
       "meta.start_ns: missing"},
      {"duration inconsistent", [](auto& d) { d["meta"]["duration_ns"].SetInt(1); },
       "meta.duration_ns: is not end_ns - start_ns"},
      {"stats type", [](auto& d) { d["stats"]["events_skipped"].SetInt(-2); },
       "stats.events_skipped: expected a non-negative integer"},
      {"wrong format", [](auto& d) { d["meta"]["format"].SetString("chrome-trace"); },
       "not a profile document"},
      {"no meta", [](auto& d) { d.RemoveMember("meta"); },
       "meta.format is not \"mlflow-profiler\""},
      {"an array", [](auto& d) { d.SetArray(); }, "the JSON is an array"},
  };
  for (const CorruptCase& c : cases) {
    Result<Profile> r = read_json_document(edited(c.edit));
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt) << c.name << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(c.message), std::string::npos)
        << c.name << ": " << r.error().message;
  }
}

TEST(JsonRead, NotJsonIsCorrupt) {
  for (const std::string& text : std::vector<std::string>{
           "hello world", "hello", "nulL", "-x", "<html></html>", "{\"meta\": 1,,}", "[1, 2] 3",
           "\xff\xfe{}", std::string("{\"meta\"\0: 1}", 12), "{\"a\": \"\xc3\x28\"}"}) {
    Result<Profile> r = read_json_document(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt) << text << ": " << r.error().message;
    EXPECT_NE(r.error().message.find("not a profile document"), std::string::npos)
        << r.error().message;
  }
  Result<Profile> gz = read_json_document(gzip_compress("hello"));
  ASSERT_FALSE(gz.ok());
  EXPECT_EQ(gz.error().kind, Error::Kind::kCorrupt) << gz.error().message;
  // A valid JSON value that is not a profile.
  Result<Profile> r = read_json_document(R"({"traceEvents": []})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt);
}

TEST(JsonRead, EmptyIsTruncated) {
  for (const std::string& text : std::vector<std::string>{"", "  \n"}) {
    Result<Profile> r = read_json_document(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, Error::Kind::kTruncated);
    EXPECT_NE(r.error().message.find("empty"), std::string::npos);
  }
}

// -- truncations and byte flips --------------------------------------------------------

TEST(JsonRead, EveryPrefixOfTheTextIsTruncated) {
  const std::string doc = to_json_document(rich_profile());
  for (size_t n = 0; n < doc.size(); ++n) {
    Result<Profile> r = read_json_document(std::string_view(doc).substr(0, n));
    ASSERT_FALSE(r.ok()) << "cut at " << n;
    ASSERT_EQ(r.error().kind, Error::Kind::kTruncated)
        << "cut at " << n << " ..." << doc.substr(n > 20 ? n - 20 : 0, std::min<size_t>(n, 20))
        << ": " << r.error().message;
  }
}

TEST(JsonRead, EveryPrefixOfTheGzipIsTruncated) {
  const std::string gz = gzip_compress(to_json_document(test::random_profile(5, 1000, 6, true)));
  ASSERT_GT(gz.size(), 4000u);
  // Every cut in the header and the first blocks, then every 7th byte.
  for (size_t n = 0; n < gz.size(); n += n < 512 ? 1 : 7) {
    Result<Profile> r = read_json_document(std::string_view(gz).substr(0, n));
    ASSERT_FALSE(r.ok()) << "cut at " << n;
    ASSERT_EQ(r.error().kind, Error::Kind::kTruncated)
        << "cut at " << n << ": " << r.error().message;
  }
}

// What a caller does with a profile it was given: it must hold together.
void use_everything(const Profile& p, const std::vector<ExportFormat>& exporters) {
  for (const ViewOptions& o : view_options()) (void)render_text(p, o);
  (void)to_json_document(p);
  for (size_t i = 0; i < p.spans.size(); ++i) {
    (void)call_path(p, static_cast<int32_t>(i));
    (void)p.io_of(static_cast<int32_t>(i));
    (void)p.segments_of(static_cast<int32_t>(i));
  }
  for (const ExportFormat f : exporters) (void)export_profile(p, f);
}

// The exporters written so far: the rest still throw "not written yet".
std::vector<ExportFormat> working_exporters(const Profile& p) {
  std::vector<ExportFormat> out;
  for (const ExportFormat f :
       {ExportFormat::kJson, ExportFormat::kJsonGz, ExportFormat::kChromeTrace,
        ExportFormat::kPprof, ExportFormat::kSpeedscope, ExportFormat::kFolded,
        ExportFormat::kHtml}) {
    try {
      (void)export_profile(p, f);
      out.push_back(f);
    } catch (const std::logic_error&) {
    }
  }
  return out;
}

void fuzz(const std::string& data, uint32_t seed, int rounds) {
  rounds /= kSanitizedRoundsDivisor;
  std::mt19937 rng(seed);
  const std::vector<ExportFormat> exporters = working_exporters(rich_profile());
  int loaded = 0, errors = 0;
  for (int i = 0; i < rounds; ++i) {
    std::string bad = data;
    const uint32_t how = rng() % 10;
    if (how < 6) {  // flip one byte
      bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    } else if (how < 8) {  // a digit for another digit: still JSON, other values
      for (int tries = 0; tries < 50; ++tries) {
        char& c = bad[rng() % bad.size()];
        if (c >= '0' && c <= '9') {
          c = static_cast<char>('0' + rng() % 10);
          break;
        }
      }
    } else if (how < 9) {  // drop a range
      const size_t at = rng() % bad.size();
      bad.erase(at, 1 + rng() % 16);
    } else {  // several flips
      for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    Result<Profile> r = read_json_document(bad);
    if (r.ok()) {
      ++loaded;
      use_everything(r.value(), exporters);
    } else {
      ++errors;
      const Error& e = r.error();
      ASSERT_TRUE(e.kind == Error::Kind::kCorrupt || e.kind == Error::Kind::kTruncated ||
                  e.kind == Error::Kind::kVersion)
          << e.message;
      ASSERT_FALSE(e.message.empty());
    }
  }
  EXPECT_GT(errors, 0);
  ::testing::Test::RecordProperty("loaded", loaded);
}

TEST(JsonRead, ByteFlipsOfTheTextLoadOrFailCleanly) {
  fuzz(to_json_document(rich_profile()), 11, 4000);
  fuzz(to_json_document(test::random_profile(3, 300, 5, true)), 12, 2000);
}

TEST(JsonRead, AnAgentProfileExportsInEveryFormat) {
  const Profile agent = agent_profile();
  // Folded stacks are self wall time: the kernel data changes nothing there;
  // roots name the thread and process, not the session.
  EXPECT_EQ(export_profile(agent, ExportFormat::kFolded),
            "thread MainThread, pid 777;predict 11999\n"
            "thread MainThread, pid 777;predict;preprocess 1500\n"
            "thread MainThread, pid 777;predict;produce 2000\n"
            "thread MainThread, pid 777;predict;consume 2000\n"
            "thread MainThread, pid 777;predict;my label 500\n"
            "thread MainThread, task 1, pid 777;predict;fetch 3000\n"
            "thread Worker, pid 777;predict;work 3500\n");
  // Two sessions of the same threads: one root per thread, values summed.
  Profile twice;
  append_profile(twice, agent);
  Profile again = agent_profile();
  for (Lane& lane : again.lanes) lane.session = 13;
  append_profile(twice, again);
  const std::string folded = export_profile(twice, ExportFormat::kFolded);
  EXPECT_NE(folded.find("thread MainThread, pid 777;predict 23998\n"), std::string::npos) << folded;
  EXPECT_EQ(std::count(folded.begin(), folded.end(), '\n'), 7) << folded;
  // The HTML report embeds the document, kernel data included.
  const std::string html = export_profile(agent, ExportFormat::kHtml);
  EXPECT_NE(html.find("\"span_values\":[[0,\"cpu\",\"ns\",16699]"), std::string::npos);
  use_everything(agent, working_exporters(agent));
}

TEST(JsonRead, ByteFlipsOfAnAgentDocumentLoadOrFailCleanly) {
  fuzz(to_json_document(agent_profile()), 14, 4000);
}

TEST(JsonRead, ByteFlipsOfTheGzipLoadOrFailCleanly) {
  fuzz(gzip_compress(to_json_document(rich_profile())), 13, 3000);
}

}  // namespace
}  // namespace mlprof
