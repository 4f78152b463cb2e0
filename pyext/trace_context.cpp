#include "trace_context.h"

#include <Python.h>

#include "compat.h"
#include "py_util.h"

namespace mlprof::trace_context {
namespace {

PyObject* g_current = nullptr;  // mlflow_profiler._traces.current, imported on first need

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
    PyErr_Clear();
    return;
  }
  compat::Untraced untraced(compat::tstate());  // an enclosing session records none of this
  if (!g_current) {
    PyObject* mod = PyImport_ImportModule("mlflow_profiler._traces");
    if (mod) {
      g_current = PyObject_GetAttrString(mod, "current");
      Py_DECREF(mod);
    }
    if (!g_current) {
      *error = "reading the trace context failed: " + pyutil::take_error();
      return;
    }
  }
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
