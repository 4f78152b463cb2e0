#pragma once
// Per-span values measured in process (opt-in): the thread's CPU time and the
// bytes it allocated while a span ran. A capture hook records raw counter
// readings next to its events (Lane::readings); build_tree turns them into
// one inclusive value per span and kind (Profile::values). The names are the
// long-form vocabulary of documents and stores ("cpu" is the agent's word for
// the same quantity: time on the CPU of the span's own thread).

#include <cstdint>
#include <string_view>

namespace mlprof {

enum class ValueKind : uint8_t {
  kCpuNs = 0,       // CLOCK_THREAD_CPUTIME_ID
  kAllocBytes = 1,  // bytes requested from Python's allocators by the thread
};
inline constexpr int kValueKinds = 2;

struct ValueKindName {
  ValueKind kind;
  std::string_view type;  // span_values/sample_values type
  std::string_view unit;
};
inline constexpr ValueKindName kValueKindNames[kValueKinds] = {
    {ValueKind::kCpuNs, "cpu", "ns"},
    {ValueKind::kAllocBytes, "alloc", "bytes"},
};

// A counter reading taken by the hook right after it wrote event `event` of
// its lane (a kCall, kReturn, kSuspend or kResume). Counters only grow
// within a thread; a span's value is the sum, over the stretches it ran, of
// the reading at the stretch's end less the one at its start.
struct Reading {
  uint32_t event = 0;
  ValueKind kind = ValueKind::kCpuNs;
  int64_t value = 0;

  bool operator==(const Reading&) const = default;
};

// A span's value of one kind. Profile::values is sorted by (span, kind); a
// span with no row of a kind has no value of it (not captured, or no
// complete reading pair), which is not the same as 0.
struct SpanValue {
  int32_t span = -1;
  ValueKind kind = ValueKind::kCpuNs;
  uint64_t value = 0;

  bool operator==(const SpanValue&) const = default;
};

}  // namespace mlprof
