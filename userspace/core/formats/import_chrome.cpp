// Chrome trace JSON (the Trace Event Format: viztracer's output, Perfetto's
// legacy JSON) as a Profile: complete events ("X", ts and dur in us) and
// begin/end pairs ("B"/"E") of each (pid, tid) become that thread's spans,
// nested by time; "M" thread_name events name the threads.

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "formats/import.h"
#include "formats/import_json.h"

namespace mlprof {

namespace {

using rapidjson::Value;

struct Call {
  int64_t start_ns = 0, end_ns = 0;
  uint32_t function = 0;
};

Error out_of_range(const char* field, double value) {
  return Error{Error::Kind::kCorrupt, 0,
               std::string("not a Chrome trace: an event's ") + field + " (" +
                   std::to_string(value) + " us) is out of range"};
}

// The tool and capture time where the trace names them: viztracer's
// viztracer_metadata.version; ours (and others') otherData.tool or
// .producer, and otherData.start_unix_ns (wall-clock ns of the capture).
void provenance(const Value& doc, std::map<std::string, std::string>& meta) {
  const Value* viz = member(doc, "viztracer_metadata");
  const Value* version = viz != nullptr ? member(*viz, "version") : nullptr;
  if (version && version->IsString())
    meta["tool"] = std::string("viztracer@") + version->GetString();
  const Value* other = member(doc, "otherData");
  if (!other || !other->IsObject()) return;
  for (const char* key : {"producer", "tool"}) {  // tool (with a version) over producer
    const Value* v = member(*other, key);
    if (v && v->IsString() && v->GetStringLength() > 0) meta["tool"] = v->GetString();
  }
  const Value* start = member(*other, "start_unix_ns");
  if (start && start->IsString()) {
    const std::string text = start->GetString();
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos)
      meta["start_unix_ns"] = text;
  } else if (start && start->IsUint64()) {
    meta["start_unix_ns"] = std::to_string(start->GetUint64());
  }
}

}  // namespace

Result<Imported> import_chrome_trace(std::string_view json) {
  rapidjson::Document doc;
  if (auto e = import_detail::parse_json(json, "Chrome trace", doc)) return *e;
  const Value* events = doc.IsArray() ? &doc : member(doc, "traceEvents");
  if (!events || !events->IsArray()) {
    return Error{Error::Kind::kCorrupt, 0, "not a Chrome trace: no traceEvents array"};
  }
  Profile p;
  p.captured_depth = -1;
  p.meta["source"] = "chrome-trace";
  if (doc.IsObject()) provenance(doc, p.meta);
  using Thread = std::pair<int64_t, int64_t>;  // (pid, tid)
  std::map<Thread, std::vector<Call>> calls;
  std::map<Thread, std::vector<std::pair<int64_t, uint32_t>>> open;  // B events awaiting their E
  std::map<Thread, std::string> names;
  std::set<int64_t> pids;
  std::map<std::string, uint32_t> functions;
  auto function_of = [&](const std::string& text) {
    auto it = functions.find(text);
    if (it != functions.end()) return it->second;
    const FrameName f = parse_frame_name(text);
    const uint32_t id = p.functions.add(f.name, "", f.file, f.line, FunctionKind::kPython, false);
    return functions[text] = id;
  };
  uint64_t unmatched = 0;
  for (const Value& e : events->GetArray()) {
    if (!e.IsObject()) continue;
    const Value* ph = member(e, "ph");
    if (!ph || !ph->IsString()) continue;
    const std::string phase = ph->GetString();
    const Value* pid = member(e, "pid");
    const Value* tid = member(e, "tid");
    // IsInt64, not IsNumber: GetInt64 of 1.5 or 1e30 is rapidjson's
    // assertion (found by fuzz_import_chrome). Such ids are thread 0.
    const Thread thread{pid && pid->IsInt64() ? pid->GetInt64() : 0,
                        tid && tid->IsInt64() ? tid->GetInt64() : 0};
    const Value* name = member(e, "name");
    const std::string text = name && name->IsString() ? name->GetString() : "";
    if (phase == "M") {
      const Value* args = member(e, "args");
      const Value* n = args != nullptr ? member(*args, "name") : nullptr;
      if (text == "thread_name" && n && n->IsString()) names[thread] = n->GetString();
      continue;
    }
    const Value* ts = member(e, "ts");
    if (!ts || !ts->IsNumber()) continue;
    const std::optional<int64_t> at = import_detail::to_ns(ts->GetDouble(), 1000.0);
    if (!at) return out_of_range("ts", ts->GetDouble());
    if (phase == "X") {
      const Value* dur = member(e, "dur");
      const double d = dur && dur->IsNumber() ? dur->GetDouble() : 0.0;
      const std::optional<int64_t> length = import_detail::to_ns(d, 1000.0);
      if (!length) return out_of_range("dur", d);
      calls[thread].push_back({*at, *at + std::max<int64_t>(0, *length), function_of(text)});
      pids.insert(thread.first);
    } else if (phase == "B") {
      open[thread].emplace_back(*at, function_of(text));
      pids.insert(thread.first);
    } else if (phase == "E") {
      auto& stack = open[thread];
      if (stack.empty()) {
        ++unmatched;
        continue;
      }
      const int64_t start = stack.back().first;
      calls[thread].push_back({start, std::max(start, *at), stack.back().second});
      stack.pop_back();
    }
  }
  if (calls.empty())
    return Error{Error::Kind::kCorrupt, 0, "the Chrome trace has no complete (X) or B/E events"};
  p.start_ns = INT64_MAX;
  p.end_ns = INT64_MIN;
  for (auto& [thread, list] : calls) {
    // Parents before children: by start, then the longer first.
    std::stable_sort(list.begin(), list.end(), [](const Call& a, const Call& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    Lane lane;
    lane.pid = static_cast<uint32_t>(thread.first);
    lane.thread_id = static_cast<uint64_t>(thread.second);
    lane.native_tid = static_cast<uint64_t>(thread.second);
    const auto n = names.find(thread);
    lane.thread_name = n != names.end() ? n->second : "Thread " + std::to_string(thread.second);
    std::vector<int64_t> ends;  // the open calls' ends, innermost last
    auto push = [&](EventKind kind, int64_t ts, uint32_t id) {
      Event ev;
      ev.kind = kind;
      ev.ts_ns = ts;
      ev.id = id;
      lane.events.push_back(ev);
    };
    for (const Call& c : list) {
      while (!ends.empty() && ends.back() <= c.start_ns) {
        push(EventKind::kReturn, ends.back(), 0);
        ends.pop_back();
      }
      // A call that outlives its parent (clock rounding) ends with it.
      const int64_t end = ends.empty() ? c.end_ns : std::min(c.end_ns, ends.back());
      push(EventKind::kCall, c.start_ns, c.function);
      ends.push_back(end);
      p.start_ns = std::min(p.start_ns, c.start_ns);
      p.end_ns = std::max(p.end_ns, c.end_ns);
    }
    while (!ends.empty()) {
      push(EventKind::kReturn, ends.back(), 0);
      ends.pop_back();
    }
    p.lanes.push_back(std::move(lane));
  }
  if (pids.size() == 1) p.meta["pid"] = std::to_string(*pids.begin());
  p.stats.unmatched_returns = unmatched;
  build_tree(p);
  for (Lane& lane : p.lanes) p.stats.events_captured += lane.recorded;
  return Imported{std::move(p)};
}

}  // namespace mlprof
