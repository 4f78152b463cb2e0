// sys.monitoring (PEP 669, 3.12+): the frames of generators and coroutines
// reached within a ceiling, through local events on their code (a
// generator's resume may come from anywhere, below the ceiling too, so the
// frame evaluation hook, which sees only windows, cannot report them); C
// calls, through local events on the code of frames whose callees are within
// the ceiling; and every frame through global events at unlimited depth or
// when the hook cannot run.
//
// Also PY_RETURN on the code of frames recorded at the ceiling whose calls
// run without the frame evaluation hook (eval_frame.cpp, "closed ceilings"):
// the return, which comes before the frame's teardown, puts the hook back in
// for the finalizers the teardown runs.
//
// Switching global events on or off makes every function re-check its
// instrumentation when it next runs (3.12: +125 ns for each distinct function,
// bench/RESULTS.md), and so does freeing a tool id on 3.14+. Local events do
// not. The tool id is held while sessions collect and need it, with PY_UNWIND
// and PY_THROW on once a generator is watched (a generator's throw and its
// exit by an exception, which cannot be local events; 3.14 reports a close
// that runs no code only through them), and freed with our local events when
// the last session ends, so that a program may take that id itself
// afterwards. Autoprofile keeps it between its
// sessions (keep_between_sessions), so that sampled requests pay for no
// switch: local events stay on their code, the callbacks return at once with
// no session, and a code whose events keep coming with no session is let go
// (DISABLE) until a session reaches it again.

#include <string>

#include "../engine.h"
#include "../py_util.h"
#include "frame_access.h"
#include "mechanisms.h"

#if MLPROF_HAS_MONITORING

namespace mlprof::capture {
namespace {

PyObject* g_monitoring = nullptr;  // the sys.monitoring module
PyObject* g_disable = nullptr;     // sys.monitoring.DISABLE
PyObject* g_tool_name = nullptr;   // "mlflow-profiler"
int g_tool = -1;
bool g_keep = false;  // autoprofile: hold the id (and our local events) between sessions
std::vector<PyObject*> g_watched;  // code objects we set local events on (strong references)
bool g_registered = false;         // events applied since the id was claimed
long g_callbacks_on = 0;           // the events whose callback is ours (registered when first set)
bool g_global_frames = false, g_global_c = false;
bool g_unwind = false;  // PY_UNWIND and PY_THROW on: a generator is watched

// An event's bit in sys.monitoring.events (`events`), read once.
long ev(PyObject* events, const char* name) {
  PyObject* v = PyObject_GetAttrString(events, name);
  long bit = v ? PyLong_AsLong(v) : -1;
  Py_XDECREF(v);
  if (bit < 0) PyErr_Clear();
  return bit < 0 ? 0 : bit;
}
long kPyStart, kPyResume, kPyReturn, kPyYield, kPyUnwind, kPyThrow, kCall, kCReturn, kCRaise;
long kGenerator, kCCalls, kUnwind;

// Per code, in a PEP 523 extra slot: which local events we set on it
// (kWatch*), whether a DISABLE let them go for want of a session, whether its
// returns were given up on (kNoReturns), the claim of the tool id they were
// set under (a tool that frees our id takes them away; 3.14+ clears them),
// and the events it sent for nothing since (with no session, or the return
// of a frame that is not a closed ceiling).
Py_ssize_t g_watch_extra = -1;
constexpr uintptr_t kWatchGenerator = 1, kWatchCCalls = 2, kDisabledBit = 4, kWatchCalls = 8;
constexpr uintptr_t kWatchReturns = 16, kNoReturns = 32;
constexpr uintptr_t kWatchAny = kWatchGenerator | kWatchCCalls | kWatchCalls | kWatchReturns;
constexpr unsigned kClaimShift = 6, kIdleShift = 14, kCeilingShift = 24;
constexpr uintptr_t kClaimMask = uintptr_t{0xff} << kClaimShift;
constexpr uintptr_t kIdleLimit = 256;  // events for nothing before a code is let go
constexpr uintptr_t kIdleMask = uintptr_t{0x3ff} << kIdleShift;      // events for nothing
constexpr uintptr_t kCeilingMask = uintptr_t{0xf} << kCeilingShift;  // calls made at the ceiling
uintptr_t g_claim = 0;  // bumped at each claim of a tool id

inline uintptr_t watch_state(PyCodeObject* code) {
  if (g_watch_extra < 0) return 0;
  const auto v = reinterpret_cast<uintptr_t>(compat::code_extra(code, g_watch_extra));
  return ((v & kClaimMask) >> kClaimShift) == (g_claim & 0xff)
             ? v
             : 0;  // an older claim's events are gone
}
inline void set_watch_state(PyCodeObject* code, uintptr_t v) {
  v = (v & ~kClaimMask) | ((g_claim & 0xff) << kClaimShift);
  if (compat::set_code_extra(reinterpret_cast<PyObject*>(code), g_watch_extra,
                             reinterpret_cast<void*>(v)) < 0) {
    PyErr_Clear();
  }
}

long events_of(uintptr_t watched);  // the sys.monitoring events of kWatch* bits
bool register_callbacks(long mask, std::string* error);  // ours, for the events of mask
void want_unwind();         // PY_UNWIND and PY_THROW on, for generators
bool claim_for_sessions();  // monitoring::acquire, and on failure the sessions stop
void fail_sessions(const std::string& error);  // the collecting sessions stop recording

// sys.monitoring's functions, looked up once and called by vectorcall: a
// session that needs the tool id claims and frees it, and
// PyObject_CallMethod's lookup and format parsing were half of that.
enum MonFn {
  kUseToolId,
  kFreeToolId,
  kGetTool,
  kRegisterCallback,
  kSetEvents,
  kSetLocalEvents,
  kMonFns
};
const char* const g_fn_names[kMonFns] = {"use_tool_id",       "free_tool_id", "get_tool",
                                         "register_callback", "set_events",   "set_local_events"};
PyObject* g_fns[kMonFns] = {};

// sys.monitoring.<fn>(tool, a, b) with a, b borrowed (b, or both, may be
// null): a new reference, or null with an exception set.
PyObject* mon(MonFn fn, long tool, PyObject* a = nullptr, PyObject* b = nullptr) {
  PyObject* t = PyLong_FromLong(tool);
  if (!t) return nullptr;
  PyObject* args[3] = {t, a, b};
  PyObject* r = PyObject_Vectorcall(g_fns[fn], args, a ? (b ? 3 : 2) : 1, nullptr);
  Py_DECREF(t);
  return r;
}
PyObject* mon(MonFn fn, long tool, long v, PyObject* b = nullptr) {
  PyObject* o = PyLong_FromLong(v);
  if (!o) return nullptr;
  PyObject* r = mon(fn, tool, o, b);
  Py_DECREF(o);
  return r;
}

void set_local(PyCodeObject* code, long mask) {
  compat::PendingError pending;
  std::string error;
  if (!register_callbacks(mask, &error)) {  // an audit hook may refuse it
    fail_sessions(error);
    return;
  }
  PyObject* m = PyLong_FromLong(mask);
  PyObject* r = m ? mon(kSetLocalEvents, g_tool, reinterpret_cast<PyObject*>(code), m) : nullptr;
  Py_XDECREF(m);
  if (r) {
    Py_DECREF(r);
  } else {
    PyErr_Clear();  // a code object that cannot be instrumented: its frames stay unseen
  }
}

// Adds the events of `bits` (kWatch*) to those of `code`, and re-arms events
// a DISABLE took away. Claims a tool id the first time a session needs one.
void watch_now(PyCodeObject* code, uintptr_t bits) {
  if (!code) return;
  if (g_tool < 0 && !claim_for_sessions()) return;
  if ((bits & kWatchGenerator) && !g_unwind) want_unwind();
  const uintptr_t state = watch_state(code);
  const uintptr_t have = state & kWatchAny;
  const bool disabled = state & kDisabledBit;
  if ((have & bits) == bits && !disabled) {
    if (state & kIdleMask) set_watch_state(code, have | (state & kNoReturns));  // in use again
    return;
  }
  // Clearing and setting again re-arms disabled locations: after a DISABLE
  // for want of a session, and CALL places let go while only watch_calls
  // wanted them, once their C calls are wanted.
  if (disabled || ((have & kWatchCalls) && (bits & kWatchCCalls))) set_local(code, 0);
  set_local(code, events_of(have | bits));
  if (!have) {
    Py_INCREF(code);
    g_watched.push_back(reinterpret_cast<PyObject*>(code));
  }
  set_watch_state(code, (have | bits) | (state & kNoReturns));
}
// Guarded: 3.13's quick path calls it (watch_calls), and it is not.
void watch(PyCodeObject* code, uintptr_t bits) {
  guarded([&] { watch_now(code, bits); });
}

// Counts one more event `code` (in `state`) sent for nothing. True once
// kIdleLimit is reached: the caller then lets something go.
bool limit_for_nothing(PyCodeObject* code, uintptr_t state) {
  const uintptr_t n = ((state & kIdleMask) >> kIdleShift) + 1;
  if (n >= kIdleLimit) return true;
  set_watch_state(code, (state & (kWatchAny | kDisabledBit | kNoReturns)) | (n << kIdleShift));
  return false;
}

// A PY_RETURN of a code watched for closed ceilings that was not one (its
// frames run below the ceiling too: a recursion): after kIdleLimit of them
// its returns are given up, and its frames at the ceiling keep the hook in.
[[gnu::noinline]] void return_for_nothing_unguarded(PyCodeObject* code) {
  const uintptr_t state = watch_state(code);
  if (!(state & kWatchReturns) || !limit_for_nothing(code, state)) return;
  const uintptr_t have = state & kWatchAny & ~kWatchReturns;
  set_local(code, events_of(have));
  set_watch_state(code, have | (state & kDisabledBit) | kNoReturns);
}
[[gnu::noinline]] void return_for_nothing(PyCodeObject* code) {
  guarded([&] { return_for_nothing_unguarded(code); });
}

inline PyCodeObject* as_code(PyObject* o) {
  return PyCode_Check(o) ? reinterpret_cast<PyCodeObject*>(o) : nullptr;
}

inline int depth_of(PyThreadState* ts) {
  return ts->py_recursion_limit - ts->py_recursion_remaining;
}

// With no session collecting: the callback returns at once, and a code that
// keeps sending events is let go. `local_event`: DISABLE may be returned
// (PY_START, PY_RESUME, PY_RETURN, PY_YIELD, CALL; not C_RETURN or C_RAISE,
// for which CPython would remove the callback instead).
[[gnu::noinline]] PyObject* idle(PyObject* code_obj, bool local_event) {
  PyCodeObject* code = as_code(code_obj);
  if (code && local_event && g_watch_extra >= 0) {
    const uintptr_t state = watch_state(code);
    if ((state & (kWatchAny | kDisabledBit)) && limit_for_nothing(code, state)) {
      set_watch_state(code, (state & (kWatchAny | kDisabledBit | kNoReturns)) | kDisabledBit);
      Py_INCREF(g_disable);
      return g_disable;  // this event at this place stops reaching us
    }
  }
  Py_RETURN_NONE;
}

// The frame the event is about is the thread's current one: described to the
// engine (generator identity, locals) without making a frame object.
struct Described {
  HookFrame hf;
  Site site;
  int depth;
  explicit Described(PyCodeObject* code) : site{compat::tstate(), &hf}, depth(depth_of(site.ts)) {
    struct _PyInterpreterFrame* f = mlprof_current_frame(site.ts);
    hf.frame = f;
    hf.generator = f && compat::is_generator_code(code)
                       ? reinterpret_cast<uintptr_t>(mlprof_frame_generator(f))
                       : 0;
  }
};
// A C call event: about the callable, not a frame.
struct Plain {
  Site site{compat::tstate()};
  int depth = depth_of(site.ts);
};

// The full path of PY_START and PY_RETURN, apart: cb_start and cb_return
// are flattened, and only the quick path belongs inlined in them.
[[gnu::noinline]] void start_in_full(PyCodeObject* c) {
  guarded([&] {
    const Described d(c);
    on_start(d.site, c, d.depth, nullptr);
  });
}
[[gnu::noinline]] void return_in_full(PyCodeObject* c, PyObject* retval) {
  guarded([&] {
    const Described d(c);
    on_return(d.site, c, d.depth, false, retval);
  });
}

// Callbacks (called by vectorcall, below). They never raise.
[[gnu::flatten]] PyObject* cb_start(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs < 1) Py_RETURN_NONE;
  if (!g_native_collecting) return idle(args[0], true);
  if (PyCodeObject* c = as_code(args[0])) {
    if (g_global_frames) {
      PyThreadState* ts = compat::tstate();
      const int depth = depth_of(ts);
      if (quick_start(ts, c, depth) || quick_below(ts, c, depth)) Py_RETURN_NONE;
    }
    start_in_full(c);
  }
  Py_RETURN_NONE;
}
[[gnu::noinline]] void resume_in_full(PyCodeObject* c) {
  guarded([&] {
    const Described d(c);
    on_resume(d.site, c, d.depth, nullptr, /*continued=*/true);
  });
}
[[gnu::noinline]] void yield_in_full(PyCodeObject* c) {
  guarded([&] {
    const Described d(c);
    on_yield(d.site, c, d.depth, nullptr);
  });
}

[[gnu::flatten]] PyObject* cb_resume(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs < 1) Py_RETURN_NONE;
  if (!g_native_collecting) return idle(args[0], true);
  if (PyCodeObject* c = as_code(args[0])) {
    PyThreadState* ts = compat::tstate();
    struct _PyInterpreterFrame* f = mlprof_current_frame(ts);
    const auto generator = f && compat::is_generator_code(c)
                               ? reinterpret_cast<uintptr_t>(mlprof_frame_generator(f))
                               : 0;
    if (quick_resume(ts, c, depth_of(ts), generator)) Py_RETURN_NONE;
    resume_in_full(c);
  }
  Py_RETURN_NONE;
}
PyObject* cb_throw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {  // a throw() resumes
  ++g_events;
  if (nargs >= 1 && g_native_collecting) {
    if (PyCodeObject* c = as_code(args[0])) {
      const Described d(c);
      on_resume(d.site, c, d.depth, nullptr, true);
    }
  }
  Py_RETURN_NONE;
}
[[gnu::flatten]] PyObject* cb_return(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs < 1) Py_RETURN_NONE;
  if (!g_native_collecting) return idle(args[0], true);
  // PY_RETURN(code, instruction_offset, retval)
  if (PyCodeObject* c = as_code(args[0])) {
    if (!g_global_frames && !compat::is_generator_code(c)) {
      // A plain frame's return comes only for closed ceilings; the frame
      // evaluation function reports the frame's end itself.
      if (!eval::ceiling_returns(compat::tstate())) return_for_nothing(c);
      Py_RETURN_NONE;
    }
    if (g_global_frames) {
      PyThreadState* ts = compat::tstate();
      const int depth = depth_of(ts);
      if (quick_return(ts, c, depth, false) || quick_unheld_return(ts, c, depth)) Py_RETURN_NONE;
    }
    return_in_full(c, nargs >= 3 ? args[2] : nullptr);
  }
  Py_RETURN_NONE;
}
PyObject* cb_unwind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs >= 1 && g_native_collecting) {
    if (PyCodeObject* c = as_code(args[0])) {
      if (!g_global_frames) {
        eval::ceiling_returns(compat::tstate());
      } else {
        PyThreadState* ts = compat::tstate();
        const int depth = depth_of(ts);
        if (quick_return(ts, c, depth, true) || quick_unheld_return(ts, c, depth)) Py_RETURN_NONE;
      }
      const Described d(c);
      on_return(d.site, c, d.depth, true, nullptr);
    }
  }
  Py_RETURN_NONE;
}
[[gnu::flatten]] PyObject* cb_yield(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs < 1) Py_RETURN_NONE;
  if (!g_native_collecting) return idle(args[0], true);
  if (PyCodeObject* c = as_code(args[0])) {
    PyThreadState* ts = compat::tstate();
    if (quick_yield(ts, c, depth_of(ts))) Py_RETURN_NONE;
    yield_in_full(c);
  }
  Py_RETURN_NONE;
}

inline bool is_python_callable(PyObject* f) {
  if (PyFunction_Check(f)) return true;
  return PyMethod_Check(f) && PyFunction_Check(PyMethod_GET_FUNCTION(f));
}
PyObject* cb_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs < 3) Py_RETURN_NONE;
  if (!g_native_collecting) return idle(args[0], true);
  // CALL fires for every call; C_RETURN/C_RAISE only for callables that are
  // not plain Python functions, so only those open a C span. Outside 3.13
  // CALL events come only from watch_c_calls; on 3.13 also from watch_calls,
  // which keeps calls of classes unspecialized: in code watched only for
  // that, a place that calls anything but a class is let go at its first call.
  const bool c_calls = !kUnspecializeCalls || (watch_state(as_code(args[0])) & kWatchCCalls);
  if (c_calls && !is_python_callable(args[2])) {
    const Plain p;
    on_c_call(p.site, args[2], as_code(args[0]), p.depth);
  }
  if (!c_calls && !PyType_Check(args[2])) {
    Py_INCREF(g_disable);
    return g_disable;
  }
  Py_RETURN_NONE;
}
PyObject* cb_c_return(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs < 3) Py_RETURN_NONE;
  // C_RETURN cannot be disabled (CPython would drop the callback): its CALL is.
  if (!g_native_collecting) return idle(args[0], false);
  const Plain p;
  on_c_return(p.site, args[2], p.depth, false);
  Py_RETURN_NONE;
}
PyObject* cb_c_raise(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_events;
  if (nargs >= 3 && g_native_collecting) {
    const Plain p;
    on_c_return(p.site, args[2], p.depth, true);
  }
  Py_RETURN_NONE;
}

// Our callback objects: called by sys.monitoring through vectorcall straight
// into the function above. A builtin function object would pass each event
// through cfunction_vectorcall_FASTCALL first (its C recursion check: ~20
// instructions an event, 5% of a full capture's cost on 3.12).
using Fn = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t);
struct Callback {
  PyObject_HEAD vectorcallfunc call;
};
// Guarded (engine.h) but for the four callbacks of every Python call, whose
// quick paths do not throw and whose full paths guard themselves: a try here
// cost about 13 instructions a call.
template <Fn F, bool kGuarded = true>
PyObject* vectorcall(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  if constexpr (!kGuarded) {
    return F(nullptr, args, PyVectorcall_NARGS(nargsf));
  } else {
    try {
      return F(nullptr, args, PyVectorcall_NARGS(nargsf));
    } catch (abi::__forced_unwind&) {
      throw;
    } catch (...) {
      hook_failed();
      Py_RETURN_NONE;
    }
  }
}
PyMemberDef g_callback_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(Callback, call), Py_READONLY, nullptr}, {}};
PyType_Slot g_callback_slots[] = {{Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                                  {Py_tp_members, g_callback_members},
                                  {0, nullptr}};
PyType_Spec g_callback_spec = {"mlflow_profiler._core.MonitoringCallback", sizeof(Callback), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, g_callback_slots};

constexpr vectorcallfunc g_fns_by_event[] = {
    vectorcall<cb_start, false>,  vectorcall<cb_resume, false>, vectorcall<cb_throw>,
    vectorcall<cb_return, false>, vectorcall<cb_unwind>,        vectorcall<cb_yield, false>,
    vectorcall<cb_call>,          vectorcall<cb_c_return>,      vectorcall<cb_c_raise>};
constexpr size_t kCallbacks = sizeof(g_fns_by_event) / sizeof(g_fns_by_event[0]);
// Event names in sys.monitoring.events, in g_fns_by_event order; their bits
// and our callback objects, made once.
const char* g_names[kCallbacks] = {"PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_UNWIND",
                                   "PY_YIELD", "CALL",      "C_RETURN", "C_RAISE"};
long g_bits[kCallbacks] = {};
PyObject* g_callbacks[kCallbacks] = {};

// Frees the id we hold, removing our callbacks first (3.12 and 3.13 leave
// them to the id's next holder).
void free_tool() {
  for (long bit : g_bits) {
    if (!(bit & g_callbacks_on)) continue;
    PyObject* r = mon(kRegisterCallback, g_tool, bit, Py_None);
    Py_XDECREF(r);
    PyErr_Clear();
  }
  PyObject* r = mon(kFreeToolId, g_tool);
  Py_XDECREF(r);
  PyErr_Clear();
  g_tool = -1;
  g_registered = false;
  g_callbacks_on = 0;
}

bool set_events(long mask, std::string* error) {
  PyObject* r = mon(kSetEvents, g_tool, mask);
  if (!r) {
    if (error) *error = pyutil::take_error_message();
    PyErr_Clear();
    return false;
  }
  Py_DECREF(r);
  return true;
}

// Registers our callback for each event of `mask` that lacks it. Only the
// events a session sets: each registration (and its removal at release) is a
// call with an audit event, and a 3.13 session that watches one code's calls
// needs one callback of nine.
bool register_callbacks(long mask, std::string* error) {
  if (!(mask & ~g_callbacks_on)) return true;
  for (size_t i = 0; i < kCallbacks; ++i) {
    if (!(g_bits[i] & mask) || (g_bits[i] & g_callbacks_on)) continue;
    PyObject* r = mon(kRegisterCallback, g_tool, g_bits[i], g_callbacks[i]);
    if (!r) {
      if (error) *error = pyutil::take_error_message();
      PyErr_Clear();
      return false;
    }
    Py_DECREF(r);
    g_callbacks_on |= g_bits[i];
  }
  return true;
}

[[gnu::cold, gnu::noinline]] bool claim(std::string* error) {
  // 4 and 3 have no standard user: holding one blocks no debugger (0),
  // coverage (1), profiler (2, cProfile) or optimizer (5) started meanwhile.
  const int order[] = {4, 3, 5, 2, 1, 0};
  for (int id : order) {
    PyObject* r = mon(kUseToolId, id, g_tool_name);
    if (r) {
      Py_DECREF(r);
      g_tool = id;
      ++g_claim;
      return true;
    }
    PyErr_Clear();
  }
  *error = "every sys.monitoring tool id (0-5) is taken by other tools";
  return false;
}

// Whether the id we hold is still ours (a tool may free or clear it).
bool still_ours() {
  PyObject* name = mon(kGetTool, g_tool);
  const bool ours = name && PyUnicode_Check(name) && PyUnicode_Compare(name, g_tool_name) == 0;
  Py_XDECREF(name);
  PyErr_Clear();
  return ours;
}

bool apply_events(std::string* error) {
  long mask = g_unwind || g_global_frames ? kUnwind : 0;
  if (g_global_frames) mask |= kPyStart | kPyResume | kPyReturn | kPyYield;
  if (g_global_c) mask |= kCCalls;
  return register_callbacks(mask, error) && set_events(mask, error);
}

bool claim_for_sessions() {
  if (g_native_collecting == 0) return false;
  std::string error;
  if (monitoring::acquire(&error)) return true;
  fail_sessions(error);
  return false;
}

// A frame the hook misses puts the window out of step with the stack: the
// tree would be wrong, so the sessions stop with the reason instead.
void fail_sessions(const std::string& error) {
  for (Engine* e : collecting_engines()) e->fail("could not install the profiling hook: " + error);
}

long events_of(uintptr_t watched) {
  return ((watched & kWatchGenerator) ? kGenerator : 0) | ((watched & kWatchCCalls) ? kCCalls : 0) |
         ((watched & kWatchCalls) ? kCall : 0) | ((watched & kWatchReturns) ? kPyReturn : 0);
}

void want_unwind() {
  g_unwind = true;
  std::string error;
  if (!apply_events(&error)) fail_sessions(error);
}

// sys.monitoring.<name> as the interpreter made it (a new reference), or
// null with an exception set. A tool may have replaced it with Python code:
// called from inside our hook, that code's frames would reach the hook as
// the program's (a ceiling frame's calls: a recursion without end, the C
// stack overflowed), so a wrapper is followed to what it wraps
// (functools.wraps' __wrapped__), and anything else is refused. Only Python
// functions are followed: their attributes are their __dict__'s, so no code
// runs here (load() may run inside the hook, when an earlier one failed).
PyObject* interpreters_own(const char* name) {
  PyObject* f = PyObject_GetAttrString(g_monitoring, name);
  for (int hops = 0; f && hops < 8 && PyFunction_Check(f); ++hops) {
    PyObject* inner = PyObject_GetAttrString(f, "__wrapped__");
    Py_DECREF(f);
    f = inner;
  }
  if (f && PyCFunction_Check(f) && PyCFunction_GET_SELF(f) == g_monitoring) return f;
  Py_XDECREF(f);
  PyErr_Clear();
  PyErr_Format(PyExc_RuntimeError,
               "sys.monitoring.%s is not the interpreter's own function (another tool replaced "
               "it), so the profiler does not call it",
               name);
  return nullptr;
}

// sys.monitoring's functions, event bits and our callback objects, looked
// up once per process (at import: a session's claim then makes no lookup).
[[gnu::cold, gnu::noinline]] bool load(std::string* error) {
  if (g_monitoring) return true;
  auto fail = [&]() {
    *error = pyutil::take_error_message();
    Py_CLEAR(g_monitoring);  // tried again next time
    return false;
  };
  PyObject* sys = PyImport_ImportModule("sys");
  g_monitoring = sys ? PyObject_GetAttrString(sys, "monitoring") : nullptr;
  Py_XDECREF(sys);
  if (g_monitoring && !PyModule_Check(g_monitoring)) {  // replaced: see interpreters_own
    PyErr_SetString(PyExc_RuntimeError,
                    "sys.monitoring is not the interpreter's own namespace (another tool replaced "
                    "it), so the profiler does not use it");
    return fail();
  }
  // XSETREF: a try after a failed one holds the earlier one's references.
  Py_XSETREF(g_disable, g_monitoring ? PyObject_GetAttrString(g_monitoring, "DISABLE") : nullptr);
  if (!g_monitoring || !g_disable) return fail();
  for (int i = 0; i < kMonFns; ++i) {
    Py_XSETREF(g_fns[i], interpreters_own(g_fn_names[i]));
    if (!g_fns[i]) return fail();
  }
  Py_XSETREF(g_tool_name, PyUnicode_InternFromString("mlflow-profiler"));
  if (!g_tool_name) return fail();
  PyObject* events = PyObject_GetAttrString(g_monitoring, "events");
  if (!events) return fail();
  for (size_t i = 0; i < kCallbacks; ++i) g_bits[i] = ev(events, g_names[i]);
  Py_DECREF(events);
  PyObject* type = PyType_FromSpec(&g_callback_spec);
  if (!type) return fail();
  for (size_t i = 0; i < kCallbacks; ++i) {
    auto* cb = PyObject_New(Callback, reinterpret_cast<PyTypeObject*>(type));
    if (!cb) {
      Py_DECREF(type);
      return fail();
    }
    cb->call = g_fns_by_event[i];
    g_callbacks[i] = reinterpret_cast<PyObject*>(cb);
  }
  Py_DECREF(type);  // each callback holds its (heap) type
  kPyStart = g_bits[0], kPyResume = g_bits[1], kPyThrow = g_bits[2], kPyReturn = g_bits[3];
  kPyUnwind = g_bits[4], kPyYield = g_bits[5], kCall = g_bits[6], kCReturn = g_bits[7],
  kCRaise = g_bits[8];
  kGenerator = kPyStart | kPyResume | kPyReturn | kPyYield;
  kCCalls = kCall | kCReturn | kCRaise;
  kUnwind = kPyUnwind | kPyThrow;
  g_watch_extra = compat::request_code_extra_index();
  return true;
}

}  // namespace

namespace monitoring {

void prepare() {
  compat::PendingError pending;
  std::string ignored;  // acquire tries again, and says why
  load(&ignored);
}

[[gnu::cold, gnu::noinline]] bool acquire(std::string* error) {
  compat::PendingError pending;
  if (!load(error)) return false;
  if (g_tool >= 0 && !still_ours()) {
    // Another tool freed or cleared our id: our local events went with it.
    g_tool = -1;
  }
  if (g_tool < 0) {
    if (!claim(error)) return false;
    g_registered = false;
    g_callbacks_on = 0;
  }
  if (!g_registered) {
    if (!apply_events(error)) {
      free_tool();
      return false;
    }
    g_registered = true;
  }
  return true;
}

void release(bool force) {
  if (g_tool < 0 || (g_keep && !force)) return;
  compat::PendingError pending;
  for (PyObject* code : g_watched) {
    set_local(reinterpret_cast<PyCodeObject*>(code), 0);
    Py_DECREF(code);
  }
  g_watched.clear();
  g_global_frames = g_global_c = g_unwind = false;
  set_events(0, nullptr);
  free_tool();
  ++g_claim;  // what we set is gone
}

void keep_between_sessions(bool keep) {
  g_keep = keep;
  if (!keep && g_native_collecting == 0) release(false);
}

[[gnu::cold, gnu::noinline]] bool set_global(bool frames, bool c_calls, std::string* error) {
  if (g_tool < 0) {
    if (error) *error = "no sys.monitoring tool id";
    return false;
  }
  if (frames == g_global_frames && c_calls == g_global_c) return true;
  compat::PendingError pending;
  g_global_frames = frames;
  g_global_c = c_calls;
  return apply_events(error);
}

bool global_frames() { return g_global_frames; }

bool holding() { return g_tool >= 0; }

void watch_running_generators() {
  // The interpreter's frames, not frame objects: a server's stack is deep,
  // and making a frame object for each level would cost every session.
  for (struct _PyInterpreterFrame* f = mlprof_current_frame(compat::tstate()); f;
       f = mlprof_frame_previous(f)) {
    if (PyCodeObject* code = mlprof_frame_code(f); code && mlprof_frame_generator(f))
      watch(code, kWatchGenerator);
  }
}

}  // namespace monitoring

void watch_generator_code(PyCodeObject* code) { watch(code, kWatchGenerator); }

void watch_c_calls(PyCodeObject* code) { watch(code, kWatchCCalls); }

void watch_calls(PyCodeObject* code) { watch(code, kWatchCalls); }

namespace monitoring {
bool returns_watched(PyCodeObject* code) {
  return g_tool >= 0 &&
         (watch_state(code) & (kWatchReturns | kDisabledBit | kNoReturns)) == kWatchReturns;
}

bool ceiling_call(PyCodeObject* code, int close_after) {
  if (!code || g_watch_extra < 0) return false;
  const uintptr_t state = watch_state(code);
  if (state & kNoReturns) return false;
  const uintptr_t n = ((state & kCeilingMask) >> kCeilingShift) + 1;
  if (n < static_cast<uintptr_t>(close_after)) {
    set_watch_state(code, (state & ~kCeilingMask) | (n << kCeilingShift));
    return false;
  }
  return watch_returns(code);
}

bool watch_returns(PyCodeObject* code) {
  if (!code || g_native_collecting == 0) return false;
  if (g_tool < 0) {
    std::string ignored;  // no id for an optimization: the hook stays in
    if (!monitoring::acquire(&ignored)) return false;
  }
  if (watch_state(code) & kNoReturns) return false;
  watch(code, kWatchReturns);
  return returns_watched(code);
}
}  // namespace monitoring

int tool_id() { return g_tool; }

}  // namespace mlprof::capture

#endif
