#pragma once
// The continuous agent's spool (docs/ebpf.md, "Continuous mode"): profiles
// waiting for their sink, on disk, so that a sink that is down, a full
// disk behind it, or an agent killed and restarted loses nothing the spool
// accepted.
//
// Layout of the directory: one item is two files named by its sequence
// number, NNNNNNNNNNNNNNNN.json.gz (the document) and NNNNNNNNNNNNNNNN.item
// (its metadata, JSON: key, labels, period, figures, the document's size).
// Each is written atomically (temporary file, fsync, rename), the document
// first: an item exists once its .item file does, and put() returns only
// then ("acknowledged"). Delivered items are removed .item first, so a crash
// in between leaves a lone document, which the next open() removes. Items
// that cannot be read back (a bad .item, a missing or short document) and
// items their sink rejects are moved to corrupt/ and rejected/, not deleted.
//
// Each item records the sink it was written for (Sink::identity()). A
// spool delivers only its own sink's items: another sink's (a previous
// run's, with another --sink) stay on disk for a run with that sink, and
// are counted and named (others_text()).
//
// Bounded, the whole directory: at most max_items items waiting and
// max_bytes bytes, the set-aside items of corrupt/ and rejected/ included
// (at most kMaxSetAside of them, the first to go when room is needed); a
// put() over a bound drops the oldest first (counted). One thread
// delivers, oldest first, with exponential back-off and jitter after a
// failure.

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/sink.h"
#include "util/result.h"

namespace mlprof::agent {

struct SpoolLimits {
  uint64_t max_bytes = uint64_t{256} << 20;  // documents and metadata together, set-aside ones too
  size_t max_items = 10'000;                 // waiting (this sink's and others')
};

// Items kept in corrupt/ and rejected/ together, at most: the newest, to be
// looked at; they are the first removed when the spool needs room.
inline constexpr size_t kMaxSetAside = 100;

// Delay before the n-th retry in a row: initial * 2^(n-1), at most max, and
// then a uniformly random point in its upper half (jitter: agents on many
// nodes that lost one server do not come back to it at the same instant).
struct Backoff {
  int64_t initial_ms = 1'000;
  int64_t max_ms = 60'000;
  // The delay before retry `failures` (>= 1), before jitter.
  int64_t ceiling_ms(uint64_t failures) const;
};

struct SpoolStats {
  uint64_t accepted = 0;       // items put() and acknowledged
  uint64_t resumed = 0;        // items found on disk by open() (a previous run's)
  uint64_t delivered = 0;      // acknowledged by the sink, removed
  uint64_t dropped_bound = 0;  // the oldest, dropped to stay within the bounds
  uint64_t dropped_write =
      0;                  // could not be written to the spool (disk full, ...): never acknowledged
  uint64_t rejected = 0;  // the sink can never take them: moved to rejected/
  uint64_t corrupt = 0;   // unreadable at open(): moved to corrupt/
  uint64_t failures = 0;  // delivery attempts that failed (each retried later)
  uint64_t pending = 0;   // this sink's items in the spool now
  uint64_t pending_bytes = 0;  // theirs
  uint64_t others = 0;         // other sinks' items in the spool now (never delivered here)
  uint64_t others_bytes = 0;
  uint64_t set_aside = 0;  // items in corrupt/ and rejected/ now
  uint64_t set_aside_bytes = 0;
  uint64_t set_aside_removed = 0;  // removed from there to stay within the bounds
  std::string last_error;  // the last failure's cause ("" once an item is delivered after it)
  // The health probe's (health.h), CLOCK_MONOTONIC ms: a call to the sink
  // in flight since (0: none), and the last delivery (0: none yet).
  int64_t call_since_ms = 0;
  int64_t last_delivered_ms = 0;
  uint64_t dropped() const { return dropped_bound + dropped_write + rejected + corrupt; }
};

class Spool {
 public:
  // Opens `dir` (created with its parents if need be) for the sink whose
  // identity is `sink` (Sink::identity(); "" in tests: items that recorded
  // none are its own), and takes up what a previous run left there: items
  // in sequence order, lone documents and temporary files removed,
  // unreadable items set aside in corrupt/. Items over the bounds are
  // dropped, oldest first. Errors: the directory cannot be created or
  // listed.
  static Result<std::unique_ptr<Spool>> open(const std::string& dir, SpoolLimits limits = {},
                                             Backoff backoff = {}, std::string sink = "");
  ~Spool();  // stop()
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Writes one item (item.path and item.sink are set by the spool) and wakes
  // the delivery thread. Ok only when both files are durable on disk; an
  // error (counted in dropped_write) leaves nothing behind.
  Result<Ok> put(SpoolItem item, std::string_view document);

  // Starts the delivery thread (once). `sink` outlives the spool's use of it
  // (stop() or the destructor); it is the sink open() was given.
  void start(Sink& sink);
  // One delivery attempt of the oldest item on the calling thread, ignoring
  // the back-off (tests, and the thread's own step). False when the spool
  // was empty.
  bool deliver_one(Sink& sink);
  // Retries now, and waits up to timeout_ms for this sink's items to be
  // delivered (back-off delays are cut to what is left): SIGTERM's bounded
  // attempt. True when none is left (other sinks' items do not count).
  bool flush(int64_t timeout_ms);
  // Ends the delivery thread after its current attempt; what is left stays
  // on disk for the next run.
  void stop();

  SpoolStats stats() const;
  // The items waiting, this sink's and others', oldest first (paths, keys,
  // labels, sinks): tests, summaries.
  std::vector<SpoolItem> items() const;
  // Other sinks' items, per sink, in one phrase: "2 items (4.8 MB) for
  // sqlite:/tmp/scratch.db, 1 item (0.1 MB) for a sink not recorded (an older
  // agent's)"; "" when there are none.
  std::string others_text() const;
  const std::string& dir() const { return dir_; }
  const std::string& sink() const { return sink_; }

 private:
  struct Entry {
    uint64_t seq = 0;
    uint64_t bytes = 0;  // both files
    bool in_flight = false;
    bool other = false;  // another sink's: never delivered here
    SpoolItem item;
  };
  struct SetAside {
    uint64_t seq = 0;
    std::string where;  // "corrupt", "rejected"
    uint64_t bytes = 0;
  };
  Spool(std::string dir, SpoolLimits limits, Backoff backoff, std::string sink);
  Result<Ok> resume();
  // Takes up corrupt/ and rejected/ (sizes, and sequence numbers to go past).
  void resume_set_aside(const std::string& where);
  std::string base(uint64_t seq) const;  // dir/NNNNNNNNNNNNNNNN
  // Removes the files of entries_[i] and erases it; under mu_.
  void remove_entry_locked(size_t i);
  // Moves an item's files to dir/`where`/ (corrupt, rejected), counted
  // there; under mu_ (or before the thread starts).
  void set_aside_locked(uint64_t seq, const std::string& where);
  // Removes the oldest set-aside item; under mu_.
  void remove_set_aside_locked();
  // Drops set-aside items, then the oldest entries not being delivered,
  // until `bytes` more and `items` more fit; under mu_. False when they
  // cannot (one item over the bound).
  bool make_room_locked(uint64_t bytes, size_t items);
  void run(Sink& sink);
  int64_t jitter_ms(int64_t ceiling_ms);

  const std::string dir_;
  const SpoolLimits limits_;
  const Backoff backoff_;
  const std::string sink_;  // the identity of the sink this run delivers to
  mutable std::mutex mu_;
  std::condition_variable wake_;     // an item arrived, flush, stop
  std::condition_variable changed_;  // an item left (flush waits on it)
  std::deque<Entry> entries_;        // oldest first
  std::deque<SetAside> set_aside_;   // oldest first
  uint64_t next_seq_ = 1;
  uint64_t bytes_ = 0;  // entries_' files and set_aside_'s together
  uint64_t consecutive_failures_ = 0;
  int64_t next_attempt_ms_ = 0;  // CLOCK_MONOTONIC ms
  int64_t flush_until_ms_ = 0;   // while flushing: back-off cut to this deadline
  bool stop_ = false;
  SpoolStats stats_;
  std::mt19937_64 rng_;
  std::thread thread_;
};

}  // namespace mlprof::agent
