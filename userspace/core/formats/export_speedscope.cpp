// speedscope's evented file format (https://www.speedscope.app/file-format-schema.json,
// src/lib/file-format-spec.ts of jlfwong/speedscope). Its importer
// (CallTreeProfileBuilder) throws when an event's "at" goes back in time,
// when a close names another frame than the one on top of the stack, and
// when frames are still open at the end; every profile here is one lane's
// stack walked in time order, so none of that can happen. A profile with the
// eBPF agent's kernel figures adds a "sampled" profile of off-CPU time.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "analysis/sched.h"
#include "formats/export.h"
#include "formats/export_util.h"
#include "formats/json_write.h"
#include "render/render_text.h"
#include "util/saturating.h"

namespace mlprof {

namespace {

using export_util::RunInterval;
using json_write::JsonWriter;
using json_write::write_string;

// Shared frames: one per distinct (display name, file, line).
class Frames {
 public:
  explicit Frames(const Profile& p) : p_(p) {}

  uint32_t of_span(const Span& s) {
    const uint32_t name = export_util::display_name_id(p_, s);
    uint32_t file = 0;
    int32_t line = 0;
    if (s.function < p_.functions.size()) {
      file = p_.functions.get(s.function).file;
      line = p_.functions.get(s.function).line;
    }
    const auto [it, inserted] = index_.try_emplace(Key{name, file, line}, keys_.size());
    if (inserted) keys_.push_back(Key{name, file, line});
    return it->second;
  }

  void write(JsonWriter& w) const {
    const StringTable& strings = p_.functions.strings();
    w.StartArray();
    for (const Key& k : keys_) {
      w.StartObject();
      w.Key("name");
      write_string(w, strings.get(k.name));
      if (k.file != 0) {
        w.Key("file");
        write_string(w, strings.get(k.file));
      }
      if (k.line > 0) {
        w.Key("line");
        w.Int(k.line);
      }
      w.EndObject();
    }
    w.EndArray();
  }

 private:
  struct Key {
    uint32_t name, file;
    int32_t line;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return (static_cast<size_t>(k.name) * 0x9e3779b97f4a7c15ULL) ^
             (static_cast<size_t>(k.file) << 20) ^ static_cast<size_t>(k.line);
    }
  };
  const Profile& p_;
  std::vector<Key> keys_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
};

void write_event(JsonWriter& w, const char* type, uint32_t frame, int64_t at) {
  w.StartObject();
  w.Key("type");
  w.String(type);
  w.Key("frame");
  w.Uint(frame);
  w.Key("at");
  w.Int64(at);
  w.EndObject();
}

// The eBPF agent's off-CPU time as one more profile, "sampled" with weights:
// one sample per span with self off-CPU time, its stack root first, weighted
// by that time in ns. speedscope's left-heavy and sandwich views then show
// where threads waited, summed over every thread.
void write_off_cpu_profile(JsonWriter& w, const Profile& p,
                           const std::vector<uint32_t>& span_frame) {
  const std::vector<SelfOffCpu> self = self_off_cpu(p);
  int64_t total = 0;
  for (const SelfOffCpu& s : self) total = saturating_add(total, s.off_cpu_ns);
  if (total == 0) return;
  w.StartObject();
  w.Key("type");
  w.String("sampled");
  w.Key("name");
  w.String("off-CPU time (all threads)");
  w.Key("unit");
  w.String("nanoseconds");
  w.Key("startValue");
  w.Int64(0);
  w.Key("endValue");
  w.Int64(total);
  w.Key("samples");
  w.StartArray();
  std::vector<uint32_t> stack;
  for (size_t i = 0; i < self.size(); ++i) {
    if (self[i].off_cpu_ns == 0) continue;
    stack.clear();
    for (auto j = static_cast<int32_t>(i); j >= 0 && stack.size() <= p.spans.size();
         j = p.spans[static_cast<size_t>(j)].parent) {
      stack.push_back(span_frame[static_cast<size_t>(j)]);
    }
    w.StartArray();
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) w.Uint(*it);
    w.EndArray();
  }
  w.EndArray();
  w.Key("weights");
  w.StartArray();
  for (const SelfOffCpu& s : self) {
    if (s.off_cpu_ns != 0) w.Int64(s.off_cpu_ns);
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace

std::string to_speedscope(const Profile& p) {
  const int64_t origin = export_util::time_origin(p);
  const auto lanes = export_util::lane_intervals(p);
  int64_t end = p.end_ns;
  for (const auto& lane : lanes) {
    for (const RunInterval& iv : lane) end = std::max(end, iv.end_ns);
  }

  Frames frames(p);
  std::vector<uint32_t> span_frame(p.spans.size());
  for (size_t i = 0; i < p.spans.size(); ++i) span_frame[i] = frames.of_span(p.spans[i]);

  rapidjson::StringBuffer buffer;
  // Two events of about 32 bytes per span.
  buffer.Reserve(4096 + p.spans.size() * 72);
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("$schema");
  w.String("https://www.speedscope.app/file-format-schema.json");
  w.Key("exporter");
  w.String("mlflow-profiler");
  std::string name = "mlflow-profiler";
  if (const auto pid = p.meta.find("pid"); pid != p.meta.end()) name += ", pid " + pid->second;
  w.Key("name");
  write_string(w, name);
  w.Key("activeProfileIndex");
  w.Int(0);

  w.Key("shared");
  w.StartObject();
  w.Key("frames");
  frames.write(w);
  w.EndObject();
  w.Key("profiles");
  w.StartArray();
  std::vector<const RunInterval*> stack;
  for (size_t li = 0; li < lanes.size(); ++li) {
    if (lanes[li].empty()) continue;
    w.StartObject();
    w.Key("type");
    w.String("evented");
    w.Key("name");
    write_string(w, lane_title(p.lanes[li]));
    w.Key("unit");
    w.String("nanoseconds");
    w.Key("startValue");
    w.Int64(0);
    w.Key("endValue");
    w.Int64(end - origin);
    w.Key("events");
    w.StartArray();
    stack.clear();
    for (const RunInterval& iv : lanes[li]) {
      while (!stack.empty() && !export_util::stays_open(*stack.back(), iv)) {
        write_event(w, "C", span_frame[stack.back()->span], stack.back()->end_ns - origin);
        stack.pop_back();
      }
      write_event(w, "O", span_frame[iv.span], iv.start_ns - origin);
      stack.push_back(&iv);
    }
    while (!stack.empty()) {
      write_event(w, "C", span_frame[stack.back()->span], stack.back()->end_ns - origin);
      stack.pop_back();
    }
    w.EndArray();
    w.EndObject();
  }
  if (p.kernel.present) write_off_cpu_profile(w, p, span_frame);
  w.EndArray();

  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace mlprof
