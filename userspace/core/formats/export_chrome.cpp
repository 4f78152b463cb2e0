// Chrome Trace Event JSON (docs/design/analysis.md, "Trace export"), in the shape Perfetto's JSON
// importer (src/trace_processor/importers/json/ of google/perfetto) takes without dropping
// anything:
// - "traceEvents" is the first key: its tokenizer ignores the rest of the
//   file after an outer key it does not know, and knows only traceEvents,
//   displayTimeUnit, otherData, metadata and systemTraceEvents.
// - "ph" and "ts" open every event: the tokenizer looks "ts" up by scanning
//   the keys in order and gives up on the whole file at an array value or an
//   escape it does not read (\uXXXX) met before it. No event holds an array.
// - pid and tid are numbers within uint32 (anything else becomes tid = pid).
// - Complete events on one (pid, tid) must nest or be disjoint: one that
//   starts inside another and ends after it is dropped
//   (slice_drop_overlapping_complete_event); at equal ts the longer one is
//   sorted first. Events here nest by construction (export_util's
//   lane_intervals) and are written in that order.
// - ts and dur are microseconds; export_util::append_us keeps nanoseconds
//   exact through its textual and its double readings.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analysis/sched.h"
#include "formats/export.h"
#include "formats/export_util.h"
#include "formats/json_write.h"
#include "model/resources.h"
#include "model/summary.h"
#include "render/render_text.h"

namespace mlprof {

namespace {

using export_util::RunInterval;
using json_write::JsonWriter;
using json_write::write_string;

// Above Linux's PID_MAX_LIMIT (2^22): never a real thread id.
constexpr uint32_t kSyntheticTidBase = 1u << 30;

void write_us(JsonWriter& w, std::string& scratch, int64_t ns) {
  scratch.clear();
  export_util::append_us(scratch, ns);
  w.RawValue(scratch.data(), scratch.size(), rapidjson::kNumberType);
}

// pid 0 is the kernel's idle task to Perfetto: a profile that names no
// process is drawn as process 1.
uint32_t shown_pid(uint32_t pid) { return pid != 0 ? pid : 1; }

// A thread's own track: (pid, tid).
using Track = std::pair<uint32_t, uint32_t>;

// One track per lane. A thread's own lane (task 0) keeps its kernel tid, so
// the trace lines up with kernel events of that thread, and the task-0 lanes
// of one thread in several sessions (a profile of many sessions) share it:
// they follow each other on one stack. Asyncio task lanes (and a lane whose
// tid is unknown) get a synthetic tid: two tasks on one thread overlap
// without nesting, so they cannot share a track.
std::vector<Track> lane_tracks(const Profile& p) {
  std::vector<Track> tracks(p.lanes.size(), Track{0, 0});
  std::set<uint32_t> used;
  for (size_t i = 0; i < p.lanes.size(); ++i) {
    const Lane& lane = p.lanes[i];
    tracks[i].first = shown_pid(lane_pid(p, lane));
    if (lane.task != 0 || lane.native_tid == 0 ||
        lane.native_tid > std::numeric_limits<uint32_t>::max()) {
      continue;
    }
    tracks[i].second = static_cast<uint32_t>(lane.native_tid);
    used.insert(tracks[i].second);
  }
  // Kernel-only threads keep their tids too.
  for (const ThreadLifetime& t : p.kernel.threads) {
    if (t.tid <= std::numeric_limits<uint32_t>::max()) used.insert(static_cast<uint32_t>(t.tid));
  }
  uint32_t next = kSyntheticTidBase;
  for (size_t i = 0; i < p.lanes.size(); ++i) {
    if (tracks[i].second != 0) continue;
    while (used.count(next)) ++next;
    tracks[i].second = next;
    used.insert(next);
  }
  return tracks;
}

const char* category(const Profile& p, const Span& s) {
  if (s.flags & kSpanWait)
    return "wait";  // the event loop idle: its own colour in a viewer's legend
  if (s.flags & kSpanBlock) return "block";
  if (s.flags & kSpanCFunction) return "c";
  if (s.function < p.functions.size() && p.functions.get(s.function).kind == FunctionKind::kC) {
    return "c";
  }
  return "python";
}

// "path:line" of each function, built once rather than once per event.
std::vector<std::string> function_locations(const Profile& p) {
  const StringTable& strings = p.functions.strings();
  std::vector<std::string> out(p.functions.size());
  for (uint32_t i = 0; i < p.functions.size(); ++i) {
    const FunctionInfo& fn = p.functions.get(i);
    if (fn.file == 0) continue;
    out[i] = strings.get(fn.file);
    if (fn.line > 0) out[i] += ":" + std::to_string(fn.line);
  }
  return out;
}

void write_span_args(JsonWriter& w, const Profile& p, const std::vector<std::string>& locations,
                     int32_t idx, const RunInterval& iv, const ResourceCall* call = nullptr,
                     const std::string* resource = nullptr) {
  const Span& s = p.spans[idx];
  const StringTable& strings = p.functions.strings();
  w.Key("args");
  w.StartObject();
  w.Key("span");
  w.Int(idx);
  if (s.function < p.functions.size()) {
    const FunctionInfo& fn = p.functions.get(s.function);
    if (s.label != 0) {
      w.Key("function");
      write_string(w, strings.get(fn.name));
    }
    if (fn.module != 0) {
      w.Key("module");
      write_string(w, strings.get(fn.module));
    }
    if (!locations[s.function].empty()) {
      w.Key("file");
      write_string(w, locations[s.function]);
    }
  }
  const auto [first, last] = p.io_of(idx);
  bool inputs_open = false;
  for (const SpanIO* io = first; io != last; ++io) {
    if (io->role != IORole::kArgument) continue;
    if (!inputs_open) {
      w.Key("in");
      w.StartObject();
      inputs_open = true;
    }
    std::string name = io->name;
    if (name.empty()) {  // appended: `"arg" + std::string` trips GCC 12's -Wrestrict
      name = "arg";
      name += std::to_string(io - first);
    }
    w.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
    write_string(w, format_io(io->summary));
  }
  if (inputs_open) w.EndObject();
  for (const SpanIO* io = first; io != last; ++io) {
    if (io->role != IORole::kReturn) continue;
    w.Key("out");
    write_string(w, format_io(io->summary));
  }
  const std::string flags = export_util::flag_text(s.flags);
  if (!flags.empty()) {
    w.Key("flags");
    write_string(w, flags);
  }
  if (resource != nullptr) {
    w.Key("resource");
    write_string(w, *resource);
  } else if (s.resource != 0) {
    w.Key("resource");
    write_string(w, p.functions.strings().get(s.resource));
  }
  if (call != nullptr) {
    w.Key("slot");
    w.Uint(call->slot);
    w.Key("in flight");
    write_string(w, format_duration(call->end_ns - call->start_ns));
    if (call->queued_from_ns < call->start_ns) {
      w.Key("queued");
      write_string(w, format_duration(call->start_ns - call->queued_from_ns));
    }
  }
  if (s.waiting_ns > 0) {  // running vs waiting, of the wall time (views/waiting.h)
    w.Key("waiting");
    write_string(w, format_duration(s.waiting_ns));
    w.Key("running");
    write_string(w, format_duration(s.running_ns()));
  }
  if (s.flags & kSpanGenerator) {
    w.Key("wall");
    write_string(w, format_duration(s.duration_ns()));
    w.Key("active");
    write_string(w, format_duration(s.active_ns));
    w.Key("resumes");
    w.Uint(s.resumes);
    if (iv.segments > 0) {
      w.Key("segment");
      write_string(w, std::to_string(iv.segment) + " of " + std::to_string(iv.segments));
    }
    if (iv.folded_resumes > 0) {  // coalesced: drawn whole, paused inside
      w.Key("folded resumes");
      w.Uint(iv.folded_resumes);
      w.Key("paused");
      write_string(w, format_duration(iv.paused_ns));
    }
  }
  w.EndObject();
}

// "active lanes": how many lanes run a span, at each time that changes. A
// lane is running from the start of its first top-level interval to the end
// of its last one, minus the gaps between them.
void write_active_lanes(JsonWriter& w, const std::vector<std::vector<RunInterval>>& lanes,
                        uint32_t pid, int64_t origin, std::string& scratch) {
  std::vector<std::pair<int64_t, int>> changes;
  for (const auto& lane : lanes) {
    bool open = false;
    int64_t run_start = 0, run_end = 0;
    for (const RunInterval& iv : lane) {
      if (open && iv.start_ns <= run_end) {
        run_end = std::max(run_end, iv.end_ns);
        continue;
      }
      if (open) {
        changes.emplace_back(run_start, +1);
        changes.emplace_back(run_end, -1);
      }
      open = true;
      run_start = iv.start_ns;
      run_end = iv.end_ns;
    }
    if (open) {
      changes.emplace_back(run_start, +1);
      changes.emplace_back(run_end, -1);
    }
  }
  std::sort(changes.begin(), changes.end());
  int active = 0, written = -1;
  for (size_t i = 0; i < changes.size();) {
    const int64_t ts = changes[i].first;
    for (; i < changes.size() && changes[i].first == ts; ++i) active += changes[i].second;
    if (active == written) continue;
    written = active;
    w.StartObject();
    w.Key("ph");
    w.String("C");
    w.Key("ts");
    write_us(w, scratch, ts - origin);
    w.Key("pid");
    w.Uint(pid);
    w.Key("name");
    w.String("active lanes");
    w.Key("args");
    w.StartObject();
    w.Key("count");
    w.Int(active);
    w.EndObject();
    w.EndObject();
  }
}

void write_metadata_event(JsonWriter& w, const char* name, uint32_t pid, const uint32_t* tid,
                          const char* arg, const std::string* text, int number) {
  w.StartObject();
  w.Key("ph");
  w.String("M");
  w.Key("ts");
  w.Int(0);
  w.Key("pid");
  w.Uint(pid);
  if (tid != nullptr) {
    w.Key("tid");
    w.Uint(*tid);
  }
  w.Key("name");
  w.String(name);
  w.Key("args");
  w.StartObject();
  w.Key(arg);
  if (text != nullptr) {
    write_string(w, *text);
  } else {
    w.Int(number);
  }
  w.EndObject();
  w.EndObject();
}

// What a thread is called, for the off-CPU slices' waker: a lane's thread
// name, else the comm the agent saw.
std::map<uint64_t, std::string> thread_names(const Profile& p) {
  std::map<uint64_t, std::string> names;
  for (const ThreadLifetime& t : p.kernel.threads) {
    if (!t.name.empty()) names[t.tid] = t.name;
  }
  for (const Lane& lane : p.lanes) {
    if (lane.native_tid != 0 && !lane.thread_name.empty())
      names[lane.native_tid] = lane.thread_name;
  }
  return names;
}

void write_duration_arg(JsonWriter& w, const char* key, int64_t ns) {
  w.Key(key);
  write_string(w, format_duration(ns));
}

// Off-CPU intervals as slices on their thread's tracks: each piece of
// off_cpu_pieces() under the span it counts for (on that span's lane track,
// where it nests), the rest on the thread's own track (tid = its kernel tid),
// which no span of that thread covers at that time. A piece is drawn, not
// the whole interval: an interval that crosses a span boundary would not nest.
void write_off_cpu(JsonWriter& w, const Profile& p, const std::vector<Track>& tracks,
                   int64_t origin, std::string& scratch) {
  const std::map<uint64_t, std::string> names = thread_names(p);
  const std::vector<OffCpuPiece> pieces = off_cpu_pieces(p);
  for (const OffCpuPiece& piece : pieces) {
    const OffCpuInterval& iv = p.kernel.off_cpu[piece.interval];
    Track track{shown_pid(iv.pid != 0 ? iv.pid : profile_pid(p)), 0};
    if (piece.own_thread && piece.span >= 0) {
      track = tracks[p.spans[static_cast<size_t>(piece.span)].lane];
    } else if (iv.tid <= std::numeric_limits<uint32_t>::max()) {
      track.second = static_cast<uint32_t>(iv.tid);
    } else {
      continue;  // no uint32 tid to draw it on
    }
    w.StartObject();
    w.Key("ph");
    w.String("X");
    w.Key("ts");
    write_us(w, scratch, piece.start_ns - origin);
    w.Key("dur");
    write_us(w, scratch, piece.end_ns - piece.start_ns);
    w.Key("pid");
    w.Uint(track.first);
    w.Key("tid");
    w.Uint(track.second);
    w.Key("name");
    w.String(iv.blocked ? "off-CPU (blocked)" : "off-CPU (preempted)");
    w.Key("cat");
    w.String("off_cpu");
    w.Key("args");
    w.StartObject();
    write_duration_arg(w, "off_cpu", iv.off_ns());
    if (iv.blocked) write_duration_arg(w, "blocked", iv.blocked_ns());
    write_duration_arg(w, "runq", iv.runq_ns());
    if (iv.waker_tid != 0) {
      w.Key("waker_tid");
      w.Uint64(iv.waker_tid);
      if (const auto name = names.find(iv.waker_tid); name != names.end()) {
        w.Key("waker");
        write_string(w, name->second);
      }
    }
    w.Key("prev_state");
    w.Uint(iv.prev_state);
    if (piece.span >= 0) {
      w.Key("counts_for");
      write_string(w, p.display_name(p.spans[static_cast<size_t>(piece.span)]));
    }
    w.EndObject();
    w.EndObject();
  }
}

// Thread start and exit as instant events on the thread's own track.
void write_thread_events(JsonWriter& w, const Profile& p, int64_t origin, std::string& scratch) {
  for (const ThreadLifetime& t : p.kernel.threads) {
    if (t.tid > std::numeric_limits<uint32_t>::max()) continue;
    const uint32_t pid = shown_pid(t.pid != 0 ? t.pid : profile_pid(p));
    for (const bool start : {true, false}) {
      const int64_t ts = start ? t.start_ns : t.end_ns;
      if (ts == 0) continue;  // before or after the capture
      w.StartObject();
      w.Key("ph");
      w.String("i");
      w.Key("ts");
      write_us(w, scratch, ts - origin);
      w.Key("pid");
      w.Uint(pid);
      w.Key("tid");
      w.Uint(static_cast<uint32_t>(t.tid));
      w.Key("s");
      w.String("t");
      w.Key("name");
      w.String(start ? "thread start" : "thread exit");
      w.Key("cat");
      w.String("thread");
      w.Key("args");
      w.StartObject();
      w.Key("thread");
      write_string(w, t.name);
      if (start) {
        w.Key("parent_tid");
        w.Uint64(t.parent_tid);
        if (t.started_under >= 0 && static_cast<size_t>(t.started_under) < p.spans.size()) {
          w.Key("started_under");
          write_string(w, p.display_name(p.spans[static_cast<size_t>(t.started_under)]));
        }
      } else {
        w.Key("exit_code");
        w.Int(t.exit_code);
      }
      w.EndObject();
      w.EndObject();
    }
  }
}

// One instant event ("ph": "i"): scope "t" on a thread's track, "p" across
// a resource's process.
void write_instant(JsonWriter& w, const Profile& p, const Mark& m, uint32_t pid,
                   const uint32_t* tid, int64_t origin, std::string& scratch) {
  const StringTable& strings = p.functions.strings();
  w.StartObject();
  w.Key("ph");
  w.String("i");
  w.Key("ts");  // right after "ph": Perfetto's tokenizer scans for it
  write_us(w, scratch, m.ts_ns - origin);
  w.Key("s");
  w.String(tid ? "t" : "p");
  w.Key("pid");
  w.Uint(pid);
  if (tid) {
    w.Key("tid");
    w.Uint(*tid);
  }
  w.Key("name");
  write_string(w, strings.get(m.name));
  w.Key("cat");
  w.String("mark");
  w.Key("args");
  w.StartObject();
  if (m.resource != 0) {
    w.Key("resource");
    write_string(w, strings.get(m.resource));
  }
  if (m.span >= 0) {
    w.Key("under");
    write_string(w, p.display_name(p.spans[static_cast<size_t>(m.span)]));
  }
  w.EndObject();
  w.EndObject();
}

// docs/design/analysis.md, "Resources and slots": each resource a process (above any real pid),
// each slot in use a thread, each call a slice on the slot it took, and per resource the counters
// "in flight" and "queued" (model/resources.h).
constexpr uint32_t kResourcePidBase = 1u << 30;

void write_resources(JsonWriter& w, const Profile& p, const std::vector<Resource>& resources,
                     const std::vector<std::string>& locations, int64_t origin,
                     std::string& scratch) {
  const StringTable& strings = p.functions.strings();
  for (size_t k = 0; k < resources.size(); ++k) {
    const Resource& r = resources[k];
    const auto pid = static_cast<uint32_t>(kResourcePidBase + k);
    const std::string name = "resource " + strings.get(r.name);
    write_metadata_event(w, "process_name", pid, nullptr, "name", &name, 0);
    write_metadata_event(w, "process_sort_index", pid, nullptr, "sort_index", nullptr,
                         static_cast<int>(k) - 1000);
    for (uint32_t slot = 1; slot <= r.slots; ++slot) {
      const std::string title = "slot " + std::to_string(slot);
      write_metadata_event(w, "thread_name", pid, &slot, "name", &title, 0);
      write_metadata_event(w, "thread_sort_index", pid, &slot, "sort_index", nullptr,
                           static_cast<int>(slot));
    }
    for (const ResourceCall& c : r.calls) {
      const Span& s = p.spans[static_cast<size_t>(c.span)];
      w.StartObject();
      w.Key("ph");
      w.String("X");
      w.Key("ts");
      write_us(w, scratch, c.start_ns - origin);
      w.Key("dur");
      write_us(w, scratch, c.end_ns - c.start_ns);
      w.Key("pid");
      w.Uint(pid);
      w.Key("tid");
      w.Uint(c.slot);
      w.Key("name");
      write_string(w, p.display_name(s));
      w.Key("cat");
      w.String("resource");
      RunInterval whole;
      whole.span = c.span;
      write_span_args(w, p, locations, c.span, whole, &c, &strings.get(r.name));
      w.EndObject();
    }
    for (const Mark& m : p.marks) {
      if (m.resource == r.name) write_instant(w, p, m, pid, nullptr, origin, scratch);
    }
    for (const ResourceSample& smp : r.samples) {
      for (const bool queued : {false, true}) {
        if (queued && r.peak_queued == 0) continue;
        w.StartObject();
        w.Key("ph");
        w.String("C");
        w.Key("ts");
        write_us(w, scratch, smp.ts_ns - origin);
        w.Key("pid");
        w.Uint(pid);
        w.Key("name");
        w.String(queued ? "queued" : "in flight");
        w.Key("args");
        w.StartObject();
        w.Key("calls");
        w.Uint(queued ? smp.queued : smp.in_flight);
        w.EndObject();
        w.EndObject();
      }
    }
  }
}

// Time zero: the timeline's, or an earlier kernel event's.
int64_t trace_origin(const Profile& p) {
  int64_t origin = export_util::time_origin(p);
  if (!p.kernel.present) return origin;
  for (const OffCpuInterval& iv : p.kernel.off_cpu) origin = std::min(origin, iv.start_ns);
  for (const ThreadLifetime& t : p.kernel.threads) {
    if (t.start_ns != 0) origin = std::min(origin, t.start_ns);
    if (t.end_ns != 0) origin = std::min(origin, t.end_ns);
  }
  return origin;
}

void write_other_data(JsonWriter& w, const Profile& p, int64_t origin) {
  w.Key("otherData");
  w.StartObject();
  w.Key("producer");
  w.String("mlflow-profiler");
  w.Key("clock");
  w.String("CLOCK_MONOTONIC");
  w.Key("ts_origin_ns");  // ts 0 of this trace, on the clock above
  w.Int64(origin);
  w.Key("session_start_ns");
  w.Int64(p.start_ns);
  w.Key("session_end_ns");
  w.Int64(p.end_ns);
  w.Key("captured_depth");
  w.Int(p.captured_depth);
  uint64_t dropped = 0;
  for (const Lane& lane : p.lanes) dropped += lane.dropped;
  w.Key("dropped_calls");
  w.Uint64(dropped);
  if (p.kernel.present) {
    w.Key("lost_kernel_events");
    w.Uint64(p.kernel.lost_events);
  }
  static constexpr std::string_view kFixed[] = {
      "producer",       "clock",          "ts_origin_ns",  "session_start_ns",
      "session_end_ns", "captured_depth", "dropped_calls", "lost_kernel_events"};
  for (const auto& [key, value] : p.meta) {
    if (std::find(std::begin(kFixed), std::end(kFixed), key) != std::end(kFixed)) continue;
    write_string(w, key);
    write_string(w, value);
  }
  w.EndObject();
}

}  // namespace

std::string to_chrome_trace(const Profile& p) {
  const int64_t origin = trace_origin(p);
  const std::vector<Track> tracks = lane_tracks(p);
  const std::vector<bool> has_spans = export_util::lanes_with_spans(p);
  const auto lanes = export_util::lane_intervals(p);
  const std::vector<std::string> locations = function_locations(p);

  rapidjson::StringBuffer buffer;
  // About 250 bytes per event with its args.
  buffer.Reserve(4096 + (p.spans.size() + p.kernel.off_cpu.size()) * 256);
  JsonWriter w(buffer);
  std::string scratch;
  w.StartObject();
  w.Key("traceEvents");
  w.StartArray();

  // Processes in the order they first appear: lanes, then kernel-only threads.
  std::vector<uint32_t> pids;
  auto add_pid = [&](uint32_t pid) {
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
  };
  for (size_t li = 0; li < p.lanes.size(); ++li) {
    if (has_spans[li]) add_pid(tracks[li].first);
  }
  if (p.kernel.present) {
    for (const ThreadLifetime& t : p.kernel.threads)
      add_pid(shown_pid(t.pid != 0 ? t.pid : profile_pid(p)));
  }
  if (pids.empty()) add_pid(shown_pid(profile_pid(p)));
  std::string host;
  if (const auto it = p.meta.find("host"); it != p.meta.end() && !it->second.empty()) {
    host = " on " + it->second;
  }
  for (const uint32_t pid : pids) {
    const std::string process = "mlflow-profiler, pid " + std::to_string(pid) + host;
    write_metadata_event(w, "process_name", pid, nullptr, "name", &process, 0);
  }
  // One name per track, from the first lane drawn on it.
  // Without the pid and session: the process and the shared track say them.
  const std::vector<std::string> titles = lane_track_titles(p, false);
  std::set<Track> named;
  size_t lanes_shown = 0;
  for (size_t li = 0; li < p.lanes.size(); ++li) {
    if (!has_spans[li]) continue;
    ++lanes_shown;
    if (!named.insert(tracks[li]).second) continue;
    write_metadata_event(w, "thread_name", tracks[li].first, &tracks[li].second, "name",
                         &titles[li], 0);
    write_metadata_event(w, "thread_sort_index", tracks[li].first, &tracks[li].second, "sort_index",
                         nullptr, static_cast<int>(li));
  }
  if (p.kernel.present) {
    for (const ThreadLifetime& t : p.kernel.threads) {
      if (t.tid > std::numeric_limits<uint32_t>::max()) continue;
      const Track track{shown_pid(t.pid != 0 ? t.pid : profile_pid(p)),
                        static_cast<uint32_t>(t.tid)};
      if (!named.insert(track).second) continue;
      const std::string title = "thread " + (t.name.empty() ? std::to_string(t.tid) : t.name);
      write_metadata_event(w, "thread_name", track.first, &track.second, "name", &title, 0);
    }
  }

  for (size_t li = 0; li < lanes.size(); ++li) {
    for (const RunInterval& iv : lanes[li]) {
      const Span& s = p.spans[iv.span];
      w.StartObject();
      w.Key("ph");
      w.String("X");
      w.Key("ts");
      write_us(w, scratch, iv.start_ns - origin);
      w.Key("dur");
      write_us(w, scratch, iv.end_ns - iv.start_ns);
      w.Key("pid");
      w.Uint(tracks[li].first);
      w.Key("tid");
      w.Uint(tracks[li].second);
      w.Key("name");
      write_string(w, p.display_name(s));
      w.Key("cat");
      w.String(category(p, s));
      write_span_args(w, p, locations, iv.span, iv);
      w.EndObject();
    }
  }
  if (p.kernel.present) {
    write_off_cpu(w, p, tracks, origin, scratch);
    write_thread_events(w, p, origin, scratch);
  }
  for (const Mark& m : p.marks) {
    if (m.lane < p.lanes.size() && has_spans[m.lane]) {
      write_instant(w, p, m, tracks[m.lane].first, &tracks[m.lane].second, origin, scratch);
    }
  }
  if (lanes_shown > 1) write_active_lanes(w, lanes, pids.front(), origin, scratch);
  write_resources(w, p, resource_view(p), locations, origin, scratch);
  w.EndArray();

  w.Key("displayTimeUnit");
  w.String("ms");
  write_other_data(w, p, origin);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace mlprof
