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
#include <string>

#include "core/result.h"

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
};

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
Result<std::unique_ptr<Sink>> open_sink(const std::string& url);

}  // namespace mlprof::agent
