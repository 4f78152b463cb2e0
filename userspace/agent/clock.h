#pragma once
// The agent's two clocks, in ns, read in one place: CLOCK_MONOTONIC (the
// clock of the BPF records' ts_ns, bpf_ktime_get_ns; the agent's loop,
// deadlines and health) and CLOCK_REALTIME (Unix time: file names, labels,
// the store's timestamps), and the offset that turns one into the other.

#include <time.h>

#include <cstdint>

namespace mlprof::agent {

// CLOCK_MONOTONIC now, in ns: the records' clock.
inline int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_REALTIME now (Unix time), in ns.
inline int64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_REALTIME minus CLOCK_MONOTONIC, now: a CLOCK_MONOTONIC time plus
// this is its Unix time. The real-time clock is read first.
inline int64_t realtime_offset_ns() {
  const int64_t unix_ns = unix_now_ns();
  return unix_ns - now_ns();
}

}  // namespace mlprof::agent
