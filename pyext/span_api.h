#pragma once
#include "compat.h"

namespace mlprof {
// Adds the SpanFunction (profile_span's wrapper) and Block (profile_block)
// types to the module. Returns false with a Python error set on failure.
bool add_span_types(PyObject* module);
// True for the profiler's own C callables (a profile_span wrapper, the
// profile_block type and its methods, add_own_function's): never recorded
// as C calls.
bool is_own_callable(PyObject* callable);
// The current reference-engine (pure Python) session, a new reference, or
// null: that engine then does the work of a C entry point itself.
PyObject* reference_session();
// tp_descr_get of a C callable that stands for a Python function: looked up
// on an instance, it binds to it as the function would (a bound method).
PyObject* bind_like_function(PyObject* self, PyObject* obj, PyObject* type);
// session.<method>(label, func, args, kwargs[, extra]) with a vectorcall's arguments.
PyObject* call_reference(PyObject* session, const char* method, PyObject* label, PyObject* func,
                         PyObject* const* args, size_t nargsf, PyObject* kwnames,
                         PyObject* extra = nullptr);
// Adds a C function of the profiler (the session's __exit__) to those never recorded.
void add_own_function(PyMethodDef* def);
}  // namespace mlprof
