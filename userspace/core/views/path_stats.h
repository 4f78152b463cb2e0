#pragma once
// Statistics per call path over many profiles (ProfileCollector): count,
// sessions, exact min/max/sum/mean and sketched p50/p95/p99 of wall, self
// (running) and waiting time, in memory that does not grow with the number
// of profiles.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/tree.h"

namespace mlprof {

// Durations (ns, >= 0) of one call path: exact count, min, max and sum, and
// quantiles from a log-bucket sketch (DDSketch, Masson et al., VLDB 2019).
//
// Bucket i holds the values in (gamma^(i-1), gamma^i], gamma = (1+a)/(1-a) with
// a = kRelativeAccuracy; it reports 2*gamma^i/(gamma+1), which is within a
// relative error a of every value in it. Values <= 0 have a bucket of their
// own and report 0. Buckets are stored densely between the lowest and the
// highest index seen: a positive int64 ns value has an index in [0, 2184], so
// one sketch holds at most 2185 counters (17 KiB) whatever the number of
// samples, and 1 ns .. 100 s spans 1268 of them.
//
// quantile(q) is the sample of rank floor(q*(count-1)) in sorted order, 0-based
// (numpy's method="lower"): the result is within a relative error a of that
// sample, and clamped to [min, max], which keeps it within the bound and makes
// q=0 and q=1 exact.
//
// Hand-written (about 60 lines): no Debian package provides a C++ DDSketch and
// a third-party dependency is not worth it for this much code.
class QuantileSketch {
 public:
  static constexpr double kRelativeAccuracy = 0.01;

  void add(int64_t value_ns);
  uint64_t count() const { return count_; }
  int64_t min() const { return min_; }  // 0 when empty
  int64_t max() const { return max_; }
  uint64_t sum() const { return sum_; }  // values are clamped to >= 0 first
  // q in [0, 1] (clamped); 0 when empty.
  double quantile(double q) const;
  // Heap bytes of the bucket array.
  size_t heap_bytes() const { return counts_.capacity() * sizeof(uint64_t); }
  // Counters stored (the span between the lowest and highest bucket index).
  size_t buckets() const { return counts_.size(); }

 private:
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
  uint64_t zero_count_ = 0;       // values <= 0
  int32_t first_index_ = 0;       // bucket index of counts_[0]
  std::vector<uint64_t> counts_;  // counts_[k]: bucket first_index_ + k
};

// The predict() sessions a profile holds: its lanes' distinct (pid,
// session) pairs (an agent's document combines many), at least 1.
uint64_t profile_sessions(const Profile& profile);

// One call path's figures, as summary() reports them.
struct PathSummary {
  std::vector<std::string> path;  // display names from the root to the span
  uint64_t sessions = 0;          // profiles in which the path appeared (complete or not)
  uint64_t incomplete = 0;        // calls open or suspended at the end: not samples
  struct Durations {
    uint64_t count = 0;  // samples (complete calls)
    int64_t min_ns = 0, max_ns = 0;
    uint64_t sum_ns = 0;
    double mean_ns = 0, p50_ns = 0, p95_ns = 0, p99_ns = 0;  // 0 when count == 0
  };
  Durations wall;  // Span::duration_ns
  Durations self;  // running self time, see CallPathStats::add
  // Of the wall, the time the call waited (Span::waiting_ns, views/waiting.h):
  // suspended, or off the CPU at any depth. Every complete call is a sample
  // (0 when it never waited), so count == wall.count.
  Durations waiting;
  // Off the CPU while the call was open (the agent's kernel data, SpanKernel::
  // off_cpu_ns); count 0 when no profile of the path carried kernel data.
  Durations off_cpu;
  // Where the call's own thread spent its wall time (the agent's kernel
  // data): sums over the `calls` complete calls that carried it.
  struct Kernel {
    uint64_t calls = 0;
    uint64_t on_cpu_ns = 0;   // SpanKernel::on_cpu_ns
    uint64_t blocked_ns = 0;  // own_blocked_ns
    uint64_t runq_ns = 0;     // own_runq_ns
    uint64_t gil_ns = 0;      // own_gil_ns: of blocked, waiting for the GIL
  };
  Kernel kernel;
  // Every complete call's wall time (ns), ascending: only when the stats
  // keep them (CallPathStats(max_paths, true): diff's bootstrap needs them).
  std::vector<int64_t> walls;
};

// Per-call-path statistics over many profiles. Not thread-safe: callers
// serialize add/summary/reset (the binding holds a mutex).
//
// A call path is the list of display names (Profile::display_name) from a root
// span down to a span, so `forward` under `encoder` and under `decoder` are two
// paths, and two calls of one path in one profile are two samples of it.
class CallPathStats {
 public:
  static constexpr size_t kDefaultMaxPaths = 10000;

  // Which figures get quantile sketches. kWallOnly leaves self, waiting and
  // off_cpu out altogether (their Durations count 0): sketch inserts fewer per
  // call, for a caller that shows only wall-time quantiles (the agent's
  // capture report, which keeps its own kernel sums).
  enum class Figures { kAll, kWallOnly };

  // keep_walls: also keep each complete call's wall time (8 bytes a call),
  // for statistics the sketch cannot give (mlprof diff's bootstrap).
  explicit CallPathStats(size_t max_paths = kDefaultMaxPaths, bool keep_walls = false,
                         Figures figures = Figures::kAll);

  // Adds one finished profile. Per span (walking the tree from its roots):
  // - depth >= 0 ignores spans deeper than `depth` (Span::depth, root = 0);
  //   their time stays in their parent's self time.
  // - A span flagged kSpanOpenAtEnd or kSpanSuspendedAtEnd is not a sample:
  //   it counts in `incomplete` of its path (and in `sessions`).
  // - Wall time is Span::duration_ns; waiting time is Span::waiting_ns (the
  //   part of the wall it was suspended or off the CPU, at any depth, also
  //   below the depth ceiling and below the cut).
  // - Self time is the span's own RUNNING time: its running_ns (wall less
  //   waiting) minus the running_ns of its children kept by the depth cut in
  //   the same lane, never negative (a thread or task hung under the span ran
  //   concurrently and is not subtracted). A span at the cut keeps its whole
  //   running_ns. So a call that slept or awaited for most of its wall has a
  //   small self time, its waiting is in `waiting`; for an ordinary call that
  //   never waited self is its wall time minus its children's wall time, the
  //   flame graph exporters' rule (export_util::self_times, which counts
  //   waits as self time) differs from it by the waits.
  // - A span whose path is new while max_paths paths are tracked is not
  //   recorded, and neither is anything under it: each such call counts in
  //   dropped_paths().
  // span_paths (optional): per span of the profile, its path (index + 1,
  // as path() gives) or 0 when it is cut by depth or past the cap, so a
  // caller can keep figures of its own by path.
  void add(const Profile& profile, int depth = -1, std::vector<uint32_t>* span_paths = nullptr);

  // The same, one call at a time, for callers that have the calls as rows
  // rather than a tree (the store's scan, store/store_scan.h): begin_profile()
  // starts a profile; path(parent, name) is the path `name` under `parent`
  // (a path() result, or kRoot), kDropped past the cap (so is anything under
  // a dropped parent); record() counts one call of a path as add() does.
  static constexpr uint32_t kRoot = 0;
  static constexpr uint32_t kDropped = UINT32_MAX;
  // sessions: the predict() sessions the profile holds (an agent's item
  // holds many; see profile_sessions()).
  void begin_profile(uint64_t sessions = 1) {
    ++sessions_;
    session_count_ += sessions;
  }
  uint32_t path(uint32_t parent, std::string_view name);
  // A call's kernel figures (SpanKernel); off_cpu_ns < 0: none.
  struct CallKernel {
    int64_t off_cpu_ns = -1;
    int64_t on_cpu_ns = 0, blocked_ns = 0, runq_ns = 0, gil_ns = 0;
  };
  // self_ns: the running self time (add's rule); waiting_ns: Span::waiting_ns.
  void record(uint32_t path, bool incomplete, int64_t wall_ns, int64_t self_ns, int64_t waiting_ns,
              const CallKernel& kernel);
  // The same with the off-CPU time alone (< 0: no kernel data).
  void record(uint32_t path, bool incomplete, int64_t wall_ns, int64_t self_ns, int64_t waiting_ns,
              int64_t off_cpu_ns) {
    CallKernel k;
    k.off_cpu_ns = off_cpu_ns;
    record(path, incomplete, wall_ns, self_ns, waiting_ns, k);
  }

  // One entry per tracked path, parents before children, siblings in the
  // order first seen.
  std::vector<PathSummary> summary() const;

  uint64_t sessions() const { return sessions_; }  // profiles added
  // The sessions those profiles held (begin_profile's, add's profile_sessions).
  uint64_t session_count() const { return session_count_; }
  // Calls not recorded because their path was past the max_paths cap (a path
  // past the cap counts once per call, in every profile it appears in).
  uint64_t dropped_paths() const { return dropped_; }
  size_t paths() const { return paths_.size(); }
  size_t max_paths() const { return max_paths_; }
  // Heap bytes held: path records, sketch buckets, the name table and the
  // path index (container allocations; allocator overhead not included).
  size_t memory_bytes() const;
  // Forgets everything (max_paths stays).
  void reset();

 private:
  struct PathRecord {
    uint32_t parent = 0;  // path index + 1, 0 for a root path
    uint32_t name = 0;    // index into names_
    uint64_t sessions = 0;
    uint64_t incomplete = 0;
    uint64_t last_session = 0;  // sessions_ when last seen, to count sessions once
    QuantileSketch wall;
    QuantileSketch self;
    QuantileSketch waiting;
    QuantileSketch off_cpu;      // samples from profiles with kernel data only
    PathSummary::Kernel kernel;  // sums, calls with kernel data only
    std::vector<int64_t> walls;  // keep_walls_ only
  };

  // The path under `parent` (path index + 1, 0 = root) named by the
  // profile's string `string_id`, created if new and under the cap;
  // kDropped past the cap.
  uint32_t child_path(uint32_t parent, const Profile& profile, uint32_t string_id);
  // The path under `parent` whose name is names_[name], made if new.
  uint32_t child_of(uint32_t parent, uint32_t name);
  uint32_t name_id(std::string_view name);

  size_t max_paths_;
  bool keep_walls_;
  bool wall_only_;
  uint64_t sessions_ = 0;
  uint64_t session_count_ = 0;
  uint64_t dropped_ = 0;
  std::vector<PathRecord> paths_;
  std::deque<std::string> names_;  // distinct names of tracked paths (deque: stable for the views)
  std::unordered_map<std::string_view, uint32_t> name_index_;
  std::unordered_map<uint64_t, uint32_t> children_;  // (parent << 32 | name) -> path index
  // Scratch for add(): the profile's string id -> names_ index + 1 (0 = not looked up).
  // Entries for the ids of a shared base (StringTable::base) outlive the
  // profile: they stay valid while the next profiles start on the same base.
  std::vector<uint32_t> name_cache_;
  std::shared_ptr<const StringTable> cache_base_;
  // By span index, the last profile's path lookups of names in cache_base_:
  // profiles of one served model mostly repeat the same tree, and a
  // comparison costs less than the hash lookup of child_path.
  struct Memo {
    uint32_t parent = kDropped;
    uint32_t string_id = 0;
    uint32_t path = 0;
  };
  std::vector<Memo> memo_;
  std::vector<std::pair<int32_t, uint32_t>> stack_;  // (span, path or kDropped)
};

}  // namespace mlprof
