// The two hook paths side by side: sys.monitoring with C callbacks on 3.12+,
// PyEval_SetProfile with a C function on 3.9-3.11. Both only translate
// interpreter events into engine.h's on_* calls.

#include <string>
#include <vector>

#include "engine.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
// 3.11's _PyInterpreterFrame (f_code), for the frame evaluation hook below.
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif
// The frame evaluation hook that runs frames below the ceiling untraced
// (3.11: the tracing path; 3.12+: sys.monitoring's callbacks).
#define MLPROF_SKIP_UNTRACED (PY_VERSION_HEX >= 0x030B0000)

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

#if MLPROF_SKIP_UNTRACED
// Each version's frame evaluation function (below), and whether it may be
// installed now.
PyObject* eval_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag);
bool eval_hook_allowed();
int g_eval_users = 0;  // sessions with a ceiling
bool g_eval_ours = false;

void eval_hook_acquire() {
  if (g_eval_users++ > 0) return;
  PyInterpreterState* interp = compat::tstate()->interp;
  // Another frame evaluator (torch.compile) keeps its place; frames then stay traced.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) == _PyEval_EvalFrameDefault && eval_hook_allowed()) {
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
inline bool is_python_callable(PyObject* f) {
  if (PyFunction_Check(f)) return true;
  return PyMethod_Check(f) && PyFunction_Check(PyMethod_GET_FUNCTION(f));
}
PyObject* cb_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  // CALL fires for every call; C_RETURN/C_RAISE only for callables that are
  // not plain Python functions, so only those open a C span.
  if (nargs >= 3 && g_native_collecting && !is_python_callable(args[2])) {
    on_c_call(args[2], as_code(args[0]));
  }
  Py_RETURN_NONE;
}
PyObject* cb_c_return(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 3 && g_native_collecting) on_c_return(args[2], false);
  Py_RETURN_NONE;
}
PyObject* cb_c_raise(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ++g_hook_events;
  if (nargs >= 3 && g_native_collecting) on_c_return(args[2], true);
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

bool set_events(bool c_calls, std::string* error) {
  PyObject* events = PyObject_GetAttrString(g_monitoring, "events");
  if (!events) {
    *error = take_error();
    return false;
  }
  long mask = 0;
  int n = c_calls ? 8 : kPyEvents;
  for (int i = 0; i < n; ++i) mask |= event_bit(events, g_events[i]);
  mask |= event_bit(events, "PY_THROW");
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

// Events of frames below every ceiling are most of a sampled predict's hook
// cost on 3.12+ (a pandas predict at depth 2: 2,926 frames, 401 within
// reach; bench/RESULTS.md). While a session with a ceiling runs, a PEP 523
// frame evaluation function raises the thread's `tracing` count (what
// CPython itself does while a callback runs, so no tool's events fire) for
// each frame that every current lane would skip, and for what it calls; a
// callee within reach again (a generator: a resume may reopen a recorded
// span; a session started down there) gets it lowered for its own run.
// A frame's state is fixed for its whole evaluation, so each lane sees both
// its start and its return or neither. t_untraced: this thread's count holds
// our raise.
thread_local bool t_untraced = false;

PyObject* eval_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag) {
  // Not while another tracer or profiler (a debugger, coverage through
  // sys.settrace) is set on this thread, nor while a callback runs Python
  // code (summarizing arguments): its frames are not monitored anyway.
  if (!g_native_collecting || ts->c_tracefunc || ts->c_profilefunc || ts->tracing != (t_untraced ? 1 : 0)) {
    return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  }
  PyObject* code = PyUnstable_InterpreterFrame_GetCode(frame);  // the frame keeps it alive
  Py_XDECREF(code);
  const bool skip = code && PyCode_Check(code) && skip_below_ceiling(reinterpret_cast<PyCodeObject*>(code));
  if (skip == t_untraced) return _PyEval_EvalFrameDefault(ts, frame, throwflag);
  if (skip) {
    PyThreadState_EnterTracing(ts);
  } else {
    PyThreadState_LeaveTracing(ts);
  }
  t_untraced = skip;
  PyObject* result = _PyEval_EvalFrameDefault(ts, frame, throwflag);
  // Back in the caller, which runs untraced iff !skip. A tracer set meanwhile
  // (pdb.set_trace() in the callee) keeps the rest traced, as CPython would.
  if (skip) {
    if (t_untraced) PyThreadState_LeaveTracing(ts);
    t_untraced = false;
  } else if (!t_untraced && !ts->c_tracefunc && !ts->c_profilefunc) {
    PyThreadState_EnterTracing(ts);
    t_untraced = true;
  }
  return result;
}

// Another sys.monitoring tool (coverage, a debugger) must see every frame.
bool other_tool_active() {
  for (int id = 0; id < 6; ++id) {
    if (id == g_tool) continue;
    PyObject* r = PyObject_CallMethod(g_monitoring, "get_tool", "i", id);
    if (!r) {
      PyErr_Clear();
      return true;  // cannot tell: keep every frame traced
    }
    const bool taken = r != Py_None;
    Py_DECREF(r);
    if (taken) return true;
  }
  return false;
}

bool eval_hook_allowed() { return !other_tool_active(); }

}  // namespace

const char* name() { return "sys.monitoring"; }

int tool_id() { return g_tool; }

bool install(Engine* engine, std::string* error) {
  bool c_calls = engine->options().capture_c_calls || g_c_events;
  if (g_users > 0) {
    if (c_calls && !g_c_events && !set_events(true, error)) return false;
    ++g_users;
    // At unlimited depth no frame is ever below the ceiling (as on 3.11).
    if (engine->options().depth >= 0) eval_hook_acquire();
    return true;
  }
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
  ++g_users;
  if (engine->options().depth >= 0) eval_hook_acquire();
  return true;
}

void uninstall(Engine* engine) {
  if (g_users == 0) return;
  if (engine->options().depth >= 0) eval_hook_release();
  if (--g_users > 0) {
    std::string ignored;
    if (g_c_events && !any_engine_wants_c_calls()) set_events(false, &ignored);
    return;
  }
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

#if MLPROF_SKIP_UNTRACED
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

bool eval_hook_allowed() { return true; }  // a chained profiler is checked per frame
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

int tool_id() { return -1; }

bool install([[maybe_unused]] Engine* engine, std::string* /*error*/) {
  install_here();
  ++t_hook.users;
#if MLPROF_SKIP_UNTRACED
  // At unlimited depth no frame is ever below the ceiling: the hook would
  // only cost (no inlining, a check per frame; fib at depth -1: 6.6x, not 5.8x).
  if (engine->options().depth >= 0) eval_hook_acquire();
#endif
  return true;
}

void uninstall([[maybe_unused]] Engine* engine) {
  ThreadHook& h = t_hook;
#if MLPROF_SKIP_UNTRACED
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
