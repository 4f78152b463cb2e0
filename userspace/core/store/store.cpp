#include "store/store.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>
#include <unordered_map>

#include "analysis/sched.h"
#include "formats/export_util.h"
#include "formats/json_doc.h"  // kSpanValueTypes
#include "views/waiting.h"

namespace mlprof {

int64_t sql_int(const SqlValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (std::holds_alternative<std::monostate>(v)) return 0;
  throw StoreFailure("the store holds a text where a number belongs");
}

std::string sql_text(const SqlValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (std::holds_alternative<std::monostate>(v)) return {};
  throw StoreFailure("the store holds a number where a text belongs");
}

namespace {

// Tables whose ids come from id_counters (reserved in blocks, so that one
// add's samples are one contiguous range and concurrent PostgreSQL writers
// never collide).
constexpr const char* kCounted[] = {"sources", "sessions", "lanes",  "samples",
                                    "functions", "locations", "stacks", "value_types"};

// Sample ids one read of a source's spans covers: bounds the rows held.
constexpr int64_t kRowsPerRead = 32768;

int64_t as_int(const SqlValue& v) { return sql_int(v); }
std::string as_text(const SqlValue& v) { return sql_text(v); }

bool is_null(const SqlValue& v) { return std::holds_alternative<std::monostate>(v); }

SqlValue text_or_null(const std::string& s) { return s.empty() ? SqlValue{} : SqlValue{s}; }

SqlValue meta_int(const Profile& p, const char* key) {
  const auto it = p.meta.find(key);
  if (it == p.meta.end()) return {};
  int64_t v = 0;
  const char* end = it->second.data() + it->second.size();
  const auto [ptr, ec] = std::from_chars(it->second.data(), end, v);
  return ec == std::errc() && ptr == end ? SqlValue{v} : SqlValue{};
}

SqlValue meta_text(const Profile& p, const SourceInfo& info, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (const auto it = info.labels.find(key); it != info.labels.end()) return it->second;
    if (const auto it = p.meta.find(key); it != p.meta.end()) return it->second;
  }
  return {};
}

int64_t reserve(StoreDriver& d, const char* table, int64_t n) {
  const auto rows = d.query("UPDATE id_counters SET next_id = next_id + ? WHERE name = ? RETURNING next_id - ?",
                            {n, std::string(table), n});
  if (rows.size() != 1) throw StoreFailure(std::string("the store's id_counters has no row for ") + table);
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
  Inserter(StoreDriver& d, std::string sql, Inserter* after = nullptr) : d_(d), sql_(std::move(sql)), after_(after) {}
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
// with as label.KEY (a label named like a meta key, "version", never
// shadows it).
void add_labels(StoreDriver& d, int64_t source_id, const std::map<std::string, std::string>& meta,
                const SourceInfo& info) {
  std::map<std::string, std::string> labels = meta;
  for (const auto& [k, v] : info.labels) labels["label." + k] = v;
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
    const SqlRow key{name, name, s.get(f.file), int64_t{f.line}, s.get(f.module), int64_t(f.kind),
                     int64_t{f.user_code ? 1 : 0}};
    const int64_t out = upsert(
        "functions",
        "INSERT INTO functions (function_id, name, system_name, filename, start_line, module, kind, user_code) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        "SELECT function_id FROM functions WHERE name = ? AND system_name = ? AND filename = ? AND start_line = ? "
        "AND module = ? AND kind = ? AND user_code = ?",
        key);
    return functions_[id] = out;
  }

  int64_t location(int64_t function_id, int64_t line, const std::string& label) {
    const auto k = std::make_tuple(function_id, line, label);
    if (const auto it = locations_.find(k); it != locations_.end()) return it->second;
    const int64_t out = upsert(
        "locations", "INSERT INTO locations (location_id, function_id, line, label) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        "SELECT location_id FROM locations WHERE function_id = ? AND line = ? AND label = ?", {function_id, line, label});
    return locations_[k] = out;
  }

  int64_t stack(int64_t parent, int64_t location, int64_t depth) {
    const auto k = std::make_pair(parent, location);
    if (const auto it = stacks_.find(k); it != stacks_.end()) return it->second;
    const auto found = d_.query("SELECT stack_id FROM stacks WHERE parent_stack_id = ? AND location_id = ?",
                                {parent, location});
    int64_t out;
    if (!found.empty()) {
      out = as_int(found[0][0]);
    } else {
      out = reserve(d_, "stacks", 1);
      d_.execute("INSERT INTO stacks (stack_id, parent_stack_id, location_id, depth) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT DO NOTHING",
                 {out, parent, location, depth});
      out = as_int(d_.query("SELECT stack_id FROM stacks WHERE parent_stack_id = ? AND location_id = ?",
                            {parent, location})
                       .at(0)
                       .at(0));
    }
    return stacks_[k] = out;
  }

  int64_t value_type(const std::string& type, const std::string& unit) {
    const auto k = std::make_pair(type, unit);
    if (const auto it = types_.find(k); it != types_.end()) return it->second;
    const int64_t out = upsert("value_types",
                               "INSERT INTO value_types (type_id, type, unit) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                               "SELECT type_id FROM value_types WHERE type = ? AND unit = ?", {type, unit});
    return types_[k] = out;
  }

 private:
  int64_t upsert(const char* table, const std::string& insert, const std::string& select, const SqlRow& key) {
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

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + comma, v);
    if (ec != std::errc() || ptr != text.data() + comma) throw StoreFailure("an I/O shape is not a list of integers");
    out.push_back(v);
    at = comma + 1;
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

std::vector<SessionPlan> plan_sessions(const Profile& p, const std::vector<std::vector<int32_t>>& lane_spans) {
  std::vector<SessionPlan> out;
  for (uint32_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& lane = p.lanes[li];
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const SessionPlan& s) { return s.pid == lane.pid && s.serial == lane.session; });
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

}  // namespace

Result<Ok> prepare_store(StoreDriver& d) {
  const std::string probe = d.dialect() == Dialect::kSqlite
                                ? "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
                                : "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'meta'";
  if (as_int(d.query(probe, {}).at(0).at(0)) == 0) {
    const std::string tables = d.dialect() == Dialect::kSqlite
                                   ? "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                   : "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()";
    if (as_int(d.query(tables, {}).at(0).at(0)) != 0) {
      return Error{Error::Kind::kCorrupt, 0,
                   "the database has tables but no store meta table: it is not an mlflow-profiler store"};
    }
    for (const std::string& stmt : schema_statements(d.dialect())) d.execute(stmt, {});
    d.execute_many("INSERT INTO meta (key, value) VALUES (?, ?)",
                   {{std::string("format"), std::string(kStoreFormat)},
                    {std::string("version"), std::to_string(kStoreMajor) + "." + std::to_string(kStoreMinor)}});
    std::vector<SqlRow> counters;
    for (const char* t : kCounted) counters.push_back({std::string(t), int64_t{1}});
    d.execute_many("INSERT INTO id_counters (name, next_id) VALUES (?, ?)", counters);
    d.execute("INSERT INTO stacks (stack_id, parent_stack_id, location_id, depth) VALUES (0, NULL, NULL, -1)", {});
    return Ok{};
  }
  const auto rows = d.query("SELECT key, value FROM meta WHERE key IN ('format', 'version')", {});
  std::string format, version;
  for (const auto& r : rows) (as_text(r[0]) == "format" ? format : version) = as_text(r[1]);
  if (format != kStoreFormat) {
    return Error{Error::Kind::kCorrupt, 0, "the database's meta table does not name an mlflow-profiler store"};
  }
  int major = 0, minor = 0;
  const auto dot = version.find('.');
  const auto [p1, e1] = std::from_chars(version.data(), version.data() + std::min(dot, version.size()), major);
  if (dot != std::string::npos) std::from_chars(version.data() + dot + 1, version.data() + version.size(), minor);
  if (e1 != std::errc() || p1 == version.data()) {
    return Error{Error::Kind::kCorrupt, 0, "the store's version '" + version + "' is not MAJOR.MINOR"};
  }
  const std::string ours = std::to_string(kStoreMajor) + "." + std::to_string(kStoreMinor);
  if (major > kStoreMajor || (major == kStoreMajor && minor > kStoreMinor)) {
    return Error{Error::Kind::kVersion, 0,
                 "store version " + version + " was written by a newer mlflow-profiler; this one reads up to " + ours +
                     ": upgrade mlflow-profiler"};
  }
  if (major < kStoreMajor) {
    const bool known = std::any_of(migrations().begin(), migrations().end(),
                                   [&](const Migration& m) { return version == m.from; });
    return Error{Error::Kind::kVersion, 0,
                 "store version " + version + " is older than this mlflow-profiler's " + ours +
                     (known ? ": run `mlprof migrate STORE` to bring it up to date"
                            : ": no `mlprof migrate` step starts from it (the oldest is " +
                                  std::string(migrations().front().from) + "); add its profiles to a new store")};
  }
  return Ok{};
}

namespace {

std::string store_version(StoreDriver& d) {
  const auto rows = d.query("SELECT value FROM meta WHERE key = 'version'", {});
  return rows.empty() ? std::string() : as_text(rows[0][0]);
}

// Whether the store is version 2.`minor` or later: 2.2 has session_traces,
// span_waits and the intervals' waker and syscall; 2.3 the futex waits'
// object (`wait`) and each reason's waker. A writer leaves a store of an
// older minor version in that version's format, which its readers still read.
bool has_2_(StoreDriver& d, int at_least) {
  const std::string v = store_version(d);
  int major = 0, minor = 0;
  const auto dot = v.find('.');
  std::from_chars(v.data(), v.data() + std::min(dot, v.size()), major);
  if (dot != std::string::npos) std::from_chars(v.data() + dot + 1, v.data() + v.size(), minor);
  return major > 2 || (major == 2 && minor >= at_least);
}
bool has_2_2(StoreDriver& d) { return has_2_(d, 2); }

// The table of the stored values (spec 001's sample_values is a view of it
// since 2.4; before, the table itself).
std::string values_table(bool v2_4) { return v2_4 ? "sample_value_rows" : "sample_values"; }

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

// The sources row: 2.4's columns (start_unix_ns, spec 001's seconds, the
// tool and content hash) or the older ones, with `extra` columns and values.
void insert_source(StoreDriver& d, int64_t source_id, const SourceInfo& info, const SqlValue& start_unix_ns,
                   const std::map<std::string, std::string>& meta, const std::string& columns,
                   const SqlRow& values) {
  const bool v2_4 = has_2_(d, 4);
  std::string sql = "INSERT INTO sources (source_id, source_type, source_uri, " +
                    std::string(v2_4 ? "start_unix_ns, source_timestamp, tool, content_hash" : "source_timestamp") +
                    ", " + columns + ") VALUES (?, ?, ?, ?" + (v2_4 ? ", ? / 1e9, ?, ?" : "");
  SqlRow row{source_id, info.type, text_or_null(info.uri), start_unix_ns};
  if (v2_4) row.insert(row.end(), {start_unix_ns, tool_of(meta, info), text_or_null(info.content_hash)});
  for (const SqlValue& v : values) {
    sql += ", ?";
    row.push_back(v);
  }
  d.execute(sql + ")", row);
}

}  // namespace

Result<std::pair<std::string, std::string>> migrate_store(StoreDriver& d) {
  const std::string from = store_version(d);
  std::string at = from;
  for (const Migration& m : migrations()) {
    if (at != m.from) continue;
    for (const std::string& stmt : m.statements) {
      const std::string sql = in_dialect(stmt, d.dialect());
      if (!sql.empty()) d.execute(sql, {});
    }
    d.execute("UPDATE meta SET value = ? WHERE key = 'version'", {std::string(m.to)});
    at = m.to;
  }
  const std::string ours = std::to_string(kStoreMajor) + "." + std::to_string(kStoreMinor);
  if (at != ours) {
    return Error{Error::Kind::kVersion, 0,
                 "no `mlprof migrate` step brings store version " + at + " to " + ours + " (the steps start at " +
                     std::string(migrations().front().from) + ")"};
  }
  return std::make_pair(from, at);
}

int64_t add_profile(StoreDriver& d, const Profile& p, const SourceInfo& info) {
  std::vector<std::vector<int32_t>> lane_spans(p.lanes.size());
  for (int32_t s = 0; s < static_cast<int32_t>(p.spans.size()); ++s) lane_spans.at(p.spans[s].lane).push_back(s);
  std::vector<SessionPlan> sessions = plan_sessions(p, lane_spans);

  const int64_t source_id = reserve(d, "sources", 1);
  insert_source(
      d, source_id, info, meta_int(p, "start_unix_ns"), p.meta,
      "host, pid, container, pod, python, model_name, model_version, run_id, start_ns, end_ns, captured_depth, "
      "events_captured, events_skipped, unmatched_returns, kernel, lost_events, added_unix_ns",
      {meta_text(p, info, {"host"}), meta_int(p, "pid"), meta_text(p, info, {"container", "container.name"}),
       meta_text(p, info, {"pod", "k8s.pod"}), meta_text(p, info, {"python"}),
       meta_text(p, info, {"model", "model.name", "model.class"}), meta_text(p, info, {"version", "model.version"}),
       meta_text(p, info, {"run_id", "model.run_id"}), p.start_ns, p.end_ns, int64_t{p.captured_depth},
       static_cast<int64_t>(p.stats.events_captured), static_cast<int64_t>(p.stats.events_skipped),
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
    session_rows.push_back({s.id, source_id, int64_t{s.pid}, static_cast<int64_t>(s.serial), s.start_ns, s.end_ns, first,
                            next_sample - first});
  }
  d.execute_many(
      "INSERT INTO sessions (session_id, source_id, pid, serial, start_ns, end_ns, first_sample_id, sample_count) "
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
    d.execute_many("INSERT INTO session_traces (session_id, trace_id, span_id) VALUES (?, ?, ?)", trace_rows);
  }

  std::vector<SqlRow> lane_rows;
  for (uint32_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& l = p.lanes[li];
    const bool has_parent = l.parent_lane >= 0 && static_cast<uint32_t>(l.parent_lane) < p.lanes.size();
    lane_rows.push_back({lane_base + li, session_of_lane[li], int64_t{li}, static_cast<int64_t>(l.thread_id),
                         static_cast<int64_t>(l.native_tid), l.thread_name, int64_t{l.task},
                         has_parent ? SqlValue{lane_base + l.parent_lane} : SqlValue{}, int64_t{l.parent_call},
                         static_cast<int64_t>(l.recorded), static_cast<int64_t>(l.dropped),
                         int64_t{l.truncated ? 1 : 0}});
  }
  // Parent lanes come first (an adopted lane's parent is an earlier lane).
  d.execute_many(
      "INSERT INTO lanes (lane_id, session_id, ordinal, thread_id, native_tid, thread_name, task, parent_lane_id, "
      "parent_call, events, dropped, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      lane_rows);

  Dictionaries dict(d);
  const std::vector<int64_t> self = export_util::self_times(p);
  std::vector<int64_t> stack_of(p.spans.size(), 0);
  const bool v2_6 = has_2_(d, 6);  // 2.6: the span's resource
  Inserter sample_rows(d, v2_6   ? "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, end_ns, "
                                   "active_ns, self_ns, resumes, source_id, resource) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
                                   "?, ?, ?)"
                          : v2_4 ? "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, end_ns, "
                                   "active_ns, self_ns, resumes, source_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                                 : "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, end_ns, "
                                   "active_ns, self_ns, resumes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  std::vector<int32_t> order;  // sample id order: parents before children
  order.reserve(p.spans.size());
  for (const auto& s : sessions) {
    for (const uint32_t li : s.lanes) order.insert(order.end(), lane_spans[li].begin(), lane_spans[li].end());
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
    SqlRow row{sample_id[i], lane_base + sp.lane, sp.parent >= 0 ? SqlValue{sample_id[sp.parent]} : SqlValue{},
               stack_of[i], int64_t{sp.flags}, sp.start_ns - base, sp.end_ns - base,
               sp.active_ns == wall ? SqlValue{} : SqlValue{sp.active_ns}, self[i], int64_t{sp.resumes}};
    if (v2_4) row.push_back(source_id);
    if (v2_6) row.push_back(sp.resource ? SqlValue{p.functions.strings().get(sp.resource)} : SqlValue{});
    sample_rows.add(std::move(row));
  }
  sample_rows.flush();

  // Per-span values, long form, one statement for both kinds. The kernel's
  // (the agent): a missing row reads as 0. Those measured in process
  // (cpu_time, alloc_bytes): a row per value taken, 0 included; a span with
  // the kernel's "cpu" keeps that one.
  Inserter value_rows(d, "INSERT INTO " + values_table(v2_4) + " (sample_id, type_id, value) VALUES (?, ?, ?)");
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
    if (attributed && v.kind == ValueKind::kCpuNs && p.kernel.spans[v.span].on_cpu_ns != 0) continue;
    const ValueKindName& name = kValueKindNames[static_cast<int>(v.kind)];
    value_rows.add({sample_id[v.span], dict.value_type(std::string(name.type), std::string(name.unit)),
                    static_cast<int64_t>(v.value)});
  }
  int64_t waiting_type = -1;  // running vs waiting (core/waiting.h): a row per span that waited
  for (size_t i = 0; i < p.spans.size(); ++i) {
    if (p.spans[i].waiting_ns == 0) continue;
    if (waiting_type < 0) waiting_type = dict.value_type(kWaitingType, "ns");
    value_rows.add({sample_id[i], waiting_type, p.spans[i].waiting_ns});
  }
  value_rows.flush();
  // 2.5: a segment's coalesced resumes; an older store keeps it as a plain one.
  const bool v2_5 = has_2_(d, 5);
  Inserter segment_rows(d, v2_5 ? "INSERT INTO segments (sample_id, start_ns, end_ns, resumes, paused_ns) VALUES "
                                  "(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                                : "INSERT INTO segments (sample_id, start_ns, end_ns) VALUES (?, ?, ?) ON CONFLICT DO "
                                  "NOTHING");
  for (const Segment& g : p.segments) {
    const int64_t base = session_start[p.spans.at(g.span).lane];
    if (v2_5) {
      segment_rows.add({sample_id[g.span], g.start_ns - base, g.end_ns - base, static_cast<int64_t>(g.resumes),
                        g.paused_ns});
    } else {
      segment_rows.add({sample_id[g.span], g.start_ns - base, g.end_ns - base});
    }
  }
  segment_rows.flush();
  Inserter io_rows(d,
                   "INSERT INTO io_summaries (sample_id, ordinal, role, name, type, shape, dtype, length, size_bytes, "
                   "device, repr) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  int32_t last_span = -1;
  int64_t ordinal = 0;
  for (const SpanIO& io : p.io) {
    ordinal = io.span == last_span ? ordinal + 1 : 0;
    last_span = io.span;
    const IOSummary& s = io.summary;
    io_rows.add({sample_id.at(io.span), ordinal, int64_t(io.role), io.name, s.type_name,
                 s.has_shape ? SqlValue{shape_text(s)} : SqlValue{}, s.dtype, s.length, s.size_bytes, s.device,
                 s.repr_short});
  }
  io_rows.flush();
  const bool v2_3 = v2_2 && has_2_(d, 3);
  std::vector<SqlRow> off_rows;
  for (size_t i = 0; i < p.kernel.off_cpu.size(); ++i) {
    const OffCpuInterval& o = p.kernel.off_cpu[i];
    off_rows.push_back({source_id, static_cast<int64_t>(i), int64_t{o.pid}, static_cast<int64_t>(o.tid), o.start_ns,
                        o.wake_ns, o.end_ns, int64_t{o.blocked ? 1 : 0}, static_cast<int64_t>(o.waker_tid),
                        int64_t{o.prev_state}});
    if (v2_2) {
      off_rows.back().insert(off_rows.back().end(),
                             {int64_t{o.syscall}, int64_t{static_cast<uint8_t>(o.waker_kind)}, o.waker_name});
    }
    if (v2_3) off_rows.back().push_back(std::string(wait_object_name(o.wait)));
  }
  if (!off_rows.empty()) {
    d.execute_many(v2_3 ? "INSERT INTO off_cpu_intervals (source_id, ordinal, pid, tid, start_ns, wake_ns, end_ns, "
                          "blocked, waker_tid, prev_state, syscall, waker_kind, waker_name, wait) VALUES (?, ?, ?, ?, "
                          "?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                   : v2_2 ? "INSERT INTO off_cpu_intervals (source_id, ordinal, pid, tid, start_ns, wake_ns, end_ns, "
                            "blocked, waker_tid, prev_state, syscall, waker_kind, waker_name) VALUES (?, ?, ?, ?, ?, ?, "
                            "?, ?, ?, ?, ?, ?, ?)"
                          : "INSERT INTO off_cpu_intervals (source_id, ordinal, pid, tid, start_ns, wake_ns, end_ns, "
                            "blocked, waker_tid, prev_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   off_rows);
  }
  if (v2_2 && attributed) {  // why spans waited (SpanKernel::waits)
    Inserter wait_rows(d, v2_3 ? "INSERT INTO span_waits (sample_id, syscall, state, blocked_ns, count, wait, waker, "
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
          wait_rows.add({sample_id[i], int64_t{key.first}, std::string(1, key.second), t.first, t.second});
        continue;
      }
      for (const WaitReason& w : p.kernel.spans[i].waits) {
        wait_rows.add({sample_id[i], int64_t{w.syscall}, std::string(1, w.state), w.blocked_ns, int64_t{w.count},
                       std::string(wait_object_name(w.object)), w.waker, w.waker_ns});
      }
    }
    wait_rows.flush();
  }
  std::vector<SqlRow> thread_rows;
  for (size_t i = 0; i < p.kernel.threads.size(); ++i) {
    const ThreadLifetime& t = p.kernel.threads[i];
    const bool under = t.started_under >= 0 && static_cast<size_t>(t.started_under) < p.spans.size();
    thread_rows.push_back({source_id, static_cast<int64_t>(i), int64_t{t.pid}, static_cast<int64_t>(t.tid),
                           static_cast<int64_t>(t.parent_tid), t.start_ns, t.end_ns, t.name,
                           under ? SqlValue{sample_id[t.started_under]} : SqlValue{}, int64_t{t.exit_code}});
  }
  if (!thread_rows.empty()) {
    d.execute_many(
        "INSERT INTO kernel_threads (source_id, ordinal, pid, tid, parent_tid, start_ns, end_ns, name, started_under, "
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
                "sample_kind, host, pid, model_name, model_version, run_id, start_ns, end_ns, captured_depth, "
                "added_unix_ns",
                {std::string("stacks"), meta_text(meta_only, info, {"host"}), meta_int(meta_only, "pid"),
                 meta_text(meta_only, info, {"model", "model.name"}),
                 meta_text(meta_only, info, {"version", "model.version"}), meta_text(meta_only, info, {"run_id"}),
                 ss.start_ns, ss.end_ns, int64_t{-1}, info.added_unix_ns});
  const bool v2_4 = has_2_(d, 4);
  add_labels(d, source_id, ss.meta, info);

  const int64_t session_id = reserve(d, "sessions", 1);
  const int64_t lane_base = reserve(d, "lanes", static_cast<int64_t>(ss.threads.size()));
  const int64_t sample_base = reserve(d, "samples", static_cast<int64_t>(ss.samples.size()));
  d.execute(
      "INSERT INTO sessions (session_id, source_id, pid, serial, start_ns, end_ns, first_sample_id, sample_count) "
      "VALUES (?, ?, 0, 0, ?, ?, ?, ?)",
      {session_id, source_id, ss.start_ns, ss.end_ns, sample_base, static_cast<int64_t>(ss.samples.size())});
  std::vector<SqlRow> lane_rows;
  for (size_t i = 0; i < ss.threads.size(); ++i) {
    lane_rows.push_back({lane_base + static_cast<int64_t>(i), session_id, static_cast<int64_t>(i),
                         static_cast<int64_t>(ss.threads[i].id), int64_t{0}, ss.threads[i].name, int64_t{0}, SqlValue{},
                         int64_t{0}, int64_t{0}, int64_t{0}, int64_t{0}});
  }
  d.execute_many(
      "INSERT INTO lanes (lane_id, session_id, ordinal, thread_id, native_tid, thread_name, task, parent_lane_id, "
      "parent_call, events, dropped, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      lane_rows);
  Dictionaries dict(d);
  std::vector<int64_t> type_ids;
  for (const auto& [type, unit] : ss.value_types) type_ids.push_back(dict.value_type(type, unit));
  Inserter sample_rows(d, v2_4 ? "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, end_ns, "
                              "active_ns, self_ns, resumes, source_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                            : "INSERT INTO samples (sample_id, lane_id, parent_id, stack_id, flags, start_ns, end_ns, "
                              "active_ns, self_ns, resumes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  Inserter value_rows(d, "INSERT INTO " + values_table(v2_4) + " (sample_id, type_id, value) VALUES (?, ?, ?)",
                      &sample_rows);
  for (size_t i = 0; i < ss.samples.size(); ++i) {
    const StackSamples::Sample& s = ss.samples[i];
    int64_t stack = 0;
    int64_t depth = 0;
    for (const StackSamples::Frame& f : s.frames) {
      stack = dict.stack(stack, dict.location(dict.function(ss.functions, f.function), f.line, ""), depth++);
    }
    const int64_t id = sample_base + static_cast<int64_t>(i);
    SqlRow row{id, lane_base + s.thread, SqlValue{}, stack, int64_t{0}, SqlValue{}, SqlValue{}, SqlValue{},
               SqlValue{}, int64_t{0}};
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

Result<StackSamples> read_stack_source(StoreDriver& d, int64_t source_id) {
  const auto src = d.query("SELECT sample_kind, start_ns, end_ns FROM sources WHERE source_id = ?", {source_id});
  if (src.empty()) return Error{Error::Kind::kUnsupported, 0, "the store has no source " + std::to_string(source_id)};
  if (as_text(src[0][0]) != "stacks") {
    return Error{Error::Kind::kUnsupported, 0, "source " + std::to_string(source_id) + " holds spans, not sampled stacks"};
  }
  StackSamples ss;
  ss.start_ns = as_int(src[0][1]);
  ss.end_ns = as_int(src[0][2]);
  for (const auto& r : d.query("SELECT key, value FROM source_labels WHERE source_id = ?", {source_id})) {
    ss.meta[as_text(r[0])] = as_text(r[1]);
  }
  std::unordered_map<int64_t, uint32_t> thread_of;
  for (const auto& r : d.query("SELECT l.lane_id, l.thread_id, l.thread_name FROM lanes l JOIN sessions se ON "
                               "se.session_id = l.session_id WHERE se.source_id = ? ORDER BY l.ordinal",
                               {source_id})) {
    thread_of[as_int(r[0])] = static_cast<uint32_t>(ss.threads.size());
    ss.threads.push_back({as_text(r[2]), static_cast<uint64_t>(as_int(r[1]))});
  }
  // Call paths: each stack's frames, root first, built from its parents.
  std::unordered_map<int64_t, std::vector<StackSamples::Frame>> frames_of{{0, {}}};
  std::unordered_map<int64_t, uint32_t> fn_of;
  auto frames = [&](int64_t stack, auto&& self) -> const std::vector<StackSamples::Frame>& {
    auto it = frames_of.find(stack);
    if (it != frames_of.end()) return it->second;
    const auto row = d.query(
        "SELECT k.parent_stack_id, lo.line, f.function_id, f.name, f.module, f.filename, f.start_line, f.kind, "
        "f.user_code FROM stacks k JOIN locations lo ON lo.location_id = k.location_id JOIN functions f ON "
        "f.function_id = lo.function_id WHERE k.stack_id = ?",
        {stack});
    if (row.empty()) throw StoreFailure("a sample names a call path that is not there");
    const auto& r = row[0];
    std::vector<StackSamples::Frame> out = self(as_int(r[0]), self);
    const int64_t fid = as_int(r[2]);
    auto f = fn_of.find(fid);
    if (f == fn_of.end()) {
      f = fn_of.emplace(fid, ss.functions.add(as_text(r[3]), as_text(r[4]), as_text(r[5]),
                                              static_cast<int32_t>(as_int(r[6])),
                                              static_cast<FunctionKind>(as_int(r[7])), as_int(r[8]) != 0))
              .first;
    }
    out.push_back({f->second, static_cast<int32_t>(as_int(r[1]))});
    return frames_of.emplace(stack, std::move(out)).first->second;
  };
  std::unordered_map<int64_t, size_t> type_index;
  for (const auto& r : d.query(
           "SELECT DISTINCT t.type_id, t.type, t.unit FROM " + values_table(has_2_(d, 4)) +
               " v JOIN value_types t ON t.type_id = v.type_id "
               "JOIN samples s ON s.sample_id = v.sample_id JOIN lanes l ON l.lane_id = s.lane_id JOIN sessions se ON "
           "se.session_id = l.session_id WHERE se.source_id = ? ORDER BY t.type_id",
           {source_id})) {
    type_index[as_int(r[0])] = ss.value_types.size();
    ss.value_types.emplace_back(as_text(r[1]), as_text(r[2]));
  }
  std::unordered_map<int64_t, size_t> sample_index;
  for (const auto& r : d.query("SELECT s.sample_id, s.lane_id, s.stack_id FROM samples s JOIN lanes l ON l.lane_id = "
                               "s.lane_id JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id = ? "
                               "ORDER BY s.sample_id",
                               {source_id})) {
    StackSamples::Sample s;
    s.thread = thread_of.at(as_int(r[1]));
    s.frames = frames(as_int(r[2]), frames);
    s.values.assign(ss.value_types.size(), 0);
    sample_index[as_int(r[0])] = ss.samples.size();
    ss.samples.push_back(std::move(s));
  }
  for (const auto& r : d.query("SELECT v.sample_id, v.type_id, v.value FROM " + values_table(has_2_(d, 4)) +
                                   " v JOIN samples s ON "
                               "s.sample_id = v.sample_id JOIN lanes l ON l.lane_id = s.lane_id JOIN sessions se ON "
                               "se.session_id = l.session_id WHERE se.source_id = ?",
                               {source_id})) {
    ss.samples.at(sample_index.at(as_int(r[0]))).values.at(type_index.at(as_int(r[1]))) = as_int(r[2]);
  }
  return ss;
}

std::string value_rows_table(StoreDriver& d) { return values_table(has_2_(d, 4)); }

Result<int64_t> remove_sources(StoreDriver& d, const std::vector<int64_t>& source_ids) {
  std::string missing;
  for (const int64_t id : source_ids) {
    if (d.query("SELECT 1 FROM sources WHERE source_id = ?", {id}).empty()) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(id);
    }
  }
  if (!missing.empty()) {
    return Error{Error::Kind::kUnsupported, 0,
                 "no source " + missing + " in the store (mlprof show lists them); nothing was removed"};
  }
  const bool v2_2 = has_2_2(d);
  const std::string values = values_table(has_2_(d, 4));
  int64_t removed = 0;
  for (const int64_t id : source_ids) {
    // Children before parents, a source's samples by their sessions' ranges
    // (one add's ids are contiguous): every statement uses a key.
    const auto ranges = d.query("SELECT first_sample_id, sample_count FROM sessions WHERE source_id = ?", {id});
    std::vector<std::string> by_sample = {values, "segments", "io_summaries"};
    if (v2_2) by_sample.push_back("span_waits");
    for (const auto& r : ranges) {
      const int64_t lo = as_int(r[0]), hi = as_int(r[0]) + as_int(r[1]) - 1;
      if (hi < lo) continue;
      for (const std::string& table : by_sample) {
        d.execute("DELETE FROM " + table + " WHERE sample_id BETWEEN ? AND ?", {lo, hi});
      }
    }
    d.execute("DELETE FROM kernel_threads WHERE source_id = ?", {id});
    d.execute("DELETE FROM off_cpu_intervals WHERE source_id = ?", {id});
    for (const auto& r : ranges) {
      const int64_t lo = as_int(r[0]), hi = as_int(r[0]) + as_int(r[1]) - 1;
      if (hi >= lo) removed += as_int(r[1]);
      if (hi >= lo) d.execute("DELETE FROM samples WHERE sample_id BETWEEN ? AND ?", {lo, hi});
    }
    const std::string sessions = "(SELECT session_id FROM sessions WHERE source_id = ?)";
    if (v2_2) d.execute("DELETE FROM session_traces WHERE session_id IN " + sessions, {id});
    d.execute("DELETE FROM lanes WHERE session_id IN " + sessions, {id});
    d.execute("DELETE FROM sessions WHERE source_id = ?", {id});
    d.execute("DELETE FROM source_labels WHERE source_id = ?", {id});
    d.execute("DELETE FROM sources WHERE source_id = ?", {id});
  }
  return removed;
}

Result<Profile> read_source(StoreDriver& d, int64_t source_id) {
  const auto src = d.query(
      "SELECT start_ns, end_ns, captured_depth, events_captured, events_skipped, unmatched_returns, kernel, "
      "lost_events, sample_kind FROM sources WHERE source_id = ?",
      {source_id});
  if (src.empty()) {
    return Error{Error::Kind::kUnsupported, 0, "the store has no source " + std::to_string(source_id)};
  }
  if (as_text(src[0][8]) == "stacks") {
    return Error{Error::Kind::kUnsupported, 0,
                 "source " + std::to_string(source_id) + " holds sampled stacks, not spans (mlprof show prints them)"};
  }
  Profile p;
  const SqlRow& s = src[0];
  p.start_ns = as_int(s[0]);
  p.end_ns = as_int(s[1]);
  p.captured_depth = static_cast<int>(as_int(s[2]));
  p.stats.events_captured = static_cast<uint64_t>(as_int(s[3]));
  p.stats.events_skipped = static_cast<uint64_t>(as_int(s[4]));
  p.stats.unmatched_returns = static_cast<uint64_t>(as_int(s[5]));
  p.kernel.present = as_int(s[6]) != 0;
  p.kernel.lost_events = static_cast<uint64_t>(as_int(s[7]));
  for (const auto& r : d.query("SELECT key, value FROM source_labels WHERE source_id = ?", {source_id})) {
    p.meta[as_text(r[0])] = as_text(r[1]);
  }

  // Lanes in document order, with their session's pid and serial.
  std::unordered_map<int64_t, uint32_t> lane_index;
  std::unordered_map<int64_t, int64_t> lane_session_start;
  std::vector<int64_t> parent_lane_ids;
  const bool traces = has_2_2(d);
  for (const auto& r : d.query(
           std::string("SELECT l.lane_id, l.thread_id, l.native_tid, l.thread_name, l.task, l.parent_lane_id, "
                       "l.parent_call, l.events, l.dropped, l.truncated, se.pid, se.serial, se.start_ns, ") +
               (traces ? "t.trace_id, t.span_id FROM lanes l JOIN sessions se ON se.session_id = l.session_id "
                         "LEFT JOIN session_traces t ON t.session_id = se.session_id"
                       : "NULL, NULL FROM lanes l JOIN sessions se ON se.session_id = l.session_id") +
               " WHERE se.source_id = ? ORDER BY l.ordinal",
           {source_id})) {
    Lane lane;
    lane.thread_id = static_cast<uint64_t>(as_int(r[1]));
    lane.native_tid = static_cast<uint64_t>(as_int(r[2]));
    lane.thread_name = as_text(r[3]);
    lane.task = static_cast<uint32_t>(as_int(r[4]));
    parent_lane_ids.push_back(is_null(r[5]) ? -1 : as_int(r[5]));
    lane.parent_call = static_cast<uint32_t>(as_int(r[6]));
    lane.recorded = static_cast<uint64_t>(as_int(r[7]));
    lane.dropped = static_cast<uint64_t>(as_int(r[8]));
    lane.truncated = as_int(r[9]) != 0;
    lane.pid = static_cast<uint32_t>(as_int(r[10]));
    lane.session = static_cast<uint64_t>(as_int(r[11]));
    if (!is_null(r[13])) {
      lane.trace_id = as_text(r[13]);
      lane.span_id = as_text(r[14]);
    }
    lane_index[as_int(r[0])] = static_cast<uint32_t>(p.lanes.size());
    lane_session_start[as_int(r[0])] = as_int(r[12]);
    p.lanes.push_back(std::move(lane));
  }
  for (size_t i = 0; i < p.lanes.size(); ++i) {
    const auto it = lane_index.find(parent_lane_ids[i]);
    p.lanes[i].parent_lane = it == lane_index.end() ? -1 : static_cast<int32_t>(it->second);
  }

  // Spans, read in sample id ranges (one add's ids are contiguous) so that
  // no more than a range's rows are held at once, then grouped by lane in
  // lane order, in sample order within a lane, as the document has them.
  std::vector<int64_t> ids, parent_ids;  // in sample order
  std::unordered_map<int64_t, uint32_t> function_ids;
  const bool v2_6 = has_2_(d, 6);  // the span's resource
  for (const auto& range : d.query("SELECT first_sample_id, sample_count FROM sessions WHERE source_id = ? ORDER BY "
                                   "first_sample_id",
                                   {source_id})) {
    const int64_t first = as_int(range[0]), end = first + as_int(range[1]);
    for (int64_t lo = first; lo < end; lo += kRowsPerRead) {
      for (const auto& r : d.query(
               "SELECT s.sample_id, s.lane_id, s.parent_id, s.flags, s.start_ns, s.end_ns, s.active_ns, s.resumes, "
               "k.depth, lo.label, f.function_id, f.name, f.module, f.filename, f.start_line, f.kind, f.user_code" +
                   std::string(v2_6 ? ", s.resource " : ", NULL ") +
                   "FROM samples s JOIN stacks k ON k.stack_id = s.stack_id JOIN locations lo ON lo.location_id = "
               "k.location_id JOIN functions f ON f.function_id = lo.function_id WHERE s.sample_id BETWEEN ? AND ? "
               "ORDER BY s.sample_id",
               {lo, std::min(lo + kRowsPerRead, end) - 1})) {
        Span sp;
        const int64_t lane_id = as_int(r[1]);
        const auto lane = lane_index.find(lane_id);
        if (lane == lane_index.end()) return Error{Error::Kind::kCorrupt, 0, "a span's lane is not in its source"};
        sp.lane = lane->second;
        const int64_t base = lane_session_start.at(lane_id);
        parent_ids.push_back(is_null(r[2]) ? -1 : as_int(r[2]));
        sp.flags = static_cast<uint32_t>(as_int(r[3]));
        sp.start_ns = base + as_int(r[4]);
        sp.end_ns = base + as_int(r[5]);
        sp.active_ns = is_null(r[6]) ? sp.end_ns - sp.start_ns : as_int(r[6]);
        sp.resumes = static_cast<uint32_t>(as_int(r[7]));
        sp.depth = static_cast<uint32_t>(as_int(r[8]));
        const std::string label = as_text(r[9]);
        sp.label = label.empty() ? 0 : p.functions.strings().intern(label);
        const int64_t fid = as_int(r[10]);
        auto fit = function_ids.find(fid);
        if (fit == function_ids.end()) {
          fit = function_ids
                    .emplace(fid, p.functions.add(as_text(r[11]), as_text(r[12]), as_text(r[13]),
                                                  static_cast<int32_t>(as_int(r[14])),
                                                  static_cast<FunctionKind>(as_int(r[15])), as_int(r[16]) != 0))
                    .first;
        }
        sp.function = fit->second;
        if (!is_null(r[17])) sp.resource = p.functions.strings().intern(as_text(r[17]));
        ids.push_back(as_int(r[0]));
        p.spans.push_back(sp);
      }
    }
  }
  // index_of[i]: the span index of the i-th sample in id order.
  std::vector<int32_t> index_of(p.spans.size());
  for (size_t i = 0; i < index_of.size(); ++i) index_of[i] = static_cast<int32_t>(i);
  const auto by_lane_order = [&](const Span& a, const Span& b) { return a.lane < b.lane; };
  if (!std::is_sorted(p.spans.begin(), p.spans.end(), by_lane_order)) {  // sessions whose lanes interleave
    std::stable_sort(index_of.begin(), index_of.end(),
                     [&](int32_t a, int32_t b) { return p.spans[a].lane < p.spans[b].lane; });
    std::vector<Span> by_lane(p.spans.size());
    std::vector<int32_t> inverse(p.spans.size());
    for (size_t k = 0; k < index_of.size(); ++k) {
      by_lane[k] = p.spans[index_of[k]];
      inverse[index_of[k]] = static_cast<int32_t>(k);
    }
    p.spans.swap(by_lane);
    index_of.swap(inverse);
  }
  const bool ids_sorted = std::is_sorted(ids.begin(), ids.end());
  if (!ids_sorted) return Error{Error::Kind::kCorrupt, 0, "the source's sessions overlap"};
  // The span of a sample id; -1 when it is not in this source.
  auto span_of = [&](int64_t sample_id) -> int32_t {
    const auto it = std::lower_bound(ids.begin(), ids.end(), sample_id);
    if (it == ids.end() || *it != sample_id) return -1;
    return index_of[static_cast<size_t>(it - ids.begin())];
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    if (parent_ids[i] < 0) continue;
    const int32_t parent = span_of(parent_ids[i]);
    if (parent < 0) return Error{Error::Kind::kCorrupt, 0, "a span's parent is not in its source"};
    p.spans[index_of[i]].parent = parent;
  }
  auto span_at = [&](const SqlValue& v) {
    const int32_t span = span_of(as_int(v));
    if (span < 0) throw StoreFailure("a row names a span that is not in its source");
    return span;
  };
  for (const auto& r : d.query(
           std::string("SELECT g.sample_id, g.start_ns, g.end_ns, l.lane_id") +
               (has_2_(d, 5) ? ", g.resumes, g.paused_ns" : ", 0, 0") +
               " FROM segments g JOIN samples s ON s.sample_id = g.sample_id JOIN lanes l ON l.lane_id = s.lane_id "
               "JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id = ? ORDER BY g.sample_id, "
               "g.start_ns",
           {source_id})) {
    const int64_t base = lane_session_start.at(as_int(r[3]));
    p.segments.push_back(Segment{span_at(r[0]), base + as_int(r[1]), base + as_int(r[2]),
                                 static_cast<uint32_t>(as_int(r[4])), as_int(r[5])});
  }
  for (const auto& r : d.query(
           "SELECT i.sample_id, i.role, i.name, i.type, i.shape, i.dtype, i.length, i.size_bytes, i.device, i.repr "
           "FROM io_summaries i JOIN samples s ON s.sample_id = i.sample_id JOIN lanes l ON l.lane_id = s.lane_id "
           "JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id = ? ORDER BY i.sample_id, i.ordinal",
           {source_id})) {
    SpanIO io;
    io.span = span_at(r[0]);
    io.role = static_cast<IORole>(as_int(r[1]));
    io.name = as_text(r[2]);
    io.summary.type_name = as_text(r[3]);
    io.summary.has_shape = !is_null(r[4]);
    if (io.summary.has_shape) io.summary.shape = parse_shape(as_text(r[4]));
    io.summary.dtype = as_text(r[5]);
    io.summary.length = as_int(r[6]);
    io.summary.size_bytes = as_int(r[7]);
    io.summary.device = as_text(r[8]);
    io.summary.repr_short = as_text(r[9]);
    p.io.push_back(std::move(io));
  }
  // The document orders both by span; sample ids follow sessions, so sort by span.
  std::stable_sort(p.segments.begin(), p.segments.end(), [](const Segment& a, const Segment& b) { return a.span < b.span; });
  std::stable_sort(p.io.begin(), p.io.end(), [](const SpanIO& a, const SpanIO& b) { return a.span < b.span; });

  // Per-span values, one read for both kinds: the kernel's (when the source
  // has kernel data) and those measured in process ("cpu" is the kernel's
  // where its data is present).
  if (p.kernel.present) p.kernel.spans.assign(p.spans.size(), SpanKernel{});
  bool waiting_rows = false;  // none: stored before running vs waiting, or nothing waited
  for (const auto& r : d.query(
           "SELECT v.sample_id, t.type, t.unit, v.value FROM " + values_table(has_2_(d, 4)) +
               " v JOIN value_types t ON t.type_id = "
               "v.type_id JOIN samples s ON s.sample_id = v.sample_id JOIN lanes l ON l.lane_id = s.lane_id JOIN "
           "sessions se ON se.session_id = l.session_id WHERE se.source_id = ?",
           {source_id})) {
    const std::string type = as_text(r[1]), unit = as_text(r[2]);
    const auto value = static_cast<uint64_t>(as_int(r[3]));
    if (type == kWaitingType && unit == "ns") {
      p.spans[span_at(r[0])].waiting_ns = as_int(r[3]);
      waiting_rows = true;
      continue;
    }
    if (p.kernel.present) {
      for (const auto& vt : kSpanValueTypes) {
        if (type == vt.type && unit == vt.unit) vt.set(p.kernel.spans[span_at(r[0])], value);
      }
    }
    for (const ValueKindName& name : kValueKindNames) {
      if (type != name.type || unit != name.unit || (p.kernel.present && name.kind == ValueKind::kCpuNs)) continue;
      p.values.push_back({span_at(r[0]), name.kind, value});
    }
  }
  std::stable_sort(p.values.begin(), p.values.end(), [](const SpanValue& a, const SpanValue& b) {
    return a.span != b.span ? a.span < b.span : a.kind < b.kind;
  });
  if (!waiting_rows) compute_waiting(p);  // the suspended time (and the kernel's, if any) is known
  if (p.kernel.present) {
    const bool v2_2 = has_2_2(d);
    const bool v2_3 = v2_2 && has_2_(d, 3);
    for (const auto& r : d.query(
             std::string("SELECT pid, tid, start_ns, wake_ns, end_ns, blocked, waker_tid, prev_state, ") +
                 (v2_2 ? "syscall, waker_kind, waker_name" : "-1, 0, ''") + (v2_3 ? ", wait" : ", ''") +
                 " FROM off_cpu_intervals WHERE source_id = ? ORDER BY ordinal",
             {source_id})) {
      OffCpuInterval o;
      o.pid = static_cast<uint32_t>(as_int(r[0]));
      o.tid = static_cast<uint64_t>(as_int(r[1]));
      o.start_ns = as_int(r[2]);
      o.wake_ns = as_int(r[3]);
      o.end_ns = as_int(r[4]);
      o.blocked = as_int(r[5]) != 0;
      o.waker_tid = static_cast<uint64_t>(as_int(r[6]));
      o.prev_state = static_cast<uint32_t>(as_int(r[7]));
      o.syscall = static_cast<int32_t>(as_int(r[8]));
      const int64_t kind = as_int(r[9]);
      o.waker_kind = kind >= 0 && kind <= 3 ? static_cast<WakerKind>(kind) : WakerKind::kTask;
      o.waker_name = as_text(r[10]);
      if (!parse_wait_object(as_text(r[11]), o.wait)) o.wait = WaitObject::kNone;
      p.kernel.off_cpu.push_back(std::move(o));
    }
    if (v2_2) {
      for (const auto& r : d.query(
               std::string("SELECT w.sample_id, w.syscall, w.state, w.blocked_ns, w.count, ") +
                   (v2_3 ? "w.wait, w.waker, w.waker_ns" : "'', '', 0") +
                   " FROM span_waits w JOIN samples s ON s.sample_id = w.sample_id JOIN lanes l ON l.lane_id = "
                   "s.lane_id JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id = ? ORDER BY "
                   "w.sample_id, w.blocked_ns DESC, w.syscall, w.state" +
                   (v2_3 ? ", w.wait" : ""),
               {source_id})) {
        WaitReason w;
        w.syscall = static_cast<int32_t>(as_int(r[1]));
        const std::string state = as_text(r[2]);
        w.state = state.empty() ? '-' : state[0];
        w.blocked_ns = as_int(r[3]);
        w.count = static_cast<uint32_t>(as_int(r[4]));
        if (!parse_wait_object(as_text(r[5]), w.object)) w.object = WaitObject::kNone;
        w.waker = as_text(r[6]);
        w.waker_ns = as_int(r[7]);
        p.kernel.spans[span_at(r[0])].waits.push_back(w);
      }
    }
    for (const auto& r : d.query(
             "SELECT pid, tid, parent_tid, start_ns, end_ns, name, started_under, exit_code FROM kernel_threads WHERE "
             "source_id = ? ORDER BY ordinal",
             {source_id})) {
      ThreadLifetime t;
      t.pid = static_cast<uint32_t>(as_int(r[0]));
      t.tid = static_cast<uint64_t>(as_int(r[1]));
      t.parent_tid = static_cast<uint64_t>(as_int(r[2]));
      t.start_ns = as_int(r[3]);
      t.end_ns = as_int(r[4]);
      t.name = as_text(r[5]);
      t.started_under = is_null(r[6]) ? -1 : span_at(r[6]);
      t.exit_code = static_cast<int32_t>(as_int(r[7]));
      p.kernel.threads.push_back(std::move(t));
    }
  }
  link_tree(p);
  return p;
}

}  // namespace mlprof
