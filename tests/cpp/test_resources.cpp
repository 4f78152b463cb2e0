// Resources and slots (model/resources.h): a span names the resource it uses
// (a kLabel flagged kEvResource before its kCall); calls take the lowest
// free slot; counters of calls in flight and queued; the Chrome trace draws
// a process per resource and a thread per slot.

#include "model/resources.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/export.h"
#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "model/tree.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_event;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

Event resource(uint32_t string_id) {
  return make_event(EventKind::kLabel, 0, string_id, kEvResource);
}

class ResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p.start_ns = 0;
    p.end_ns = 1000;
    predict = test::user_fn(p, "predict");
    ask = test::user_fn(p, "ask");
    task = test::user_fn(p, "endpoint_call");
    fast = p.functions.strings().intern("fast");
    smart = p.functions.strings().intern("smart");
  }
  Profile p;
  uint32_t predict = 0, ask = 0, task = 0, fast = 0, smart = 0;
};

TEST_F(ResourcesTest, AResourceEventNamesTheNextCallsResourceNotItsLabel) {
  p.lanes.push_back(make_lane(
      {call(0, predict), resource(fast), call(10, ask), ret(20), call(30, ask), ret(40), ret(50)}));
  build_tree(p);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.spans[0].resource, 0u);
  EXPECT_EQ(p.spans[1].resource, fast);
  EXPECT_EQ(p.spans[1].label, 0u);
  EXPECT_EQ(p.display_name(p.spans[1]), "ask");
  EXPECT_EQ(p.spans[2].resource, 0u);  // only the next call
}

TEST_F(ResourcesTest, TheDocumentKeepsItAndAnOlderDocumentHasNone) {
  p.lanes.push_back(
      make_lane({call(0, predict), resource(smart), call(10, ask), ret(20), ret(50)}));
  build_tree(p);
  const std::string doc = to_json_document(p);
  const Result<Profile> read = read_json_document(doc);
  ASSERT_TRUE(read.ok()) << read.error().message;
  const Profile& back = read.value();
  ASSERT_EQ(back.spans.size(), 2u);
  EXPECT_EQ(back.functions.strings().get(back.spans[1].resource), "smart");
  EXPECT_EQ(back.spans[0].resource, 0u);
  // Without the column (a document written before it): no resource.
  rapidjson::Document d;
  d.Parse(doc.c_str());
  ASSERT_EQ(std::string(d["span_fields"][d["span_fields"].Size() - 1].GetString()), "resource");
  d["span_fields"].PopBack();
  for (auto& row : d["spans"].GetArray()) row.PopBack();
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  d.Accept(w);
  const Result<Profile> old = read_json_document(std::string(b.GetString(), b.GetSize()));
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old.value().spans[1].resource, 0u);
}

// Six calls to "fast", each in its own thread lane under predict: the lowest
// free slot at each start (a call ending at t frees its slot for one starting
// at t), and the in-flight counter at each change.
TEST_F(ResourcesTest, EachCallTakesTheLowestFreeSlot) {
  p.lanes.push_back(make_lane({call(0, predict), ret(400)}));
  const std::vector<std::pair<int64_t, int64_t>> calls = {{0, 100},   {0, 100},   {50, 150},
                                                          {100, 200}, {100, 200}, {160, 300}};
  for (const auto& [s, e] : calls) {
    p.lanes.push_back(make_lane({resource(fast), call(s, ask), ret(e)}, "worker", 0, 0, 0));
    p.lanes.back().native_tid = 5000 + p.lanes.size();
  }
  build_tree(p);
  const std::vector<Resource> view = resource_view(p);
  ASSERT_EQ(view.size(), 1u);
  const Resource& r = view[0];
  EXPECT_EQ(p.functions.strings().get(r.name), "fast");
  EXPECT_EQ(r.slots, 3u);
  std::vector<uint32_t> slots;
  for (const ResourceCall& c : r.calls) slots.push_back(c.slot);
  EXPECT_EQ(slots, (std::vector<uint32_t>{1, 2, 3, 1, 2, 3}));
  std::vector<std::pair<int64_t, uint32_t>> in_flight;
  for (const ResourceSample& s : r.samples) in_flight.emplace_back(s.ts_ns, s.in_flight);
  EXPECT_EQ(in_flight, (std::vector<std::pair<int64_t, uint32_t>>{
                           {0, 2}, {50, 3}, {150, 2}, {160, 3}, {200, 1}, {300, 0}}));
  EXPECT_EQ(r.peak_queued, 0u);  // threads: nothing says a call was queued
}

// Two asyncio tasks whose coroutine waits for a slot (suspended) and then
// calls "smart" in a block: each call is queued from its task's first
// suspension to its start. A call that is the task's coroutine itself, and a
// task's second call, are not queued.
TEST_F(ResourcesTest, ATaskSuspendedBeforeItsCallIsQueued) {
  const uint32_t block = p.functions.add("ask smart", "", "", 0, FunctionKind::kBlock, true);
  p.lanes.push_back(make_lane({call(0, predict), ret(900)}));
  // task 1: runs 0-10, waits, gets its slot at 100: the call [100, 300]; then a second call [310,
  // 400]
  p.lanes.push_back(
      make_lane({call(0, task), suspend(10, 0), resume(100, 0), resource(smart), call(100, block),
                 ret(300), resource(smart), call(310, block), ret(400), ret(410)},
                "MainThread", 1, 0, 0));
  // task 2: the same, its slot at 300
  p.lanes.push_back(make_lane({call(0, task), suspend(20, 0), resume(300, 0), resource(smart),
                               call(300, block), ret(500), ret(510)},
                              "MainThread", 2, 0, 0));
  // task 3: the coroutine is the call (profile_span(resource=) on it)
  p.lanes.push_back(
      make_lane({resource(smart), call(0, task), suspend(5, 0), resume(600, 0), ret(610)},
                "MainThread", 3, 0, 0));
  build_tree(p);
  const std::vector<Resource> view = resource_view(p);
  ASSERT_EQ(view.size(), 1u);
  std::map<int64_t, int64_t> queued;  // start -> queued from
  for (const ResourceCall& c : view[0].calls) queued[c.start_ns] = c.queued_from_ns;
  EXPECT_EQ(queued, (std::map<int64_t, int64_t>{{0, 0}, {100, 10}, {300, 20}, {310, 310}}));
  EXPECT_EQ(view[0].peak_queued, 2u);
  std::vector<std::tuple<int64_t, uint32_t, uint32_t>> samples;
  for (const ResourceSample& s : view[0].samples)
    samples.emplace_back(s.ts_ns, s.in_flight, s.queued);
  EXPECT_EQ(samples, (std::vector<std::tuple<int64_t, uint32_t, uint32_t>>{{0, 1, 0},
                                                                           {10, 1, 1},
                                                                           {20, 1, 2},
                                                                           {100, 2, 1},
                                                                           {300, 2, 0},
                                                                           {310, 3, 0},
                                                                           {400, 2, 0},
                                                                           {500, 1, 0},
                                                                           {610, 0, 0}}));
}

TEST_F(ResourcesTest, ACallInsideACallToTheSameResourceIsPartOfIt) {
  p.lanes.push_back(
      make_lane({call(0, predict), resource(fast), call(10, ask), resource(fast), call(20, ask),
                 ret(30), resource(smart), call(40, ask), ret(60), ret(90), ret(100)}));
  build_tree(p);
  const std::vector<Resource> view = resource_view(p);
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(p.functions.strings().get(view[0].name), "fast");
  ASSERT_EQ(view[0].calls.size(), 1u);
  EXPECT_EQ(view[0].calls[0].end_ns, 90);
  EXPECT_EQ(view[1].calls.size(), 1u);  // another resource inside is its own call
}

TEST_F(ResourcesTest, TheChromeTraceHasAProcessPerResourceAndAThreadPerSlot) {
  p.lanes.push_back(make_lane({call(0, predict), ret(400)}));
  for (const auto& [s, e] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 100}, {10, 100}, {100, 200}}) {
    p.lanes.push_back(make_lane({resource(fast), call(s, ask), ret(e)}, "worker", 0, 0, 0));
    p.lanes.back().native_tid = 5000 + p.lanes.size();
  }
  build_tree(p);
  rapidjson::Document d;
  d.Parse(to_chrome_trace(p).c_str());
  ASSERT_FALSE(d.HasParseError());
  std::string process;
  std::set<std::string> threads;
  std::vector<std::pair<double, uint32_t>> slices;  // (ts us, tid) on the resource's process
  std::vector<std::pair<double, int>> counter;
  uint32_t pid = 0;
  for (const auto& e : d["traceEvents"].GetArray()) {
    const std::string ph = e["ph"].GetString(), name = e["name"].GetString();
    if (ph == "M" && name == "process_name" &&
        std::string(e["args"]["name"].GetString()) == "resource fast") {
      pid = e["pid"].GetUint();
    }
  }
  ASSERT_NE(pid, 0u);
  for (const auto& e : d["traceEvents"].GetArray()) {
    if (e["pid"].GetUint() != pid) continue;
    const std::string ph = e["ph"].GetString(), name = e["name"].GetString();
    if (ph == "M" && name == "thread_name") threads.insert(e["args"]["name"].GetString());
    if (ph == "X") {
      slices.emplace_back(e["ts"].GetDouble(), e["tid"].GetUint());
      EXPECT_EQ(std::string(e["args"]["resource"].GetString()), "fast");
    }
    if (ph == "C" && name == "in flight")
      counter.emplace_back(e["ts"].GetDouble(), e["args"]["calls"].GetInt());
  }
  EXPECT_EQ(threads, (std::set<std::string>{"slot 1", "slot 2"}));
  EXPECT_EQ(slices, (std::vector<std::pair<double, uint32_t>>{{0, 1}, {0.01, 2}, {0.1, 1}}));
  EXPECT_EQ(counter, (std::vector<std::pair<double, int>>{{0, 1}, {0.01, 2}, {0.1, 1}, {0.2, 0}}));
}

}  // namespace
}  // namespace mlprof
