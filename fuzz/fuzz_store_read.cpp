// Fuzz target: the store reader (userspace/core/store/store_read.cpp) on a
// store file someone was sent. Input: the SQLite file's bytes, opened
// read-only in memory (sqlite3_deserialize). Every source (the first 16)
// is read as spans or as sampled stacks and exercised. SQLite refusing the
// file, or the reader throwing StoreFailure (a column of the wrong type),
// is a refusal the commands turn into one line; anything else is a finding.
#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.h"
#include "store/store.h"

using namespace mlprof;

namespace {

// A read-only StoreDriver over one connection. The agent's SqliteStore
// opens (and may create) a file for writing; this one reads an image.
class ImageDriver final : public StoreDriver {
 public:
  explicit ImageDriver(sqlite3* db) : db_(db) {}
  Dialect dialect() const override { return Dialect::kSqlite; }
  void execute(const std::string& sql, const SqlRow& params) override { (void)query(sql, params); }
  void execute_many(const std::string& sql, const std::vector<SqlRow>& rows) override {
    for (const SqlRow& r : rows) (void)query(sql, r);
  }
  std::vector<SqlRow> query(const std::string& sql, const SqlRow& params) override {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) fail();
    for (size_t i = 0; i < params.size(); ++i) {
      const int at = static_cast<int>(i) + 1;
      if (const auto* n = std::get_if<int64_t>(&params[i])) {
        sqlite3_bind_int64(st, at, *n);
      } else if (const auto* s = std::get_if<std::string>(&params[i])) {
        sqlite3_bind_text(st, at, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
      }
    }
    std::vector<SqlRow> rows;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      SqlRow row;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        switch (sqlite3_column_type(st, c)) {
          case SQLITE_NULL:
            row.emplace_back(std::monostate{});
            break;
          case SQLITE_INTEGER:
            row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(st, c)));
            break;
          default: {
            const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, c));
            row.emplace_back(
                std::string(t ? t : "", static_cast<size_t>(sqlite3_column_bytes(st, c))));
          }
        }
      }
      rows.push_back(std::move(row));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) fail();
    return rows;
  }

 private:
  [[noreturn]] void fail() const { throw StoreFailure(sqlite3_errmsg(db_)); }
  sqlite3* db_;
};

void read_all(StoreDriver& d) {
  if (!store_present(d)) return;
  (void)store_version(d);
  for (const SqlRow& r : d.query("SELECT source_id FROM sources ORDER BY source_id LIMIT 16", {})) {
    const int64_t id = sql_int(r[0]);
    Result<Profile> p = read_source(d, id);
    if (p.ok()) {
      fuzz::exercise(p.value());
      continue;
    }
    Result<StackSamples> s = read_stack_source(d, id);
    if (s.ok()) fuzz::exercise(s.value());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return 0;
  }
  // SQLite owns the copy (FREEONCLOSE); read-only: the reader writes nothing.
  auto* image = static_cast<unsigned char*>(sqlite3_malloc64(size ? size : 1));
  if (image != nullptr) {
    std::memcpy(image, data, size);
    const int rc = sqlite3_deserialize(
        db, "main", image, static_cast<sqlite3_int64>(size), static_cast<sqlite3_int64>(size),
        SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY);
    if (rc == SQLITE_OK) {
      ImageDriver d(db);
      try {
        read_all(d);
      } catch (const StoreFailure&) {
        // SQLite refused the file, or a column has the wrong type: one line.
      }
    }
  }
  sqlite3_close(db);
  return 0;
}
