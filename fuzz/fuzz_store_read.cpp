// Fuzz target: the store reader (userspace/core/store/store_read.cpp) on a
// store file someone was sent. Input: the SQLite file's bytes, opened
// read-only in memory (sqlite3_deserialize). Every source (the first 16)
// is read as spans or as sampled stacks and exercised, then scanned as
// `mlprof top` scans a store, by call path and by function. SQLite refusing the
// file, or the reader throwing StoreFailure (a column of the wrong type),
// is a refusal the commands turn into one line; anything else is a finding.
// The driver is the agent's SqliteStore over the in-memory connection.
#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent/store_sqlite.h"
#include "fuzz_common.h"
#include "store/store.h"
#include "store/store_scan.h"
#include "views/function_stats.h"
#include "views/path_stats.h"

using namespace mlprof;

namespace {

// A read-only StoreDriver over one connection. The agent's SqliteStore
// opens (and may create) a file for writing; this one reads an image.
void read_all(StoreDriver& d) {
  if (!store_present(d)) return;
  (void)store_version(d);
  std::vector<int64_t> ids;
  for (const SqlRow& r : d.query("SELECT source_id FROM sources ORDER BY source_id LIMIT 16", {})) {
    const int64_t id = sql_int(r[0]);
    ids.push_back(id);
    Result<Profile> p = read_source(d, id);
    if (p.ok()) {
      fuzz::exercise(p.value());
      continue;
    }
    Result<StackSamples> s = read_stack_source(d, id);
    if (s.ok()) fuzz::exercise(s.value());
  }
  CallPathStats paths(4096);
  (void)add_store_paths(d, ids, -1, paths);
  FunctionStats functions;
  (void)functions.add_store(d, ids, -1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return 0;
  }
  // The agent's own driver, as its commands read a store; it closes db.
  const std::unique_ptr<agent::SqliteStore> store = agent::SqliteStore::adopt(db);
  // SQLite owns the copy (FREEONCLOSE); read-only: the reader writes nothing.
  auto* image = static_cast<unsigned char*>(sqlite3_malloc64(size ? size : 1));
  if (image == nullptr) return 0;
  std::memcpy(image, data, size);
  if (sqlite3_deserialize(
          db, "main", image, static_cast<sqlite3_int64>(size), static_cast<sqlite3_int64>(size),
          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) != SQLITE_OK)
    return 0;
  try {
    read_all(*store);
  } catch (const StoreFailure&) {
    // SQLite refused the file, or a column has the wrong type: one line.
  }
  return 0;
}
