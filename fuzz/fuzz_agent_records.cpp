// Fuzz target: the agent's joiner (userspace/agent/joiner*.cpp) on a stream
// of ring-buffer records, every field of which a hostile target can choose
// through its probes' arguments, except the header's tgid, tid and time
// (the kernel's). Input: records, each [u16 length, little-endian][bytes].
// The tgid is folded onto three processes so that sessions, lanes and
// names meet; a process's exit and the capture's end come last.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "agent_joiner.h"

using namespace mlprof;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  agent::Joiner j({}, fuzz::small_limits());
  uint64_t now = 0;
  size_t at = 0, records = 0;
  unsigned char rec[fuzz::kMaxRecord];
  while (size - at >= 2) {
    uint16_t len = 0;
    std::memcpy(&len, data + at, 2);
    at += 2;
    len = static_cast<uint16_t>(std::min<size_t>({len, size - at, sizeof rec}));
    std::memcpy(rec, data + at, len);
    at += len;
    if (len >= sizeof(mlprof_ev_header)) {
      mlprof_ev_header h{};
      std::memcpy(&h, rec, sizeof h);
      h.tgid = 100 + h.tgid % 3;
      h.ts_ns &= (uint64_t{1} << 62) - 1;  // the kernel's clock: far from wrapping
      now = std::max<uint64_t>(now, h.ts_ns);
      std::memcpy(rec, &h, sizeof h);
    }
    fuzz::feed(j, rec, len);
    if (++records % 64 == 0) fuzz::exercise_finished(j);
  }
  j.on_process_exit(101, static_cast<int64_t>(now));
  j.finish(static_cast<int64_t>(now) + 1);
  fuzz::exercise_finished(j);
  return 0;
}
