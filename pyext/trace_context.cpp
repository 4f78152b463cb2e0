#include "trace_context.h"

#include <Python.h>

#include <vector>

#include "compat.h"
#include "py_util.h"

namespace mlprof::trace_context {
namespace {

PyObject* g_traces = nullptr;   // mlflow_profiler._traces, imported on first need
PyObject* g_current = nullptr;  // its current()

// Where current() looks (_traces.context_slots()): a span is active only if
// one of these ContextVars' Context holds the span key. Rebuilt when
// sys.modules changes size or a runtime context is replaced.
struct Slot {
  PyObject* module;     // str
  PyObject* attribute;  // str
  PyObject* runtime;    // the module's attribute when the slots were built
  PyObject* var;        // its ContextVar
};
std::vector<Slot> g_slots;
PyObject* g_span_key = nullptr;  // null: no usable slots (ask current())
Py_ssize_t g_slots_for = -1;     // len(sys.modules) they were built for

void clear_slots() {
  for (const Slot& s : g_slots) {
    Py_DECREF(s.module);
    Py_DECREF(s.attribute);
    Py_DECREF(s.runtime);
    Py_DECREF(s.var);
  }
  g_slots.clear();
  Py_CLEAR(g_span_key);
}

bool import_traces() {
  if (g_current) return true;
  PyObject* mod = PyImport_ImportModule("mlflow_profiler._traces");
  if (!mod) return false;
  g_current = PyObject_GetAttrString(mod, "current");
  if (!g_current) {
    Py_DECREF(mod);
    return false;
  }
  g_traces = mod;
  return true;
}

// Rebuilds the slots from _traces.context_slots(); unusable on any surprise.
void build_slots(PyObject* modules) {
  clear_slots();
  g_slots_for = PyDict_GET_SIZE(modules);
  PyObject* r = PyObject_CallMethod(g_traces, "context_slots", nullptr);
  if (!r) {
    PyErr_Clear();
    return;
  }
  bool ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2 &&
            PyUnicode_Check(PyTuple_GET_ITEM(r, 0)) && PyTuple_Check(PyTuple_GET_ITEM(r, 1));
  if (ok) {
    PyObject* slots = PyTuple_GET_ITEM(r, 1);
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(slots); ++i) {
      PyObject* s = PyTuple_GET_ITEM(slots, i);
      ok = PyTuple_Check(s) && PyTuple_GET_SIZE(s) == 4 &&
           PyUnicode_Check(PyTuple_GET_ITEM(s, 0)) && PyUnicode_Check(PyTuple_GET_ITEM(s, 1)) &&
           PyContextVar_CheckExact(PyTuple_GET_ITEM(s, 3));
      if (!ok) break;
      Slot slot{PyTuple_GET_ITEM(s, 0), PyTuple_GET_ITEM(s, 1), PyTuple_GET_ITEM(s, 2),
                PyTuple_GET_ITEM(s, 3)};
      for (PyObject* o : {slot.module, slot.attribute, slot.runtime, slot.var}) Py_INCREF(o);
      g_slots.push_back(slot);
    }
  }
  if (ok) {
    g_span_key = PyTuple_GET_ITEM(r, 0);
    Py_INCREF(g_span_key);
  } else {
    clear_slots();
  }
  Py_DECREF(r);
}

// Each slot's runtime context is still its module's attribute.
bool slots_current(PyObject* modules) {
  for (const Slot& s : g_slots) {
    PyObject* module = PyDict_GetItemWithError(modules, s.module);  // borrowed
    PyObject* runtime = module && PyModule_Check(module)
                            ? PyDict_GetItemWithError(PyModule_GetDict(module), s.attribute)
                            : nullptr;
    if (runtime != s.runtime) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

// True when no slot's Context holds a span: current() would return None.
bool surely_no_span(PyObject* modules) {
  if (PyDict_GET_SIZE(modules) != g_slots_for || !slots_current(modules)) build_slots(modules);
  if (!g_span_key) return false;
  for (const Slot& s : g_slots) {
    PyObject* context = nullptr;
    if (PyContextVar_Get(s.var, nullptr, &context) < 0) {
      PyErr_Clear();
      return false;
    }
    if (!context) continue;  // never set, no default
    bool held = true;        // a Context that is not a dict: ask current()
    if (PyDict_Check(context)) {
      held = PyDict_GetItemWithError(context, g_span_key) != nullptr;
      if (PyErr_Occurred()) {
        PyErr_Clear();
        held = true;
      }
    }
    Py_DECREF(context);
    if (held) return false;
  }
  return true;
}

bool hex_of_length(PyObject* s, Py_ssize_t n, std::string* out) {
  if (!PyUnicode_Check(s)) return false;
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(s, &size);
  if (!text || size != n) return false;
  out->assign(text, static_cast<size_t>(size));
  return true;
}

}  // namespace

void read(std::string* trace_id, std::string* span_id, std::string* error) {
  // Without OpenTelemetry there is no span to find: one dict lookup.
  // (An interned key: PyDict_GetItemString makes and hashes a new string a call.)
  static PyObject* const key = PyUnicode_InternFromString("opentelemetry.trace");
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  if (!key) {
    PyErr_Clear();
    return;
  }
  if (!modules || !PyDict_GetItemWithError(modules, key)) {
    if (PyErr_Occurred()) PyErr_Clear();
    return;
  }
  compat::Untraced untraced(compat::tstate());  // an enclosing session records none of this
  if (!import_traces()) {
    *error = "reading the trace context failed: " + pyutil::take_error();
    return;
  }
  if (surely_no_span(modules)) return;
  PyObject* r = PyObject_CallNoArgs(g_current);
  if (!r) {
    *error = "reading the trace context failed: " + pyutil::take_error();
    return;
  }
  if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
    std::string t, s;
    if (hex_of_length(PyTuple_GET_ITEM(r, 0), 32, &t) &&
        hex_of_length(PyTuple_GET_ITEM(r, 1), 16, &s)) {
      *trace_id = std::move(t);
      *span_id = std::move(s);
    }
  }
  Py_DECREF(r);
  if (PyErr_Occurred()) PyErr_Clear();
}

}  // namespace mlprof::trace_context
