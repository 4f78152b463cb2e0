// The store's lifecycle (docs/store.md): creating the schema in an empty
// database or checking an existing store's version, `mlprof migrate`,
// `mlprof rm`, and the label look-up of an add made once. Adding a profile
// is store_write.cpp's job, reading one back store_read.cpp's.

#include "store/store.h"

#include <algorithm>
#include <charconv>

#include "store/store_internal.h"
#include "util/utf8.h"

namespace mlprof {

using namespace store_detail;

int64_t sql_int(const SqlValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (std::holds_alternative<std::monostate>(v)) return 0;
  throw StoreFailure("the store holds a text where a number belongs");
}

std::string sql_text(const SqlValue& v) {
  // A store file may have been damaged or made by hand: its text reaches
  // documents and Python, which must get UTF-8 (bad bytes become U+FFFD).
  if (const auto* s = std::get_if<std::string>(&v)) return to_valid_utf8(*s);
  if (std::holds_alternative<std::monostate>(v)) return {};
  throw StoreFailure("the store holds a number where a text belongs");
}

namespace {

// Tables whose ids come from id_counters (reserved in blocks, so that one
// add's samples are one contiguous range and concurrent PostgreSQL writers
// never collide).
constexpr const char* kCounted[] = {"sources",   "sessions",  "lanes",  "samples",
                                    "functions", "locations", "stacks", "value_types"};

}  // namespace

bool store_present(StoreDriver& d) {
  const std::string probe =
      d.dialect() == Dialect::kSqlite
          ? "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
          : "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = "
            "'meta'";
  return as_int(d.query(probe, {}).at(0).at(0)) != 0;
}

Result<Ok> prepare_store(StoreDriver& d) {
  if (!store_present(d)) {
    const std::string tables =
        d.dialect() == Dialect::kSqlite
            ? "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
            : "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()";
    if (as_int(d.query(tables, {}).at(0).at(0)) != 0) {
      return Error{
          Error::Kind::kCorrupt, 0,
          "the database has tables but no store meta table: it is not an mlflow-profiler store"};
    }
    for (const std::string& stmt : schema_statements(d.dialect())) d.execute(stmt, {});
    d.execute_many("INSERT INTO meta (key, value) VALUES (?, ?)",
                   {{std::string("format"), std::string(kStoreFormat)},
                    {std::string("version"),
                     std::to_string(kStoreMajor) + "." + std::to_string(kStoreMinor)}});
    std::vector<SqlRow> counters;
    for (const char* t : kCounted) counters.push_back({std::string(t), int64_t{1}});
    d.execute_many("INSERT INTO id_counters (name, next_id) VALUES (?, ?)", counters);
    d.execute(
        "INSERT INTO stacks (stack_id, parent_stack_id, location_id, depth) VALUES (0, NULL, NULL, "
        "-1)",
        {});
    return Ok{};
  }
  const auto rows = d.query("SELECT key, value FROM meta WHERE key IN ('format', 'version')", {});
  std::string format, version;
  for (const auto& r : rows) (as_text(r[0]) == "format" ? format : version) = as_text(r[1]);
  if (format != kStoreFormat) {
    return Error{Error::Kind::kCorrupt, 0,
                 "the database's meta table does not name an mlflow-profiler store"};
  }
  int major = 0, minor = 0;
  const auto dot = version.find('.');
  const auto [p1, e1] =
      std::from_chars(version.data(), version.data() + std::min(dot, version.size()), major);
  if (dot != std::string::npos)
    std::from_chars(version.data() + dot + 1, version.data() + version.size(), minor);
  if (e1 != std::errc() || p1 == version.data()) {
    return Error{Error::Kind::kCorrupt, 0,
                 "the store's version '" + version + "' is not MAJOR.MINOR"};
  }
  const std::string ours = std::to_string(kStoreMajor) + "." + std::to_string(kStoreMinor);
  if (major > kStoreMajor || (major == kStoreMajor && minor > kStoreMinor)) {
    return Error{Error::Kind::kVersion, 0,
                 "store version " + version +
                     " was written by a newer mlflow-profiler; this one reads up to " + ours +
                     ": upgrade mlflow-profiler"};
  }
  if (major < kStoreMajor) {
    const bool known = std::any_of(migrations().begin(), migrations().end(),
                                   [&](const Migration& m) { return version == m.from; });
    return Error{Error::Kind::kVersion, 0,
                 "store version " + version + " is older than this mlflow-profiler's " + ours +
                     (known ? ": run `mlprof migrate STORE` to bring it up to date"
                            : ": no `mlprof migrate` step starts from it (the oldest is " +
                                  std::string(migrations().front().from) +
                                  "); add its profiles to a new store")};
  }
  return Ok{};
}

std::string store_version(StoreDriver& d) {
  const auto rows = d.query("SELECT value FROM meta WHERE key = 'version'", {});
  return rows.empty() ? std::string() : as_text(rows[0][0]);
}

namespace store_detail {

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

}  // namespace store_detail

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
                 "no `mlprof migrate` step brings store version " + at + " to " + ours +
                     " (the steps start at " + std::string(migrations().front().from) + ")"};
  }
  return std::make_pair(from, at);
}

std::string label_key(std::string_view key) { return std::string(kLabelPrefix) + std::string(key); }

std::optional<int64_t> find_labelled_source(StoreDriver& d, const std::string& key,
                                            const std::string& value) {
  const auto rows =
      d.query("SELECT source_id FROM source_labels WHERE key = ? AND value = ? LIMIT 1",
              {label_key(key), value});
  if (rows.empty()) return std::nullopt;
  return as_int(rows[0][0]);
}

Result<AddedOnce> add_profile_once(StoreDriver& d, const Profile& profile, const SourceInfo& info,
                                   const std::string& label) {
  const auto value = info.labels.find(label);
  if (value == info.labels.end())
    return Error{Error::Kind::kUnsupported, 0, "no label " + label + " to add once by"};
  if (const auto found = find_labelled_source(d, label, value->second))
    return AddedOnce{*found, false};
  return AddedOnce{add_profile(d, profile, info), true};
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
    return Error{
        Error::Kind::kUnsupported, 0,
        "no source " + missing + " in the store (mlprof show lists them); nothing was removed"};
  }
  const bool v2_2 = has_2_2(d);
  const std::string values = values_table(has_2_(d, 4));
  int64_t removed = 0;
  for (const int64_t id : source_ids) {
    // Children before parents, a source's samples by their sessions' ranges
    // (one add's ids are contiguous): every statement uses a key.
    const auto ranges =
        d.query("SELECT first_sample_id, sample_count FROM sessions WHERE source_id = ?", {id});
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
}  // namespace mlprof
