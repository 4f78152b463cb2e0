// The hook paths side by side. 3.12 and 3.13: a PEP 523 frame evaluation
// function reports Python frames, sys.monitoring only C calls (or everything,
// when another frame evaluator holds the hook). 3.14+: sys.monitoring.
// 3.9-3.11: PyEval_SetProfile with a C function, and on 3.11 a frame
// evaluation function that runs frames below the ceiling untraced. All only
// translate interpreter events into engine.h's on_* calls.

#include <algorithm>
#include <string>
#include <vector>

#include "engine.h"

#if (PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000) || MLPROF_EVAL_TRACER
// The interpreter's _PyInterpreterFrame and generator layout, for the frame
// evaluation hook below (3.11: f_code; 3.12/3.13: owner, locals, globals).
#include <opcode.h>
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif
#define MLPROF_EVAL_HOOK ((PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000) || MLPROF_EVAL_TRACER)

namespace mlprof::hooks {
namespace {

std::string take_error() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string out = "unknown error";
  if (value) {
    PyObject* s = PyObject_Str(value);
    if (s) {
      const char* p = PyUnicode_AsUTF8(s);
      if (p) out = p;
      Py_DECREF(s);
    }
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return out;
}


uint64_t g_hook_events = 0;  // events delivered to our hook (GIL held)

#if MLPROF_EVAL_HOOK
// Each version's frame evaluation function (below).
PyObject* eval_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag);
int g_eval_users = 0;  // sessions using it (3.11: those with a ceiling)
bool g_eval_ours = false;

void eval_hook_acquire() {
  if (g_eval_users++ > 0) return;
  PyInterpreterState* interp = compat::tstate()->interp;
  // Another frame evaluator (torch.compile) keeps its place: 3.11 then traces
  // every frame, 3.12/3.13 take their events from sys.monitoring.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) == _PyEval_EvalFrameDefault) {
    _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame);
    g_eval_ours = true;
  }
}

void eval_hook_release() {
  if (g_eval_users == 0 || --g_eval_users > 0) return;
  PyInterpreterState* interp = compat::tstate()->interp;
  if (g_eval_ours && _PyInterpreterState_GetEvalFrameFunc(interp) == eval_frame) {
    _PyInterpreterState_SetEvalFrameFunc(interp, _PyEval_EvalFrameDefault);
  }
  g_eval_ours = false;
}
#endif

}  // namespace

uint64_t event_count() { return g_hook_events; }

#if MLPROF_HAS_MONITORING
// ---------------------------------------------------------------- 3.12+ ------

namespace {

int g_tool = -1;
int g_users = 0;
bool g_c_events = false;
PyObject* g_monitoring = nullptr;

inline PyCodeObject* as_code(PyObject* o) {
  return PyCode_Check(o) ? reinterpret_cast<PyCodeObject*>(o) : nullptr;
}

// Callbacks: never raise, never return sys.monitoring.DISABLE (that would
// switch the event off for every thread and tool user of this code).
PyObject* cb_start(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 1 && g_native_collecting) {
    if (PyCodeObject* c = as_code(args[0])) on_start(c, nullptr);
  }
  Py_RETURN_NONE;
}
PyObject* cb_resume(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 1 && g_native_collecting) {
    if (PyCodeObject* c = as_code(args[0])) on_resume(c, nullptr, /*continued=*/true);
  }
  Py_RETURN_NONE;
}
PyObject* cb_return(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 1 && g_native_collecting) {
    // PY_RETURN(code, instruction_offset, retval)
    if (PyCodeObject* c = as_code(args[0])) on_return(c, nullptr, false, nargs >= 3 ? args[2] : nullptr);
  }
  Py_RETURN_NONE;
}
PyObject* cb_unwind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 1 && g_native_collecting) {
    if (PyCodeObject* c = as_code(args[0])) on_return(c, nullptr, true, nullptr);
  }
  Py_RETURN_NONE;
}
PyObject* cb_yield(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 1 && g_native_collecting) {
    if (PyCodeObject* c = as_code(args[0])) on_yield(c, nullptr);
  }
  Py_RETURN_NONE;
}
#if MLPROF_EVAL_TRACER
// The innermost frame of this thread runs below every ceiling (eval_frame):
// the C-call events sys.monitoring sends from it are not the session's either.
thread_local bool t_skipped_run = false;
#else
constexpr bool t_skipped_run = false;
#endif

inline bool is_python_callable(PyObject* f) {
  if (PyFunction_Check(f)) return true;
  return PyMethod_Check(f) && PyFunction_Check(PyMethod_GET_FUNCTION(f));
}
PyObject* cb_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  // CALL fires for every call; C_RETURN/C_RAISE only for callables that are
  // not plain Python functions, so only those open a C span.
  if (nargs >= 3 && g_native_collecting && !t_skipped_run && !is_python_callable(args[2])) {
    on_c_call(args[2], as_code(args[0]));
  }
  Py_RETURN_NONE;
}
PyObject* cb_c_return(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 3 && g_native_collecting && !t_skipped_run) on_c_return(args[2], false);
  Py_RETURN_NONE;
}
PyObject* cb_c_raise(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 3 && g_native_collecting && !t_skipped_run) on_c_return(args[2], true);
  Py_RETURN_NONE;
}

#define MLPROF_CB(name) \
  {#name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(name)), METH_FASTCALL, nullptr}
PyMethodDef g_defs[] = {MLPROF_CB(cb_start),  MLPROF_CB(cb_resume),   MLPROF_CB(cb_return),
                        MLPROF_CB(cb_unwind), MLPROF_CB(cb_yield),    MLPROF_CB(cb_call),
                        MLPROF_CB(cb_c_return), MLPROF_CB(cb_c_raise)};
#undef MLPROF_CB
// Event names in sys.monitoring.events, in g_defs order (PY_THROW reuses cb_resume).
const char* g_events[] = {"PY_START", "PY_RESUME", "PY_RETURN", "PY_UNWIND",
                          "PY_YIELD", "CALL",      "C_RETURN",  "C_RAISE"};
constexpr int kPyEvents = 5;

long event_bit(PyObject* events, const char* name) {
  PyObject* v = PyObject_GetAttrString(events, name);
  if (!v) return -1;
  long bit = PyLong_AsLong(v);
  Py_DECREF(v);
  return bit;
}

bool register_callbacks(std::string* error) {
  PyObject* events = PyObject_GetAttrString(g_monitoring, "events");
  if (!events) {
    *error = take_error();
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < sizeof(g_defs) / sizeof(g_defs[0]) && ok; ++i) {
    PyObject* fn = PyCFunction_New(&g_defs[i], nullptr);
    long bit = event_bit(events, g_events[i]);
    PyObject* r = fn && bit >= 0 ? PyObject_CallMethod(g_monitoring, "register_callback", "ilO",
                                                       g_tool, bit, fn)
                                 : nullptr;
    if (r && i == 1) {  // PY_THROW: a throw() into a suspended generator resumes it
      Py_DECREF(r);
      long throw_bit = event_bit(events, "PY_THROW");
      r = throw_bit >= 0 ? PyObject_CallMethod(g_monitoring, "register_callback", "ilO", g_tool,
                                               throw_bit, fn)
                         : nullptr;
    }
    Py_XDECREF(fn);
    if (!r) ok = false;
    Py_XDECREF(r);
  }
  Py_DECREF(events);
  if (!ok) *error = take_error();
  return ok;
}

// Whether the frame evaluation hook reports Python frames (then sys.monitoring
// is used for C calls only, if at all).
bool python_frames_from_hook() {
#if MLPROF_EVAL_TRACER
  return g_eval_ours;
#else
  return false;
#endif
}

bool set_events(bool c_calls, std::string* error) {
  PyObject* events = PyObject_GetAttrString(g_monitoring, "events");
  if (!events) {
    *error = take_error();
    return false;
  }
  long mask = 0;
  if (!python_frames_from_hook()) {
    for (int i = 0; i < kPyEvents; ++i) mask |= event_bit(events, g_events[i]);
    mask |= event_bit(events, "PY_THROW");
  }
  if (c_calls) {
    for (int i = kPyEvents; i < 8; ++i) mask |= event_bit(events, g_events[i]);
  }
  Py_DECREF(events);
  PyObject* r = PyObject_CallMethod(g_monitoring, "set_events", "il", g_tool, mask);
  if (!r) {
    *error = take_error();
    return false;
  }
  Py_DECREF(r);
  g_c_events = c_calls;
  return true;
}

bool claim_tool(std::string* error) {
  // PROFILER_ID (2) first; cProfile takes it on 3.12+, then fall back through
  // the ids that CPython leaves free for other tools.
  const int order[] = {2, 4, 3, 1, 0, 5};
  for (int id : order) {
    PyObject* r = PyObject_CallMethod(g_monitoring, "use_tool_id", "is", id, "mlflow-profiler");
    if (r) {
      Py_DECREF(r);
      g_tool = id;
      return true;
    }
    PyErr_Clear();
  }
  *error = "every sys.monitoring tool id (0-5) is taken by other tools";
  return false;
}

#if MLPROF_EVAL_TRACER
// Why a frame evaluation function and not sys.monitoring's events: switching
// the events on instruments every function that runs next, and switching
// them off undoes it, function by function, in whatever runs after. With a
// session per sampled request, the sampled call and the unsampled call after
// it paid that (3.13, a pandas predict: the next call +11%, the sampled one
// +27-30%; with the hook +3.5% and +22%: nothing is instrumented;
// bench/RESULTS.md). While a
// session runs, this function sees each Python frame before it runs and
// after it returns, yields or unwinds: with one set, the interpreter inlines
// no Python call or generator resume, so every frame comes through here.
// Frames below every ceiling just run. Other tools (coverage, a debugger
// through sys.settrace) keep their own events.

inline PyCodeObject* code_of(_PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* c = f->f_executable;
  return c && PyCode_Check(c) ? reinterpret_cast<PyCodeObject*>(c) : nullptr;
#else
  return f->f_code;
#endif
}

// Index of a generator's RESUME 0 in its code units, read once from the
// original bytecode (the adaptive copy may hold instrumented opcodes) and
// kept in a code extra slot as index + 1.
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

// Runs one event with the frame described to the engine and the thread's
// tracing count raised, as CPython does around a monitoring callback, so that
// Python code the event runs (summarizing an argument) is not reported
// itself. An exception being raised or thrown in stays pending.
template <typename Fn>
void report(PyThreadState* ts, const HookFrame& frame, Fn&& event) {
  ++g_hook_events;
  PyObject* pending = PyErr_GetRaisedException();
  PyThreadState_EnterTracing(ts);
  set_hook_frame(&frame);
  event();
  set_hook_frame(nullptr);
  PyThreadState_LeaveTracing(ts);
  PyErr_SetRaisedException(pending);
}

// The frames this thread's hook reported the start or resume of and is
// running now, innermost last.
struct Wrapped {
  _PyInterpreterFrame* frame;
  PyCodeObject* code;
  HookFrame described;
  bool ended;  // its return was reported early (end_left_frame)
  IOTargets pending;  // then: the spans that want its return value
};
thread_local std::vector<Wrapped> t_wrapped;

inline _PyInterpreterFrame* current_frame(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030D0000
  return ts->current_frame;
#else
  return ts->cframe->current_frame;
#endif
}

// A frame that starts while the thread's current frame is the entry frame
// below the innermost wrapped one runs in that frame's teardown (a weakref
// callback or a __del__ as its locals are released, after its return: the
// interpreter has already made the frame's caller current). sys.monitoring
// reports the return before the teardown; so does this, so the finalizer is
// the frame's sibling and not its child.
void end_left_frame(PyThreadState* ts) {
  if (t_wrapped.empty()) return;
  Wrapped& w = t_wrapped.back();
  _PyInterpreterFrame* now = current_frame(ts);
  if (w.ended || now == w.frame || !now || now != w.frame->previous || now->owner != FRAME_OWNED_BY_CSTACK) return;
  w.ended = true;
  report(ts, w.described, [&] { on_frame_left(w.code, PyErr_Occurred() != nullptr, &w.pending); });
}

// Runs a reported frame; true in `ended` if its exit was reported already
// (then its return value is summarized here, where it is known).
PyObject* run_wrapped(PyThreadState* ts, _PyInterpreterFrame* frame, PyCodeObject* code, const HookFrame& hf,
                      int throwflag, bool* ended) {
  t_wrapped.push_back(Wrapped{frame, code, hf, false, {}});
  const bool skipped = t_skipped_run;
  t_skipped_run = false;
  PyObject* result = _PyEval_EvalFrameDefault(ts, frame, throwflag);
  t_skipped_run = skipped;
  *ended = t_wrapped.back().ended;
  const IOTargets pending = *ended ? t_wrapped.back().pending : IOTargets{};  // no copy per frame
  t_wrapped.pop_back();
  if (result && pending.n) report(ts, hf, [&] { on_left_frame_value(result, pending); });
  return result;
}

PyObject* run_skipped(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag) {
  const bool skipped = t_skipped_run;
  t_skipped_run = true;
  PyObject* result = _PyEval_EvalFrameDefault(ts, frame, throwflag);
  t_skipped_run = skipped;
  return result;
}

PyObject* eval_generator(PyThreadState* ts, _PyInterpreterFrame* frame, PyCodeObject* code, int throwflag) {
  // The call that creates a generator runs only RETURN_GENERATOR: not an event
  // (sys.monitoring reports the first resume as the start).
  if (frame->owner != FRAME_OWNED_BY_GENERATOR) return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  PyGenObject* gen = _PyFrame_GetGenerator(frame);
  const HookFrame hf{reinterpret_cast<uintptr_t>(gen), frame->f_globals, frame->localsplus};
  // Before RESUME 0: its first run (a throw into it is a resume, as PY_THROW).
  const long resume = first_resume(code);
  const bool first = !throwflag && resume >= 0 && PyUnstable_InterpreterFrame_GetLasti(frame) / 2 < resume;
  if (first) {
    report(ts, hf, [&] { on_start(code, nullptr); });
  } else {
    report(ts, hf, [&] { on_resume(code, nullptr, true); });
  }
  bool ended = false;
  PyObject* result = run_wrapped(ts, frame, code, hf, throwflag, &ended);
  if (ended) return result;
  if (!result) {
    report(ts, hf, [&] { on_return(code, nullptr, true, nullptr); });
  } else if (generator_state(reinterpret_cast<PyObject*>(gen)) < 0) {  // suspended: a yield or an await
    report(ts, hf, [&] { on_yield(code, nullptr); });
  } else {
    report(ts, hf, [&] { on_return(code, nullptr, false, result); });
  }
  return result;
}

PyObject* eval_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag) {
  // tracing: a callback or one of our events runs this frame (their frames are not reported).
  if (!g_native_collecting || ts->tracing) return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  PyCodeObject* code = code_of(frame);
  if (!code) return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  end_left_frame(ts);
  if (compat::is_generator_code(code)) return eval_generator(ts, frame, code, throwflag);
  if (skip_below_ceiling(code)) return run_skipped(ts, frame, throwflag);
  const HookFrame hf{0, frame->f_globals, frame->localsplus};
  report(ts, hf, [&] { on_start(code, nullptr); });
  bool ended = false;
  PyObject* result = run_wrapped(ts, frame, code, hf, throwflag, &ended);
  if (!ended) report(ts, hf, [&] { on_return(code, nullptr, result == nullptr, result); });
  return result;
}

#endif

// What the newest session's Python frames were reported by.
const char* g_name = MLPROF_EVAL_TRACER ? "eval_frame" : "sys.monitoring";

bool start_monitoring(bool c_calls, std::string* error) {
  if (!g_monitoring) {
    PyObject* sys = PyImport_ImportModule("sys");
    g_monitoring = sys ? PyObject_GetAttrString(sys, "monitoring") : nullptr;
    Py_XDECREF(sys);
    if (!g_monitoring) {
      *error = take_error();
      return false;
    }
  }
  if (!claim_tool(error)) return false;
  if (!register_callbacks(error) || !set_events(c_calls, error)) {
    PyObject* r = PyObject_CallMethod(g_monitoring, "free_tool_id", "i", g_tool);
    Py_XDECREF(r);
    PyErr_Clear();
    g_tool = -1;
    return false;
  }
  return true;
}

void stop_monitoring() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* r = PyObject_CallMethod(g_monitoring, "set_events", "ii", g_tool, 0);
  Py_XDECREF(r);
  for (const char* ev : g_events) {
    PyObject* events = PyObject_GetAttrString(g_monitoring, "events");
    long bit = events ? event_bit(events, ev) : -1;
    Py_XDECREF(events);
    if (bit >= 0) {
      r = PyObject_CallMethod(g_monitoring, "register_callback", "ilO", g_tool, bit, Py_None);
      Py_XDECREF(r);
    }
  }
  r = PyObject_CallMethod(g_monitoring, "free_tool_id", "i", g_tool);
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
  g_tool = -1;
  g_c_events = false;
}

}  // namespace

const char* name() { return g_name; }

bool sees_running_frames() { return !python_frames_from_hook(); }

bool wraps_generator_run(PyObject* gen) {
#if MLPROF_EVAL_TRACER
  const auto key = reinterpret_cast<uintptr_t>(gen);
  return std::any_of(t_wrapped.begin(), t_wrapped.end(), [key](const Wrapped& w) { return w.described.generator == key; });
#else
  (void)gen;
  return true;
#endif
}

int generator_state(PyObject* gen) {
#if MLPROF_EVAL_TRACER
  const auto state = reinterpret_cast<PyGenObject*>(gen)->gi_frame_state;  // coroutines share the layout
  return state < FRAME_EXECUTING ? -1 : state == FRAME_EXECUTING ? 0 : 1;
#else
  (void)gen;
  return 0;
#endif
}

int tool_id() { return g_tool; }

bool install(Engine* engine, std::string* error) {
  const bool c_calls = engine->options().capture_c_calls || g_c_events;
#if MLPROF_EVAL_TRACER
  // The first session picks how frames are reported while any runs. With a
  // ceiling: the hook (nothing instrumented; frames below the ceiling just
  // run). At unlimited depth every frame is reported, and sys.monitoring's
  // callbacks cost less per frame than the hook, which also stops inlining
  // (fib, 3.13: 4.1x against 5.7x; bench/RESULTS.md).
  if (g_users == 0) {
    if (engine->options().depth >= 0) eval_hook_acquire();
    g_name = g_eval_ours ? "eval_frame" : "sys.monitoring";
  } else if (g_eval_users > 0) {
    eval_hook_acquire();
  }
#endif
  // sys.monitoring: for C calls, or for every event without the hook.
  const bool monitoring = c_calls || !python_frames_from_hook();
  if ((monitoring && g_tool < 0 && !start_monitoring(c_calls, error)) ||
      (monitoring && c_calls && !g_c_events && !set_events(true, error))) {
#if MLPROF_EVAL_TRACER
    if (g_eval_users > 0) eval_hook_release();
#endif
    return false;
  }
  ++g_users;
  return true;
}

void uninstall(Engine* /*engine*/) {
  if (g_users == 0) return;
#if MLPROF_EVAL_TRACER
  if (g_eval_users > 0) eval_hook_release();  // every session acquired it, or none
#endif
  if (--g_users > 0) {
    std::string ignored;
    if (g_tool >= 0 && g_c_events && !any_engine_wants_c_calls()) set_events(false, &ignored);
    return;
  }
  if (g_tool >= 0) stop_monitoring();
}

#else
// ---------------------------------------------------------------- 3.9-3.11 ---

namespace {

struct ThreadHook {
  Py_tracefunc prev_func = nullptr;
  PyObject* prev_obj = nullptr;  // strong reference while we are installed
  int users = 0;
  bool installed = false;
};
thread_local ThreadHook t_hook;

int profile_func(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  ThreadHook& h = t_hook;
  if (h.prev_func) {
    // Chain to the profiler that was here first, so it keeps counting.
    int r = h.prev_func(h.prev_obj, frame, what, arg);
    if (r) return r;
  }
  ++g_hook_events;
  if (!g_native_collecting) return 0;
  PyCodeObject* code = compat::frame_code(frame);
  switch (what) {
    case PyTrace_CALL:
      if (compat::is_generator_code(code)) {
#if PY_VERSION_HEX < 0x030B0000
        bool continued = frame->f_lasti >= 0;  // 3.9/3.10: -1 until the first instruction ran
#else
        // 3.11: a resume reports the YIELD_VALUE it stopped at, or the
        // RESUME n>0 after it; a first start reports RESUME 0 or what precedes
        // it (3.11's opcode.h: YIELD_VALUE 86, RESUME 151, and RESUME_QUICK
        // 150 once the code is quickened).
        int lasti = PyFrame_GetLasti(frame);
        bool continued = false;
        if (lasti >= 0) {
          _Py_CODEUNIT word = _PyCode_CODE(code)[lasti / 2];
          int op = _Py_OPCODE(word);
          continued = op == 86 || ((op == 151 || op == 150) && _Py_OPARG(word) != 0);
        }
#endif
        on_resume(code, frame, continued);
      } else {
        on_start(code, frame);
      }
      break;
    case PyTrace_RETURN:
      if (compat::is_generator_code(code) && compat::frame_is_suspending(frame)) {
        on_yield(code, frame);
      } else {
        on_return(code, frame, arg == nullptr, arg);  // arg: the return value, null on an exception
      }
      break;
    case PyTrace_C_CALL:
      on_c_call(arg, code);
      break;
    case PyTrace_C_RETURN:
      on_c_return(arg, false);
      break;
    case PyTrace_C_EXCEPTION:
      on_c_return(arg, true);
      break;
    default:
      break;
  }
  return 0;
}

#if MLPROF_EVAL_HOOK
// 3.11 runs every instruction of a thread with a profile function on its
// tracing path, de-specialised: +40% on a pandas predict whose frames are
// nearly all below the ceiling (bench/RESULTS.md). While a session is
// installed, a PEP 523 frame evaluation function runs each frame that every
// current lane would skip with its C frame's use_tracing off, so it and the
// frames it calls (each comes back through here: with a frame evaluation
// function set, 3.11 does not inline Python calls) run at full speed. A
// frame's traced state is fixed for its whole evaluation, so each lane sees
// both its start and its return or neither.
PyObject* eval_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag) {
  // Only when we are the thread's sole profiler and nobody traces: a chained
  // profiler (cProfile) or a tracer (debugger, coverage) must see every frame.
  if (!t_hook.installed || t_hook.prev_func || ts->c_profilefunc != profile_func || ts->c_tracefunc ||
      ts->tracing || !g_native_collecting) {
    return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  }
  _PyCFrame* cf = ts->cframe;
  const uint8_t want = skip_below_ceiling(frame->f_code) ? 0 : 255;
  const uint8_t saved = cf->use_tracing;
  if (want == saved) return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  cf->use_tracing = want;  // the callee's C frame starts from its caller's value
  PyObject* result = _PyEval_EvalFrameDefault(ts, frame, throwflag);
  // The callee copied its value back into ours on exit; ours goes back to
  // what it was unless the callee changed who profiles or traces this thread
  // (then CPython's own value stands, as without this hook).
  if (ts->c_profilefunc == profile_func && !ts->c_tracefunc) cf->use_tracing = saved;
  return result;
}

#endif

void install_here() {
  ThreadHook& h = t_hook;
  if (h.installed) return;
  PyThreadState* ts = compat::tstate();
  if (ts->c_profilefunc != profile_func) {
    h.prev_func = ts->c_profilefunc;
    h.prev_obj = ts->c_profileobj;
    Py_XINCREF(h.prev_obj);
  }
  PyEval_SetProfile(profile_func, nullptr);
  h.installed = true;
}

}  // namespace

const char* name() { return "setprofile"; }

bool sees_running_frames() { return true; }

int generator_state(PyObject* /*gen*/) { return 0; }

bool wraps_generator_run(PyObject* /*gen*/) { return true; }

int tool_id() { return -1; }

bool install([[maybe_unused]] Engine* engine, std::string* /*error*/) {
  install_here();
  ++t_hook.users;
#if MLPROF_EVAL_HOOK
  // At unlimited depth no frame is ever below the ceiling: the hook would
  // only cost (no inlining, a check per frame; fib at depth -1: 6.6x, not 5.8x).
  if (engine->options().depth >= 0) eval_hook_acquire();
#endif
  return true;
}

void uninstall([[maybe_unused]] Engine* engine) {
  ThreadHook& h = t_hook;
#if MLPROF_EVAL_HOOK
  if (engine->options().depth >= 0) eval_hook_release();
#endif
  if (h.users > 0) --h.users;
  if (h.users > 0 || !h.installed) return;
  PyThreadState* ts = compat::tstate();
  if (ts->c_profilefunc == profile_func) {
    // Put back whatever was installed before us (cProfile, sys.setprofile).
    PyEval_SetProfile(h.prev_func, h.prev_obj);
  }
  Py_CLEAR(h.prev_obj);
  h.prev_func = nullptr;
  h.installed = false;
}

#endif

// ---------------------------------------------------------------- all_threads -

namespace {

int g_binder_users = 0;
PyObject* g_saved_threading_hook = nullptr;
std::vector<Engine*> g_binder_engines;

// Runs as the first profile event of a thread started by `threading` while an
// all_threads session collects: binds the thread, then hands over to our hook.
PyObject* binder(PyObject*, PyObject* const*, Py_ssize_t) {
  Engine* e = newest_all_threads_engine();
  PyEval_SetProfile(nullptr, nullptr);  // drop the binder itself
#if !MLPROF_HAS_MONITORING
  if (e) install_here();  // 3.12+: sys.monitoring already sees this thread
#endif
  if (e) bind_thread(e);
  Py_RETURN_NONE;
}
PyMethodDef g_binder_def = {"_mlflow_profiler_thread_binder",
                            reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(binder)),
                            METH_FASTCALL, nullptr};

}  // namespace

bool install_thread_binder(std::string* error) {
  if (g_binder_users++ > 0) return true;
  PyObject* threading = PyImport_ImportModule("threading");
  if (!threading) {
    *error = take_error();
    return false;
  }
  g_saved_threading_hook = PyObject_GetAttrString(threading, "_profile_hook");
  if (!g_saved_threading_hook) PyErr_Clear();
  PyObject* fn = PyCFunction_New(&g_binder_def, nullptr);
  PyObject* r = fn ? PyObject_CallMethod(threading, "setprofile", "O", fn) : nullptr;
  Py_XDECREF(fn);
  Py_DECREF(threading);
  if (!r) {
    *error = take_error();
    return false;
  }
  Py_DECREF(r);
  return true;
}

void uninstall_thread_binder() {
  if (g_binder_users == 0 || --g_binder_users > 0) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* threading = PyImport_ImportModule("threading");
  if (threading) {
    PyObject* r = PyObject_CallMethod(threading, "setprofile", "O",
                                      g_saved_threading_hook ? g_saved_threading_hook : Py_None);
    Py_XDECREF(r);
    Py_DECREF(threading);
  }
  Py_CLEAR(g_saved_threading_hook);
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

}  // namespace mlprof::hooks
