#pragma once
// What the joiner's fuzz targets share: a Joiner with small limits (so the
// caps are reached in a few records), one record handed to it from an
// aligned copy as the ring buffer hands it (its byte count checked against
// a recount after each), and every session it built exercised (its
// document must read back).

#include <linux/types.h>  // mlprof_events.h is the BPF side's: its __u32 ...

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "agent/joiner.h"
#include "fuzz_common.h"
#include "mlprof_events.h"

namespace mlprof::fuzz {

inline agent::JoinerLimits small_limits() {
  agent::JoinerLimits l;
  l.max_events_per_session = 1 << 12;
  l.max_events_total = 1 << 14;
  l.max_open_sessions = 8;
  l.max_lanes_per_session = 64;
  l.max_lanes_total = 256;
  l.max_off_cpu_per_thread = 64;
  l.max_threads_per_process = 16;
  l.max_thread_events = 64;
  l.max_names_per_process = 256;
  l.max_processes = 4;
  l.max_bytes_total = 64 << 10;
  return l;
}

// The largest record the BPF side writes, and room for a longer one.
inline constexpr size_t kMaxRecord = sizeof(mlprof_ev_chunk) + 64;

inline void feed(agent::Joiner& j, const void* bytes, size_t size) {
  alignas(8) unsigned char rec[kMaxRecord];
  size = std::min(size, sizeof rec);
  std::memcpy(rec, bytes, size);
  j.on_record(rec, size);
  const std::string held = j.check_bytes_held();
  fuzz_check(held.empty(), "the joiner's byte count is not what it holds", held);
}

inline void exercise_finished(agent::Joiner& j) {
  for (const Profile& p : j.take_finished()) exercise(p);
}

}  // namespace mlprof::fuzz
