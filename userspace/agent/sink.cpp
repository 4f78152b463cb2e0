// open_sink: a --sink URL to its Sink (sink.h lists the forms); the
// helpers the sinks share (identity paths, the retention text).

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string_view>
#include <vector>

#include "agent/sink.h"
#include "agent/sink_dir.h"
#include "agent/sink_mlflow.h"
#include "agent/sink_postgres.h"
#include "agent/sink_sqlite.h"

namespace mlprof::agent {

namespace {

// "1024 MB", "41.2 MB": MiB, one decimal unless whole.
std::string mib_text(uint64_t bytes) {
  char buf[32];
  if (bytes % (uint64_t{1} << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " MB", bytes >> 20);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1 << 20));
  }
  return buf;
}

// "7d", "24h", "90m", "45s": the largest whole unit.
std::string age_text(int64_t ns) {
  const int64_t s = ns / 1'000'000'000;
  if (s > 0 && s % 86400 == 0) return std::to_string(s / 86400) + "d";
  if (s > 0 && s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s > 0 && s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}

}  // namespace

std::string absolute_path(const std::string& path) {
  std::string full = path;
  if (full.empty() || full[0] != '/') {
    std::vector<char> cwd(4096);
    const std::string here = ::getcwd(cwd.data(), cwd.size()) != nullptr ? cwd.data() : "";
    full = here + "/" + full;
  }
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= full.size()) {
    const size_t end = std::min(full.find('/', at), full.size());
    const std::string part = full.substr(at, end - at);
    at = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (const std::string& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

std::string retention_text(const RetentionStats& r) {
  std::string bound;
  if (r.max_bytes > 0) bound = mib_text(r.max_bytes);
  if (r.max_age_ns > 0) bound += (bound.empty() ? "" : ", ") + age_text(r.max_age_ns);
  std::string text = "directory " + mib_text(r.bytes) + " in " + std::to_string(r.files) +
                     (r.files == 1 ? " file" : " files") + " (bound " +
                     (bound.empty() ? "none" : bound) + "), pruned " +
                     std::to_string(r.pruned_files);
  if (r.pruned_files > 0) text += " (" + mib_text(r.pruned_bytes) + ")";
  if (!r.last_error.empty()) text += ", cannot prune: " + r.last_error;
  return text;
}

Result<std::unique_ptr<Sink>> open_sink(const std::string& url, const SinkOptions& options) {
  auto bad = [&](const std::string& why) {
    return Error{Error::Kind::kUnsupported, 0, "--sink '" + url + "': " + why};
  };
  if (url.empty())
    return bad("give a directory, sqlite:///PATH, postgresql://... or http://HOST:PORT");
  if (url.starts_with("postgresql://") || url.starts_with("postgres://"))
    return open_postgres_sink(url);
  if (url.starts_with("http://") || url.starts_with("https://")) return open_mlflow_sink(url);
  if (url.starts_with("sqlite://")) {
    if (!url.starts_with("sqlite:///") || url.size() == 10)
      return bad("a SQLite store is sqlite:///relative.db or sqlite:////absolute.db");
    return open_sqlite_sink(url);
  }
  if (url.starts_with("file://")) {
    if (!url.starts_with("file:///")) return bad("a directory URL is file:///absolute/path");
    return open_directory_sink(url.substr(7), {options.dir_max_bytes, options.dir_max_age_ns});
  }
  if (const size_t colon = url.find("://"); colon != std::string::npos) {
    return bad("unknown scheme '" + url.substr(0, colon) +
               "': use a directory, sqlite:///PATH, postgresql://... or http(s)://HOST:PORT");
  }
  if (url.ends_with(".db") || url.ends_with(".sqlite") || url.ends_with(".sqlite3"))
    return open_sqlite_sink(url);
  return open_directory_sink(url, {options.dir_max_bytes, options.dir_max_age_ns});
}

}  // namespace mlprof::agent
