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

// The off-CPU time inside each stretch of `cut` (sorted, disjoint): its wall
// less the thread's CPU time between the readings around it (`samples`:
// every lane of the thread's (time, CPU ns), sorted), within [0, its wall].
// A stretch that was preempted or blocked (a repr that sleeps) is cut from
// the timeline, so its off-CPU time must go too. The engines read the clock
// at a stretch's start (once a quantum) and at the end of one a quantum long
// (note_thread_overhead), so the figure is short of the truth by at most
// the CPU time of one quantum before the stretch.
template <class ToNs>
std::vector<int64_t> off_cpu_inside(const TimePairs& cut, const TimePairs& samples, ToNs to_ns) {
  std::vector<int64_t> inside(cut.size(), 0);
  size_t before = 0;  // samples[before - 1] is the last at or before the stretch
  for (size_t i = 0; i < cut.size(); ++i) {
    const auto [from, to] = cut[i];
    while (before < samples.size() && samples[before].first <= from) ++before;
    const auto after = std::lower_bound(samples.begin() + static_cast<std::ptrdiff_t>(before),
                                        samples.end(), std::make_pair(to, INT64_MIN));
    if (before == 0 || after == samples.end()) continue;
    const int64_t wall = to_ns(to) - to_ns(from);
    const int64_t cpu = after->second - samples[before - 1].second;
    inside[i] = std::clamp<int64_t>(wall - cpu, 0, wall);
  }
  return inside;
}

// off_cpu_inside for every thread of `cuts`, from `reads`: per thread, the
// readings of all its lanes (sorted here).
template <class ToNs>
std::unordered_map<uint64_t, std::vector<int64_t>> off_cpu_inside(
    const std::unordered_map<uint64_t, TimePairs>& cuts,
    std::unordered_map<uint64_t, TimePairs>& reads, ToNs to_ns) {
  std::unordered_map<uint64_t, std::vector<int64_t>> out;
  for (const auto& [thread, cut] : cuts) {
    TimePairs& samples = reads[thread];
    std::sort(samples.begin(), samples.end());
    out[thread] = off_cpu_inside(cut, samples, to_ns);
  }
  return out;
}

// Off-CPU time between consecutive readings `reads` of the thread's CPU
// clock ((time, CPU ns)): against the raw wall time, less the off-CPU time
// inside the stretches `cut` between them (`inside`, from off_cpu_inside;
// a stretch split by a reading, by its share of wall on each side), placed
// at the reading's time on the cut timeline, as the events are. Appends
// those of kOffCpuMinNs or more.
template <class ToNs>
void add_off_cpu(const TimePairs& reads, const TimePairs& cut, const std::vector<int64_t>& inside,
                 ToNs to_ns, std::vector<OffCpuReading>& out) {
  CutTimeline on_cut(cut);
  size_t first = 0;  // the first stretch that ends after the interval's start
  for (size_t r = 1; r < reads.size(); ++r) {
    const int64_t a = reads[r - 1].first, b = reads[r].first;
    int64_t off = (to_ns(b) - to_ns(a)) - (reads[r].second - reads[r - 1].second);
    while (first < cut.size() && cut[first].second <= a) ++first;
    for (size_t i = first; i < cut.size() && cut[i].first < b; ++i) {
      if (inside[i] <= 0) continue;
      const int64_t wall = to_ns(cut[i].second) - to_ns(cut[i].first);
      const int64_t part = to_ns(std::min(b, cut[i].second)) - to_ns(std::max(a, cut[i].first));
      off -= part >= wall ? inside[i]
                          : static_cast<int64_t>(static_cast<double>(inside[i]) * part / wall);
    }
    const int64_t at = to_ns(on_cut(b));
    if (off >= kOffCpuMinNs) out.push_back({at, off});
  }
}

}  // namespace mlprof
