// Adding to the store (docs/store.md): a Profile, or sampled stacks, as the
// rows of one source. Functions, locations, call paths and value types are
// shared by every source (looked up, else inserted); the rest is the
// source's own, written in batches so an add's memory stays bounded.

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>
#include <unordered_map>

#include "analysis/sched.h"
#include "formats/export_util.h"
#include "formats/json_doc.h"  // kSpanValueTypes
#include "store/store.h"
#include "store/store_internal.h"
#include "views/waiting.h"

namespace mlprof {

using namespace store_detail;

namespace {

SqlValue text_or_null(const std::string& s) { return s.empty() ? SqlValue{} : SqlValue{s}; }

SqlValue meta_int(const Profile& p, const char* key) {
  const auto it = p.meta.find(key);
  if (it == p.meta.end()) return {};
  int64_t v = 0;
  const char* end = it->second.data() + it->second.size();
  const auto [ptr, ec] = std::from_chars(it->second.data(), end, v);
  return ec == std::errc() && ptr == end ? SqlValue{v} : SqlValue{};
}

SqlValue meta_text(const Profile& p, const SourceInfo& info,
                   std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (const auto it = info.labels.find(key); it != info.labels.end()) return it->second;
    if (const auto it = p.meta.find(key); it != p.meta.end()) return it->second;
  }
  return {};
}

int64_t reserve(StoreDriver& d, const char* table, int64_t n) {
  const auto rows =
      d.query("UPDATE id_counters SET next_id = next_id + ? WHERE name = ? RETURNING next_id - ?",
              {n, std::string(table), n});
  if (rows.size() != 1)
    throw StoreFailure(std::string("the store's id_counters has no row for ") + table);
  return as_int(rows[0][0]);
}

// The rows of one INSERT, sent in batches: a large profile never holds all
// its rows as SqlRows at once (about 400 bytes a span), which bounds an
// add's memory whatever the profile's size. flush() sends the rest (none:
// no statement). Rows that refer to another inserter's rows name it as
// `after`: it is flushed first, since foreign keys are checked per statement.
class Inserter {
 public:
  static constexpr size_t kBatch = 8192;
  Inserter(StoreDriver& d, std::string sql, Inserter* after = nullptr)
      : d_(d), sql_(std::move(sql)), after_(after) {}
  void add(SqlRow row) {
    rows_.push_back(std::move(row));
    if (rows_.size() >= kBatch) flush();
  }
  void flush() {
    if (rows_.empty()) return;
    if (after_ != nullptr) after_->flush();
    d_.execute_many(sql_, rows_);
    rows_.clear();
  }

 private:
  StoreDriver& d_;
  std::string sql_;
  Inserter* after_;
  std::vector<SqlRow> rows_;
};

// A source's provenance rows: its meta verbatim, and the labels it was added
// with under their label_key (store.h's kLabelPrefix).
void add_labels(StoreDriver& d, int64_t source_id, const std::map<std::string, std::string>& meta,
                const SourceInfo& info) {
  std::map<std::string, std::string> labels = meta;
  for (const auto& [k, v] : info.labels) labels[label_key(k)] = v;
  Inserter rows(d, "INSERT INTO source_labels (source_id, key, value) VALUES (?, ?, ?)");
  for (const auto& [k, v] : labels) rows.add({source_id, k, v});
  rows.flush();
}

// Functions, locations, stacks and value types are stored once across
// sources: looked up, else inserted (ON CONFLICT: a concurrent writer won).
class Dictionaries {
 public:
  explicit Dictionaries(StoreDriver& d) : d_(d) {}

  int64_t function(const FunctionTable& table, uint32_t id) {
    if (const auto it = functions_.find(id); it != functions_.end()) return it->second;
    const FunctionInfo& f = table.get(id);
    const auto& s = table.strings();
    const std::string& name = s.get(f.name);
    const SqlRow key{name,
                     name,
                     s.get(f.file),
                     int64_t{f.line},
                     s.get(f.module),
                     int64_t(f.kind),
                     int64_t{f.user_code ? 1 : 0}};
    const int64_t out = upsert("functions",
                               "INSERT INTO functions (function_id, name, system_name, filename, "
                               "start_line, module, kind, user_code) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                               "SELECT function_id FROM functions WHERE name = ? AND system_name = "
                               "? AND filename = ? AND start_line = ? "
                               "AND module = ? AND kind = ? AND user_code = ?",
                               key);
    return functions_[id] = out;
  }

  int64_t location(int64_t function_id, int64_t line, const std::string& label) {
    const auto k = std::make_tuple(function_id, line, label);
    if (const auto it = locations_.find(k); it != locations_.end()) return it->second;
    const int64_t out =
        upsert("locations",
               "INSERT INTO locations (location_id, function_id, line, label) VALUES (?, ?, ?, ?) "
               "ON CONFLICT DO NOTHING",
               "SELECT location_id FROM locations WHERE function_id = ? AND line = ? AND label = ?",
               {function_id, line, label});
    return locations_[k] = out;
  }

  int64_t stack(int64_t parent, int64_t location, int64_t depth) {
    const auto k = std::make_pair(parent, location);
    if (const auto it = stacks_.find(k); it != stacks_.end()) return it->second;
    const auto found =
        d_.query("SELECT stack_id FROM stacks WHERE parent_stack_id = ? AND location_id = ?",
                 {parent, location});
    int64_t out;
    if (!found.empty()) {
      out = as_int(found[0][0]);
    } else {
      out = reserve(d_, "stacks", 1);
      d_.execute(
          "INSERT INTO stacks (stack_id, parent_stack_id, location_id, depth) VALUES (?, ?, ?, ?) "
          "ON CONFLICT DO NOTHING",
          {out, parent, location, depth});
      out = as_int(
          d_.query("SELECT stack_id FROM stacks WHERE parent_stack_id = ? AND location_id = ?",
                   {parent, location})
              .at(0)
              .at(0));
    }
    return stacks_[k] = out;
  }

  int64_t value_type(const std::string& type, const std::string& unit) {
    const auto k = std::make_pair(type, unit);
    if (const auto it = types_.find(k); it != types_.end()) return it->second;
    const int64_t out = upsert(
        "value_types",
        "INSERT INTO value_types (type_id, type, unit) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        "SELECT type_id FROM value_types WHERE type = ? AND unit = ?", {type, unit});
    return types_[k] = out;
  }

 private:
  int64_t upsert(const char* table, const std::string& insert, const std::string& select,
                 const SqlRow& key) {
    auto found = d_.query(select, key);
    if (!found.empty()) return as_int(found[0][0]);
    SqlRow row{reserve(d_, table, 1)};
    row.insert(row.end(), key.begin(), key.end());
    d_.execute(insert, row);
    found = d_.query(select, key);
    if (found.empty()) throw StoreFailure(std::string("a row added to ") + table + " is not there");
    return as_int(found[0][0]);
  }

  StoreDriver& d_;
  std::unordered_map<uint32_t, int64_t> functions_;
  std::map<std::tuple<int64_t, int64_t, std::string>, int64_t> locations_;
  std::map<std::pair<int64_t, int64_t>, int64_t> stacks_;
  std::map<std::pair<std::string, std::string>, int64_t> types_;
};

std::string shape_text(const IOSummary& s) {
  std::string out;
  for (const int64_t d : s.shape) {
    if (!out.empty()) out += ',';
    out += std::to_string(d);
  }
  return out;
}

// A session of a profile: its lanes (in document order) and time window.
struct SessionPlan {
  uint32_t pid = 0;
  uint64_t serial = 0;
  std::vector<uint32_t> lanes;
  int64_t start_ns = 0, end_ns = 0;
  int64_t id = 0;
};

std::vector<SessionPlan> plan_sessions(const Profile& p,
                                       const std::vector<std::vector<int32_t>>& lane_spans) {
  std::vector<SessionPlan> out;
  for (uint32_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& lane = p.lanes[li];
    auto it = std::find_if(out.begin(), out.end(), [&](const SessionPlan& s) {
      return s.pid == lane.pid && s.serial == lane.session;
    });
    if (it == out.end()) {
      out.push_back(SessionPlan{lane.pid, lane.session, {}, INT64_MAX, INT64_MIN});
      it = out.end() - 1;
    }
    it->lanes.push_back(li);
    for (const int32_t s : lane_spans[li]) {
      it->start_ns = std::min(it->start_ns, p.spans[s].start_ns);
      it->end_ns = std::max(it->end_ns, p.spans[s].end_ns);
    }
  }
  for (auto& s : out) {
    // The profile's window when it is the only session (in process), or a
    // session without spans: its times are offsets from this start.
    if (out.size() == 1 || s.start_ns > s.end_ns) {
      s.start_ns = std::min(p.start_ns, s.start_ns);
      s.end_ns = std::max(p.end_ns, s.end_ns);
    }
  }
  return out;
}

// What made the profile: the tool its file names (meta "tool", set by the
// imports and the capture), or the agent's version line.
SqlValue tool_of(const std::map<std::string, std::string>& meta, const SourceInfo& info) {
  if (!info.tool.empty()) return info.tool;
  if (const auto it = meta.find("tool"); it != meta.end() && !it->second.empty()) return it->second;
  if (const auto it = meta.find("agent"); it != meta.end() && !it->second.empty()) {
    std::string line = it->second;  // "mlprof-ebpf 0.1.0"
    if (const auto space = line.find(' '); space != std::string::npos) line[space] = '@';
    return line;
  }
  return {};
}

// The sources row: 2.4's columns (start_unix_ns, docs/design/store.md's seconds, the
// tool and content hash) or the older ones, with `extra` columns and values.
void insert_source(StoreDriver& d, int64_t source_id, const SourceInfo& info,
                   const SqlValue& start_unix_ns, const std::map<std::string, std::string>& meta,
                   const std::string& columns, const SqlRow& values) {
  const bool v2_4 = has_2_(d, 4);
  std::string sql = "INSERT INTO sources (source_id, source_type, source_uri, " +
                    std::string(v2_4 ? "start_unix_ns, source_timestamp, tool, content_hash"
                                     : "source_timestamp") +
                    ", " + columns + ") VALUES (?, ?, ?, ?" + (v2_4 ? ", ? / 1e9, ?, ?" : "");
  SqlRow row{source_id, info.type, text_or_null(info.uri), start_unix_ns};
  if (v2_4)
    row.insert(row.end(), {start_unix_ns, tool_of(meta, info), text_or_null(info.content_hash)});
  for (const SqlValue& v : values) {
    sql += ", ?";
    row.push_back(v);
  }
  d.execute(sql + ")", row);
}

}  // namespace

int64_t add_profile(StoreDriver& d, const Profile& p, const SourceInfo& info) {
  std::vector<std::vector<int32_t>> lane_spans(p.lanes.size());
  for (int32_t s = 0; s < static_cast<int32_t>(p.spans.size()); ++s)
    lane_spans.at(p.spans[s].lane).push_back(s);
  std::vector<SessionPlan> sessions = plan_sessions(p, lane_spans);

  const int64_t source_id = reserve(d, "sources", 1);
  insert_source(
      d, source_id, info, meta_int(p, "start_unix_ns"), p.meta,
      "host, pid, container, pod, python, model_name, model_version, run_id, start_ns, end_ns, "
      "captured_depth, "
      "events_captured, events_skipped, unmatched_returns, kernel, lost_events, added_unix_ns",
      {meta_text(p, info, {"host"}), meta_int(p, "pid"),
       meta_text(p, info, {"container", "container.name"}), meta_text(p, info, {"pod", "k8s.pod"}),
       meta_text(p, info, {"python"}), meta_text(p, info, {"model", "model.name", "model.class"}),
       meta_text(p, info, {"version", "model.version"}),
       meta_text(p, info, {"run_id", "model.run_id"}), p.start_ns, p.end_ns,
       int64_t{p.captured_depth}, static_cast<int64_t>(p.stats.events_captured),
       static_cast<int64_t>(p.stats.events_skipped),
       static_cast<int64_t>(p.stats.unmatched_returns), int64_t{p.kernel.present ? 1 : 0},
       static_cast<int64_t>(p.kernel.lost_events), info.added_unix_ns});
  add_labels(d, source_id, p.meta, info);

  // Ids: sessions, lanes and samples in blocks; a session's samples contiguous.
  const int64_t session_base = reserve(d, "sessions", static_cast<int64_t>(sessions.size()));
  const int64_t lane_base = reserve(d, "lanes", static_cast<int64_t>(p.lanes.size()));
  const int64_t sample_base = reserve(d, "samples", static_cast<int64_t>(p.spans.size()));
  std::vector<int64_t> sample_id(p.spans.size(), 0), session_of_lane(p.lanes.size(), 0),
      session_start(p.lanes.size(), 0);
  int64_t next_sample = sample_base;
  std::vector<SqlRow> session_rows;
  for (size_t i = 0; i < sessions.size(); ++i) {
    SessionPlan& s = sessions[i];
    s.id = session_base + static_cast<int64_t>(i);
    const int64_t first = next_sample;
    for (const uint32_t li : s.lanes) {
      session_of_lane[li] = s.id;
      session_start[li] = s.start_ns;
      for (const int32_t span : lane_spans[li]) sample_id[span] = next_sample++;
    }
    session_rows.push_back({s.id, source_id, int64_t{s.pid}, static_cast<int64_t>(s.serial),
                            s.start_ns, s.end_ns, first, next_sample - first});
  }
  d.execute_many(
      "INSERT INTO sessions (session_id, source_id, pid, serial, start_ns, end_ns, "
      "first_sample_id, sample_count) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      session_rows);
  std::vector<SqlRow> trace_rows;  // a session's lanes all carry its trace context
  for (const SessionPlan& s : sessions) {
    const Lane& first = p.lanes[s.lanes.front()];
    if (!first.trace_id.empty()) trace_rows.push_back({s.id, first.trace_id, first.span_id});
  }
  const bool v2_2 = has_2_2(d);
  const bool v2_4 = has_2_(d, 4);
  if (!trace_rows.empty() && v2_2) {
    d.execute_many("INSERT INTO session_traces (session_id, trace_id, span_id) VALUES (?, ?, ?)",
                   trace_rows);
  }

  std::vector<SqlRow> lane_rows;
  for (uint32_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& l = p.lanes[li];
    const bool has_parent =
        l.parent_lane >= 0 && static_cast<uint32_t>(l.parent_lane) < p.lanes.size();
    lane_rows.push_back({lane_base + li, session_of_lane[li], int64_t{li},
                         static_cast<int64_t>(l.thread_id), static_cast<int64_t>(l.native_tid),
                         l.thread_name, int64_t{l.task},
                         has_parent ? SqlValue{lane_base + l.parent_lane} : SqlValue{},
                         int64_t{l.parent_call}, static_cast<int64_t>(l.recorded),
                         static_cast<int64_t>(l.dropped), int64_t{l.truncated ? 1 : 0}});
  }
  // Parent lanes come first (an adopted lane's parent is an earlier lane).
  d.execute_many(
      "INSERT INTO lanes (lane_id, session_id, ordinal, thread_id, native_tid, thread_name, task, "
      "parent_lane_id, "
      "parent_call, events, dropped, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      lane_rows);

  Dictionaries dict(d);
  const std::vector<int64_t> self = export_util::self_times(p);
  std::vector<int64_t> stack_of(p.spans.size(), 0);
  const bool v2_6 = has_2_(d, 6);  // 2.6: the span's resource
  Inserter sample_rows(
      d,
      v2_6   ? "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, "
               "end_ns, "
               "active_ns, self_ns, resumes, source_id, resource) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
               "?, ?, ?)"
      : v2_4 ? "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, "
               "end_ns, "
               "active_ns, self_ns, resumes, source_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
             : "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, "
               "end_ns, "
               "active_ns, self_ns, resumes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  std::vector<int32_t> order;  // sample id order: parents before children
  order.reserve(p.spans.size());
  for (const auto& s : sessions) {
    for (const uint32_t li : s.lanes)
      order.insert(order.end(), lane_spans[li].begin(), lane_spans[li].end());
  }
  for (const int32_t i : order) {
    const Span& sp = p.spans[i];
    const FunctionInfo& f = p.functions.get(sp.function);
    const std::string label = sp.label ? p.functions.strings().get(sp.label) : std::string();
    const int64_t location = dict.location(dict.function(p.functions, sp.function), f.line, label);
    const int64_t parent_stack = sp.parent >= 0 ? stack_of[sp.parent] : 0;
    stack_of[i] = dict.stack(parent_stack, location, int64_t{sp.depth});
    const int64_t base = session_start[sp.lane];
    const int64_t wall = sp.end_ns - sp.start_ns;
    SqlRow row{sample_id[i],
               lane_base + sp.lane,
               sp.parent >= 0 ? SqlValue{sample_id[sp.parent]} : SqlValue{},
               stack_of[i],
               int64_t{sp.flags},
               sp.start_ns - base,
               sp.end_ns - base,
               sp.active_ns == wall ? SqlValue{} : SqlValue{sp.active_ns},
               self[i],
               int64_t{sp.resumes}};
    if (v2_4) row.push_back(source_id);
    if (v2_6)
      row.push_back(sp.resource ? SqlValue{p.functions.strings().get(sp.resource)} : SqlValue{});
    sample_rows.add(std::move(row));
  }
  sample_rows.flush();

  // Per-span values, long form, one statement for both kinds. The kernel's
  // (the agent): a missing row reads as 0. Those measured in process
  // (cpu_time, alloc_bytes): a row per value taken, 0 included; a span with
  // the kernel's "cpu" keeps that one.
  Inserter value_rows(
      d, "INSERT INTO " + values_table(v2_4) + " (sample_id, type_id, value) VALUES (?, ?, ?)");
  const bool attributed = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  if (attributed) {
    for (const auto& vt : kSpanValueTypes) {
      const int64_t type_id = dict.value_type(std::string(vt.type), std::string(vt.unit));
      for (size_t i = 0; i < p.spans.size(); ++i) {
        const uint64_t v = vt.get(p.kernel.spans[i]);
        if (v) value_rows.add({sample_id[i], type_id, static_cast<int64_t>(v)});
      }
    }
  }
  for (const SpanValue& v : p.values) {
    if (attributed && v.kind == ValueKind::kCpuNs && p.kernel.spans[v.span].on_cpu_ns != 0)
      continue;
    const ValueKindName& name = kValueKindNames[static_cast<int>(v.kind)];
    value_rows.add({sample_id[v.span],
                    dict.value_type(std::string(name.type), std::string(name.unit)),
                    static_cast<int64_t>(v.value)});
  }
  int64_t waiting_type = -1;  // running vs waiting (views/waiting.h): a row per span that waited
  for (size_t i = 0; i < p.spans.size(); ++i) {
    if (p.spans[i].waiting_ns == 0) continue;
    if (waiting_type < 0) waiting_type = dict.value_type(kWaitingType, "ns");
    value_rows.add({sample_id[i], waiting_type, p.spans[i].waiting_ns});
  }
  value_rows.flush();
  // 2.5: a segment's coalesced resumes; an older store keeps it as a plain one.
  const bool v2_5 = has_2_(d, 5);
  Inserter segment_rows(
      d, v2_5
             ? "INSERT INTO segments (sample_id, start_ns, end_ns, resumes, paused_ns) VALUES "
               "(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
             : "INSERT INTO segments (sample_id, start_ns, end_ns) VALUES (?, ?, ?) ON CONFLICT DO "
               "NOTHING");
  for (const Segment& g : p.segments) {
    const int64_t base = session_start[p.spans.at(g.span).lane];
    if (v2_5) {
      segment_rows.add({sample_id[g.span], g.start_ns - base, g.end_ns - base,
                        static_cast<int64_t>(g.resumes), g.paused_ns});
    } else {
      segment_rows.add({sample_id[g.span], g.start_ns - base, g.end_ns - base});
    }
  }
  segment_rows.flush();
  Inserter io_rows(d,
                   "INSERT INTO io_summaries (sample_id, ordinal, role, name, type, shape, dtype, "
                   "length, size_bytes, "
                   "device, repr) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  int32_t last_span = -1;
  int64_t ordinal = 0;
  for (const SpanIO& io : p.io) {
    ordinal = io.span == last_span ? ordinal + 1 : 0;
    last_span = io.span;
    const IOSummary& s = io.summary;
    io_rows.add({sample_id.at(io.span), ordinal, int64_t(io.role), io.name, s.type_name,
                 s.has_shape ? SqlValue{shape_text(s)} : SqlValue{}, s.dtype, s.length,
                 s.size_bytes, s.device, s.repr_short});
  }
  io_rows.flush();
  const bool v2_3 = v2_2 && has_2_(d, 3);
  std::vector<SqlRow> off_rows;
  for (size_t i = 0; i < p.kernel.off_cpu.size(); ++i) {
    const OffCpuInterval& o = p.kernel.off_cpu[i];
    off_rows.push_back({source_id, static_cast<int64_t>(i), int64_t{o.pid},
                        static_cast<int64_t>(o.tid), o.start_ns, o.wake_ns, o.end_ns,
                        int64_t{o.blocked ? 1 : 0}, static_cast<int64_t>(o.waker_tid),
                        int64_t{o.prev_state}});
    if (v2_2) {
      off_rows.back().insert(
          off_rows.back().end(),
          {int64_t{o.syscall}, int64_t{static_cast<uint8_t>(o.waker_kind)}, o.waker_name});
    }
    if (v2_3) off_rows.back().push_back(std::string(wait_object_name(o.wait)));
  }
  if (!off_rows.empty()) {
    d.execute_many(v2_3 ? "INSERT INTO off_cpu_intervals (source_id, ordinal, pid, tid, start_ns, "
                          "wake_ns, end_ns, "
                          "blocked, waker_tid, prev_state, syscall, waker_kind, waker_name, wait) "
                          "VALUES (?, ?, ?, ?, "
                          "?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                   : v2_2 ? "INSERT INTO off_cpu_intervals (source_id, ordinal, pid, tid, "
                            "start_ns, wake_ns, end_ns, "
                            "blocked, waker_tid, prev_state, syscall, waker_kind, waker_name) "
                            "VALUES (?, ?, ?, ?, ?, ?, "
                            "?, ?, ?, ?, ?, ?, ?)"
                          : "INSERT INTO off_cpu_intervals (source_id, ordinal, pid, tid, "
                            "start_ns, wake_ns, end_ns, "
                            "blocked, waker_tid, prev_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   off_rows);
  }
  if (v2_2 && attributed) {  // why spans waited (SpanKernel::waits)
    Inserter wait_rows(
        d,
        v2_3
            ? "INSERT INTO span_waits (sample_id, syscall, state, blocked_ns, count, wait, waker, "
              "waker_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            : "INSERT INTO span_waits (sample_id, syscall, state, blocked_ns, count) VALUES (?, ?, "
              "?, ?, ?)");
    for (size_t i = 0; i < p.spans.size(); ++i) {
      if (!v2_3) {  // 2.2 keys a reason by (syscall, state): a futex's objects as one
        std::map<std::pair<int32_t, char>, std::pair<int64_t, int64_t>> sums;
        for (const WaitReason& w : p.kernel.spans[i].waits) {
          auto& t = sums[{w.syscall, w.state}];
          t.first += w.blocked_ns;
          t.second += w.count;
        }
        for (const auto& [key, t] : sums)
          wait_rows.add(
              {sample_id[i], int64_t{key.first}, std::string(1, key.second), t.first, t.second});
        continue;
      }
      for (const WaitReason& w : p.kernel.spans[i].waits) {
        wait_rows.add({sample_id[i], int64_t{w.syscall}, std::string(1, w.state), w.blocked_ns,
                       int64_t{w.count}, std::string(wait_object_name(w.object)), w.waker,
                       w.waker_ns});
      }
    }
    wait_rows.flush();
  }
  std::vector<SqlRow> thread_rows;
  for (size_t i = 0; i < p.kernel.threads.size(); ++i) {
    const ThreadLifetime& t = p.kernel.threads[i];
    const bool under =
        t.started_under >= 0 && static_cast<size_t>(t.started_under) < p.spans.size();
    thread_rows.push_back(
        {source_id, static_cast<int64_t>(i), int64_t{t.pid}, static_cast<int64_t>(t.tid),
         static_cast<int64_t>(t.parent_tid), t.start_ns, t.end_ns, t.name,
         under ? SqlValue{sample_id[t.started_under]} : SqlValue{}, int64_t{t.exit_code}});
  }
  if (!thread_rows.empty()) {
    d.execute_many(
        "INSERT INTO kernel_threads (source_id, ordinal, pid, tid, parent_tid, start_ns, end_ns, "
        "name, started_under, "
        "exit_code) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        thread_rows);
  }
  return source_id;
}

int64_t add_stack_samples(StoreDriver& d, const StackSamples& ss, const SourceInfo& info) {
  const int64_t source_id = reserve(d, "sources", 1);
  Profile meta_only;  // the meta lookups of add_profile
  meta_only.meta = ss.meta;
  insert_source(d, source_id, info, meta_int(meta_only, "start_unix_ns"), ss.meta,
                "sample_kind, host, pid, model_name, model_version, run_id, start_ns, end_ns, "
                "captured_depth, "
                "added_unix_ns",
                {std::string("stacks"), meta_text(meta_only, info, {"host"}),
                 meta_int(meta_only, "pid"), meta_text(meta_only, info, {"model", "model.name"}),
                 meta_text(meta_only, info, {"version", "model.version"}),
                 meta_text(meta_only, info, {"run_id"}), ss.start_ns, ss.end_ns, int64_t{-1},
                 info.added_unix_ns});
  const bool v2_4 = has_2_(d, 4);
  add_labels(d, source_id, ss.meta, info);

  const int64_t session_id = reserve(d, "sessions", 1);
  const int64_t lane_base = reserve(d, "lanes", static_cast<int64_t>(ss.threads.size()));
  const int64_t sample_base = reserve(d, "samples", static_cast<int64_t>(ss.samples.size()));
  d.execute(
      "INSERT INTO sessions (session_id, source_id, pid, serial, start_ns, end_ns, "
      "first_sample_id, sample_count) "
      "VALUES (?, ?, 0, 0, ?, ?, ?, ?)",
      {session_id, source_id, ss.start_ns, ss.end_ns, sample_base,
       static_cast<int64_t>(ss.samples.size())});
  std::vector<SqlRow> lane_rows;
  for (size_t i = 0; i < ss.threads.size(); ++i) {
    lane_rows.push_back({lane_base + static_cast<int64_t>(i), session_id, static_cast<int64_t>(i),
                         static_cast<int64_t>(ss.threads[i].id), int64_t{0}, ss.threads[i].name,
                         int64_t{0}, SqlValue{}, int64_t{0}, int64_t{0}, int64_t{0}, int64_t{0}});
  }
  d.execute_many(
      "INSERT INTO lanes (lane_id, session_id, ordinal, thread_id, native_tid, thread_name, task, "
      "parent_lane_id, "
      "parent_call, events, dropped, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      lane_rows);
  Dictionaries dict(d);
  std::vector<int64_t> type_ids;
  for (const auto& [type, unit] : ss.value_types) type_ids.push_back(dict.value_type(type, unit));
  Inserter sample_rows(
      d, v2_4 ? "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, "
                "end_ns, "
                "active_ns, self_ns, resumes, source_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
              : "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, "
                "end_ns, "
                "active_ns, self_ns, resumes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  Inserter value_rows(
      d, "INSERT INTO " + values_table(v2_4) + " (sample_id, type_id, value) VALUES (?, ?, ?)",
      &sample_rows);
  for (size_t i = 0; i < ss.samples.size(); ++i) {
    const StackSamples::Sample& s = ss.samples[i];
    int64_t stack = 0;
    int64_t depth = 0;
    for (const StackSamples::Frame& f : s.frames) {
      stack = dict.stack(stack, dict.location(dict.function(ss.functions, f.function), f.line, ""),
                         depth++);
    }
    const int64_t id = sample_base + static_cast<int64_t>(i);
    SqlRow row{id,         lane_base + s.thread, SqlValue{}, stack,      int64_t{0},
               SqlValue{}, SqlValue{},           SqlValue{}, SqlValue{}, int64_t{0}};
    if (v2_4) row.push_back(source_id);
    sample_rows.add(std::move(row));
    for (size_t v = 0; v < s.values.size() && v < type_ids.size(); ++v) {
      if (s.values[v] != 0) value_rows.add({id, type_ids[v], s.values[v]});
    }
  }
  value_rows.flush();
  sample_rows.flush();
  return source_id;
}

}  // namespace mlprof
