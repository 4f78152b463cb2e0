// Waits in the standard library's selectors, measured where they happen: an
// asyncio event loop with nothing ready calls its selector's select() with a
// timeout, and so do subprocess.communicate, socketserver and others. The
// callers' frames may lie below the depth ceiling, where no hook runs, so
// the select methods themselves are watched: from the first session on, the
// `select` of each selector class of the `selectors` module is a SelectWait,
// a C method descriptor around the class's own function. It creates no
// Python frame, calls the original with the same arguments and returns what
// it returns, raising what it raises. A call with timeout 0 (something is
// ready) is not a wait and is not recorded. Once watched, the classes keep
// the wrappers (a wrapper outside sessions only forwards the call): putting
// the functions back at each session's end changed the classes twice a
// session, which on 3.13+ used up their type versions after ~1,000 sessions
// (the classes are then never cached or specialized again), and cost about
// 26,000 instructions a session (docs/capture.md, "Waiting: selectors").

#include "loop_watch.h"

#include <structmember.h>

#include <string>
#include <utility>
#include <vector>

#include "clock.h"
#include "engine.h"
#include "py_util.h"
#include "span_api.h"

namespace mlprof::loop_watch {
namespace {

struct SelectWait {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* orig;     // the class's own select function
  uint32_t function;  // its registry id
};

PyObject* g_type = nullptr;
PyObject* g_selectors = nullptr;  // "selectors", interned: sys.modules' key
// The classes whose select is a SelectWait now, with the wrapper.
std::vector<std::pair<PyObject*, PyObject*>> g_patched;

// The selectors module's classes that define select (CPython 3.9-3.15).
constexpr const char* kClasses[] = {"SelectSelector", "_PollLikeSelector", "EpollSelector",
                                    "DevpollSelector", "KqueueSelector"};

// select(self, timeout=None): timeout None (wait for ever) or positive.
bool waits(PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  PyObject* timeout = n > 1 ? args[1] : Py_None;
  if (kwnames) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "timeout") == 0)
        timeout = args[n + i];
    }
  }
  if (timeout == Py_None) return true;
  const double t = PyFloat_AsDouble(timeout);
  if (t == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;  // the function raises its own error for it
  }
  return t > 0;
}

PyObject* select_call(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<SelectWait*>(self_);
  if (!(g_native_collecting | g_reference_collecting) || !waits(args, nargsf, kwnames)) {
    return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
  }
  if (PyObject* ref = reference_session()) {
    // The reference engine records the wait itself (_reference.py, wait_call).
    PyObject* r = call_reference(ref, "_wait_call", Py_None, self->orig, args, nargsf, kwnames);
    Py_DECREF(ref);
    return r;
  }
  WaitToken tokens[4];
  int n = 0;
  guarded([&] { n = wait_begin(tokens, 4); });
  const int64_t start = clock::ticks();
  PyObject* r = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
  if (n) guarded([&] { wait_end(tokens, n, self->function, start, clock::ticks()); });
  return r;
}

int select_traverse(PyObject* self_, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<SelectWait*>(self_)->orig);
  return 0;
}

int select_clear(PyObject* self_) {
  Py_CLEAR(reinterpret_cast<SelectWait*>(self_)->orig);
  return 0;
}

void select_dealloc(PyObject* self_) {
  PyTypeObject* type = Py_TYPE(self_);  // a heap type: each instance holds a reference
  PyObject_GC_UnTrack(self_);
  select_clear(self_);
  type->tp_free(self_);
  Py_DECREF(type);
}

PyObject* select_repr(PyObject* self_) {
  return PyUnicode_FromFormat("<mlflow_profiler waiting %R>",
                              reinterpret_cast<SelectWait*>(self_)->orig);
}

PyObject* select_getattr(PyObject* self_, PyObject* name) {
  // __doc__, __name__, __qualname__, __module__ ... of the function it stands for.
  PyObject* r = PyObject_GenericGetAttr(self_, name);
  if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyErr_Clear();
  return PyObject_GetAttr(reinterpret_cast<SelectWait*>(self_)->orig, name);
}

PyMemberDef select_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SelectWait, vectorcall), READONLY, nullptr},
    {"__wrapped__", T_OBJECT, offsetof(SelectWait, orig), READONLY,
     "the selector class's own select"},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot select_slots[] = {
    {Py_tp_doc,
     const_cast<char*>("A selector's select, timed by mlflow_profiler while it profiles.")},
    {Py_tp_dealloc, reinterpret_cast<void*>(select_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(select_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(select_clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get,
     reinterpret_cast<void*>(bind_like_function)},  // selector.select is a bound method
    {Py_tp_getattro, reinterpret_cast<void*>(select_getattr)},
    {Py_tp_repr, reinterpret_cast<void*>(select_repr)},
    {Py_tp_members, select_members},
    {0, nullptr}};

PyType_Spec select_spec = {"mlflow_profiler._core.SelectWait", sizeof(SelectWait), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                               Py_TPFLAGS_METHOD_DESCRIPTOR,
                           select_slots};

// The function's registry id: the name its frame gets (co_qualname, or the
// function's __qualname__ before 3.11, which is the same), module, file, line.
bool function_of(PyObject* func, uint32_t* out) {
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(func));
  PyObject* qualname = PyObject_GetAttrString(func, "__qualname__");
  PyObject* module = PyFunction_GET_MODULE(func);  // borrowed
  if (!qualname || !PyUnicode_Check(qualname)) {
    Py_XDECREF(qualname);
    PyErr_Clear();
    return false;
  }
  *out = wait_function(compat::utf8(qualname),
                       module && PyUnicode_Check(module) ? compat::utf8(module) : "",
                       compat::utf8(code->co_filename), code->co_firstlineno);
  Py_DECREF(qualname);
  return true;
}

void patch(PyObject* cls) {
  if (!PyType_Check(cls)) return;
  PyObject* dict = reinterpret_cast<PyTypeObject*>(cls)->tp_dict;          // borrowed
  PyObject* func = dict ? PyDict_GetItemString(dict, "select") : nullptr;  // borrowed
  uint32_t function = 0;
  if (!func || !PyFunction_Check(func) || !function_of(func, &function))
    return;  // ours, or replaced by someone
  auto* w = PyObject_GC_New(SelectWait, reinterpret_cast<PyTypeObject*>(g_type));
  if (!w) return;
  w->vectorcall = select_call;
  Py_INCREF(func);
  w->orig = func;
  w->function = function;
  PyObject_GC_Track(w);
  if (PyObject_SetAttrString(cls, "select", reinterpret_cast<PyObject*>(w)) == 0) {
    Py_INCREF(cls);
    g_patched.emplace_back(cls, reinterpret_cast<PyObject*>(w));
  } else {
    Py_DECREF(w);
  }
}

PyObject* py_watch_selectors(PyObject*, PyObject*) { return PyBool_FromLong(watch_selectors()); }

PyMethodDef watch_def = {
    "watch_selectors", py_watch_selectors, METH_NOARGS,
    "Watch the selectors module's select methods while sessions collect (loop_watch.cpp)."};

}  // namespace

bool watch_selectors() {
  if (!g_patched.empty()) return true;
  compat::PendingError pending;
  // Only once the program imported selectors (asyncio does): importing it
  // here would run Python code inside the session.
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  PyObject* selectors = modules ? PyDict_GetItem(modules, g_selectors) : nullptr;
  if (!selectors || !PyModule_Check(selectors)) return false;
  // The module's dict, not getattr: a missing name (KqueueSelector on Linux)
  // makes 3.13's module getattr run ModuleSpec.has_location, Python code
  // that would run, and be recorded, inside the hook.
  PyObject* dict = PyModule_GetDict(selectors);  // borrowed
  for (const char* name : kClasses) {
    if (PyObject* cls = PyDict_GetItemString(dict, name)) patch(cls);  // borrowed
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return !g_patched.empty();
}

void unwatch() {
  if (g_native_collecting != 0 || g_reference_collecting != 0) return;
  compat::PendingError pending;
  for (auto& [cls, w] : g_patched) {
    PyObject* dict = reinterpret_cast<PyTypeObject*>(cls)->tp_dict;
    // Only ours: something that replaced it since keeps its place.
    if (dict && PyDict_GetItemString(dict, "select") == w &&
        PyObject_SetAttrString(cls, "select", reinterpret_cast<SelectWait*>(w)->orig) < 0) {
      PyErr_Clear();
    }
    Py_DECREF(w);
    Py_DECREF(cls);
  }
  g_patched.clear();
  if (PyErr_Occurred()) PyErr_Clear();
}

bool add_loop_watch(PyObject* module) {
  g_selectors = PyUnicode_InternFromString("selectors");
  if (!g_selectors) return false;
  g_type = PyType_FromSpec(&select_spec);
  if (!g_type) return false;
  Py_INCREF(g_type);
  if (PyModule_AddObject(module, "SelectWait", g_type) < 0) return false;
  PyObject* f = PyCFunction_NewEx(&watch_def, nullptr, nullptr);
  if (!f) return false;
  return PyModule_AddObject(module, "watch_selectors", f) == 0;
}

bool is_wrapper(PyObject* callable) {
  if (!g_type) return false;
  if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);
  return Py_TYPE(callable) == reinterpret_cast<PyTypeObject*>(g_type);
}

}  // namespace mlprof::loop_watch
