#include "clock.h"

#include <atomic>
#include <fstream>
#include <string>

namespace mlprof::clock {

bool g_use_tsc = false;

namespace {
Anchor g_process_anchor;

bool invariant_tsc() {
#if defined(__x86_64__)
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("flags")) {
      auto has = [&](const char* f) {
        return line.find(std::string(" ") + f) != std::string::npos;
      };
      return has("constant_tsc") && has("nonstop_tsc");
    }
  }
#endif
  return false;
}
}  // namespace

Anchor anchor() {
  // One read when its window is as narrow as this machine's usually are (at
  // most twice the narrowest seen); else the narrowest of three, as an
  // interrupt or a preemption inside a read widens it. Each read is three
  // clock reads: a session starts and stops with an anchor, and the fixed
  // three reads each were ~100 ns of its 2 us.
  static std::atomic<int64_t> narrowest{INT64_MAX / 4};
  const int64_t usual = 2 * narrowest.load(std::memory_order_relaxed);
  Anchor best;
  int64_t best_window = INT64_MAX;
  for (int i = 0; i < 3 && best_window > usual; ++i) {
    int64_t before = ticks();
    int64_t ns = monotonic_ns();
    int64_t after = ticks();
    if (after - before < best_window) {
      best_window = after - before;
      best.ticks = before + (after - before) / 2;
      best.ns = ns;
      best.error_ns = (after - before) / 2;  // in ticks; converted by mapping()
    }
  }
  if (best_window < usual / 2) narrowest.store(best_window, std::memory_order_relaxed);
  return best;
}

void init() {
  g_use_tsc = invariant_tsc();
  g_process_anchor = anchor();
}

int64_t ticks_for(int64_t ns) {
  static std::atomic<double> ticks_per_ns{0.0};
  if (!g_use_tsc) return ns;
  double rate = ticks_per_ns.load(std::memory_order_relaxed);
  if (rate == 0.0) {
    const Anchor now = anchor();
    if (now.ns - g_process_anchor.ns < 100'000'000 || now.ticks <= g_process_anchor.ticks)
      return ns;
    rate = static_cast<double>(now.ticks - g_process_anchor.ticks) /
           static_cast<double>(now.ns - g_process_anchor.ns);
    ticks_per_ns.store(rate, std::memory_order_relaxed);
  }
  return static_cast<int64_t>(static_cast<double>(ns) * rate);
}

Mapping mapping(const Anchor& origin, const Anchor& end) {
  Mapping m;
  m.origin = origin;
  if (!g_use_tsc) {
    m.ns_per_tick = 1.0;
    m.origin.ticks = origin.ns;  // ticks are ns
    return m;
  }
  // The longest interval gives the most exact rate.
  const Anchor& from =
      g_process_anchor.ticks && g_process_anchor.ticks < origin.ticks ? g_process_anchor : origin;
  int64_t dt = end.ticks - from.ticks;
  if (dt > 0 && end.ns > from.ns)
    m.ns_per_tick = static_cast<double>(end.ns - from.ns) / static_cast<double>(dt);
  m.error_ns =
      static_cast<int64_t>(static_cast<double>(origin.error_ns + end.error_ns) * m.ns_per_tick) + 1;
  return m;
}

}  // namespace mlprof::clock
