#pragma once
// Where the continuous agent's profiles go (--sink URL, docs/ebpf.md,
// "Continuous mode"): a directory, a SQLite or PostgreSQL profile store, or
// an MLflow tracking server. The spool (spool.h) hands a sink one item at a
// time: one period of one workload (a pod's container, or a process outside
// Kubernetes), already written on disk as a profile document. A sink
// delivers an item whole or not at all; the spool keeps what is not
// delivered, retries with back-off, and removes an item only once its sink
// acknowledged it.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "util/result.h"

namespace mlprof::agent {

// One spooled profile: one rotation period of one workload.
struct SpoolItem {
  std::string path;  // the profile document (.json.gz), complete (written atomically)
  // namespace, pod, container, node, pid, ... and every --label KEY=VALUE.
  std::map<std::string, std::string> labels;
  int64_t period_start_unix_ns = 0;
  int64_t period_end_unix_ns = 0;
  uint64_t sessions = 0;
  uint64_t spans = 0;
  // Unique and stable across restarts (derived from the node, workload and
  // period). A sink records it with what it delivers and treats an item
  // whose key it already holds as delivered, so an item re-sent after a
  // crash between delivery and acknowledgement is not stored twice.
  std::string key;
  // The identity of the sink it was written for (Sink::identity()); set by
  // the spool. A run delivers only its own sink's items. "": not recorded
  // (written by an older agent).
  std::string sink;
};

// What a sink that prunes what it wrote holds and has removed (the
// directory sink's retention, --sink-max-mb and --sink-max-age).
struct RetentionStats {
  uint64_t max_bytes = 0;                       // 0: no bound
  int64_t max_age_ns = 0;                       // 0: no bound
  uint64_t files = 0;                           // the agent's files there now
  uint64_t bytes = 0;                           // their size
  uint64_t pruned_files = 0, pruned_bytes = 0;  // removed since the agent started, oldest first
  std::string last_error;                       // the last removal that failed ("" if none)
};

// "directory 41.2 MB in 14 files (bound 1024 MB, 7d), pruned 3 (9.6 MB)":
// the summary lines' part (MB: MiB, one decimal).
std::string retention_text(const RetentionStats& r);

// The source label under which a store sink records SpoolItem::key, so a
// re-delivered item is found and not added twice ("agent_item").
inline constexpr const char* kItemKeyLabel = "agent_item";

enum class DeliveryStatus {
  kDelivered,  // stored; the spool may forget the item
  kRetry,      // transient (server down, store locked, disk full): kept, retried later
  kReject,     // can never be delivered (an unreadable document): set aside, counted dropped
};

struct Delivery {
  DeliveryStatus status = DeliveryStatus::kRetry;
  // Delivered: where it went ("source 12", "run 3f2a..."); otherwise the cause.
  std::string detail;
};

class Sink {
 public:
  virtual ~Sink() = default;
  // Delivers one item. Never throws; may block (network, a locked store),
  // so the spool calls it off the agent's polling loop.
  virtual Delivery deliver(const SpoolItem& item) = 0;
  // The URL as log lines show it, any password removed.
  virtual std::string describe() const = 0;
  // Where items go, stable across runs and spellings of the URL, never a
  // password: "dir:/abs/path", "sqlite:/abs/path.db",
  // "postgresql://USER@HOST:PORT/DB", "mlflow:http://HOST:PORT/PREFIX?experiment=NAME".
  // The spool records it with every item and delivers only its own sink's.
  virtual std::string identity() const { return describe(); }
  // Housekeeping between deliveries, from the rotation (another thread
  // than deliver()'s): the directory sink prunes what is past its age.
  virtual void maintain(int64_t /*now_unix_ns*/) {}
  // A sink that bounds what it keeps (the directory): its figures.
  virtual std::optional<RetentionStats> retention() const { return std::nullopt; }
};

// `path` absolute (against the working directory) and lexically normal: no
// "." or ".." parts, no repeated or trailing '/'. Symbolic links are kept
// (the path may not exist yet): a sink's identity.
std::string absolute_path(const std::string& path);

// Options of the sinks that take any (the directory's retention).
struct SinkOptions {
  uint64_t dir_max_bytes = 0;  // --sink-max-mb; 0: no bound
  int64_t dir_max_age_ns = 0;  // --sink-max-age; 0: no bound
};

// Opens a --sink URL:
//   DIR or file:///DIR          a directory: one document per item
//   sqlite:///PATH, PATH.db     a SQLite profile store (docs/store.md)
//   postgresql://...            a PostgreSQL profile store
//   http://HOST:PORT[/?experiment=NAME], https://...
//                               an MLflow tracking server: one run per
//                               workload and period, the document as an
//                               artifact, its top-level figures as metrics
// A malformed URL, or a store of another version, is an error here; a
// server that is down is not (the spool holds items until it is back).
Result<std::unique_ptr<Sink>> open_sink(const std::string& url, const SinkOptions& options = {});

}  // namespace mlprof::agent
