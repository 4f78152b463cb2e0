#pragma once
// One pprof profile aggregated from many sources (a selection of the store,
// docs/store.md "Export pprof"): span profiles and sampled stacks added one
// at a time, so only the aggregate is held, never the sources. Identical
// call paths (the same function names, files and lines, root to leaf) with
// the same labels become one sample whose values are the sums.
//
// - A span profile adds what to_pprof writes for it, per span: `calls`
//   (count, 1) and `wall` (nanoseconds, its self time), and `off_cpu` and
//   `runq` (nanoseconds, self) when it has the agent's kernel figures. Its
//   per-sample labels (thread, task, label, flags) are not kept: they would
//   keep apart what the aggregate merges.
// - Sampled stacks (imported pprof, py-spy, speedscope, folded) add their
//   own value types and units.
// - The profile's sample types are the union, in the order first seen; a
//   value a source lacks is 0.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/stack_samples.h"
#include "model/tree.h"

namespace mlprof {

class PprofAggregate {
 public:
  // String labels put on every sample of one source, as (key, value):
  // {("source", "3")} keeps source 3's paths apart from the others'. Empty:
  // its samples merge with every other source's.
  using Labels = std::vector<std::pair<std::string, std::string>>;

  PprofAggregate();
  ~PprofAggregate();
  PprofAggregate(const PprofAggregate&) = delete;
  PprofAggregate& operator=(const PprofAggregate&) = delete;

  void add(const Profile& profile, const Labels& labels = {});
  void add(const StackSamples& samples, const Labels& labels = {});
  // A line for `go tool pprof -comments` (the provenance of a source).
  void add_comment(std::string_view comment);

  // Sources added so far (both kinds).
  size_t sources() const;
  // Distinct samples so far: call paths times label sets.
  size_t samples() const;
  // The union of the sample types so far, as (type, unit), in order.
  std::vector<std::pair<std::string, std::string>> sample_types() const;
  // The sum of one sample type's values over every sample (0 if absent).
  int64_t total(std::string_view type, std::string_view unit) const;

  // The profile.proto message, gzip-compressed. `default_sample_type` is
  // `wall` where a source gave it; time_nanos and duration_nanos span the
  // span profiles' wall-clock windows (meta start_unix_ns) where known.
  std::string to_pprof() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mlprof
