// The USDT probes' cold halves (probes.h has the inline gates): firing each
// probe of the contract in bpf/mlprof_usdt.h, and session_begin's flags,
// with autoprofile's marks of the sessions it starts.
#include "engine_internal.h"

#include <algorithm>

#include "gil_range.h"

namespace mlprof {

// --- USDT probes (probes.h): the cold halves --------------------------------------

namespace {
// Serials of sessions that autoprofile started (probes::mark_autoprofile),
// until they begin. One or two at a time, so a vector.
std::vector<uint64_t> g_autoprofile_serials;
}  // namespace

// session_begin's flags; consumes the session's autoprofile mark.
uint32_t begin_flags(const EngineOptions& o, uint64_t serial) {
  uint32_t flags = 0;
  if (o.capture_io) flags |= MLPROF_SESSION_CAPTURE_IO;
  if (o.all_threads) flags |= MLPROF_SESSION_ALL_THREADS;
  auto it = std::find(g_autoprofile_serials.begin(), g_autoprofile_serials.end(), serial);
  if (it != g_autoprofile_serials.end()) {
    flags |= MLPROF_SESSION_AUTOPROFILE;
    g_autoprofile_serials.erase(it);
  }
  return flags;
}

namespace probes {

void mark_autoprofile(uint64_t session) {
  if (std::find(g_autoprofile_serials.begin(), g_autoprofile_serials.end(), session) ==
      g_autoprofile_serials.end()) {
    g_autoprofile_serials.push_back(session);
  }
}

void fire_session_begin(uint64_t session, int64_t ceiling, uint32_t flags) {
  uint64_t gil = 0, gil_bytes = 0;  // the agent tells GIL waits by it
  mlprof_gil_range(&gil, &gil_bytes);
  MLPROF_USDT_SESSION_BEGIN(session, ceiling, flags, gil, gil_bytes);
}

void fire_session_end(uint64_t session, uint64_t dropped) {
  MLPROF_USDT_SESSION_END(session, dropped);
}

void fire_lane_begin(uint64_t session, uint32_t lane, int32_t parent_lane, uint32_t parent_call,
                     uint32_t task, uint64_t ident, const std::string& thread_name) {
  const uint32_t parent =
      parent_lane < 0 ? MLPROF_NO_PARENT_LANE : static_cast<uint32_t>(parent_lane);
  MLPROF_USDT_LANE_BEGIN(session, lane, parent, parent_call, task, ident, thread_name.c_str());
}

void fire_span_enter(uint64_t session, uint32_t lane, uint32_t index, uint32_t function,
                     uint32_t label, int32_t depth, uint32_t flags) {
  // The registry's strings live as long as the process: the pointers stay valid.
  const FunctionTable& table = registry();
  const FunctionInfo& f = table.get(function);
  const StringTable& strings = table.strings();
  const char* label_text = label ? strings.get(label).c_str() : nullptr;
  MLPROF_USDT_SPAN_ENTER(session, lane, index, function, label, depth, flags,
                         strings.get(f.name).c_str(), strings.get(f.module).c_str(),
                         strings.get(f.file).c_str(), static_cast<long long>(f.line), label_text);
}

void fire_span_exit(uint64_t session, uint32_t lane, uint32_t index, uint32_t flags) {
  MLPROF_USDT_SPAN_EXIT(session, lane, index, flags);
}

void fire_span_suspend(uint64_t session, uint32_t lane, uint32_t index) {
  MLPROF_USDT_SPAN_SUSPEND(session, lane, index);
}

void fire_span_resume(uint64_t session, uint32_t lane, uint32_t index) {
  MLPROF_USDT_SPAN_RESUME(session, lane, index);
}

void fire_span_io(uint64_t session, uint32_t lane, uint32_t index, IORole role,
                  const std::string& name, const std::string& summary) {
  MLPROF_USDT_SPAN_IO(session, lane, index, static_cast<unsigned>(role), name.c_str(),
                      summary.c_str());
}

}  // namespace probes

}  // namespace mlprof
