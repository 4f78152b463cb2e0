#pragma once
// Sampled stacks summed per call path (mlprof top over py-spy, pprof and
// other samplers' sources): a sampler has no calls to time, so a path gets
// its samples' values: self (samples whose leaf it is) and total (samples
// at or under it), per value type, across sources.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/stack_samples.h"

namespace mlprof {

class StackPathTotals {
 public:
  struct Row {
    std::vector<std::string> path;  // function names from the root
    std::vector<int64_t> self;      // per value_types() entry
    std::vector<int64_t> total;
  };

  // Adds every sample of `samples`; its value types join the union (a type
  // is its (type, unit) pair; a source without one adds 0 to it). With
  // `depth` >= 0, frames deeper than it fold into their ancestor at that
  // depth (0 = the root), which takes their samples as its self, as `top
  // --depth` folds calls.
  void add(const StackSamples& samples, int depth = -1);
  // (type, unit) in first-seen order.
  const std::vector<std::pair<std::string, std::string>>& value_types() const { return types_; }
  uint64_t sources() const { return sources_; }
  // Samples seen: a pre-aggregated sample counts as its count (StackSamples::weight).
  uint64_t samples() const { return samples_; }
  // Every path seen, parents before children.
  std::vector<Row> rows() const;

 private:
  struct Node {
    uint32_t parent = 0;  // node index + 1; 0: a root
    std::string name;
    std::vector<int64_t> self, total;
  };
  std::vector<std::pair<std::string, std::string>> types_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, uint32_t> index_;  // parent index + "\0" + name -> node index
  uint64_t sources_ = 0;
  uint64_t samples_ = 0;
};

}  // namespace mlprof
