#pragma once
// The profile store (docs/store.md) in a SQLite file, written by the agent
// itself through Debian's libsqlite3: core store.h's StoreDriver on one
// connection, with the connection settings of Python's open_store (WAL, a
// 30 s busy timeout, foreign keys on) and its transactions (one add is one
// BEGIN IMMEDIATE ... COMMIT). Only the agent and its tests link this: the
// extension drives Python's own sqlite3 module and never links libsqlite3.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tree.h"
#include "store/store.h"
#include "util/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace mlprof::agent {

// Writers queue on the file's lock for this long (store.py's _BUSY_TIMEOUT_MS):
// an add of a long capture holds it for seconds.
inline constexpr int kStoreBusyTimeoutMs = 30'000;

// The file a store target names: "sqlite:///rel.db" and "sqlite:////abs.db"
// as store.py reads them, else the target itself as a path.
std::string sqlite_store_path(const std::string& target);

class SqliteStore final : public StoreDriver {
 public:
  // Opens (creating it if need be) the store at `target`, creates its
  // schema or checks its version (core prepare_store) in one write
  // transaction, then turns on WAL. Errors say the cause (the caller names
  // the target): kVersion (a
  // newer or older store), kCorrupt (not a store, not SQLite), kIo (cannot
  // open or create the file), kUnsupported (a PostgreSQL URL: the agent
  // writes SQLite only).
  static Result<std::unique_ptr<SqliteStore>> open(const std::string& target);
  // A store on `db`, an open connection it takes over as it is: no schema
  // made or checked, no settings changed. For reading a store image that
  // was deserialized into memory (fuzz/fuzz_store_read.cpp).
  static std::unique_ptr<SqliteStore> adopt(sqlite3* db);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  // Adds `profile` as one source in one transaction (BEGIN IMMEDIATE ...
  // COMMIT; ROLLBACK on any failure, so nothing is half-added). Returns its
  // source_id, or kIo with sqlite's message.
  Result<int64_t> add(const Profile& profile, const SourceInfo& info);
  // add(), unless a source already carries the label `label` with the value
  // info.labels[label] (the continuous agent's item key, sink.h): core
  // add_profile_once in this store's transaction, so two deliveries of one
  // item store it once.
  using Once = AddedOnce;
  Result<Once> add_once(const Profile& profile, const SourceInfo& info, const std::string& label);

  const std::string& target() const { return target_; }

  // StoreDriver: statements are prepared once and kept, by their text.
  // Failures throw StoreFailure with sqlite's message.
  Dialect dialect() const override { return Dialect::kSqlite; }
  void execute(const std::string& sql, const SqlRow& params) override;
  void execute_many(const std::string& sql, const std::vector<SqlRow>& rows) override;
  std::vector<SqlRow> query(const std::string& sql, const SqlRow& params) override;

 private:
  SqliteStore(std::string target, sqlite3* db) : target_(std::move(target)), db_(db) {}

  sqlite3_stmt* prepared(const std::string& sql);
  // Runs statement text outside the cache (BEGIN, COMMIT, PRAGMA ...).
  void exec(const char* sql);
  // Throws StoreFailure: sqlite's message, then what was being done.
  [[noreturn]] void fail(const std::string& context) const;

  std::string target_;
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace mlprof::agent
