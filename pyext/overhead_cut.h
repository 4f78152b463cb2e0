#pragma once
// The profiler's own stretches (I/O summaries, labellers, the first sight of
// a code) taken out of its thread's timeline when a profile is built, and the
// thread's off-CPU time placed on that timeline
// (docs/decisions/0006-profilers-own-cost-is-cut-out.md, views/waiting.h).
// One implementation for both engines: the native engine's build
// (Engine::profile, engine_session.cpp) and the reference engine's lanes
// (_core.build_profile, module.cpp). Times are in the engine's clock units
// (the native engine's ticks, the reference's ns); `to_ns` converts them.
// Inline: the native build's per-event loop stays as it was.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "views/waiting.h"

namespace mlprof {

// (from, to) stretches of the profiler's work; also (time, CPU ns) readings.
using TimePairs = std::vector<std::pair<int64_t, int64_t>>;

// Sorts each thread's stretches and merges overlaps (a stretch noted for
// several lanes of the thread: every lane of a thread is cut alike, so an
// asyncio task's lane and the lane whose span runs the loop keep their
// order). Returns the merged stretches' total length.
inline int64_t merge_stretches(std::unordered_map<uint64_t, TimePairs>& by_thread) {
  int64_t total = 0;
  for (auto& [thread, c] : by_thread) {
    std::sort(c.begin(), c.end());
    size_t n = 0;
    for (const auto& iv : c) {
      if (n && iv.first <= c[n - 1].second) {
        c[n - 1].second = std::max(c[n - 1].second, iv.second);
      } else {
        c[n++] = iv;
      }
    }
    c.resize(n);
    for (const auto& [from, to] : c) total += to - from;
  }
  return total;
}

// Maps times, given in increasing order, onto the timeline without the
// stretches `cut` (sorted, disjoint): a time after some moves back by their
// length, one inside a stretch to its start.
class CutTimeline {
 public:
  explicit CutTimeline(const TimePairs& cut) : cut_(cut) {}
  int64_t operator()(int64_t t) {
    while (next_ < cut_.size() && cut_[next_].second <= t) {
      shift_ += cut_[next_].second - cut_[next_].first;
      ++next_;
    }
    if (next_ < cut_.size() && cut_[next_].first < t) t = cut_[next_].first;
    return t - shift_;
  }

 private:
  const TimePairs& cut_;
  size_t next_ = 0;
  int64_t shift_ = 0;
};

// Off-CPU time between consecutive readings `reads` of the thread's CPU
// clock ((time, CPU ns)): against the raw wall time (the profiler's
// stretches ran on the CPU too), placed at the reading's time on the cut
// timeline, as the events are. Appends those of kOffCpuMinNs or more.
template <class ToNs>
void add_off_cpu(const TimePairs& reads, const TimePairs& cut, ToNs to_ns,
                 std::vector<OffCpuReading>& out) {
  CutTimeline on_cut(cut);
  for (size_t r = 1; r < reads.size(); ++r) {
    const int64_t off = (to_ns(reads[r].first) - to_ns(reads[r - 1].first)) -
                        (reads[r].second - reads[r - 1].second);
    const int64_t at = to_ns(on_cut(reads[r].first));
    if (off >= kOffCpuMinNs) out.push_back({at, off});
  }
}

}  // namespace mlprof
