#pragma once
// Sampled stacks (py-spy, pprof, speedscope's sampled profiles, folded
// stacks): what a sampler saw, with no call boundaries or per-call times.
// The counterpart of Profile for the store's imports (docs/store.md).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/functions.h"

namespace mlprof {

struct StackSamples {
  FunctionTable functions;
  // Kinds of value each sample carries, in order: ("samples", "count"),
  // ("cpu", "nanoseconds") ... as the input names them.
  std::vector<std::pair<std::string, std::string>> value_types;
  struct Thread {
    std::string name;
    uint64_t id = 0;
  };
  std::vector<Thread> threads;  // at least one
  struct Frame {
    uint32_t function = 0;  // FunctionTable id
    int32_t line = 0;
  };
  struct Sample {
    uint32_t thread = 0;
    std::vector<Frame> frames;    // root first
    std::vector<int64_t> values;  // one per value type
  };
  std::vector<Sample> samples;
  std::map<std::string, std::string> meta;  // what the input says of itself
  int64_t start_ns = 0;                     // 0 when the input has no clock (folded stacks)
  int64_t end_ns = 0;

  // The value type that counts samples: the first named "samples" or in
  // unit "count"; -1 when none does. A sample of a pre-aggregated input
  // (folded, pprof) stands for that many samples (docs/design/store.md).
  int count_type() const {
    for (size_t i = 0; i < value_types.size(); ++i) {
      if (value_types[i].first == "samples" || value_types[i].second == "count")
        return static_cast<int>(i);
    }
    return -1;
  }
  // How many samples `s` stands for: its count (a negative one, as in a
  // pprof diff, as none), or 1 when nothing counts.
  static uint64_t weight(const Sample& s, int count_type) {
    if (count_type < 0 || static_cast<size_t>(count_type) >= s.values.size()) return 1;
    const int64_t count = s.values[static_cast<size_t>(count_type)];
    return count > 0 ? static_cast<uint64_t>(count) : 0;
  }
  // The samples all of them stand for (weight summed).
  uint64_t sample_count() const {
    const int counted = count_type();
    uint64_t total = 0;
    for (const Sample& s : samples) total += weight(s, counted);
    return total;
  }
};

}  // namespace mlprof
