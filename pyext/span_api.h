#pragma once
#include "compat.h"

namespace mlprof {
// Adds the SpanFunction (profile_span's wrapper) and Block (profile_block)
// types to the module. Returns false with a Python error set on failure.
bool add_span_types(PyObject* module);
}  // namespace mlprof
