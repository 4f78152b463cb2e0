#pragma once
// Probe points for the eBPF agent (USDT, provider `mlprof`). The eBPF issue
// defines their arguments in a header under bpf/ and turns these into
// semaphore-guarded DTRACE_PROBEs; until then they compile to nothing, so the
// call sites below mark where the contract fires.

#include <cstdint>

namespace mlprof::probes {

inline void session_begin(uint64_t /*session_id*/, int /*depth*/) {}
inline void session_end(uint64_t /*session_id*/) {}
inline void span_enter(uint64_t /*session_id*/, uint32_t /*call_index*/, int /*depth*/,
                       uint32_t /*function*/) {}
inline void span_exit(uint64_t /*session_id*/, uint32_t /*call_index*/) {}

}  // namespace mlprof::probes
