#pragma once
// Time per function rather than per call path (mlprof top --by function, as
// pprof's -top): a function's flat time (its calls' self time, or its
// samples as the leaf) and its cum time (the time of the call paths it is
// on, counted once per path however often it recurses there). A span
// source's self time is running time (views/path_stats.h, CallPathStats::add):
// its waits (views/waiting.h) are kept apart, as flat and cum waiting.
//
// Values are summed per call path first; flat and cum are read off the
// paths at the end, which is how pprof computes them from its samples:
// flat(f) = the values of the paths whose leaf is f; cum(f) = the values of
// the paths that contain f anywhere. A call of f under another call of f is
// on a path that already contains f, so recursion adds to cum once.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/stack_samples.h"
#include "model/tree.h"
#include "store/store.h"
#include "util/result.h"
#include "util/saturating.h"

namespace mlprof {

// How functions are told apart: the name shown (a span's label, else the
// function's name), the file and the line of definition (0 unknown), so two
// `forward`s in different files stay two functions.
struct FunctionKey {
  std::string name;
  std::string file;
  int32_t line = 0;
  bool operator==(const FunctionKey&) const = default;
};

// Values of `slots` kinds summed per call path of functions, then read per
// function as flat and cum. The building block of FunctionStats.
class FunctionTotals {
 public:
  static constexpr uint32_t kRoot = 0;  // the path above every root

  explicit FunctionTotals(size_t slots) : slots_(slots) {}

  // The id of a function, made if new.
  uint32_t function(std::string_view name, std::string_view file, int32_t line);
  // The path `function` under `parent` (a node() result or kRoot), made if new.
  uint32_t node(uint32_t parent, uint32_t function);
  // Adds `value` to slot `slot` of path `node` (not kRoot).
  void add(uint32_t node, size_t slot, int64_t value) {
    int64_t& v = values_[(node - 1) * slots_ + slot];
    v = saturating_add(v, value);
  }
  // One more slot, 0 on every path.
  void add_slot();
  size_t slots() const { return slots_; }
  size_t paths() const { return parents_.size(); }

  struct Row {
    FunctionKey function;
    std::vector<int64_t> flat;  // per slot: the paths whose leaf it is
    std::vector<int64_t> cum;   // per slot: the paths that contain it, once each
  };
  // One row per function on any path, in first-seen order.
  std::vector<Row> rows() const;

 private:
  size_t slots_;
  std::vector<FunctionKey> functions_;
  std::unordered_map<std::string, uint32_t> function_index_;  // name \0 file \0 line -> id
  std::vector<uint32_t> parents_;      // by path: node + 1 of the parent, 0 for a root
  std::vector<uint32_t> function_of_;  // by path
  std::vector<int64_t> values_;        // path * slots_ + slot
  std::unordered_map<uint64_t, uint32_t> children_;  // parent << 32 | function -> node
};

// top --by function over span sources (profiles, a store's rows) and
// sampled stacks (py-spy, pprof, folded ...), kept apart: a span source has
// times of calls, a sampler counts of samples.
class FunctionStats {
 public:
  FunctionStats() : spans_(3), sampled_(0) {}

  // A span profile. Per call: its function's calls + 1, its self time
  // (running time: Span::running_ns less the same-thread children's, at
  // least 0, CallPathStats::add's rule) and its self waiting time
  // (Span::waiting_ns less the same-thread children's, not clamped: a
  // child's waits can exceed its parent's by a few us of placement) on its
  // call path. Every call counts, those open at the end too, as the pprof
  // export counts them. depth >= 0 leaves out spans deeper than `depth`; one
  // at the cut keeps its whole running and waiting time as its own.
  void add(const Profile& profile, int depth = -1);
  // Sampled stacks: each sample's values on its stack's path. depth >= 0
  // cuts stacks to their first depth + 1 frames (root first): a deeper
  // sample counts for the frame at the cut as the leaf.
  void add(const StackSamples& samples, int depth = -1);
  // The span sources of `source_ids` read from a store as rows, each as one
  // profile (sampled-stack sources are skipped: add them as StackSamples);
  // the figures add(read_source(id), depth) gives, summed in SQL per call
  // path (the store's self_ns is the flame graphs' rule, active time less
  // the children's: the off-CPU part of the waits, waiting_ns less the
  // suspended time, is moved from it to the waiting). Returns the number of
  // profiles added.
  Result<uint64_t> add_store(StoreDriver& driver, const std::vector<int64_t>& source_ids,
                             int depth = -1);

  struct SpanRow {
    FunctionKey function;
    uint64_t calls = 0;
    int64_t flat_ns = 0;          // self time of its calls
    int64_t cum_ns = 0;           // self time of every call on a path through it, once per path
    int64_t flat_waiting_ns = 0;  // self waiting time of its calls
    int64_t cum_waiting_ns =
        0;  // the same as cum: its outermost calls' waiting, in the same thread
  };
  std::vector<SpanRow> span_rows() const;
  uint64_t profiles() const { return profiles_; }
  uint64_t sessions() const { return sessions_; }

  struct SampledRow {
    FunctionKey function;
    std::vector<int64_t> flat;  // per value_types() entry
    std::vector<int64_t> cum;
  };
  std::vector<SampledRow> sampled_rows() const;
  // (type, unit) of the sampled stacks' values, first seen first.
  const std::vector<std::pair<std::string, std::string>>& value_types() const { return types_; }
  uint64_t sampled_sources() const { return sampled_sources_; }
  // Samples seen: a pre-aggregated sample counts as its count (StackSamples::weight).
  uint64_t samples() const { return samples_; }

 private:
  static constexpr size_t kSelf = 0, kCalls = 1, kWaiting = 2;  // spans_ slots
  FunctionTotals spans_;
  FunctionTotals sampled_;
  std::vector<std::pair<std::string, std::string>> types_;
  uint64_t profiles_ = 0, sessions_ = 0, sampled_sources_ = 0, samples_ = 0;
};

}  // namespace mlprof
