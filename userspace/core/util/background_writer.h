#pragma once
// A process-wide writer thread for profiles handed off by a serving process
// (autoprofile with output_dir): the export and the atomic write run there
// under SCHED_IDLE, so a write never takes CPU from the requests and, in the
// extension, never waits for or holds the Python GIL. The queue is bounded:
// a full queue drops the profile and counts it; the caller never blocks.
// A submit wakes the thread only when it sleeps after an idle second; while
// profiles keep coming it polls the queue every 50 ms (a wake-up per profile
// cost the request thread more than the write did). What is queued (16 at
// most) is written as one AtomicWriteBatch with deferred durability
// (file_io.h): each file is whole under its name at once, and
// flush_background_writes makes all of them durable with one syncfs per
// filesystem.

#include <cstdint>
#include <memory>
#include <string>

#include "formats/export.h"
#include "model/tree.h"

namespace mlprof {

struct WriterStats {
  uint64_t submitted = 0;  // accepted into the queue
  uint64_t written = 0;
  uint64_t dropped = 0;  // the queue was full
  uint64_t failed = 0;   // save_profile returned an error
  uint64_t queued = 0;   // accepted, not yet written or failed
  uint64_t batches = 0;  // batches written
  uint64_t sync_failures =
      0;                   // flushes whose syncfs failed (the files are written, maybe not durable)
  std::string last_error;  // the newest failure's message, "" if none
};

// Queues `profile` for save_profile(path, format); the directory is created
// if missing. False (counted as dropped) if `capacity` jobs are already
// waiting. Starts the thread on first use, again in a forked child.
bool write_in_background(std::shared_ptr<const Profile> profile, std::string path,
                         ExportFormat format, size_t capacity);
// Waits until every queued job is written or failed, then syncs the
// filesystems written to since the last flush; false if `timeout_s` (< 0: no
// limit) passed before the queue drained (nothing is synced then).
bool flush_background_writes(double timeout_s);
WriterStats background_writer_stats();
// background_writer_stats().failed + sync_failures, without copying the last error.
uint64_t background_writer_failures();

}  // namespace mlprof
