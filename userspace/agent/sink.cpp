// open_sink: a --sink URL to its Sink (sink.h lists the forms).

#include <string_view>

#include "agent/sink.h"
#include "agent/sink_dir.h"
#include "agent/sink_mlflow.h"
#include "agent/sink_postgres.h"
#include "agent/sink_sqlite.h"

namespace mlprof::agent {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

}  // namespace

Result<std::unique_ptr<Sink>> open_sink(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Error{Error::Kind::kUnsupported, 0, "--sink '" + url + "': " + why};
  };
  if (url.empty()) return bad("give a directory, sqlite:///PATH, postgresql://... or http://HOST:PORT");
  if (starts_with(url, "postgresql://") || starts_with(url, "postgres://")) return open_postgres_sink(url);
  if (starts_with(url, "http://") || starts_with(url, "https://")) return open_mlflow_sink(url);
  if (starts_with(url, "sqlite://")) {
    if (!starts_with(url, "sqlite:///") || url.size() == 10)
      return bad("a SQLite store is sqlite:///relative.db or sqlite:////absolute.db");
    return open_sqlite_sink(url);
  }
  if (starts_with(url, "file://")) {
    if (!starts_with(url, "file:///")) return bad("a directory URL is file:///absolute/path");
    return open_directory_sink(url.substr(7));
  }
  if (const size_t colon = url.find("://"); colon != std::string::npos) {
    return bad("unknown scheme '" + url.substr(0, colon) +
               "': use a directory, sqlite:///PATH, postgresql://... or http(s)://HOST:PORT");
  }
  if (ends_with(url, ".db") || ends_with(url, ".sqlite") || ends_with(url, ".sqlite3")) return open_sqlite_sink(url);
  return open_directory_sink(url);
}

}  // namespace mlprof::agent
