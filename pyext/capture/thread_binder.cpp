// all_threads: a thread started by `threading` while such a session collects
// is bound to it at its first Python event. threading.setprofile installs a
// Python-level profile function in each new thread; ours binds the thread and
// removes itself, and the thread then reports through this interpreter's
// mechanism like the session's own thread.

#include <vector>

#include "../engine.h"
#include "mechanisms.h"

namespace mlprof::capture {

void thread_bound();  // capture.cpp: the bound thread's mechanism

namespace {

int g_binder_users = 0;
PyObject* g_saved_threading_hook = nullptr;

std::string take_error() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string out = "unknown error";
  if (value) {
    if (PyObject* s = PyObject_Str(value)) {
      out = compat::utf8(s);
      Py_DECREF(s);
    }
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return out;
}

PyObject* binder(PyObject*, PyObject* const*, Py_ssize_t) {
  Engine* e = newest_all_threads_engine();
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
  compat::PendingError pending;
  PyObject* threading = PyImport_ImportModule("threading");
  if (threading) {
    PyObject* r = PyObject_CallMethod(threading, "setprofile", "O",
                                      g_saved_threading_hook ? g_saved_threading_hook : Py_None);
    Py_XDECREF(r);
    Py_DECREF(threading);
  }
  Py_CLEAR(g_saved_threading_hook);
  PyErr_Clear();
}

}  // namespace mlprof::capture
