// session_spans (USDT contract v2, bpf/mlprof_usdt.h): a stopped session's
// lanes, serialized into one body, handed to a tracer by one probe hit.
// Runs only while a tracer is attached to session_spans (the caller checks
// the semaphore), once per session: its cost is a copy of the events (16
// bytes each, the tick-to-ns mapping applied) and one walk for the ids.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "clock.h"
#include "engine.h"
#include "exception_state.h"
#include "probes.h"

namespace mlprof::probes {

namespace {

// As size_t: the sums below are in size_t, the macro (shared with BPF C) is unsigned int.
constexpr size_t kMaxBytes = MLPROF_SPANS_MAX_BYTES;

// Per id, the serial of the last session that listed it: an id is listed
// once per session without a set. Grown to the registry's size on demand.
std::vector<uint64_t> g_listed_function, g_listed_label;

bool first_in_session(std::vector<uint64_t>& listed, uint32_t id, uint64_t serial) {
  if (id >= listed.size()) listed.resize(std::max<size_t>(id + 1, listed.size() * 2), 0);
  if (listed[id] == serial) return false;
  listed[id] = serial;
  return true;
}

void copy_text(char* out, size_t size, const std::string& text) {
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);  // NOLINT(bugprone-not-null-terminated-result): memset ends it
  std::memset(out + n, 0, size - n);
}

struct SpanBuffers {
  std::string body;
  std::vector<mlprof_spans_name> names;
};

template <typename T>
T* append(std::string& body) {
  const size_t at = body.size();
  body.resize(at + sizeof(T));
  return reinterpret_cast<T*>(body.data() + at);
}

}  // namespace

void fire_session_spans(const Engine& engine, const FunctionTable& registry,
                        const clock::Mapping& clk, uint32_t flags, bool final) {
  const uint64_t serial = engine.serial();
  const EngineOptions& opts = engine.options();
  // One buffer per thread, reused: a session allocates nothing once warm.
  // On the heap: held in thread_locals (56 bytes) they pushed the extension
  // past glibc's static TLS surplus (tests/python/test_extension_tls.py).
  thread_local std::unique_ptr<SpanBuffers> buffers;
  if (!buffers) buffers = std::make_unique<SpanBuffers>();
  std::string& body = buffers->body;
  std::vector<mlprof_spans_name>& names = buffers->names;
  body.clear();
  names.clear();
  body.reserve(4096);

  {
    mlprof_spans_head head{};
    head.version = MLPROF_USDT_VERSION;
    head.lanes = static_cast<uint32_t>(engine.lanes().size());
    head.session = serial;
    head.start_ns = engine.start_ns();
    head.end_ns = engine.end_ns();
    head.ceiling = opts.depth;
    head.flags = flags;
    for (const auto& lane : engine.lanes()) head.dropped += lane->out.dropped;
    copy_text(head.trace_id, sizeof(head.trace_id), opts.trace_id);
    copy_text(head.span_id, sizeof(head.span_id), opts.span_id);
    std::memcpy(append<mlprof_spans_head>(body), &head, sizeof(head));
  }

  const StringTable& strings = registry.strings();
  auto add_name = [&](uint32_t id, bool label) {
    if (names.size() >= MLPROF_SPANS_MAX_NAMES) return;  // the agent names it "<function N>"
    if (!first_in_session(label ? g_listed_label : g_listed_function, id, serial)) return;
    mlprof_spans_name n{};
    n.id = id;
    n.is_label = label;
    if (label) {
      n.name = reinterpret_cast<uintptr_t>(strings.get(id).c_str());
    } else {
      const FunctionInfo& f = registry.get(id);
      n.name = reinterpret_cast<uintptr_t>(strings.get(f.name).c_str());
      n.module = reinterpret_cast<uintptr_t>(strings.get(f.module).c_str());
      n.file = reinterpret_cast<uintptr_t>(strings.get(f.file).c_str());
      n.line = f.line;
    }
    names.push_back(n);
  };

  bool cut = false;    // the body reached MLPROF_SPANS_MAX_BYTES: later lanes are empty
  bool folds = false;  // coalesced resumes: the body says MLPROF_SPANS_FOLDS_VERSION
  bool marks = false;  // instants: MLPROF_SPANS_MARKS_VERSION
  uint32_t lanes = 0;
  for (const auto& lp : engine.lanes()) {
    const Lane& out = lp->out;
    const size_t room =
        kMaxBytes - std::min<size_t>(kMaxBytes, body.size() + sizeof(mlprof_spans_lane));
    size_t n_events = cut ? 0 : std::min(out.events.size(), room / sizeof(mlprof_spans_event));
    size_t n_io = 0;
    if (n_events == out.events.size() && !cut) {
      const size_t left = room - n_events * sizeof(mlprof_spans_event);
      n_io = std::min(out.io.size(), left / sizeof(mlprof_spans_io));
    }
    const bool truncated_here = n_events < out.events.size() || n_io < out.io.size();
    if (body.size() + sizeof(mlprof_spans_lane) > kMaxBytes) break;  // not even its head fits
    cut = cut || truncated_here;

    mlprof_spans_lane lane{};
    lane.lane = lp->index;
    lane.parent_lane =
        out.parent_lane < 0 ? MLPROF_NO_PARENT_LANE : static_cast<uint32_t>(out.parent_lane);
    lane.parent_call = out.parent_call;
    lane.task = out.task;
    lane.thread_ident = lp->thread_id;
    lane.native_tid = out.native_tid;
    lane.dropped = out.dropped;
    lane.events = static_cast<uint32_t>(n_events);
    lane.ios = static_cast<uint32_t>(n_io);
    lane.truncated = out.truncated || truncated_here;
    copy_text(lane.thread_name, sizeof(lane.thread_name), out.thread_name);
    std::memcpy(append<mlprof_spans_lane>(body), &lane, sizeof(lane));
    ++lanes;

    const size_t at = body.size();
    body.resize(at + n_events * sizeof(mlprof_spans_event));
    auto* ev = reinterpret_cast<mlprof_spans_event*>(body.data() + at);
    for (size_t i = 0; i < n_events; ++i) {
      const Event& e = out.events[i];
      ev[i].ts_ns = clk.to_ns(e.ts_ns);
      ev[i].id = e.id;
      ev[i].kind = static_cast<uint8_t>(e.kind);
      ev[i].flags = e.flags;
      ev[i].reserved = 0;
      if (e.kind == EventKind::kCall)
        add_name(e.id, false);
      else if (e.kind == EventKind::kLabel)
        add_name(e.id, true);
      else if (e.kind == EventKind::kFold)
        folds = true;
      else if (e.kind == EventKind::kMark) {
        add_name(e.id, true);
        marks = true;
      }
    }
    for (size_t i = 0; i < n_io; ++i) {
      const IORecord& r = out.io[i];
      auto* io = append<mlprof_spans_io>(body);
      io->call = r.call;
      io->role = static_cast<uint32_t>(r.role);
      copy_text(io->name, sizeof(io->name), r.name);
      copy_text(io->summary, sizeof(io->summary), format_io(r.summary));
    }
  }
  reinterpret_cast<mlprof_spans_head*>(body.data())->lanes = lanes;
  if (folds)
    reinterpret_cast<mlprof_spans_head*>(body.data())->version = MLPROF_SPANS_FOLDS_VERSION;
  if (marks)
    reinterpret_cast<mlprof_spans_head*>(body.data())->version = MLPROF_SPANS_MARKS_VERSION;
  // In registers: the buffers are thread_local, and an operand the compiler
  // leaves %fs-relative is one libbpf cannot read ("unrecognized register").
  const char* body_at = body.data();
  uint64_t body_bytes = body.size();
  const mlprof_spans_name* names_at = names.data();
  uint64_t name_count = names.size();
  asm volatile("" : "+r"(body_at), "+r"(body_bytes), "+r"(names_at), "+r"(name_count));
  MLPROF_USDT_SESSION_SPANS(serial, body_at, body_bytes, names_at, name_count, final ? 1 : 0);
}

// --- checkpoints: the spans of a long session before it ends -------------------
//
// A session's spans reach the tracer when it ends; a process killed in the
// middle of one would take them along. So while session_spans is traced, a
// thread of the extension's looks every 50 ms (without the GIL: one atomic
// load) for a session open longer than MLPROF_CHECKPOINT_AFTER_NS, and only
// then takes the GIL and sends each such session as it stands (final 0).
// A predict of a few ms never wakes more than this thread.

namespace {
std::atomic<int> g_checkpoint_pid{
    0};  // the process whose thread runs (fork: the child starts its own)
std::atomic<int64_t> g_oldest_open_ns{0};  // start of the oldest open traced session, 0: none
int g_open_traced = 0;                     // open sessions counted (GIL held)
std::atomic<int> g_state_made{0};          // the thread's state: 0 not yet, 1 made, -1 none

using compat::finalizing;

void checkpoint_loop(PyInterpreterState* interp) {
  // This thread's exception state, while there is memory (exception_state.h).
  reach_exception_state();
  const int pid = getpid();
  // Its thread state too, made once now: PyGILState_Ensure at a checkpoint
  // made one each time it found none, and out of memory that is
  // Py_FatalError ("Couldn't create thread-state for new thread").
  PyThreadState* ts = PyThreadState_New(interp);
  bool bound = ts != nullptr;
  g_state_made.store(bound ? 1 : -1);
  while (bound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_checkpoint_pid.load() != pid) return;  // a forked child's copy: not ours to free
    const int64_t oldest = g_oldest_open_ns.load(std::memory_order_relaxed);
    if (!spans_traced() && oldest == 0) break;
    if (oldest == 0 || clock::monotonic_ns() - oldest < MLPROF_CHECKPOINT_AFTER_NS) continue;
    if (!Py_IsInitialized() || finalizing()) {
      bound = false;  // the interpreter frees its thread states
      break;
    }
    PyEval_RestoreThread(ts);
    try {
      const int64_t now = clock::monotonic_ns();
      int64_t still = 0;
      for (Engine* e : collecting_engines()) {
        if (!e->usdt_counted()) continue;
        if (spans_traced()) e->usdt_checkpoint(now);
        if (still == 0 || e->start_ns() < still) still = e->start_ns();
      }
      g_oldest_open_ns.store(still, std::memory_order_relaxed);
    } catch (abi::__forced_unwind&) {
      throw;
    } catch (...) {  // out of memory (a memory limit): this checkpoint is skipped
    }
    PyEval_SaveThread();
  }
  if (bound && Py_IsInitialized() && !finalizing()) {
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
  }
  int expected = pid;
  g_checkpoint_pid.compare_exchange_strong(expected, 0);
}
}  // namespace

void checkpoints_session_started(int64_t start_ns) {
  if (g_open_traced++ == 0) g_oldest_open_ns.store(start_ns, std::memory_order_relaxed);
  const int pid = getpid();
  int running = g_checkpoint_pid.load();
  if (running == pid) return;
  if (!g_checkpoint_pid.compare_exchange_strong(running, pid)) return;
  g_state_made.store(0);
  try {
    std::thread(checkpoint_loop, PyInterpreterState_Get()).detach();
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {               // std::system_error; bad_alloc under a memory limit
    g_checkpoint_pid.store(0);  // no thread: sessions still arrive whole at their end
    return;
  }
  // Wait (bounded) for the thread's state, made without the GIL: made later,
  // when the session's code may have used up memory, 3.11's PyThreadState_New
  // dereferences its failed allocation (SIGSEGV). Once per process.
  for (int i = 0; i < 1000 && g_state_made.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

void checkpoints_session_stopped() {
  if (g_open_traced > 0 && --g_open_traced == 0)
    g_oldest_open_ns.store(0, std::memory_order_relaxed);
}

}  // namespace mlprof::probes
