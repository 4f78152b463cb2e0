#pragma once
// Call-path statistics straight from the store's rows (mlprof top and diff
// over a store): the spans of many sources are read in id ranges and fed to
// CallPathStats without building a tree per source, in memory bounded by
// one session's calls (a call's running self time needs its children's)
// whatever the store's size. The figures are those of
// CallPathStats::add on each source's profile (read_source), which the tests
// check.

#include <cstdint>
#include <functional>
#include <vector>

#include "store/store.h"
#include "util/result.h"
#include "views/path_stats.h"

namespace mlprof {

// One span as the scan reads it, for a caller that keeps figures of its own
// by path (analysis/run_values.h). Only spans kept by the depth cut.
struct ScanCall {
  int64_t source = 0;
  int64_t sample_id = 0;
  int64_t parent_id = -1;  // -1: none
  int64_t depth = 0;       // 0: a root
  uint32_t path = 0;       // CallPathStats::path's, kDropped past the cap
  bool incomplete = false;
  int64_t wall_ns = 0;
  int64_t cpu_ns = -1;     // the span's `cpu` value (in process or the agent's); -1: none
  int64_t waiting_ns = 0;  // its "waiting" value (views/waiting.h); 0: none
};

struct ScanHooks {
  bool want_cpu = false;  // read every source's `cpu` values, not only the agent's
  std::function<void(const ScanCall&)> on_call;
  std::function<void()> on_session_end;  // after the last call of each session
};

// Adds every span source of `source_ids` (sources of sampled stacks have no
// calls and are skipped) as one profile each; depth >= 0 cuts as
// CallPathStats::add does. Returns the number of profiles added. `hooks`
// (optional) also sees each call, session by session.
Result<uint64_t> add_store_paths(StoreDriver& driver, const std::vector<int64_t>& source_ids,
                                 int depth, CallPathStats& stats, const ScanHooks* hooks = nullptr);

}  // namespace mlprof
