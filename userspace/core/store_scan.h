#pragma once
// Call-path statistics straight from the store's rows (mlprof top and diff
// over a store): the spans of many sources are read in id ranges and fed to
// CallPathStats without building a tree per source, in memory bounded by
// one range whatever the store's size. The figures are those of
// CallPathStats::add on each source's profile (read_source), which the tests
// check.

#include <cstdint>
#include <vector>

#include "core/path_stats.h"
#include "core/result.h"
#include "core/store.h"

namespace mlprof {

// Adds every span source of `source_ids` (sources of sampled stacks have no
// calls and are skipped) as one profile each; depth >= 0 cuts as
// CallPathStats::add does. Returns the number of profiles added.
Result<uint64_t> add_store_paths(StoreDriver& driver, const std::vector<int64_t>& source_ids, int depth,
                                 CallPathStats& stats);

}  // namespace mlprof
