#pragma once
// --store's adds, off the agent's polling loop. With --stream every
// finished session is added as its own source; an add commits (an fsync:
// about 4.5 ms for a 30-span session here) and waits up to the busy
// timeout (30 s) while another process writes the store. Done in the loop,
// that would leave the ring buffer unread and lose events; so sessions go
// to one writer thread through a bounded queue, and a full queue drops
// (and counts) rather than blocks. The capture's single source (no
// --stream) is added on the caller's thread at the end, through add().

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/store_sqlite.h"
#include "model/tree.h"
#include "store/store.h"

namespace mlprof::agent {

struct StoreWriterStats {
  uint64_t added = 0;        // sources committed
  uint64_t failed = 0;       // adds rolled back (sqlite's error)
  uint64_t dropped = 0;      // submits refused: `capacity` sessions were waiting or being added
  int64_t first_source = 0;  // source_id of the first and the last add; 0 before any
  int64_t last_source = 0;
  std::string first_error;  // the first failure's message, "" if none
};

class StoreWriter {
 public:
  // Sessions waiting or being added, at most: 1024 sessions of a few
  // hundred spans is a few MB, and minutes of a locked store.
  static constexpr size_t kDefaultCapacity = 1024;

  // Adds to `store` (which outlives the writer) as sources described by
  // `info`; added_unix_ns is stamped at each add.
  StoreWriter(SqliteStore& store, SourceInfo info, size_t capacity = kDefaultCapacity);
  ~StoreWriter();  // finish()
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Queues a session for the writer thread (started on first use); never
  // waits for the store. False when it was dropped (the queue is full).
  bool submit(std::shared_ptr<const Profile> session);
  // Adds on the calling thread, after what was submitted (finish()es first).
  void add(const Profile& profile);
  // Waits until everything submitted is added or failed; ends the thread.
  void finish();

  StoreWriterStats stats() const;
  // The first failure's message, once: the caller says it when it happens.
  std::optional<std::string> take_first_failure();

 private:
  void run();
  void add_locked_out(const Profile& profile);  // the add, outside mu_; records the result

  SqliteStore& store_;
  const SourceInfo info_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // a job arrived, or stop_
  std::condition_variable idle_;  // pending_ reached 0
  std::deque<std::shared_ptr<const Profile>> queue_;
  size_t pending_ = 0;  // queued + being added: what capacity_ bounds
  bool stop_ = false;
  bool failure_said_ = false;
  StoreWriterStats stats_;
  std::thread thread_;
};

}  // namespace mlprof::agent
