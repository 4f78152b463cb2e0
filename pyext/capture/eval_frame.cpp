// The PEP 523 frame evaluation function (3.11+). While it is installed the
// interpreter calls it for every Python frame it would run, and inlines no
// Python call: each frame is then a C recursion. So it is installed only
// while some thread runs a frame whose callees are within a ceiling (a
// "window"): it reports those callees, and once a thread runs a frame at its
// ceiling the function is taken out again, so what runs below runs inlined,
// untraced and at full speed. Per thread it adds at most one C level per
// window frame, and it steps aside before the C stack or the C recursion
// limit is at risk (c_stack_at_risk).
//
// 3.12+: it reports plain frames only; sys.monitoring reports generator and
// coroutine frames wherever they resume (monitoring.cpp), so the function
// just makes sure their code is watched before they run. 3.11: it reports generators too,
// reading the frame's state after each run (frame_access.h).

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "../engine.h"
#include "frame_access.h"
#include "mechanisms.h"

#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX < 0x030C0000
#include <opcode.h>  // 3.11: RESUME
#endif

namespace mlprof::capture {

namespace {

PyObject* eval_frame(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag);

// --- windows ---------------------------------------------------------------------
// Threads whose flag is on, in one atomic word with the epoch they count in
// (bumped when the last session ends: older flags count for nothing). A
// thread's flag is set after each of its events (set_window), with the GIL; a
// thread that exits with it on gives it back in the flag's destructor, which
// runs without the GIL, perhaps while another thread ends the last session:
// the compare-and-swap drops its decrement when the epoch moved on.
constexpr unsigned kEpochShift = 24;  // up to 16M threads at once
std::atomic<uint64_t> g_windows{uint64_t{1} << kEpochShift};

inline uint64_t window_epoch() { return g_windows.load(std::memory_order_relaxed) >> kEpochShift; }
inline int window_threads() {
  return static_cast<int>(g_windows.load(std::memory_order_relaxed) &
                          ((uint64_t{1} << kEpochShift) - 1));
}
// Adds `delta` to the count of `epoch`; nothing if the epoch moved on.
void add_window(uint64_t epoch, int delta) {
  uint64_t w = g_windows.load(std::memory_order_relaxed);
  do {
    if ((w >> kEpochShift) != epoch) return;
  } while (!g_windows.compare_exchange_weak(
      w, w + static_cast<uint64_t>(static_cast<int64_t>(delta)), std::memory_order_relaxed));
}

// 3.12+: the innermost frame this thread runs that is recorded at the
// ceiling (its callees are below every ceiling of the thread). Its window
// stays open so that the finalizers its teardown runs (its caller's callees,
// at its own depth) are seen, and each of its calls passes this function,
// which takes itself out for the call: about 1,000 instructions per call.
// Once it made kCloseAfter calls (with a tool id held: once frames of its
// code made them, in all) its window is closed instead: its calls run
// without this function, and a PY_RETURN local event on its code
// (monitoring.cpp) puts it back in for the teardown. The code's later frames
// at the ceiling start closed.
struct Ceiling {
  struct _PyInterpreterFrame* frame = nullptr;
  int calls = 0;
  bool closed = false;
};
// Fewer calls than this cost less through the window than the tool id, the
// local event and its callback cost (bench/RESULTS.md, "closed ceilings").
// Counted per frame while no tool id is held (counted per code, sessions of
// the Pipeline predict at depth 2 claimed one mid-predict: 1.08 -> 1.40 of
// bare on 3.12), and per code once one is, so that a function at the
// ceiling making one call a run (a helper calling a helper) closes too.
constexpr int kCloseAfter = 8;

struct StackBounds {
  uintptr_t top = 0;
  size_t size = 0;
  uintptr_t quarter = 0;  // a quarter of the stack used below this (0: no bound known)
  uintptr_t limit = 0;    // below this stack pointer the guard looks again (stack_grows_safely)
  bool grows = false;     // the main thread's: its mapping grows as it is used
};
#if PY_VERSION_HEX < 0x030C0000
// 3.11: a frame this function ran on this thread (its frame depth is its
// position among them).
struct Run {
  struct _PyInterpreterFrame* frame;
  int depth;
};
#endif

// What a frame's run returned, for eval_frame's handler (run sets it).
struct Outcome {
  bool ran = false;
  PyObject* result = nullptr;
};

// Everything this function keeps per thread, in one thread_local: in a
// module loaded with dlopen each thread_local's address is a call (through
// a TLS descriptor, or to __tls_get_addr), and the function passes this
// block down instead.
struct WindowFlag {
  bool on = false;
  uint64_t epoch = 0;
  Ceiling ceiling;
  StackBounds stack;           // read once (c_stack_at_risk)
  Outcome* outcome = nullptr;  // the innermost eval_frame's
#if PY_VERSION_HEX < 0x030C0000
  std::vector<Run> runs;  // 3.11: the frames this function ran, innermost last
#endif
  bool live() const { return on && epoch == window_epoch(); }
  ~WindowFlag() {
    if (on) add_window(epoch, -1);
  }
};
thread_local WindowFlag t_window;

// This thread's block. Opaque to the optimizer, so that a caller keeps the
// address in a register: GCC would rather derive it again after each call.
inline WindowFlag& window_flag() {
  WindowFlag* w = &t_window;
  asm("" : "+r"(w));
  return *w;
}

bool g_ours = false;         // the interpreter's evaluation function is ours
bool g_unavailable = false;  // another evaluator held the hook when we wanted it
bool g_aside = false;        // the guard stepped aside (until the last session ends)
std::string g_aside_why;

void sync_hook(PyThreadState* ts = compat::tstate()) {
  PyInterpreterState* interp = ts->interp;
  const bool want =
      window_threads() > 0 && g_native_collecting > 0 && !g_aside && !every_frame_reported();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (want && !g_ours) {
    if (current != _PyEval_EvalFrameDefault) {
      // torch.compile or another tool evaluates frames: it keeps its place.
      if (!g_unavailable) {
        g_unavailable = true;
        eval_lost("another frame evaluation function (PEP 523) is installed");
      }
      return;
    }
    _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame);
    g_ours = true;
  } else if (want && current != eval_frame) {
    // Replaced by another tool while installed: it keeps its place.
    g_ours = false;
    g_unavailable = true;
    eval_lost("another frame evaluation function (PEP 523) replaced the profiler's");
  } else if (!want && g_ours) {
    if (current == eval_frame)
      _PyInterpreterState_SetEvalFrameFunc(interp, _PyEval_EvalFrameDefault);
    g_ours = false;
  }
}

// --- the C stack guard -------------------------------------------------------------
// A frame run through this function costs one C level (this function and the
// interpreter's loop, about 0.5 KiB here) and, on 3.12/3.13, two units of the
// C recursion limit. The function steps aside (takes itself out for the
// sessions running now) once a thread has used a quarter of its C stack or
// of the C recursion limit: the program keeps three quarters of what it had,
// whatever depth it is at.
//
// The main thread's stack is mapped as it grows, and under an address-space
// limit (ulimit -v) it cannot grow once the program has used the space: a
// fault there ends the process by SIGSEGV, where 3.11 without the profiler
// (no C level a Python call) raises its own MemoryError or SystemError. So
// the main thread's guard looks again each time its stack pointer comes
// within a margin of the part it knows mapped. With no address-space limit
// it maps the next stride (map_stack_down_to: the kernel grows the stack,
// one page resident), so that a limit set later finds the part it trusts
// mapped; with a limit, it steps aside rather than grow the stack.
constexpr uintptr_t kStackMargin = 128 << 10;  // left mapped below us for the C code that follows
constexpr uintptr_t kStackStride = 256 << 10;  // mapped at once while there is no limit

inline uintptr_t stack_pointer() {
  char here;
  return reinterpret_cast<uintptr_t>(&here);
}

// Where to look again: the margin above the lowest byte known mapped, and
// never below the quarter the program keeps.
inline uintptr_t look_again_at(const StackBounds& b, uintptr_t mapped_from) {
  return std::max(b.quarter, mapped_from + kStackMargin);
}

// The mapping that holds `sp` in /proc/self/maps, where the one below it
// ends, and whether it is the main thread's stack; `from` 0: none found.
// Read once, for the main thread (and again under ulimit -v): a serving
// process maps thousands of regions; sscanf cost 1,900 instructions a line.
struct Mapping {
  uintptr_t from = 0, to = 0, below = 0;
  bool stack = false;
};

[[gnu::cold, gnu::noinline]] Mapping mapping_of(uintptr_t sp) {
  Mapping m;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return m;
  char line[512];
  bool at_start = true;  // a line longer than the buffer comes in pieces
  uintptr_t below = 0;
  while (std::fgets(line, sizeof line, f)) {
    const bool starts = at_start;
    const size_t n = std::strlen(line);
    at_start = n > 0 && line[n - 1] == '\n';
    if (!starts) continue;
    char* end = nullptr;
    const uintptr_t from = std::strtoull(line, &end, 16);
    if (end == line || *end != '-') continue;
    const char* second = end + 1;
    const uintptr_t to = std::strtoull(second, &end, 16);
    if (end == second) continue;
    if (from <= sp && sp < to) {
      m = {from, to, below, std::string_view(line, n).find(" [stack]") != std::string_view::npos};
      break;
    }
    below = to;
  }
  std::fclose(f);
  return m;
}

// Maps the main thread's stack down to `low`, growing it as a call that deep
// would. The stack pointer moves there first (alloca): a kernel before 4.20
// (x86) and valgrind end the process with SIGSEGV, rather than grow the
// stack, at an access more than 64 KiB below it.
[[gnu::cold, gnu::noinline]] void map_stack_down_to(uintptr_t low) {
  const uintptr_t sp = stack_pointer();
  if (sp <= low) return;
  volatile char* bottom = static_cast<char*>(__builtin_alloca(sp - low));
  *bottom = 0;  // the block's lowest byte, at or below `low`: one page resident
}

// Whether the stack may grow below `sp`; sets the next point to look again.
[[gnu::cold, gnu::noinline]] bool stack_grows_safely(StackBounds& b, uintptr_t sp) {
  if (!b.grows || sp < b.quarter + kStackMargin) return false;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur == RLIM_INFINITY) {
    const uintptr_t low = std::max(b.quarter, (sp - kStackStride) & ~uintptr_t{4095});
    map_stack_down_to(low);
    b.limit = std::min(sp, low + kStackMargin);
    return true;
  }
  const uintptr_t bottom = mapping_of(sp).from;
  if (!bottom || sp < bottom + kStackMargin) return false;
  b.limit = look_again_at(b, bottom);
  return true;
}

// An unlimited main stack, or one glibc reports as over 1 GiB: count on 8 MiB.
inline size_t counted_size(size_t size) {
  return size > (size_t{1} << 30) ? (size_t{8} << 20) : size;
}

// The main thread's stack from its mapping, as glibc's pthread_getattr_np
// finds it, without that function's own read of /proc/self/maps: it ends at
// the mapping's end and is RLIMIT_STACK long, not reaching the mapping below.
void main_stack_bounds(StackBounds& b, const Mapping& m) {
  rlimit rl{};
  size_t size = getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                    ? static_cast<size_t>(rl.rlim_cur)
                    : SIZE_MAX;
  size = std::min<size_t>(size, m.to - m.below) & ~size_t{4095};
  b.top = m.to;
  b.size = counted_size(size);
  b.quarter = b.top - b.size / 4;
  b.limit = look_again_at(b, m.from);
  b.grows = true;
}

[[gnu::cold, gnu::noinline]] void read_stack_bounds(StackBounds& b) {
  // Another thread's stack is mapped whole when the thread starts.
  const bool main = getpid() == static_cast<pid_t>(syscall(SYS_gettid));
  Mapping m;
  if (main) {
    char here;
    m = mapping_of(reinterpret_cast<uintptr_t>(&here));
    if (m.stack) return main_stack_bounds(b, m);
  }
  // Another thread, or the main thread off its [stack] mapping (a fiber's).
  pthread_attr_t attr;
  void* addr = nullptr;
  size_t size = 0;
  b.top = 1;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size) {
      b.top = reinterpret_cast<uintptr_t>(addr) + size;
      b.size = counted_size(size);
      b.quarter = b.limit = b.top - b.size / 4;
      b.grows = main;
      if (main && m.from) b.limit = look_again_at(b, m.from);
    }
    pthread_attr_destroy(&attr);
  }
}

inline StackBounds& stack_bounds(WindowFlag& w) {
  if (!w.stack.top) read_stack_bounds(w.stack);
  return w.stack;
}

#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
constexpr int kCRecursionLimit = Py_C_RECURSION_LIMIT;
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
constexpr int kCRecursionLimit = C_RECURSION_LIMIT;
#endif

// 3.12/3.13: a quarter of the C recursion limit is used.
inline bool c_recursion_at_risk(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000
  return ts->c_recursion_remaining < kCRecursionLimit * 3 / 4;
#else
  (void)ts;
  return false;
#endif
}

inline bool c_stack_at_risk(PyThreadState* ts, WindowFlag& w) {
  if (c_recursion_at_risk(ts)) return true;
  const uintptr_t sp = stack_pointer();
  StackBounds& b = stack_bounds(w);
  return sp < b.limit && !stack_grows_safely(b, sp);
}

// What c_stack_at_risk found, for the note.
[[gnu::cold, gnu::noinline]] std::string stack_risk(PyThreadState* ts, WindowFlag& w) {
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000
  if (c_recursion_at_risk(ts)) {
    return "a quarter of the C recursion limit (" + std::to_string(kCRecursionLimit) + ") used";
  }
#else
  (void)ts;
#endif
  const StackBounds& b = stack_bounds(w);
  const uintptr_t sp = stack_pointer();
  std::string why = std::to_string((b.top - sp) >> 10) + " KiB of a " +
                    std::to_string(b.size >> 10) + " KiB C stack used";
  if (b.grows && sp >= b.quarter + kStackMargin) why += ", and no room to grow under ulimit -v";
  return why;
}

void set_window(WindowFlag& w, PyThreadState* ts, bool open) {
  const uint64_t epoch = window_epoch();
  if (w.epoch != epoch) {  // a void flag from an earlier epoch
    w.on = false;
    w.epoch = epoch;
  }
  if (open != w.on) {
    w.on = open;
    add_window(epoch, open ? 1 : -1);
    sync_hook(ts);
  }
}

[[gnu::cold, gnu::noinline]] void step_aside(const std::string& why) {
  if (g_aside) return;
  g_aside = true;
  g_aside_why = why;
  sync_hook();
  eval_lost("the frame evaluation hook stepped aside to keep the C stack safe: " + why);
}

// --- running frames ----------------------------------------------------------------
#if PY_VERSION_HEX < 0x030C0000
inline int depth_of_new_frame(PyThreadState* ts, const WindowFlag& w) {
  if (w.runs.empty()) return 1;
  // A frame that starts while the innermost one we ran is already off the
  // thread's stack runs in its teardown (a finalizer as its locals are
  // released): it is that frame's sibling, as sys.monitoring reports it.
  const Run& r = w.runs.back();
  return mlprof_current_frame(ts) == mlprof_frame_previous(r.frame) ? r.depth : r.depth + 1;
}

inline PyObject* run(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag, int depth,
                     WindowFlag& w) {
  Outcome* const o = w.outcome;
  w.runs.push_back(Run{f, depth});
  PyObject* result = _PyEval_EvalFrameDefault(ts, f, throwflag);
  w.runs.pop_back();
  *o = Outcome{true, result};
  return result;
}
inline PyObject* pass_through(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag,
                              WindowFlag& w) {
  return run(ts, f, throwflag, depth_of_new_frame(ts, w), w);
}
// The current frame's depth (capture::frame_depth while this function reports).
inline int current_depth(PyThreadState*, const WindowFlag& w) {
  return w.runs.empty() ? 0 : w.runs.back().depth;
}
#else
inline int depth_of_new_frame(PyThreadState* ts, const WindowFlag&) {
  return ts->py_recursion_limit - ts->py_recursion_remaining + 1;  // not entered yet
}
inline PyObject* run(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag, int /*depth*/,
                     WindowFlag& w) {
  Outcome* const o = w.outcome;
  PyObject* result = _PyEval_EvalFrameDefault(ts, f, throwflag);
  *o = Outcome{true, result};
  return result;
}
inline PyObject* pass_through(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag,
                              WindowFlag& w) {
  return run(ts, f, throwflag, 0, w);
}
inline int current_depth(PyThreadState* ts, const WindowFlag&) { return frame_depth(ts); }
#endif

// Runs one event with the frame described to the engine and the thread's
// tracing count raised, as CPython does around a monitoring callback, so that
// Python code the event runs (summarizing an argument) is not reported
// itself. An exception being raised or thrown in stays pending.
template <typename Fn>
inline void report(PyThreadState* ts, const HookFrame& frame, Fn&& event) {
  ++g_events;
  compat::PendingError pending;
  PyThreadState_EnterTracing(ts);
  guarded([&] { event(Site{ts, &frame}); });
  PyThreadState_LeaveTracing(ts);
}

// A frame below every ceiling of this thread: it and everything it calls run
// without this function (taken out unless another thread's window needs it,
// and then each of them passes the C stack guard), inlined and untraced.
PyObject* run_below(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag, int depth,
                    WindowFlag& w) {
  const uint64_t generation = lanes_generation();
  set_window(w, ts, false);
  PyObject* result = run(ts, f, throwflag, depth, w);
  // Nothing below can change this thread's lanes but a session starting or
  // ending in there (events below close what they open).
  set_window(w, ts, lanes_generation() == generation ? true : current_lanes_want_callees(ts));
  return result;
}

// A call made by this thread's ceiling frame, with the window closed for the
// rest of that frame's run: its next calls reach no hook. Its return opens
// the window again (quick_return, on_return; 3.12+: the PY_RETURN event).
PyObject* run_closing(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag, int depth,
                      WindowFlag& w) {
  const uint64_t generation = lanes_generation();
  set_window(w, ts, false);
  PyObject* result = run(ts, f, throwflag, depth, w);
  // A session started or ended in there may want it open.
  if (lanes_generation() != generation) set_window(w, ts, current_lanes_want_callees(ts));
  return result;
}

#if MLPROF_HAS_MONITORING
// A call made by this thread's ceiling frame: through the window for its
// first calls, then with the window closed for the rest of the frame's run.
PyObject* run_under_ceiling(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag,
                            int depth, WindowFlag& w) {
  Ceiling& c = w.ceiling;
  if (!c.closed) {
    PyCodeObject* code = mlprof_frame_code(c.frame);
    c.closed = monitoring::holding() ? monitoring::ceiling_call(code, kCloseAfter)
                                     : ++c.calls == kCloseAfter && monitoring::watch_returns(code);
  }
  if (!c.closed) return run_below(ts, f, throwflag, depth, w);
  return run_closing(ts, f, throwflag, depth, w);
}

// Runs a recorded frame; at the ceiling it becomes the thread's Ceiling.
// `at_ceiling`: whether its callees are below every ceiling of the thread,
// if known (-1: not known).
inline PyObject* run_recorded(PyThreadState* ts, struct _PyInterpreterFrame* f, PyCodeObject* code,
                              int throwflag, int depth, WindowFlag& w, int at_ceiling = -1) {
  const Ceiling outer = w.ceiling;
  w.ceiling = Ceiling{};
  if (at_ceiling < 0 ? below_every_ceiling(ts, depth + 1, false) : at_ceiling) {
    w.ceiling.frame = f;
    // Seen making many calls before: its calls reach no hook from the start.
    w.ceiling.closed = monitoring::returns_watched(code);
    if (w.ceiling.closed) set_window(w, ts, false);
  }
  PyObject* result = run(ts, f, throwflag, depth, w);
  w.ceiling = outer;
  return result;
}
#else
inline PyObject* run_recorded(PyThreadState* ts, struct _PyInterpreterFrame* f, PyCodeObject*,
                              int throwflag, int depth, WindowFlag& w, int = -1) {
  return run(ts, f, throwflag, depth, w);
}
#endif

// 3.11: the profile function took over every frame while this one ran (the
// C stack guard stepped aside) and has reported its end already.
inline bool taken_over() { return !MLPROF_HAS_MONITORING && every_frame_reported(); }

[[gnu::noinline]] void return_in_full(PyThreadState* ts, struct _PyInterpreterFrame* f,
                                      PyCodeObject* code, int depth, PyObject* result) {
  if (taken_over()) return;
  report(ts, HookFrame{0, f},
         [&](const Site& site) { on_return(site, code, depth, result == nullptr, result); });
}

// A plain frame through the engine's full path (on_start, on_return).
[[gnu::noinline]] PyObject* run_plain_in_full(PyThreadState* ts, struct _PyInterpreterFrame* f,
                                              PyCodeObject* code, int throwflag, int depth,
                                              WindowFlag& w) {
  bool tracked = false;
  report(ts, HookFrame{0, f},
         [&](const Site& site) { tracked = on_start(site, code, depth, nullptr); });
  if (!tracked) return run_below(ts, f, throwflag, depth, w);
  PyObject* result = run_recorded(ts, f, code, throwflag, depth, w);
  return_in_full(ts, f, code, depth, result);
  return result;
}

// Flattened: the engine's quick path is inlined here.
[[gnu::flatten]] PyObject* run_plain(PyThreadState* ts, struct _PyInterpreterFrame* f,
                                     PyCodeObject* code, int throwflag, WindowFlag& w, int depth) {
  PyObject* result;
  bool at_ceiling = false;
  if (quick_start(ts, code, depth, true, &at_ceiling)) {
    // The common case: no Python code runs in the events, so no report().
    g_events += 2;
    result = run_recorded(ts, f, code, throwflag, depth, w, at_ceiling);
    if (quick_return(ts, code, depth, result == nullptr)) {
      // The caller's callees are within the ceiling: its window is open
      // (again, if this frame closed it at the ceiling and left by an exception).
      set_window(w, ts, true);
    } else {
      return_in_full(ts, f, code, depth, result);
    }
  } else {
    result = run_plain_in_full(ts, f, code, throwflag, depth, w);
  }
  if (g_ours && _PyInterpreterState_GetEvalFrameFunc(ts->interp) != eval_frame) {
    compat::PendingError pending;
    sync_hook(ts);  // another tool (torch.compile) replaced the function while this frame ran
  }
  return result;
}

#if PY_VERSION_HEX < 0x030C0000
// Index of a generator's RESUME 0 in its code units, read once from the
// original bytecode and kept in a code extra slot as index + 1: a run that
// starts before it is the generator's first.
Py_ssize_t g_resume_extra = -1;

long first_resume(PyCodeObject* code) {
  void* extra = nullptr;
  if (g_resume_extra < 0) g_resume_extra = compat::request_code_extra_index();
  if (g_resume_extra < 0) return -1;
  if (compat::get_code_extra(reinterpret_cast<PyObject*>(code), g_resume_extra, &extra) < 0) {
    PyErr_Clear();
    return -1;
  }
  if (extra) return static_cast<long>(reinterpret_cast<uintptr_t>(extra)) - 1;
  long index = -1;
  if (PyObject* bytes = PyCode_GetCode(code)) {
    const auto* units = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(bytes));
    const Py_ssize_t n = PyBytes_GET_SIZE(bytes) / 2;
    for (Py_ssize_t i = 0; i < n && index < 0; ++i) {
      if (units[2 * i] == RESUME) index = static_cast<long>(i);
    }
    Py_DECREF(bytes);
  } else {
    PyErr_Clear();
  }
  if (index >= 0) {
    compat::set_code_extra(reinterpret_cast<PyObject*>(code), g_resume_extra,
                           reinterpret_cast<void*>(static_cast<uintptr_t>(index) + 1));
  }
  return index;
}

// 3.11: a generator's or coroutine's run. The call that creates one runs only
// its RETURN_GENERATOR and is not an event; a run that starts before RESUME 0
// is its start (a throw into it is a resume, as sys.monitoring's PY_THROW),
// any other a resume; after it, its state tells a yield from a return.
PyObject* run_generator(PyThreadState* ts, struct _PyInterpreterFrame* f, PyCodeObject* code,
                        int throwflag, WindowFlag& w, int depth) {
  PyObject* gen = mlprof_frame_generator(f);
  if (!gen) return run(ts, f, throwflag, depth, w);
  const HookFrame hf{reinterpret_cast<uintptr_t>(gen), f};
  const long resume = first_resume(code);
  const bool first = !throwflag && resume >= 0 && mlprof_frame_lasti(f) < resume;
  if (first) {
    report(ts, hf, [&](const Site& site) { on_start(site, code, depth, nullptr); });
  } else {
    report(ts, hf, [&](const Site& site) { on_resume(site, code, depth, nullptr, true); });
  }
  PyObject* result = run(ts, f, throwflag, depth, w);
  if (taken_over()) {
    // reported by the profile function
  } else if (!result) {
    report(ts, hf, [&](const Site& site) { on_return(site, code, depth, true, nullptr); });
  } else if (mlprof_generator_state(gen) < 0) {  // suspended: a yield or an await
    report(ts, hf, [&](const Site& site) { on_yield(site, code, depth, nullptr); });
  } else {
    report(ts, hf, [&](const Site& site) { on_return(site, code, depth, false, result); });
  }
  return result;
}
#endif

PyObject* evaluate(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag, WindowFlag& w) {
  // tracing: a callback or one of our events runs this frame (not reported).
  // Another mechanism reports every frame now: just run it (and take this out).
  if (every_frame_reported()) {
    sync_hook(ts);
    return pass_through(ts, f, throwflag, w);
  }
  if (ts->tracing || !w.live()) {
    // Another thread's window keeps this function installed: this thread's
    // frames pass through it, each a C level.
    if (!g_aside && c_stack_at_risk(ts, w)) step_aside(stack_risk(ts, w));
    return pass_through(ts, f, throwflag, w);
  }
  PyCodeObject* code = mlprof_frame_code(f);
  const int depth = depth_of_new_frame(ts, w);
  const bool generator = code && compat::is_generator_code(code);
  // Counted as skipped: a frame's start, not a generator's creation call
  // (no event elsewhere); 3.12+ leaves a generator's runs to sys.monitoring,
  // which counts them where it watches their code.
  const bool count = !generator || (!MLPROF_HAS_MONITORING && mlprof_frame_generator(f) != nullptr);
  // 3.11: a suspended span may resume below, so the function stays in there.
  const bool keep = !MLPROF_HAS_MONITORING && current_lanes_keep_hook();
  // Whether this thread (its context may have changed since its last event)
  // wants the callees of its current frame and, the common case at the
  // ceiling, whether this one would be below it everywhere (3.11: not a
  // generator's run while a suspended span may be resumed by it).
  const Callee callee =
      classify_callee(ts, current_depth(ts, w), depth, code && (!generator || !keep), count);
  if (callee == Callee::kNotWanted) {
    set_window(w, ts, false);
    return run(ts, f, throwflag, depth, w);
  }
  if (callee == Callee::kNotHere) {  // the event loop's own frames, between task steps
    if (c_stack_at_risk(ts, w)) step_aside(stack_risk(ts, w));
    return run(ts, f, throwflag, depth, w);
  }
  const bool below = callee == Callee::kBelow;
  if (below && !keep) {
#if MLPROF_HAS_MONITORING
    if (w.ceiling.frame && w.ceiling.frame == mlprof_current_frame(ts)) {
      return run_under_ceiling(ts, f, throwflag, depth, w);
    }
    return run_below(ts, f, throwflag, depth, w);
#else
    // 3.11: the caller is a frame at the ceiling (its window is open and its
    // callees are below). Its teardown (the finalizers of its locals) runs
    // after this function returns from its run, in its caller's window, so
    // its window closes at its first call, for the rest of its run. Not
    // where C calls are captured: the profile function counts their frame
    // depth from the frames this function ran, so it must see each callee.
    if (!current_lanes_want_c_calls()) return run_closing(ts, f, throwflag, depth, w);
    return run_below(ts, f, throwflag, depth, w);
#endif
  }
  // A frame run here and not taken out below adds a C level that stays while
  // its callees run: the guard comes before it.
  if (c_stack_at_risk(ts, w)) {
    step_aside(stack_risk(ts, w));
    return run(ts, f, throwflag, depth, w);
  }
  if (below || !code) return run(ts, f, throwflag, depth, w);
#if PY_VERSION_HEX >= 0x030C0000
  if (generator) {
    watch_generator_code(code);  // sys.monitoring reports its frames wherever they run
    return run(ts, f, throwflag, depth, w);
  }
  return run_plain(ts, f, code, throwflag, w, depth);
#else
  return generator ? run_generator(ts, f, code, throwflag, w, depth)
                   : run_plain(ts, f, code, throwflag, w, depth);
#endif
}

// The interpreter's frame evaluation function while ours is installed. A C++
// exception (out of memory) must not go on through the interpreter (that
// ends the process): the sessions stop, and the frame runs, or what its run
// returned is returned, once.
PyObject* eval_frame(PyThreadState* ts, struct _PyInterpreterFrame* f, int throwflag) {
  WindowFlag& w = window_flag();
  Outcome o;
  Outcome* const outer = w.outcome;
  const Ceiling ceiling = w.ceiling;
  w.outcome = &o;
  try {
    PyObject* result = evaluate(ts, f, throwflag, w);
    w.outcome = outer;
    return result;
  } catch (abi::__forced_unwind&) {  // the thread ends (engine.h, guarded)
    w.outcome = outer;
    throw;
  } catch (...) {
    w.outcome = outer;
    w.ceiling = ceiling;
    hook_failed();
    return o.ran ? o.result : _PyEval_EvalFrameDefault(ts, f, throwflag);
  }
}

}  // namespace

void set_window(bool open) { set_window(window_flag(), compat::tstate(), open); }

State state() {
  State s{};
  s.eval_installed =
      g_ours && _PyInterpreterState_GetEvalFrameFunc(compat::tstate()->interp) == eval_frame;
  s.window_threads = window_threads();
  s.global_frames = every_frame_reported();
  s.stepped_aside = g_aside;
  return s;
}

namespace eval {

void sync() { sync_hook(); }

#if MLPROF_HAS_MONITORING
bool ceiling_returns(PyThreadState* ts) {
  WindowFlag& w = window_flag();
  if (!w.ceiling.closed || w.ceiling.frame != mlprof_current_frame(ts)) return false;
  w.ceiling.closed = false;
  set_window(w, ts, true);  // as it would be had the window stayed open
  return true;
}
#endif

bool available() {
  if (g_ours) return true;
  return _PyInterpreterState_GetEvalFrameFunc(compat::tstate()->interp) == _PyEval_EvalFrameDefault;
}

bool stepped_aside(std::string* why) {
  if (why) *why = g_aside_why;
  return g_aside;
}

void all_sessions_ended() {
  g_windows.store((window_epoch() + 1) << kEpochShift, std::memory_order_relaxed);
  g_aside = false;
  g_aside_why.clear();
  g_unavailable = false;
  sync_hook();
}

#if PY_VERSION_HEX < 0x030C0000
int frame_depth() { return current_depth(nullptr, window_flag()); }

int entering_frame_depth(int levels_above) {
  // The profiler's own frames on top (activate, __enter__) may have been run
  // by this function (an outer session's window): those are not the entering
  // frame's level.
  const std::vector<Run>& t_runs = window_flag().runs;
  size_t k = 0;
  struct _PyInterpreterFrame* cur = mlprof_current_frame(compat::tstate());
  for (int i = 0; i < levels_above && cur; ++i) {
    if (k < t_runs.size() && t_runs[t_runs.size() - 1 - k].frame == cur) ++k;
    cur = mlprof_frame_previous(cur);
  }
  return t_runs.size() > k ? t_runs[t_runs.size() - 1 - k].depth : 0;
}
#else
int frame_depth() { return 0; }
int entering_frame_depth(int) { return 0; }
#endif

}  // namespace eval

}  // namespace mlprof::capture

#endif
