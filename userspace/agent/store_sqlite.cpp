#include "agent/store_sqlite.h"

#include <sqlite3.h>

#include <string_view>
#include <utility>

namespace mlprof::agent {

namespace {

// A cached statement in use: bound now, reset and unbound when done, so it
// holds no read lock and no pointer into the caller's parameters.
class Bound {
 public:
  explicit Bound(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~Bound() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Bound(const Bound&) = delete;
  Bound& operator=(const Bound&) = delete;
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

// For messages: "WHAT `the statement's first 45 characters...`": appended piece by piece,
// as gcc 12 warns (-Wrestrict, a false positive) on "`" + std::string&&
// inlined at -O3.
std::string quoted(const char* what, const std::string& sql) {
  std::string s = what;
  s += '`';
  if (sql.size() <= 48) {
    s += sql;
  } else {
    s.append(sql, 0, 45);
    s += "...";
  }
  s += '`';
  return s;
}

}  // namespace

std::string sqlite_store_path(const std::string& target) {
  // store.py's _sqlite_path: sqlite:///rel -> rel, sqlite:////abs -> /abs.
  constexpr std::string_view kScheme = "sqlite:///";
  return target.starts_with(kScheme) ? target.substr(kScheme.size()) : target;
}

Result<std::unique_ptr<SqliteStore>> SqliteStore::open(const std::string& target) {
  if (target.starts_with("postgresql://") || target.starts_with("postgres://")) {
    return Error{
        Error::Kind::kUnsupported, 0,
        "the agent writes SQLite stores only: write its profile with -o FILE.json and add that "
        "to PostgreSQL with `mlprof add URL FILE.json`"};
  }
  const std::string path = sqlite_store_path(target);
  if (path.empty()) return Error{Error::Kind::kIo, 0, "no file name"};
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = std::string("cannot open the SQLite file: ") +
                          (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close_v2(db);
    return Error{Error::Kind::kIo, 0, std::move(message)};
  }
  sqlite3_extended_result_codes(db, 1);
  std::unique_ptr<SqliteStore> store(new SqliteStore(target, db));
  try {
    store->exec("PRAGMA foreign_keys = ON");
    sqlite3_busy_timeout(db, kStoreBusyTimeoutMs);
    // One writer at a time creates the schema; the others then find it.
    store->exec("BEGIN IMMEDIATE");
    Result<Ok> prepared = [&]() -> Result<Ok> {
      try {
        return prepare_store(*store);
      } catch (...) {
        if (sqlite3_get_autocommit(db) == 0)
          sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
      }
    }();
    if (!prepared) {
      store->exec("ROLLBACK");
      return prepared.error();
    }
    store->exec("COMMIT");
    // WAL: readers never wait for a writer, and writers queue on the busy timeout.
    store->exec("PRAGMA journal_mode = WAL");
  } catch (const StoreFailure& e) {
    const int code = sqlite3_errcode(db) & 0xff;
    const bool not_a_store = code == SQLITE_NOTADB || code == SQLITE_CORRUPT;
    return Error{not_a_store ? Error::Kind::kCorrupt : Error::Kind::kIo, 0,
                 std::string(not_a_store ? "not a readable SQLite store: " : "") + e.what()};
  }
  return store;
}

std::unique_ptr<SqliteStore> SqliteStore::adopt(sqlite3* db) {
  return std::unique_ptr<SqliteStore>(new SqliteStore("(in memory)", db));
}

SqliteStore::~SqliteStore() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Result<int64_t> SqliteStore::add(const Profile& profile, const SourceInfo& info) {
  try {
    exec("BEGIN IMMEDIATE");  // the write lock at once: no deadlock upgrading a read lock
    try {
      const int64_t id = add_profile(*this, profile, info);
      exec("COMMIT");
      return id;
    } catch (...) {
      // Some failures (a full disk) end the transaction themselves.
      if (sqlite3_get_autocommit(db_) == 0)
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  } catch (const StoreFailure& e) {
    return Error{Error::Kind::kIo, 0, e.what()};
  } catch (const std::exception& e) {  // the core's own checks (a row it cannot write)
    return Error{Error::Kind::kIo, 0, e.what()};
  }
}

Result<SqliteStore::Once> SqliteStore::add_once(const Profile& profile, const SourceInfo& info,
                                                const std::string& label) {
  try {
    exec("BEGIN IMMEDIATE");
    try {
      Result<Once> once = add_profile_once(*this, profile, info, label);
      exec(once ? "COMMIT" : "ROLLBACK");
      return once;
    } catch (...) {
      if (sqlite3_get_autocommit(db_) == 0)
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  } catch (const StoreFailure& e) {
    return Error{Error::Kind::kIo, 0, e.what()};
  } catch (const std::exception& e) {
    return Error{Error::Kind::kIo, 0, e.what()};
  }
}

void SqliteStore::fail(const std::string& context) const {
  throw StoreFailure(std::string(sqlite3_errmsg(db_)) + " (" + context + ")");
}

void SqliteStore::exec(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql);
}

sqlite3_stmt* SqliteStore::prepared(const std::string& sql) {
  if (const auto it = statements_.find(sql); it != statements_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                         &stmt, nullptr) != SQLITE_OK) {
    fail(quoted("preparing ", sql));
  }
  statements_.emplace(sql, stmt);
  return stmt;
}

namespace {

// The parameters are the caller's and outlive the step: SQLITE_STATIC.
bool bind(sqlite3_stmt* stmt, const SqlRow& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const int at = static_cast<int>(i) + 1;
    int rc = SQLITE_OK;
    if (const auto* n = std::get_if<int64_t>(&params[i])) {
      rc = sqlite3_bind_int64(stmt, at, *n);
    } else if (const auto* s = std::get_if<std::string>(&params[i])) {
      rc = sqlite3_bind_text64(stmt, at, s->data(), s->size(), SQLITE_STATIC, SQLITE_UTF8);
    } else {
      rc = sqlite3_bind_null(stmt, at);
    }
    if (rc != SQLITE_OK) return false;
  }
  return true;
}

}  // namespace

void SqliteStore::execute(const std::string& sql, const SqlRow& params) {
  Bound stmt(prepared(sql));
  if (!bind(stmt.get(), params)) fail(quoted("binding ", sql));
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) fail(quoted("", sql));
}

void SqliteStore::execute_many(const std::string& sql, const std::vector<SqlRow>& rows) {
  // The caller's transaction holds them all: no statement journal per row.
  Bound stmt(prepared(sql));
  for (const SqlRow& row : rows) {
    if (!bind(stmt.get(), row)) fail(quoted("binding ", sql));
    if (sqlite3_step(stmt.get()) != SQLITE_DONE) fail(quoted("", sql));
    sqlite3_reset(stmt.get());
  }
}

std::vector<SqlRow> SqliteStore::query(const std::string& sql, const SqlRow& params) {
  Bound stmt(prepared(sql));
  if (!bind(stmt.get(), params)) fail(quoted("binding ", sql));
  std::vector<SqlRow> out;
  const int columns = sqlite3_column_count(stmt.get());
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    SqlRow& row = out.emplace_back();
    row.reserve(static_cast<size_t>(columns));
    for (int c = 0; c < columns; ++c) {
      switch (sqlite3_column_type(stmt.get(), c)) {
        case SQLITE_INTEGER:
          row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt.get(), c)));
          break;
        case SQLITE_TEXT: {
          const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), c));
          row.emplace_back(
              std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt.get(), c))));
          break;
        }
        case SQLITE_NULL:
          row.emplace_back(std::monostate{});
          break;
        default:  // the schema has no REAL or BLOB column (as PyDriver, which refuses them too)
          throw StoreFailure(quoted("", sql) +
                             " returned a REAL or BLOB, not an integer, a text or NULL");
      }
    }
  }
  if (rc != SQLITE_DONE) fail(quoted("", sql));
  return out;
}

}  // namespace mlprof::agent
