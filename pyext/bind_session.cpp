// ProfileSession's `with` protocol in C: __enter__ and __exit__ with no
// Python frame of ours. A session's start and stop is on the hot path
// (autoprofile starts one per sampled request): the Python methods cost four
// frames, and __exit__ and deactivate ran while the capture hook was
// installed, each one passing the hook (bench/RESULTS.md, "Issue 16, eighth
// session"). The rules stay in _session.py: anything but the plain case (a
// native engine that has not run, a GIL) goes to ProfileSession.activate or
// .deactivate, which raise the errors and log the failures.

#include <pybind11/pybind11.h>

#include <climits>
#include <memory>
#include <new>
#include <stdexcept>

#include "bindings.h"
#include "engine.h"
#include "span_api.h"

namespace py = pybind11;

namespace mlprof {
namespace {

PyTypeObject* g_engine_type = nullptr;
PyObject* g_session_type = nullptr;  // ProfileSession: a subclass may override activate/deactivate
PyObject* g_str_engine = nullptr;
PyObject* g_str_activated = nullptr;
PyObject* g_str_deactivate = nullptr;
PyObject* g_refresh = nullptr;    // _transparent.refresh, imported at first use
Py_ssize_t g_refreshed_for = -1;  // len(sys.modules) it last had nothing left to do for

// The native engine of a plain ProfileSession (a new reference in *obj), or
// null (no error set) for any other.
Engine* native_engine(PyObject* session, PyObject** obj) {
  *obj = nullptr;
  if (reinterpret_cast<PyObject*>(Py_TYPE(session)) != g_session_type) return nullptr;
  *obj = PyObject_GetAttr(session, g_str_engine);
  if (!*obj) {
    PyErr_Clear();
    return nullptr;
  }
  if (Py_TYPE(*obj) != g_engine_type) {
    Py_CLEAR(*obj);
    return nullptr;
  }
  // pybind11's own layout for a class with one C++ type (what py::cast does
  // after its type lookup, which costs more than the rest of this function).
  return reinterpret_cast<py::detail::instance*>(*obj)->get_value_and_holder().value_ptr<Engine>();
}

// _transparent.refresh() when sys.modules changed since it last had nothing
// left to do (it returns the size it is complete for, or -1).
bool refresh_transparent() {
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  if (PyDict_GET_SIZE(modules) == g_refreshed_for) return true;
  if (!g_refresh) {
    PyObject* mod = PyImport_ImportModule("mlflow_profiler._transparent");
    if (!mod) return false;
    g_refresh = PyObject_GetAttrString(mod, "refresh");
    Py_DECREF(mod);
    if (!g_refresh) return false;
  }
  PyObject* r;
  {
    compat::Untraced untraced(compat::tstate());  // an enclosing session records none of it
    r = PyObject_CallNoArgs(g_refresh);
  }
  if (!r) return false;
  g_refreshed_for = PyLong_Check(r) ? PyLong_AsSsize_t(r) : -1;
  Py_DECREF(r);
  if (PyErr_Occurred()) PyErr_Clear();
  return true;
}

// __enter__(self, levels_above=0): levels_above counts the profiler's Python
// frames between the caller whose calls are the roots and this function.
PyObject* session_enter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError,
                    "ProfileSession.__enter__() takes self and an optional levels_above");
    return nullptr;
  }
  PyObject* self = args[0];
  int levels = 0;
  if (nargs == 2) {
    levels = PyLong_AsLong(args[1]);
    if (levels == -1 && PyErr_Occurred()) return nullptr;
  }
  PyObject* obj = nullptr;
#ifdef Py_GIL_DISABLED
  Engine* e = nullptr;  // activate() checks that the GIL is on
#else
  Engine* e = native_engine(self, &obj);
#endif
  if (!e || e->state() != Engine::State::kIdle) {
    Py_XDECREF(obj);
    PyObject* r = PyObject_CallMethod(self, "activate", "i", levels + 1);
    if (!r) return nullptr;
    Py_DECREF(r);
    Py_INCREF(self);
    return self;
  }
  const bool ok = refresh_transparent() && start_engine(*e, self, levels) &&
                  PyObject_SetAttr(self, g_str_activated, Py_True) == 0;
  Py_DECREF(obj);
  if (!ok) return nullptr;
  Py_INCREF(self);
  return self;
}

// __exit__(self, *exc_info): ends capture; False (never swallows the
// exception). Failures and notes are logged by deactivate().
PyObject* session_exit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(
        PyExc_TypeError,
        "ProfileSession.__exit__() takes self and the exception, if any (type, value, traceback)");
    return nullptr;
  }
  PyObject* self = args[0];
  PyObject* obj = nullptr;
  if (Engine* e = native_engine(self, &obj)) {
    bool quiet = false;
    try {
      e->stop();
      quiet = e->failures().empty() && e->notes().empty();
    } catch (...) {  // deactivate() stops again (idempotent) and logs what goes wrong
    }
    Py_DECREF(obj);
    if (quiet) Py_RETURN_FALSE;
  }
  PyObject* r = PyObject_CallMethodNoArgs(self, g_str_deactivate);
  if (!r) return nullptr;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

// new_engine(depth, max_events): an Engine with every other option at its
// default, for profiling()'s path for the defaults. pybind11's constructor
// (ten arguments cast, its keyword defaults, the instance registered twice)
// took 4,000 instructions of an empty session's 22,000.
PyObject* new_engine(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "new_engine() takes depth and max_events, two ints");
    return nullptr;
  }
  EngineOptions o;
  const long depth = PyLong_AsLong(args[0]);
  const size_t max_events = PyLong_AsSize_t(args[1]);
  if (PyErr_Occurred()) return nullptr;
  if (depth < -1 || depth > INT_MAX) {
    PyErr_SetString(PyExc_ValueError, "new_engine(): depth must be -1 or more");
    return nullptr;
  }
  o.depth = static_cast<int>(depth);
  o.max_events = max_events;
  try {
    return py::cast(std::make_unique<Engine>(std::move(o))).release().ptr();
  } catch (py::error_already_set& err) {
    err.restore();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& err) {
    PyErr_SetString(PyExc_RuntimeError, err.what());
  }
  return nullptr;
}

PyMethodDef g_new_engine_def = {
    "new_engine", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(new_engine)),
    METH_FASTCALL,
    "new_engine(depth, max_events, /)\n--\n\n"
    "Engine(depth, max_events, False, False): every other option at its default."};

PyMethodDef g_enter_def = {
    "__enter__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(session_enter)),
    METH_FASTCALL,
    "__enter__(self, levels_above=0, /)\n--\n\n"
    "Starts capture (ProfileSession.activate, without its frames)."};
PyMethodDef g_exit_def = {
    "__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(session_exit)),
    METH_FASTCALL,
    "__exit__(self, *exc_info)\n--\n\n"
    "Ends capture (ProfileSession.deactivate, without its frames); returns False."};

// A C function that binds like a Python method (instancemethod).
py::object method(PyMethodDef* def, py::module_& m) {
  PyObject* fn = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
  if (!fn) throw py::error_already_set();
  add_own_function(def);
  PyObject* im = PyInstanceMethod_New(fn);
  Py_DECREF(fn);
  if (!im) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(im);
}

}  // namespace

bool start_engine(Engine& e, PyObject* session, int levels_above) {
  try {
    e.start(session, levels_above);
    return true;
  } catch (const std::bad_alloc&) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
  } catch (const std::runtime_error& err) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, err.what());
  } catch (const std::exception& err) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, err.what());
  }
  return false;
}

void bind_session(py::module_& m) {
  g_engine_type = reinterpret_cast<PyTypeObject*>(py::type::of<Engine>().ptr());
  g_str_engine = PyUnicode_InternFromString("_engine");
  g_str_activated = PyUnicode_InternFromString("_activated");
  g_str_deactivate = PyUnicode_InternFromString("deactivate");
  if (!g_str_engine || !g_str_activated || !g_str_deactivate) throw py::error_already_set();
  m.def(
      "set_session_class",
      [](py::object cls) {
        Py_XDECREF(g_session_type);
        g_session_type = cls.release().ptr();
      },
      "The class whose instances session_enter/session_exit start and stop without its methods.");
  PyObject* fn = PyCFunction_NewEx(&g_new_engine_def, nullptr, m.attr("__name__").ptr());
  if (!fn) throw py::error_already_set();
  add_own_function(&g_new_engine_def);
  m.attr("new_engine") = py::reinterpret_steal<py::object>(fn);
  m.attr("session_enter") = method(&g_enter_def, m);
  m.attr("session_exit") = method(&g_exit_def, m);
}

}  // namespace mlprof
