// speedscope's file format (https://www.speedscope.app/file-format-schema.json):
// evented profiles (open/close events) become a Profile, a lane each;
// sampled profiles (py-spy's --format speedscope) become StackSamples, a
// thread each, every sample counted once and its weight kept in its unit.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "formats/import.h"
#include "formats/import_json.h"

namespace mlprof {

namespace {

using rapidjson::Value;

// Nanoseconds per unit for time units; 0 for the others.
double ns_per(const std::string& unit) {
  if (unit == "nanoseconds") return 1.0;
  if (unit == "microseconds") return 1e3;
  if (unit == "milliseconds") return 1e6;
  if (unit == "seconds") return 1e9;
  return 0.0;
}

Error not_speedscope(const std::string& why) {
  return Error{Error::Kind::kCorrupt, 0, "not a speedscope file: " + why};
}

}  // namespace

Result<Imported> import_speedscope(std::string_view json) {
  rapidjson::Document doc;
  if (auto e = import_detail::parse_json(json, "speedscope", doc)) return *e;
  if (!doc.IsObject()) return not_speedscope("the top level is not an object");
  const Value* shared = member(doc, "shared");
  const Value* frames = shared != nullptr ? member(*shared, "frames") : nullptr;
  const Value* profiles = member(doc, "profiles");
  if (!frames || !frames->IsArray() || !profiles || !profiles->IsArray()) {
    return not_speedscope("no shared.frames or no profiles");
  }
  // py-spy writes this when it took no sample (a short or starved target).
  if (profiles->Empty())
    return Error{Error::Kind::kCorrupt, 0,
                 "the speedscope file holds no profiles: its tool recorded no samples"};
  bool sampled = false, evented = false;
  for (const Value& pr : profiles->GetArray()) {
    const Value* type = member(pr, "type");
    if (!type || !type->IsString()) return not_speedscope("a profile has no type");
    (std::string(type->GetString()) == "evented" ? evented : sampled) = true;
  }
  if (sampled && evented)
    return not_speedscope("it mixes sampled and evented profiles, which this import keeps apart");
  // The tool that wrote it ("py-spy@0.4.3"); speedscope's format has no capture time.
  const Value* exporter = member(doc, "exporter");
  const std::string tool = exporter && exporter->IsString() ? exporter->GetString() : "";

  // Functions of the frames, for whichever model we build.
  FunctionTable functions;
  std::vector<std::pair<uint32_t, int32_t>> frame_fn;
  for (const Value& f : frames->GetArray()) {
    const Value* name = member(f, "name");
    if (!name || !name->IsString()) return not_speedscope("a frame has no name");
    const Value* file = member(f, "file");
    const Value* line = member(f, "line");
    FrameName fn = parse_frame_name(name->GetString());
    if (file && file->IsString()) fn.file = file->GetString();
    if (line && line->IsInt()) fn.line = line->GetInt();
    frame_fn.emplace_back(
        functions.add(fn.name, "", fn.file, fn.line, FunctionKind::kPython, false), fn.line);
  }
  auto frame_at = [&](const Value& v, uint32_t* out) {
    if (!v.IsUint() || v.GetUint() >= frame_fn.size()) return false;
    *out = v.GetUint();
    return true;
  };

  if (sampled) {
    StackSamples out;
    out.functions = std::move(functions);
    out.meta["source"] = "speedscope";
    if (!tool.empty()) out.meta["tool"] = tool;
    std::string unit;
    for (const Value& pr : profiles->GetArray()) {
      const Value* u = member(pr, "unit");
      const std::string this_unit = u && u->IsString() ? u->GetString() : "none";
      if (!unit.empty() && this_unit != unit)
        return not_speedscope("its profiles weigh samples in different units");
      unit = this_unit;
    }
    const double scale = ns_per(unit);
    out.value_types = {{"samples", "count"},
                       scale > 0
                           ? std::make_pair(std::string("wall"), std::string("nanoseconds"))
                           : std::make_pair(std::string(unit == "bytes" ? "alloc" : "weight"),
                                            std::string(unit == "bytes" ? "bytes" : "count"))};
    for (const Value& pr : profiles->GetArray()) {
      const Value* first = member(pr, "startValue");
      const Value* last = member(pr, "endValue");
      if (scale > 0 && first && last && first->IsNumber() && last->IsNumber()) {
        const std::optional<int64_t> span =
            import_detail::to_ns(last->GetDouble() - first->GetDouble(), scale);
        if (!span) return not_speedscope("a profile's startValue or endValue is out of range");
        out.end_ns = std::max(out.end_ns, *span);
      }
      const Value* name = member(pr, "name");
      const Value* samples = member(pr, "samples");
      const Value* weights = member(pr, "weights");
      if (!samples || !samples->IsArray())
        return not_speedscope("a sampled profile has no samples");
      if (weights && (!weights->IsArray() || weights->Size() != samples->Size())) {
        return not_speedscope("a sampled profile's weights do not match its samples");
      }
      const auto thread = static_cast<uint32_t>(out.threads.size());
      out.threads.push_back(
          {name && name->IsString() ? name->GetString() : "profile " + std::to_string(thread),
           thread});
      for (rapidjson::SizeType i = 0; i < samples->Size(); ++i) {
        const Value& stack = (*samples)[i];
        if (!stack.IsArray()) return not_speedscope("a sample is not a list of frames");
        StackSamples::Sample s;
        s.thread = thread;
        for (const Value& f : stack.GetArray()) {
          uint32_t idx = 0;
          if (!frame_at(f, &idx)) return not_speedscope("a sample names a frame that is not there");
          s.frames.push_back({frame_fn[idx].first, frame_fn[idx].second});
        }
        double w = 1.0;
        if (weights) {
          const Value& wv = (*weights)[i];
          if (!wv.IsNumber()) return not_speedscope("a weight is not a number");
          w = wv.GetDouble();
        }
        const std::optional<int64_t> weight = import_detail::to_ns(w, scale > 0 ? scale : 1.0);
        if (!weight || *weight < 0) return not_speedscope("a weight is negative or out of range");
        s.values = {1, *weight};
        out.samples.push_back(std::move(s));
      }
    }
    return Imported{std::move(out)};
  }

  Profile p;
  p.functions = std::move(functions);
  p.captured_depth = -1;
  p.meta["source"] = "speedscope";
  if (!tool.empty()) p.meta["tool"] = tool;
  p.start_ns = INT64_MAX;
  p.end_ns = INT64_MIN;
  for (const Value& pr : profiles->GetArray()) {
    const Value* u = member(pr, "unit");
    const double scale = ns_per(u && u->IsString() ? u->GetString() : "none");
    if (scale == 0) return not_speedscope("an evented profile's unit is not a time unit");
    const Value* events = member(pr, "events");
    const Value* name = member(pr, "name");
    if (!events || !events->IsArray()) return not_speedscope("an evented profile has no events");
    Lane lane;
    lane.thread_id = p.lanes.size();
    lane.thread_name =
        name && name->IsString() ? name->GetString() : "profile " + std::to_string(p.lanes.size());
    for (const Value& e : events->GetArray()) {
      const Value* type = member(e, "type");
      const Value* at = member(e, "at");
      const Value* frame = member(e, "frame");
      uint32_t idx = 0;
      if (!type || !type->IsString() || !at || !at->IsNumber() || !frame ||
          !frame_at(*frame, &idx)) {
        return not_speedscope("an event lacks its type, time or frame");
      }
      Event ev;
      const std::optional<int64_t> ts = import_detail::to_ns(at->GetDouble(), scale);
      if (!ts) return not_speedscope("an event's time is out of range");
      // Events are in time order (the format's schema): one that goes back
      // would make a span end before it starts.
      if (!lane.events.empty() && *ts < lane.events.back().ts_ns) {
        return not_speedscope("profile " + std::to_string(p.lanes.size()) + "'s event " +
                              std::to_string(lane.events.size()) + " goes back in time");
      }
      ev.ts_ns = *ts;
      ev.kind = std::string(type->GetString()) == "O" ? EventKind::kCall : EventKind::kReturn;
      ev.id = ev.kind == EventKind::kCall ? frame_fn[idx].first : 0;
      p.start_ns = std::min(p.start_ns, ev.ts_ns);
      p.end_ns = std::max(p.end_ns, ev.ts_ns);
      lane.events.push_back(ev);
    }
    p.lanes.push_back(std::move(lane));
  }
  if (p.start_ns > p.end_ns) p.start_ns = p.end_ns = 0;
  build_tree(p);
  for (Lane& lane : p.lanes) p.stats.events_captured += lane.recorded;
  return Imported{std::move(p)};
}

}  // namespace mlprof
