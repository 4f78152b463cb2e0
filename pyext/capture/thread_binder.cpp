// all_threads: a thread started by `threading` while such a session collects
// is bound to it at its first Python event. threading.setprofile installs a
// Python-level profile function in each new thread; ours binds the thread and
// removes itself, and the thread then reports through this interpreter's
// mechanism like the session's own thread.
//
// That first event comes after Thread.start has been told the thread runs,
// so the starter may have moved on by then. Where the thread hangs is taken
// earlier: threading's reference to _thread's start function is replaced,
// while such a session collects, by a C function of the same name that tells
// the engine which Thread is starting, then calls the original.

#include <vector>

#include "../engine.h"
#include "../py_util.h"
#include "mechanisms.h"

namespace mlprof::capture {

void thread_bound();  // capture.cpp: the bound thread's mechanism

namespace {

int g_binder_users = 0;
PyObject* g_saved_threading_hook = nullptr;

PyObject* binder(PyObject*, PyObject* const*, Py_ssize_t) {
  Engine* e = newest_all_threads_engine();
  // Put in a thread the session records in already, by the program
  // (threading.setprofile_all_threads(threading.getprofile())): it stays,
  // as the program's profile function, and does nothing.
  if (e && records_here(e)) Py_RETURN_NONE;
  PyEval_SetProfile(nullptr, nullptr);  // drop the binder itself
  if (e) {
    bind_thread(e);
    thread_bound();
  }
  Py_RETURN_NONE;
}
PyMethodDef g_binder_def = {"_mlflow_profiler_thread_binder",
                            reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(binder)),
                            METH_FASTCALL, nullptr};

// Thread.start calls threading._<name>(self._bootstrap, ...), threading's
// reference to _thread.<name>.
#if PY_VERSION_HEX >= 0x030D0000
#define MLPROF_THREAD_START "start_joinable_thread"
#else
#define MLPROF_THREAD_START "start_new_thread"
#endif
constexpr const char* kStartAttr = "_" MLPROF_THREAD_START;
PyObject* g_original_start = nullptr;  // kept for good: a stale wrapper still calls it
PyObject* g_start_wrapper = nullptr;

PyObject* start_thread(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs > 0 && PyMethod_Check(args[0])) {
    if (Engine* e = newest_all_threads_engine()) {
      try {
        e->note_thread_start(PyMethod_GET_SELF(args[0]));
      } catch (const std::exception&) {  // out of memory: the lane samples its parent later
      }
    }
  }
  return PyObject_Vectorcall(g_original_start, args, static_cast<size_t>(nargs), kwnames);
}
// Named like the function it stands for: a session that records C calls
// shows the same span with or without it.
PyMethodDef g_start_def = {
    MLPROF_THREAD_START,
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(start_thread)),
    METH_FASTCALL | METH_KEYWORDS, nullptr};

// Best effort: without the wrapper a thread's lane hangs where the origin
// lane is when the thread first runs.
void wrap_thread_start(PyObject* threading) {
  PyObject* current = PyObject_GetAttrString(threading, kStartAttr);
  if (!current) {
    PyErr_Clear();
    return;
  }
  if (!g_start_wrapper) {
    PyObject* module = PyUnicode_FromString("_thread");
    g_start_wrapper = module ? PyCFunction_NewEx(&g_start_def, nullptr, module) : nullptr;
    Py_XDECREF(module);
  }
  if (g_start_wrapper && current != g_start_wrapper) {
    Py_XSETREF(g_original_start, current);
    current = nullptr;
    if (PyObject_SetAttrString(threading, kStartAttr, g_start_wrapper) < 0) PyErr_Clear();
  }
  Py_XDECREF(current);
  PyErr_Clear();
}

// Puts the original back, unless someone replaced the wrapper meanwhile.
void unwrap_thread_start(PyObject* threading) {
  PyObject* current = PyObject_GetAttrString(threading, kStartAttr);
  if (current && current == g_start_wrapper && g_original_start) {
    if (PyObject_SetAttrString(threading, kStartAttr, g_original_start) < 0) PyErr_Clear();
  }
  Py_XDECREF(current);
  PyErr_Clear();
}

}  // namespace

bool install_thread_binder(std::string* error) {
  if (g_binder_users++ > 0) return true;
  PyObject* threading = PyImport_ImportModule("threading");
  if (!threading) {
    *error = pyutil::take_error_message();
    return false;
  }
  g_saved_threading_hook = PyObject_GetAttrString(threading, "_profile_hook");
  if (!g_saved_threading_hook) PyErr_Clear();
  PyObject* fn = PyCFunction_New(&g_binder_def, nullptr);
  PyObject* r = fn ? PyObject_CallMethod(threading, "setprofile", "O", fn) : nullptr;
  Py_XDECREF(fn);
  if (r) wrap_thread_start(threading);
  Py_DECREF(threading);
  if (!r) {
    *error = pyutil::take_error_message();
    return false;
  }
  Py_DECREF(r);
  return true;
}

void uninstall_thread_binder() {
  if (g_binder_users == 0 || --g_binder_users > 0) return;
  compat::PendingError pending;
  PyObject* threading = PyImport_ImportModule("threading");
  if (threading) {
    unwrap_thread_start(threading);
    PyObject* r = PyObject_CallMethod(threading, "setprofile", "O",
                                      g_saved_threading_hook ? g_saved_threading_hook : Py_None);
    Py_XDECREF(r);
    Py_DECREF(threading);
  }
  Py_CLEAR(g_saved_threading_hook);
  PyErr_Clear();
}

}  // namespace mlprof::capture
