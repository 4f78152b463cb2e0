#pragma once
// How the store's readers cut a query into batches (store_scan.cpp,
// store_read.cpp, views/function_stats.cpp): ids named at once, and sample
// rows read at once. Private to userspace/core.

#include <cstddef>
#include <cstdint>
#include <string>

namespace mlprof::sql_batch {

// Ids a query names at once (SQLite allows 32766 parameters, PostgreSQL 65535).
constexpr size_t kIdsPerQuery = 500;
// Sample ids a summing query reads at once.
constexpr int64_t kRowsPerRead = 32768;

// "?, ?, ?": n placeholders for an IN (...) list.
inline std::string placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i ? ", ?" : "?";
  return out;
}

}  // namespace mlprof::sql_batch
