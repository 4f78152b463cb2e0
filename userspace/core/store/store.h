#pragma once
// The profile store (docs/store.md): a Profile added as rows of the schema
// in store_schema.h, and read back as the same tree. The SQL runs through a
// StoreDriver, so one writer and one reader serve every engine and host: the
// extension drives Python's sqlite3 (or psycopg) connection, the agent its
// own libsqlite3 one. The caller owns the connection and the transaction:
// one add is one transaction (BEGIN IMMEDIATE in SQLite), so a killed writer
// leaves the store as it was.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "model/stack_samples.h"
#include "model/tree.h"
#include "store/store_schema.h"
#include "util/result.h"

namespace mlprof {

// A parameter or a column: NULL, an integer or a text.
using SqlValue = std::variant<std::monostate, int64_t, std::string>;
using SqlRow = std::vector<SqlValue>;

// Runs SQL with `?` placeholders (a driver for PostgreSQL rewrites them).
// Failures are thrown (the driver's own exception type, or StoreFailure).
class StoreDriver {
 public:
  virtual ~StoreDriver() = default;
  virtual Dialect dialect() const = 0;
  virtual void execute(const std::string& sql, const SqlRow& params) = 0;
  virtual void execute_many(const std::string& sql, const std::vector<SqlRow>& rows) = 0;
  virtual std::vector<SqlRow> query(const std::string& sql, const SqlRow& params) = 0;
};

struct StoreFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A column as a number (NULL: 0) or a text (NULL: ""; bytes that are not
// UTF-8 become U+FFFD); the other type throws StoreFailure.
int64_t sql_int(const SqlValue& v);
std::string sql_text(const SqlValue& v);

// The labels a source is added with (SourceInfo::labels) are kept in
// source_labels as "label.KEY", beside its meta's keys, so that a label
// named like a meta key ("version") never shadows it. The one definition:
// the agent's backends use it, and Python reads it from _core.
inline constexpr std::string_view kLabelPrefix = "label.";

// "label.KEY": the source_labels key of the label `key`.
std::string label_key(std::string_view key);

// Where a profile came from, besides what its meta says (docs/store.md).
struct SourceInfo {
  std::string type = "in-process";            // in-process, ebpf, pprof, speedscope, chrome-trace
  std::string uri;                            // "" = none (written directly)
  std::map<std::string, std::string> labels;  // --label k=v: model, version, run_id ...
  int64_t added_unix_ns = 0;
  std::string tool;          // "" = the meta's "tool" (or the agent's version line), if any
  std::string content_hash;  // sha256 of the added file's bytes, hex; "" = none (2.4)
};

// Whether the database has a store's meta table (one that prepare_store
// created, or a database that merely has one): read-only, so a reader can
// refuse a database without creating anything.
bool store_present(StoreDriver& driver);

// meta('version') as stored ("2.6"); "" when there is none.
std::string store_version(StoreDriver& driver);

// Creates the schema in an empty database, or checks the version of an
// existing one: kVersion for a newer store (upgrade mlflow-profiler) or an
// older one (run `mlprof migrate`), kCorrupt for a database that is not a store.
Result<Ok> prepare_store(StoreDriver& driver);

// `mlprof migrate`: applies the migrations() steps from the store's version
// to this build's, inside the caller's write transaction; (from, to) ("2.1",
// "2.1" when there was nothing to do). kVersion when no chain of steps
// starts at the store's version.
Result<std::pair<std::string, std::string>> migrate_store(StoreDriver& driver);

// Adds the profile as one source; returns its source_id. Call inside a
// write transaction.
int64_t add_profile(StoreDriver& driver, const Profile& profile, const SourceInfo& info);

// The first source added with the label `key` = `value`; none when no
// source has it.
std::optional<int64_t> find_labelled_source(StoreDriver& driver, const std::string& key,
                                            const std::string& value);

// add_profile, unless a source already carries the label `label` with the
// value info.labels[label] (the continuous agent's item key): then nothing
// is added and that source's id comes back with `added` false. Call inside
// one write transaction, so that two deliveries of one item store it once.
// kUnsupported when info has no label `label`.
struct AddedOnce {
  int64_t source_id = 0;
  bool added = false;
};
Result<AddedOnce> add_profile_once(StoreDriver& driver, const Profile& profile,
                                   const SourceInfo& info, const std::string& label);

// Adds sampled stacks (an import of pprof, py-spy, speedscope's sampled
// profiles, folded stacks) as one source of sample_kind 'stacks': a sample
// a row with its call path and values, no times.
int64_t add_stack_samples(StoreDriver& driver, const StackSamples& samples, const SourceInfo& info);

// The profile of one source, as it was added (the same tree: spans, times,
// flags, labels, I/O, segments, lanes, kernel data, meta). kUnsupported for
// a source of sampled stacks (read_stack_source reads those).
Result<Profile> read_source(StoreDriver& driver, int64_t source_id);
Result<StackSamples> read_stack_source(StoreDriver& driver, int64_t source_id);

// `mlprof rm`: deletes the sources and every row of theirs (sessions,
// lanes, samples, values, I/O, segments, kernel data, labels) inside the
// caller's write transaction; the shared functions, locations, call paths
// and value types stay. Returns the samples deleted; kUnsupported naming
// the ids the store does not have (nothing deleted then).
Result<int64_t> remove_sources(StoreDriver& driver, const std::vector<int64_t>& source_ids);

// The table of the stored values keyed by type_id: sample_value_rows since
// 2.4 (docs/design/store.md's sample_values is a view of it, with spans' wall and self),
// sample_values before.
std::string value_rows_table(StoreDriver& driver);

}  // namespace mlprof
