#pragma once
// Per run and call path, the path's time per root call: what `mlprof diff`
// and `mlprof trend` compare. A run is a group of profiles (a source, or the
// sources sharing a label: a process, a CI job); its root calls are the
// calls of the paths at depth 0 (`predict`). Per root call, a path's time is
// the sum of its complete calls under that root call (0 when it made none),
// so a step that B calls twice per predict shows as twice the time, not as
// two cheaper calls; per run, the mean, p50 or p95 of that over the run's
// root calls of the path's root.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tree.h"
#include "store/store.h"
#include "store/store_scan.h"
#include "util/result.h"
#include "views/path_stats.h"

namespace mlprof {

class RunPathValues {
 public:
  enum class Statistic { kMean, kP50, kP95 };
  // kCpu: the span's `cpu` value (cpu_time, or the agent's on-CPU); kWaiting:
  // Span::waiting_ns, the part of the wall it waited (views/waiting.h).
  enum class Quantity { kWall, kCpu, kWaiting };

  explicit RunPathValues(size_t max_paths = CallPathStats::kDefaultMaxPaths) : paths_(max_paths) {}

  // The index of the run named `key`, made if new (runs keep their order).
  size_t run(const std::string& key);
  const std::vector<std::string>& runs() const { return run_keys_; }

  // Adds a finished profile to `run`; depth >= 0 leaves deeper paths out
  // (their time stays inside their ancestors').
  void add(const Profile& profile, size_t run, int depth = -1);
  // Adds the store's span sources, source_ids[i] to run run_of[i] (the
  // rows read in ranges, store/store_scan.h). Returns the profiles added.
  Result<uint64_t> add_store(StoreDriver& driver, const std::vector<int64_t>& source_ids,
                             const std::vector<size_t>& run_of, int depth = -1);

  struct PathRuns {
    std::vector<std::string> path;  // display names from the root
    // Per run (runs() order): the statistic of the path's time per root
    // call, ns; NaN when the run made no complete root call of the path's
    // root (or, for kCpu, no call of the run had a cpu value).
    std::vector<double> values;
    std::vector<uint64_t> calls;  // per run: the path's complete calls
  };
  // Every path seen, parents before children.
  std::vector<PathRuns> values(Statistic statistic, Quantity quantity) const;
  // Per run: its complete root calls (all root paths together).
  std::vector<uint64_t> root_calls() const;
  // Calls left out: past the path cap, or under no complete root call.
  uint64_t dropped() const { return dropped_ + paths_.dropped_paths(); }

 private:
  struct Cell {  // one path under one root call
    int64_t wall_ns = 0;
    int64_t cpu_ns = 0;
    int64_t waiting_ns = 0;
    uint64_t calls = 0;
    bool has_cpu = false;
  };
  struct RootCall {
    size_t run = 0;
    uint32_t root_path = 0;  // path index + 1
  };
  struct Call {  // a span waiting for its root call to be known
    int64_t id = 0, parent = -1;
    uint32_t path = 0;
    bool root = false, incomplete = false;
    int64_t wall_ns = 0, cpu_ns = -1;
    int64_t waiting_ns = 0;
  };

  // Attributes `calls` (one session's spans, any order) to root calls.
  void flush(size_t run, std::vector<Call>& calls);

  CallPathStats paths_;  // the path names (the same rule as top's)
  std::vector<std::string> run_keys_;
  std::unordered_map<std::string, size_t> run_index_;
  std::vector<RootCall> root_calls_;
  std::unordered_map<uint64_t, Cell> cells_;  // root call << 32 | path index + 1
  uint64_t dropped_ = 0;
  std::vector<Call> pending_;
};

}  // namespace mlprof
