#pragma once
// The capture clock. Events are stamped with raw ticks on the hot path and
// converted to CLOCK_MONOTONIC nanoseconds when the profile is built.
//
// On x86-64 with an invariant TSC (constant_tsc + nonstop_tsc), a tick is
// the TSC: rdtsc costs ~16 ns in this VM where clock_gettime costs ~48 ns,
// and there are two stamps per call. Ticks map to CLOCK_MONOTONIC by linear
// interpolation between anchors, each a (tsc, monotonic) pair read back to
// back (the tightest of several reads). The offset comes from the session's
// start anchor, the rate from the longest interval available (process start
// anchor to session end anchor). Error bound: the anchors' read jitter
// (under 100 ns, reported as clock_error_ns) plus any change in NTP's slew
// rate of CLOCK_MONOTONIC during the interval (500 ppm at the very most,
// typically a few ppm). Elsewhere a tick is simply CLOCK_MONOTONIC ns.

#include <time.h>

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace mlprof::clock {

// Clock `id` now, in ns.
inline int64_t now_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t monotonic_ns() { return now_ns(CLOCK_MONOTONIC); }

// CLOCK_REALTIME now. Read at each session's start, not derived from an
// offset to CLOCK_MONOTONIC kept for 100 ms: that offset, from a monotonic
// read on each side of a wall-clock read, was off by half of any preemption
// between them, for every session of those 100 ms (a start 437 us before the
// wall clock read just ahead of it: CI under load, 3.13,
// test_meta_records_the_wall_clock_start).
inline int64_t realtime_ns() { return now_ns(CLOCK_REALTIME); }

extern bool g_use_tsc;

[[gnu::always_inline]] inline int64_t ticks() {
#if defined(__x86_64__)
  if (__builtin_expect(g_use_tsc, 1)) return static_cast<int64_t>(__rdtsc());
#endif
  return monotonic_ns();
}

struct Anchor {
  int64_t ticks = 0;
  int64_t ns = 0;
  int64_t error_ns = 0;  // half the read window of the tightest pair
};

// Decides TSC vs clock_gettime once per process (reads /proc/cpuinfo).
void init();
// A fresh anchor.
Anchor anchor();
// Maps ticks to ns given the session's start anchor and a rate anchor pair.
struct Mapping {
  Anchor origin;
  double ns_per_tick = 1.0;
  int64_t error_ns = 0;
  int64_t to_ns(int64_t t) const {
    return origin.ns + static_cast<int64_t>(static_cast<double>(t - origin.ticks) * ns_per_tick);
  }
};
// origin: the session start anchor; end: an anchor taken at session end.
Mapping mapping(const Anchor& origin, const Anchor& end);
// About `ns` nanoseconds in ticks, for thresholds on the hot path, not for
// times: measured once the process is 100 ms old; until then a tick counts
// as a nanosecond (a TSC ticks faster, so the threshold comes sooner).
int64_t ticks_for(int64_t ns);

}  // namespace mlprof::clock
