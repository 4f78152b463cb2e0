// PyEval_SetProfile with a C function, per thread (3.9-3.11). On 3.9 and 3.10
// it reports every Python frame and C call. On 3.11 the frame evaluation hook
// reports frames (eval_frame.cpp), and this function is installed only for C
// calls (capture_c_calls) or when another frame evaluator holds the hook: a
// profile function puts every instruction of its thread on the
// interpreter's slower tracing path. A profiler installed before (cProfile,
// sys.setprofile) is called first on every event and put back at the end.

#include "../engine.h"
#include "mechanisms.h"

#if !MLPROF_HAS_MONITORING

namespace mlprof::capture {
namespace {

struct ThreadHook {
  Py_tracefunc prev_func = nullptr;
  PyObject* prev_obj = nullptr;  // strong reference while we are installed
  int users = 0;
  bool installed = false;
  bool all_events = true;
  int depth = 0;  // calls minus returns seen: the frame depth of frames reported here
};
thread_local ThreadHook t_hook;

inline bool generator_continues(PyFrameObject* frame, PyCodeObject* code) {
#if PY_VERSION_HEX < 0x030B0000
  (void)code;
  return frame->f_lasti >= 0;  // 3.9/3.10: -1 until the first instruction ran
#else
  // 3.11: a resume reports the YIELD_VALUE it stopped at, or the RESUME n>0
  // after it; a first start reports RESUME 0 or what precedes it (3.11's
  // opcode.h: YIELD_VALUE 86, RESUME 151, and RESUME_QUICK 150 once quickened).
  int lasti = PyFrame_GetLasti(frame);
  if (lasti < 0) return false;
  _Py_CODEUNIT word = _PyCode_CODE(code)[lasti / 2];
  int op = _Py_OPCODE(word);
  return op == 86 || ((op == 151 || op == 150) && _Py_OPARG(word) != 0);
#endif
}

// A plain frame's start and end: the quick path inlined (flatten), the full
// one apart.
[[gnu::noinline]] void start_in_full(PyThreadState* ts, PyCodeObject* code, int depth,
                                     PyFrameObject* frame) {
  on_start(Site{ts}, code, depth, frame);
}
[[gnu::noinline]] void return_in_full(PyThreadState* ts, PyCodeObject* code, int depth,
                                      PyObject* retval) {
  on_return(Site{ts}, code, depth, retval == nullptr,
            retval);  // the return value, null on an exception
}
[[gnu::flatten]] void report_start(PyCodeObject* code, int depth, PyFrameObject* frame) {
  PyThreadState* ts = compat::tstate();
  if (!quick_start(ts, code, depth) && !quick_below(ts, code, depth))
    start_in_full(ts, code, depth, frame);
}
[[gnu::flatten]] void report_return(PyCodeObject* code, int depth, PyObject* retval) {
  PyThreadState* ts = compat::tstate();
  if (!quick_return(ts, code, depth, retval == nullptr) && !quick_unheld_return(ts, code, depth))
    return_in_full(ts, code, depth, retval);
}

int on_profile_event(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  ThreadHook& h = t_hook;
  if (h.prev_func) {
    // Chain to the profiler that was here first, so it keeps counting.
    int r = h.prev_func(h.prev_obj, frame, what, arg);
    if (r) return r;
  }
  ++g_events;
  PyCodeObject* code = compat::frame_code(frame);
  // The thread state only for an event that is reported (3.11 with C calls
  // gets every Python call here and passes them on).
  auto site = [] { return Site{compat::tstate()}; };
  guarded([&] {
    switch (what) {
      case PyTrace_CALL: {
        const int depth = ++h.depth;
        if (!h.all_events || !g_native_collecting) break;
        if (compat::is_generator_code(code)) {
          on_resume(site(), code, depth, frame, generator_continues(frame, code));
        } else {
          report_start(code, depth, frame);
        }
        break;
      }
      case PyTrace_RETURN: {
        const int depth = h.depth--;
        if (!h.all_events || !g_native_collecting) break;
        if (compat::is_generator_code(code) && compat::frame_is_suspending(frame)) {
          on_yield(site(), code, depth, frame);
        } else {
          report_return(code, depth, arg);  // arg: the return value, null on an exception
        }
        break;
      }
      case PyTrace_C_CALL:
        if (g_native_collecting) on_c_call(site(), arg, code, capture::frame_depth());
        break;
      case PyTrace_C_RETURN:
        if (g_native_collecting) on_c_return(site(), arg, capture::frame_depth(), false);
        break;
      case PyTrace_C_EXCEPTION:
        if (g_native_collecting) on_c_return(site(), arg, capture::frame_depth(), true);
        break;
      default:
        break;
    }
  });
  return 0;
}

}  // namespace

namespace profile_func {

void install_here(bool all_events) {
  ThreadHook& h = t_hook;
  h.all_events = all_events;  // the same for every session of a process (capture.cpp)
  if (h.users++ > 0) return;
  PyThreadState* ts = compat::tstate();
  if (ts->c_profilefunc != on_profile_event) {
    h.prev_func = ts->c_profilefunc;
    h.prev_obj = ts->c_profileobj;
    Py_XINCREF(h.prev_obj);
  }
  PyEval_SetProfile(on_profile_event, nullptr);
  h.installed = true;
}

void uninstall_here() {
  ThreadHook& h = t_hook;
  if (h.users > 0) --h.users;
  if (h.users > 0 || !h.installed) return;
  PyThreadState* ts = compat::tstate();
  if (ts->c_profilefunc == on_profile_event) {
    // Put back whatever was installed before us (cProfile, sys.setprofile).
    PyEval_SetProfile(h.prev_func, h.prev_obj);
  }
  Py_CLEAR(h.prev_obj);
  h.prev_func = nullptr;
  h.installed = false;
}

void take_over(int sessions, int depth) {
  ThreadHook& h = t_hook;
  h.depth = depth;
  for (int i = 0; i < sessions; ++i) install_here(true);
  h.all_events = true;  // a C-calls-only install of a session running already reports frames too
}

int frame_depth() { return t_hook.depth; }

}  // namespace profile_func

}  // namespace mlprof::capture

#endif
