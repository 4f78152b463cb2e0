#include "formats/json_doc.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <array>
#include <limits>
#include <vector>

#include "formats/json_write.h"

namespace mlprof {

namespace {
constexpr uint64_t kMaxNs = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr uint64_t kMaxCount = std::numeric_limits<uint32_t>::max();
uint64_t ns(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }
}  // namespace

// Lambdas without captures: plain function pointers, one table for the
// writer and the reader.
const std::array<SpanValueType, 14> kSpanValueTypes = {{
    {"cpu", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.on_cpu_ns); },
     [](SpanKernel& k, uint64_t v) { k.on_cpu_ns = static_cast<int64_t>(v); }},
    {"off_cpu", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.off_cpu_ns); },
     [](SpanKernel& k, uint64_t v) { k.off_cpu_ns = static_cast<int64_t>(v); }},
    {"blocked", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.blocked_ns); },
     [](SpanKernel& k, uint64_t v) { k.blocked_ns = static_cast<int64_t>(v); }},
    {"runq", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.runq_ns); },
     [](SpanKernel& k, uint64_t v) { k.runq_ns = static_cast<int64_t>(v); }},
    {"voluntary_switches", "count", kMaxCount,
     [](const SpanKernel& k) { return static_cast<uint64_t>(k.voluntary_switches); },
     [](SpanKernel& k, uint64_t v) { k.voluntary_switches = static_cast<uint32_t>(v); }},
    {"involuntary_switches", "count", kMaxCount,
     [](const SpanKernel& k) { return static_cast<uint64_t>(k.involuntary_switches); },
     [](SpanKernel& k, uint64_t v) { k.involuntary_switches = static_cast<uint32_t>(v); }},
    {"waker", "tid", std::numeric_limits<uint64_t>::max(),
     [](const SpanKernel& k) { return k.top_waker_tid; },
     [](SpanKernel& k, uint64_t v) { k.top_waker_tid = v; }},
    {"waker_blocked", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.top_waker_ns); },
     [](SpanKernel& k, uint64_t v) { k.top_waker_ns = static_cast<int64_t>(v); }},
    // 1 timer, 2 softirq, 3 hardirq (WakerKind); absent: a task (waker).
    {"waker_kind", "kind", 3,
     [](const SpanKernel& k) { return static_cast<uint64_t>(k.top_waker_kind); },
     [](SpanKernel& k, uint64_t v) { k.top_waker_kind = static_cast<WakerKind>(v); }},
    {"own_off_cpu", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.own_off_cpu_ns); },
     [](SpanKernel& k, uint64_t v) { k.own_off_cpu_ns = static_cast<int64_t>(v); }},
    {"own_blocked", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.own_blocked_ns); },
     [](SpanKernel& k, uint64_t v) { k.own_blocked_ns = static_cast<int64_t>(v); }},
    {"own_runq", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.own_runq_ns); },
     [](SpanKernel& k, uint64_t v) { k.own_runq_ns = static_cast<int64_t>(v); }},
    // Of own_blocked: asleep waiting for the GIL, and for a CPython lock.
    {"gil_wait", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.own_gil_ns); },
     [](SpanKernel& k, uint64_t v) { k.own_gil_ns = static_cast<int64_t>(v); }},
    {"lock_wait", "ns", kMaxNs, [](const SpanKernel& k) { return ns(k.own_lock_ns); },
     [](SpanKernel& k, uint64_t v) { k.own_lock_ns = static_cast<int64_t>(v); }},
}};

namespace {

using json_write::JsonWriter;
using json_write::write_string;

// Absent values ("" or -1) are written as null.
void write_optional(JsonWriter& w, const std::string& s) {
  if (s.empty()) {
    w.Null();
  } else {
    write_string(w, s);
  }
}
void write_optional(JsonWriter& w, int64_t v) {
  if (v < 0) {
    w.Null();
  } else {
    w.Int64(v);
  }
}

void write_fields(JsonWriter& w, std::initializer_list<std::string_view> fields) {
  w.StartArray();
  for (const std::string_view f : fields) write_string(w, f);
  w.EndArray();
}

constexpr std::array<std::string_view, 8> kFixedMetaKeys = {
    "format", "version",  "captured_depth", "view_depth",
    "clock",  "start_ns", "end_ns",         "duration_ns"};

void write_meta(JsonWriter& w, const Profile& p, int view_depth) {
  w.Key("meta");
  w.StartObject();
  w.Key("format");
  w.String("mlflow-profiler");
  w.Key("version");
  w.Int(kDocumentVersion);
  w.Key("captured_depth");
  w.Int(p.captured_depth);
  w.Key("view_depth");
  if (view_depth < 0) {
    w.Null();
  } else {
    w.Int(view_depth);
  }
  w.Key("clock");
  w.String("CLOCK_MONOTONIC");
  w.Key("start_ns");
  w.Int64(p.start_ns);
  w.Key("end_ns");
  w.Int64(p.end_ns);
  w.Key("duration_ns");
  w.Int64(p.end_ns - p.start_ns);
  for (const auto& [key, value] : p.meta) {
    // Provenance never overrides the keys the format defines.
    bool fixed = false;
    for (const std::string_view k : kFixedMetaKeys) fixed = fixed || k == key;
    if (fixed) continue;
    write_string(w, key);
    write_string(w, value);
  }
  w.EndObject();
}

// The long-form span values: the kernel figures, one row per non-zero value
// (absent reads as 0), then the values measured in process (cpu_time,
// alloc_bytes: a row per value taken, 0 included; absent: not taken). A span
// with the kernel's "cpu" keeps that one (a type appears once per span).
void write_span_values(JsonWriter& w, const Profile& p, const std::vector<int32_t>* renumbered) {
  w.Key("span_value_fields");
  write_fields(w, {"span", "type", "unit", "value"});
  w.Key("span_values");
  w.StartArray();
  const bool attributed = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  for (const SpanValue& v : p.values) {
    if (v.span < 0 || static_cast<size_t>(v.span) >= p.spans.size()) continue;
    const int32_t span = renumbered == nullptr ? v.span : (*renumbered)[v.span];
    if (span < 0) continue;
    const ValueKindName& name = kValueKindNames[static_cast<int>(v.kind)];
    if (attributed && v.kind == ValueKind::kCpuNs && p.kernel.spans[v.span].on_cpu_ns != 0)
      continue;
    w.StartArray();
    w.Int(span);
    write_string(w, name.type);
    write_string(w, name.unit);
    w.Uint64(v.value);
    w.EndArray();
  }
  for (size_t i = 0; attributed && i < p.spans.size(); ++i) {
    const int32_t span = renumbered == nullptr ? static_cast<int32_t>(i) : (*renumbered)[i];
    if (span < 0) continue;
    const SpanKernel& k = p.kernel.spans[i];
    for (const SpanValueType& t : kSpanValueTypes) {
      const uint64_t v = t.get(k);
      if (v == 0) continue;
      w.StartArray();
      w.Int(span);
      write_string(w, t.type);
      write_string(w, t.unit);
      w.Uint64(v);
      w.EndArray();
    }
  }
  w.EndArray();
}

void write_kernel(JsonWriter& w, const Profile& p, const std::vector<int32_t>* renumbered) {
  w.Key("kernel");
  w.StartObject();
  w.Key("lost_events");
  w.Uint64(p.kernel.lost_events);
  w.Key("off_cpu_fields");
  write_fields(w, {"tid", "pid", "start_ns", "wake_ns", "end_ns", "blocked", "waker_tid",
                   "prev_state", "syscall", "waker_kind", "waker_name", "wait"});
  w.Key("off_cpu");
  w.StartArray();
  for (const OffCpuInterval& iv : p.kernel.off_cpu) {
    w.StartArray();
    w.Uint64(iv.tid);
    w.Uint(iv.pid);
    w.Int64(iv.start_ns);
    w.Int64(iv.wake_ns);
    w.Int64(iv.end_ns);
    w.Bool(iv.blocked);
    w.Uint64(iv.waker_tid);
    w.Uint(iv.prev_state);
    w.Int(iv.syscall);
    const char* kind = waker_kind_name(iv.waker_kind);
    w.String(kind ? kind : "task");
    write_string(w, iv.waker_name);
    const char* wait = wait_object_name(iv.wait);
    write_string(w, wait ? wait : "");
    w.EndArray();
  }
  w.EndArray();
  // Why spans waited: their own thread's blocked time by syscall, state and
  // futex object (SpanKernel::waits), inclusive like span_values, with the
  // waker that ended the most of it.
  w.Key("wait_fields");
  write_fields(w, {"span", "syscall", "syscall_name", "state", "blocked_ns", "count", "wait",
                   "waker", "waker_ns"});
  w.Key("waits");
  w.StartArray();
  const bool attributed = p.kernel.spans.size() == p.spans.size();
  for (size_t i = 0; attributed && i < p.spans.size(); ++i) {
    const int32_t span = renumbered == nullptr ? static_cast<int32_t>(i) : (*renumbered)[i];
    if (span < 0) continue;
    for (const WaitReason& wr : p.kernel.spans[i].waits) {
      w.StartArray();
      w.Int(span);
      w.Int(wr.syscall);
      write_string(w, syscall_name(wr.syscall));
      write_string(w, std::string_view(&wr.state, 1));
      w.Int64(wr.blocked_ns);
      w.Uint(wr.count);
      const char* wait = wait_object_name(wr.object);
      write_string(w, wait ? wait : "");
      write_string(w, wr.waker);
      w.Int64(wr.waker_ns);
      w.EndArray();
    }
  }
  w.EndArray();
  w.Key("thread_fields");
  write_fields(
      w, {"tid", "pid", "parent_tid", "start_ns", "end_ns", "name", "started_under", "exit_code"});
  w.Key("threads");
  w.StartArray();
  for (const ThreadLifetime& t : p.kernel.threads) {
    // In a view, a span left out hands its threads to its nearest kept ancestor.
    int32_t under = t.started_under;
    if (under >= static_cast<int64_t>(p.spans.size())) under = -1;
    if (renumbered != nullptr) {
      while (under >= 0 && (*renumbered)[static_cast<size_t>(under)] < 0) {
        under = p.spans[static_cast<size_t>(under)].parent;
      }
      if (under >= 0) under = (*renumbered)[static_cast<size_t>(under)];
    }
    w.StartArray();
    w.Uint64(t.tid);
    w.Uint(t.pid);
    w.Uint64(t.parent_tid);
    w.Int64(t.start_ns);
    w.Int64(t.end_ns);
    write_string(w, t.name);
    w.Int(under);
    w.Int(t.exit_code);
    w.EndArray();
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace

std::string to_json_document(const Profile& p, const ViewOptions& opts) {
  const int view_depth = opts.depth < 0 ? -1 : opts.depth;
  rapidjson::StringBuffer buffer;
  // About 60 bytes per span row; reserving avoids most regrowth on big profiles.
  buffer.Reserve(4096 + p.spans.size() * 64);
  JsonWriter w(buffer);
  w.StartObject();
  write_meta(w, p, view_depth);

  w.Key("stats");
  w.StartObject();
  w.Key("events_captured");
  w.Uint64(p.stats.events_captured);
  w.Key("events_skipped");
  w.Uint64(p.stats.events_skipped);
  w.Key("unmatched_returns");
  w.Uint64(p.stats.unmatched_returns);
  w.EndObject();

  const StringTable& strings = p.functions.strings();
  w.Key("strings");
  w.StartArray();
  for (uint32_t i = 0; i < strings.size(); ++i) write_string(w, strings.get(i));
  w.EndArray();

  w.Key("function_fields");
  write_fields(w, {"name", "module", "file", "line", "kind", "user_code"});
  w.Key("functions");
  w.StartArray();
  for (uint32_t i = 0; i < p.functions.size(); ++i) {
    const FunctionInfo& fn = p.functions.get(i);
    w.StartArray();
    w.Uint(fn.name);
    w.Uint(fn.module);
    w.Uint(fn.file);
    w.Int(fn.line);
    w.Uint(static_cast<unsigned>(fn.kind));
    w.Uint(fn.user_code ? 1 : 0);
    w.EndArray();
  }
  w.EndArray();

  w.Key("lanes");
  w.StartArray();
  for (const Lane& lane : p.lanes) {
    w.StartObject();
    w.Key("thread_id");
    w.Uint64(lane.thread_id);
    w.Key("native_tid");
    w.Uint64(lane.native_tid);
    w.Key("thread_name");
    write_string(w, lane.thread_name);
    w.Key("task");
    w.Uint(lane.task);
    w.Key("parent_lane");
    w.Int(lane.parent_lane);
    w.Key("parent_call");
    w.Uint(lane.parent_call);
    w.Key("events");
    w.Uint64(lane.recorded);
    w.Key("dropped");
    w.Uint64(lane.dropped);
    w.Key("truncated");
    w.Bool(lane.truncated);
    // The agent's provenance; absent (0) in an in-process profile.
    if (lane.pid != 0) {
      w.Key("pid");
      w.Uint(lane.pid);
    }
    if (lane.session != 0) {
      w.Key("session");
      w.Uint64(lane.session);
    }
    if (!lane.trace_id.empty()) {  // the session's trace context, when one was active
      w.Key("trace_id");
      write_string(w, lane.trace_id);
      w.Key("span_id");
      write_string(w, lane.span_id);
    }
    w.EndObject();
  }
  w.EndArray();

  w.Key("span_fields");
  write_fields(w, {"parent", "function", "label", "lane", "depth", "flags", "start_ns", "end_ns",
                   "active_ns", "resumes", "waiting_ns", "resource"});
  // A view keeps spans at depth <= k. Parents are shallower, so they are kept
  // and come earlier: one pass renumbers.
  std::vector<int32_t> renumbered;
  if (view_depth >= 0) renumbered.assign(p.spans.size(), -1);
  int32_t next = 0;
  w.Key("spans");
  w.StartArray();
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    int32_t parent = s.parent;
    if (view_depth >= 0) {
      if (static_cast<int64_t>(s.depth) > view_depth) continue;
      renumbered[i] = next++;
      if (parent >= 0) parent = renumbered[parent];
    }
    w.StartArray();
    w.Int(parent);
    w.Uint(s.function);
    w.Uint(s.label);
    w.Uint(s.lane);
    w.Uint(s.depth);
    w.Uint(s.flags);
    w.Int64(s.start_ns);
    w.Int64(s.end_ns);
    w.Int64(s.active_ns);
    w.Uint(s.resumes);
    w.Int64(s.waiting_ns);
    w.Uint(s.resource);
    w.EndArray();
  }
  w.EndArray();

  auto kept = [&](int32_t span) { return view_depth < 0 ? span : renumbered[span]; };
  w.Key("segment_fields");
  write_fields(w, {"span", "start_ns", "end_ns", "resumes", "paused_ns"});
  w.Key("segments");
  w.StartArray();
  for (const Segment& seg : p.segments) {
    const int32_t span = kept(seg.span);
    if (span < 0) continue;
    w.StartArray();
    w.Int(span);
    w.Int64(seg.start_ns);
    w.Int64(seg.end_ns);
    w.Uint(seg.resumes);
    w.Int64(seg.paused_ns);
    w.EndArray();
  }
  w.EndArray();

  w.Key("io_fields");
  write_fields(w, {"span", "role", "name", "type", "shape", "dtype", "length", "size_bytes",
                   "device", "repr"});
  w.Key("io");
  w.StartArray();
  for (const SpanIO& io : p.io) {
    const int32_t span = kept(io.span);
    if (span < 0) continue;
    const IOSummary& sum = io.summary;
    w.StartArray();
    w.Int(span);
    w.Uint(static_cast<unsigned>(io.role));
    write_string(w, io.name);
    write_string(w, sum.type_name);
    if (sum.has_shape) {
      w.StartArray();
      for (const int64_t d : sum.shape) {
        if (d < 0) {
          w.Null();
        } else {
          w.Int64(d);
        }
      }
      w.EndArray();
    } else {
      w.Null();
    }
    write_optional(w, sum.dtype);
    write_optional(w, sum.length);
    write_optional(w, sum.size_bytes);
    write_optional(w, sum.device);
    write_optional(w, sum.repr_short);
    w.EndArray();
  }
  w.EndArray();
  if (!p.marks.empty()) {
    // Instants (optional table): a mark under a span the view cut is under
    // its nearest kept ancestor.
    auto kept_or_above = [&](int32_t span) {
      while (span >= 0 && kept(span) < 0) span = p.spans[static_cast<size_t>(span)].parent;
      return span < 0 ? -1 : kept(span);
    };
    w.Key("mark_fields");
    write_fields(w, {"lane", "ts_ns", "span", "name", "resource"});
    w.Key("marks");
    w.StartArray();
    for (const Mark& m : p.marks) {
      w.StartArray();
      w.Uint(m.lane);
      w.Int64(m.ts_ns);
      w.Int(kept_or_above(m.span));
      w.Uint(m.name);
      w.Uint(m.resource);
      w.EndArray();
    }
    w.EndArray();
  }
  if (p.kernel.present || !p.values.empty())
    write_span_values(w, p, view_depth < 0 ? nullptr : &renumbered);
  if (p.kernel.present) write_kernel(w, p, view_depth < 0 ? nullptr : &renumbered);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace mlprof
