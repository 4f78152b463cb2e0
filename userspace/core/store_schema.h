#pragma once
// The profile store's schema (spec 001's v2 model adapted to spans;
// docs/store.md): one text, two dialects. Every writer and reader (the
// extension through Python's sqlite3 or psycopg, the agent through
// libsqlite3) creates and checks it from here.

#include <string>
#include <vector>

namespace mlprof {

enum class Dialect { kSqlite, kPostgres };

// meta('version'): a reader takes the same major with a minor <= its own.
inline constexpr int kStoreMajor = 2;
inline constexpr int kStoreMinor = 0;
inline constexpr const char* kStoreFormat = "mlflow-profiler-store";

// The CREATE statements, in order (tables, then views), for `dialect`.
std::vector<std::string> schema_statements(Dialect dialect);

// The schema as one SQL text (SQLite dialect): what docs/store.md quotes.
const std::string& schema_text();

}  // namespace mlprof
