#include "agent/store_postgres.h"

#include <libpq-fe.h>

#include <cctype>
#include <charconv>
#include <string_view>
#include <utility>

#include "store/store_copy.h"

namespace mlprof::agent {

namespace {

// store.py takes the same lock while it creates or checks the schema, so two
// writers opening a new database at once create it once.
constexpr const char* kSchemaLock = "7170687";

// Type oids of the columns the store's queries return (pg_type.h).
constexpr Oid kInt8 = 20, kInt2 = 21, kInt4 = 23, kOid = 26, kNumeric = 1700, kBool = 16;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

std::string excerpt(const std::string& sql) {
  return sql.size() <= 48 ? sql : sql.substr(0, 45) + "...";
}

// The core writes `?` (SQLite's); PostgreSQL numbers its parameters.
std::string numbered(const std::string& sql, int* count) {
  std::string out;
  out.reserve(sql.size() + 16);
  int n = 0;
  for (const char c : sql) {
    if (c == '?') {
      out += '$' + std::to_string(++n);
    } else {
      out += c;
    }
  }
  *count = n;
  return out;
}

// Parameters as text (the server parses them as the types it inferred).
class TextParams {
 public:
  explicit TextParams(const SqlRow& row) {
    texts_.reserve(row.size());
    for (const SqlValue& v : row) {
      if (const auto* n = std::get_if<int64_t>(&v)) {
        texts_.push_back(std::to_string(*n));
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        texts_.push_back(*s);
      } else {
        texts_.emplace_back();
      }
    }
    values_.reserve(row.size());
    for (size_t i = 0; i < row.size(); ++i) {
      values_.push_back(std::holds_alternative<std::monostate>(row[i]) ? nullptr
                                                                       : texts_[i].c_str());
    }
  }
  int size() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return values_.data(); }

 private:
  std::vector<std::string> texts_;
  std::vector<const char*> values_;
};

void ignore_notice(void*, const char*) {}  // "relation already exists, skipping" and the like

// libpq's messages span lines ("server closed the connection
// unexpectedly\n\tThis probably means ..."): one line, for logs and the spool.
std::string one_line(const std::string& message) {
  std::string out;
  for (const char c : message) {
    if (c == '\n' || c == '\t' || c == '\r') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

std::string postgres_url_for_display(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const auto at = url.rfind('@');
  if (at == std::string::npos || at < scheme) return url;
  const auto colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon) + ":***" + url.substr(at);
}

std::string postgres_identity(const std::string& url) {
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), nullptr);
  if (parsed == nullptr) return postgres_url_for_display(url);
  std::string host, port, db, user;
  for (const PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    const std::string key = o->keyword, value = o->val != nullptr ? o->val : "";
    if (key == "host" || (key == "hostaddr" && host.empty())) host = value;
    if (key == "port") port = value;
    if (key == "dbname") db = value;
    if (key == "user") user = value;
  }
  PQconninfoFree(parsed);
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (port.empty()) port = "5432";
  if (db.empty()) db = user;
  return "postgresql://" + (user.empty() ? "" : user + "@") + host + ":" + port + "/" + db;
}

Result<std::unique_ptr<PostgresStore>> PostgresStore::open(const std::string& url) {
  if (!url.starts_with("postgresql://") && !url.starts_with("postgres://")) {
    return Error{Error::Kind::kUnsupported, 0, "not a postgresql:// URL"};
  }
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string message = parse_error != nullptr ? parse_error : "out of memory";
    PQfreemem(parse_error);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return Error{Error::Kind::kUnsupported, 0, "not a PostgreSQL URL libpq reads: " + message};
  }
  PQconninfoFree(parsed);

  // The URL first, expanded; the keywords after it override its own.
  const std::string timeout = std::to_string(kPostgresConnectTimeoutS);
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* values[] = {url.c_str(), timeout.c_str(), "mlprof-ebpf", nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, 1);
  if (conn == nullptr)
    return Error{Error::Kind::kIo, 0, "cannot reach the PostgreSQL store: out of memory"};
  std::unique_ptr<PostgresStore> store(new PostgresStore(conn));
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    // One line per address tried: the first names the cause.
    if (const auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
    return Error{Error::Kind::kIo, 0, "cannot reach the PostgreSQL store: " + one_line(message)};
  }
  PQsetNoticeProcessor(conn, ignore_notice, nullptr);
  try {
    store->exec((std::string("SELECT pg_advisory_lock(") + kSchemaLock + ")").c_str());
    Result<Ok> prepared = Ok{};
    try {
      store->exec("BEGIN");
      prepared = prepare_store(*store);
      store->exec(prepared ? "COMMIT" : "ROLLBACK");
    } catch (...) {
      store->rollback();
      PQclear(
          PQexec(conn, (std::string("SELECT pg_advisory_unlock(") + kSchemaLock + ")").c_str()));
      throw;
    }
    store->exec((std::string("SELECT pg_advisory_unlock(") + kSchemaLock + ")").c_str());
    if (!prepared) return prepared.error();
  } catch (const std::exception& e) {  // the server's, or the core's own checks
    return Error{Error::Kind::kIo, 0, e.what()};
  }
  return store;
}

PostgresStore::~PostgresStore() { PQfinish(conn_); }

bool PostgresStore::connected() const { return PQstatus(conn_) == CONNECTION_OK; }

Result<PostgresStore::Once> PostgresStore::add_once(const Profile& profile, const SourceInfo& info,
                                                    const std::string& label) {
  try {
    exec("BEGIN");
    try {
      Result<Once> once = add_profile_once(*this, profile, info, label);
      exec(once ? "COMMIT" : "ROLLBACK");
      return once;
    } catch (...) {
      rollback();
      throw;
    }
  } catch (const std::exception& e) {  // the server's, or the core's own checks
    return Error{Error::Kind::kIo, 0, e.what()};
  }
}

void PostgresStore::fail(const std::string& context) const {
  throw StoreFailure(one_line(PQerrorMessage(conn_)) + " (" + context + ")");
}

void PostgresStore::rollback() noexcept {
  if (PQtransactionStatus(conn_) != PQTRANS_IDLE && PQtransactionStatus(conn_) != PQTRANS_UNKNOWN) {
    PQclear(PQexec(conn_, "ROLLBACK"));
  }
}

void PostgresStore::exec(const char* sql) {
  PgResult r(PQexec(conn_, sql));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) fail(sql);
}

const std::string& PostgresStore::prepared(const std::string& sql) {
  if (const auto it = statements_.find(sql); it != statements_.end()) return it->second;
  std::string name = "mlprof_" + std::to_string(statements_.size() + 1);
  int count = 0;
  const std::string text = numbered(sql, &count);
  PgResult r(PQprepare(conn_, name.c_str(), text.c_str(), count, nullptr));
  if (!r || PQresultStatus(r.get()) != PGRES_COMMAND_OK) fail("preparing `" + excerpt(sql) + "`");
  return statements_.emplace(sql, std::move(name)).first->second;
}

void PostgresStore::execute(const std::string& sql, const SqlRow& params) {
  const std::string& name = prepared(sql);
  const TextParams p(params);
  PgResult r(PQexecPrepared(conn_, name.c_str(), p.size(), p.values(), nullptr, nullptr, 0));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) fail("`" + excerpt(sql) + "`");
}

void PostgresStore::execute_many(const std::string& sql, const std::vector<SqlRow>& rows) {
  if (rows.size() >= kCopyMinRows) {
    if (const std::string statement = copy_statement(sql); !statement.empty()) {
      copy(statement, rows);
      return;
    }
  }
  for (const SqlRow& row : rows) execute(sql, row);
}

void PostgresStore::copy(const std::string& statement, const std::vector<SqlRow>& rows) {
  PgResult start(PQexec(conn_, statement.c_str()));
  if (!start || PQresultStatus(start.get()) != PGRES_COPY_IN) fail("`" + excerpt(statement) + "`");
  const std::string text = copy_text(rows);
  const bool sent = PQputCopyData(conn_, text.data(), static_cast<int>(text.size())) == 1;
  const bool ended = PQputCopyEnd(conn_, sent ? nullptr : "the agent could not send the rows") == 1;
  // The COPY's outcome, then the end of its results.
  bool ok = sent && ended;
  std::string message;
  while (PGresult* r = PQgetResult(conn_)) {
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      ok = false;
      if (message.empty()) message = PQresultErrorMessage(r);
    }
    PQclear(r);
  }
  if (!ok) {
    throw StoreFailure(one_line(message.empty() ? std::string(PQerrorMessage(conn_)) : message) +
                       " (`" + excerpt(statement) + "`)");
  }
}

std::vector<SqlRow> PostgresStore::query(const std::string& sql, const SqlRow& params) {
  const std::string& name = prepared(sql);
  const TextParams p(params);
  PgResult r(PQexecPrepared(conn_, name.c_str(), p.size(), p.values(), nullptr, nullptr, 0));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) fail("`" + excerpt(sql) + "`");
  const int rows = PQntuples(r.get());
  const int columns = PQnfields(r.get());
  std::vector<SqlRow> out;
  out.reserve(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    SqlRow& row = out.emplace_back();
    row.reserve(static_cast<size_t>(columns));
    for (int c = 0; c < columns; ++c) {
      if (PQgetisnull(r.get(), i, c)) {
        row.emplace_back(std::monostate{});
        continue;
      }
      const std::string_view text(PQgetvalue(r.get(), i, c),
                                  static_cast<size_t>(PQgetlength(r.get(), i, c)));
      const Oid type = PQftype(r.get(), c);
      if (type == kBool) {
        row.emplace_back(int64_t{text == "t" ? 1 : 0});
      } else if (type == kInt8 || type == kInt4 || type == kInt2 || type == kOid ||
                 type == kNumeric) {
        // A NUMERIC is an integer here (sums of integers); anything else is refused, as by
        // PyDriver.
        int64_t n = 0;
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec != std::errc() || ptr != text.data() + text.size()) {
          throw StoreFailure("`" + excerpt(sql) + "` returned '" + std::string(text) +
                             "', not an integer");
        }
        row.emplace_back(n);
      } else {
        row.emplace_back(std::string(text));
      }
    }
  }
  return out;
}

}  // namespace mlprof::agent
