#pragma once
// The profile store (docs/store.md) on a PostgreSQL server, written by the
// agent itself through Debian's libpq: core store.h's StoreDriver on one
// connection, as store.py's _PostgresDriver drives psycopg (autocommit, the
// store's own BEGIN ... COMMIT, a batch of a plain INSERT's rows as one COPY
// FROM STDIN: store/store_copy.h). The SQL and the rows are the core's, so
// `mlprof top postgresql://...` reads what the agent wrote as what
// `mlprof add` wrote.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tree.h"
#include "store/store.h"
#include "util/result.h"

typedef struct pg_conn PGconn;

namespace mlprof::agent {

// Seconds a connection attempt waits (store.py's _CONNECT_TIMEOUT_S).
inline constexpr int kPostgresConnectTimeoutS = 5;

// The URL without its password, for messages (store.py's _safe).
std::string postgres_url_for_display(const std::string& url);
// The server and database a URL names, as a sink's identity (sink.h):
// "postgresql://USER@HOST:PORT/DB", libpq's reading of the URL (its
// parameters too), the port 5432 and the database USER when not given; no
// password. The URL itself when libpq cannot read it.
std::string postgres_identity(const std::string& url);

class PostgresStore final : public StoreDriver {
 public:
  // Connects to `url` (a libpq URI: postgresql://user[:password]@host:port/db)
  // and creates the schema or checks its version (core prepare_store) in one
  // transaction, under the advisory lock store.py takes for it. Errors:
  // kUnsupported (not a postgresql:// URL libpq can parse), kIo (the server
  // cannot be reached or refused the connection: a later try may succeed),
  // kVersion (a store of another version), kCorrupt (tables that are not a store).
  static Result<std::unique_ptr<PostgresStore>> open(const std::string& url);

  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

  // Adds `profile` as one source in one transaction, unless a source already
  // carries the label `label` with the value info.labels[label] (the
  // continuous agent's item key, sink.h): core add_profile_once in this
  // store's transaction. kIo with the server's message.
  using Once = AddedOnce;
  Result<Once> add_once(const Profile& profile, const SourceInfo& info, const std::string& label);

  // False once the connection is lost (the server went away): a new one
  // must be opened.
  bool connected() const;

  // StoreDriver: `?` placeholders become $1, $2 ...; statements are prepared
  // once on the connection and kept, by their text. Failures throw
  // StoreFailure with the server's message.
  Dialect dialect() const override { return Dialect::kPostgres; }
  void execute(const std::string& sql, const SqlRow& params) override;
  void execute_many(const std::string& sql, const std::vector<SqlRow>& rows) override;
  std::vector<SqlRow> query(const std::string& sql, const SqlRow& params) override;

 private:
  explicit PostgresStore(PGconn* conn) : conn_(conn) {}

  // The prepared statement's name for `sql`, preparing it the first time.
  const std::string& prepared(const std::string& sql);
  // Runs statement text outside the cache (BEGIN, COMMIT, an advisory lock).
  void exec(const char* sql);
  void copy(const std::string& statement, const std::vector<SqlRow>& rows);
  // ROLLBACK when a transaction is open; never throws.
  void rollback() noexcept;
  [[noreturn]] void fail(const std::string& context) const;

  PGconn* conn_;
  std::unordered_map<std::string, std::string> statements_;
};

}  // namespace mlprof::agent
