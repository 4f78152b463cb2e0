// I/O capture (capture_io): the data summaries of a recorded span's
// arguments and return value, of a frame's or of a profile_span block's
// (summarize.h makes them). Summarizing runs Python code, so the lanes are
// looked up again after it, and its time is taken out of the spans.
#include "engine_internal.h"

#include <string>

#include "capture/frame_access.h"
#include "summarize.h"

namespace mlprof {

using compat::utf8;

// --- I/O capture (capture_io) --------------------------------------------------
// Summarizing runs Python code (properties of a DataFrame ...), during which
// other threads may run and end the session. So the hooks first note which
// lanes want the I/O of a span (by engine serial, not by pointer), summarize
// once for all of them, and then look the lanes up again.

constexpr int kMaxIOArguments = 16;  // a summary per parameter, at most this many
namespace {

CaptureLane* target_lane(const IOTarget& t);

// span_io for each target still collecting: the summary is formatted once.
[[gnu::cold, gnu::noinline]] void fire_io(const IOTargets& io, IORole role, const std::string& name,
                                          const IOSummary& summary) {
  std::string text = format_io(summary);
  if (text.size() > MLPROF_IO_SUMMARY_LEN - 1) text.resize(MLPROF_IO_SUMMARY_LEN - 1);
  for (int i = 0; i < io.n; ++i) {
    if (target_lane(io.t[i]))
      probes::fire_span_io(io.t[i].serial, io.t[i].lane, io.t[i].call, role, name, text);
  }
}

// The target's lane if its session is still collecting, else null.
CaptureLane* target_lane(const IOTarget& t) {
  auto it = g_by_serial.find(t.serial);
  if (it == g_by_serial.end() || it->second->state() != Engine::State::kCollecting) return nullptr;
  const auto& lanes = it->second->lanes();
  return t.lane < lanes.size() ? lanes[t.lane].get() : nullptr;
}

void append_io(const IOTargets& io, IORole role, const std::string& name,
               const IOSummary& summary) {
  for (int i = 0; i < io.n; ++i) {
    if (CaptureLane* L = target_lane(io.t[i]))
      L->out.io.push_back(IORecord{io.t[i].call, role, name, summary});
  }
  if (probes::io_traced()) fire_io(io, role, name, summary);
}

// The profiler's work from `since` to now, on each target's lane: removed
// from the lane's timeline at build (CaptureLane::overhead).
void note_overhead(const IOTargets& io, int64_t since) {
  const int64_t now = clock::ticks();
  for (int i = 0; i < io.n; ++i) {
    if (CaptureLane* L = target_lane(io.t[i])) note_stretch(*L, since, now);
  }
}

// Now, as the profiler starts summarizing for `io`'s lanes (note_stretch).
int64_t stretch_start(const IOTargets& io) {
  const int64_t now = clock::ticks();
  for (int i = 0; i < io.n; ++i) {
    if (CaptureLane* L = target_lane(io.t[i])) maybe_read_off_cpu(*L, now);
  }
  return now;
}

// The span of kCall `call` starts again (restart_calls): so do its readings.
[[gnu::noinline]] void restart_readings(CaptureLane& L, uint32_t call) {
  std::vector<Reading>& r = L.out.readings;
  const size_t end = r.size();
  take_readings(L);  // fresh readings, tied to the last event: moved onto the call's
  const size_t fresh = r.size();
  for (size_t i = end; i-- > 0 && r[i].event >= call;) {
    if (r[i].event != call) continue;
    for (size_t j = end; j < fresh; ++j) {
      if (r[j].kind == r[i].kind) r[i].value = r[j].value;
    }
  }
  r.resize(end);
}

// Summarizing the arguments happened after the span's start was taken: the
// span starts again now, so its time is the call's and not the summary's (a
// first repr of an estimator takes milliseconds); the stretch is the
// profiler's, taken out of the callers' time at build.
void restart_calls(const IOTargets& io, int64_t since) {
  const int64_t ts = clock::ticks();
  for (int i = 0; i < io.n; ++i) {
    CaptureLane* L = target_lane(io.t[i]);
    if (!L) continue;
    if (io.t[i].call < L->out.events.size()) L->out.events[io.t[i].call].ts_ns = ts;
    if (L->values) restart_readings(*L, io.t[i].call);
    note_stretch(*L, since, ts);
  }
}
}  // namespace

void capture_arguments(PyCodeObject* code, PyFrameObject* frame, const IOTargets& io) {
  const int64_t since = stretch_start(io);
  IOSummary summary;
  bool first = true;
  auto each = [&](PyObject* name, PyObject* value) {
    std::string n = utf8(name);
    // The receiver of a method is the model object itself, not data flowing through.
    bool receiver = first && (n == "self" || n == "cls");
    first = false;
    if (receiver) return;
    summary = IOSummary{};
    summarize_object(value, &summary);
    append_io(io, IORole::kArgument, n, summary);
  };
#if MLPROF_HAS_EVAL_HOOK
  const HookFrame* hook = frame ? nullptr : hook_frame_now();
  if (hook && hook->frame) {
    struct _PyInterpreterFrame* f = hook->frame;
    compat::for_each_parameter_of([f](int i) { return mlprof_frame_local(f, i); }, code,
                                  kMaxIOArguments, each);
    restart_calls(io, since);
    return;
  }
#endif
  if (!frame) frame = PyEval_GetFrame();  // the frame that is starting
  if (!frame || compat::frame_code(frame) != code) return;
  compat::for_each_parameter(frame, code, kMaxIOArguments, each);
  restart_calls(io, since);
}

void capture_return(PyObject* retval, const IOTargets& io) {
  if (!retval) return;
  const int64_t since = stretch_start(io);
  IOSummary summary;
  summarize_object(retval, &summary);
  append_io(io, IORole::kReturn, std::string(), summary);
  note_overhead(io, since);
}

namespace {
IOTargets io_targets(const BlockToken* tokens, int n) {
  IOTargets io;
  for (int i = 0; i < n && io.n < 4; ++i) {
    if (tokens[i].want_io)
      io.t[io.n++] = IOTarget{tokens[i].serial, tokens[i].lane, tokens[i].call_index};
  }
  return io;
}
}  // namespace

void block_arguments_io(const BlockToken* tokens, int n, PyObject* const* args, size_t nargs,
                        PyObject* kwnames) {
  const IOTargets io = io_targets(tokens, n);
  if (!io.n) return;
  const int64_t since = stretch_start(io);
  const Py_ssize_t npos = PyVectorcall_NARGS(nargs);
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  IOSummary summary;
  for (Py_ssize_t i = 0; i < npos + nkw && i < kMaxIOArguments; ++i) {
    std::string name =
        i < npos ? "args[" + std::to_string(i) + "]" : utf8(PyTuple_GET_ITEM(kwnames, i - npos));
    summary = IOSummary{};
    summarize_object(args[i], &summary);
    append_io(io, IORole::kArgument, name, summary);
  }
  restart_calls(io, since);
}

void block_return_io(const BlockToken* tokens, int n, PyObject* retval) {
  const IOTargets io = io_targets(tokens, n);
  if (io.n) capture_return(retval, io);
}
}  // namespace mlprof
