#pragma once
// The profile store's schema (docs/design/store.md's model adapted to spans;
// docs/store.md): one text, two dialects. Every writer and reader (the
// extension through Python's sqlite3 or psycopg, the agent through
// libsqlite3) creates and checks it from here.

#include <string>
#include <vector>

namespace mlprof {

enum class Dialect { kSqlite, kPostgres };

// meta('version'): a reader takes the same major with a minor <= its own.
inline constexpr int kStoreMajor = 2;
inline constexpr int kStoreMinor = 6;
inline constexpr const char* kStoreFormat = "mlflow-profiler-store";

// The CREATE statements, in order (tables, views, then the migrations()
// steps' statements), for `dialect`: this version's, or those of an older
// `version` ("2.0" ... : what that version created; empty when no step
// reaches it), which the migration tests start from.
std::vector<std::string> schema_statements(Dialect dialect, const std::string& version = "");

// A migration statement that starts with this runs on PostgreSQL only.
inline constexpr const char* kPostgresOnly = "-- postgres only\n";

// One statement written in SQLite's dialect, as `dialect` takes it ("" for
// a PostgreSQL-only statement in SQLite).
std::string in_dialect(std::string statement, Dialect dialect);

// The schema as one SQL text (SQLite dialect): what docs/store.md quotes.
const std::string& schema_text();

// One step of `mlprof migrate`: the statements (both dialects) that bring a
// store of version `from` to `to`. Steps within a major version are
// additive, so a reader of that major still reads a store not migrated.
struct Migration {
  const char* from;
  const char* to;
  std::vector<std::string> statements;
};
// Every step, oldest first.
const std::vector<Migration>& migrations();

}  // namespace mlprof
