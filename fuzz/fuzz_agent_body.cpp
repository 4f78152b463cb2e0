// Fuzz target: the session_spans body (bpf/mlprof_usdt.h), which a target
// writes in its own memory and the agent decodes (joiner_records.cpp,
// apply_body). Input: the body. It reaches the joiner as the BPF side sends
// it: SESSION_BEGIN, the body in MLPROF_CHUNK_BYTES pieces, SESSION_END;
// then the same body again as a checkpoint of a second session, ended by
// the process's exit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "agent_joiner.h"
#include "mlprof_usdt.h"

using namespace mlprof;

namespace {

mlprof_ev_header header(uint16_t kind, uint64_t ts) {
  mlprof_ev_header h{};
  h.ts_ns = ts;
  h.tgid = 100;
  h.tid = 100;
  h.kind = kind;
  return h;
}

void session(agent::Joiner& j, uint16_t kind, uint64_t serial, uint64_t ts) {
  mlprof_ev_session s{};
  s.h = header(kind, ts);
  s.session = serial;
  s.ceiling = -1;
  fuzz::feed(j, &s, sizeof s);
}

void body(agent::Joiner& j, uint64_t serial, const uint8_t* data, size_t size, uint64_t ts) {
  size = std::min<size_t>(size, MLPROF_SPANS_MAX_BYTES);
  for (size_t off = 0; off < size; off += MLPROF_CHUNK_BYTES) {
    mlprof_ev_chunk c{};
    c.h = header(MLPROF_EV_SPANS_CHUNK, ts);
    c.session = serial;
    c.offset = static_cast<uint32_t>(off);
    c.total = static_cast<uint32_t>(size);
    c.bytes = static_cast<uint32_t>(std::min<size_t>(MLPROF_CHUNK_BYTES, size - off));
    std::memcpy(c.data, data + off, c.bytes);
    fuzz::feed(j, &c, sizeof c);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  agent::Joiner j({}, fuzz::small_limits());
  session(j, MLPROF_EV_SESSION_BEGIN, 1, 1000);
  body(j, 1, data, size, 2000);
  session(j, MLPROF_EV_SESSION_END, 1, 3000);
  session(j, MLPROF_EV_SESSION_BEGIN, 2, 4000);
  body(j, 2, data, size, 5000);
  j.on_process_exit(100, 6000);
  fuzz::exercise_finished(j);
  j.finish(7000);
  fuzz::exercise_finished(j);
  return 0;
}
