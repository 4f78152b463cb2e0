#pragma once
// summarize(obj) -> IOSummary in C++ (spec 000 section 3.2; issue 3). Called
// by the capture hooks for arguments and return values within the I/O depth,
// and by mlflow_profiler.summarize().

#include "compat.h"

#include "core/io.h"

namespace mlprof {

// Fills `out` from `obj`. GIL held. Never raises and never leaves an
// exception set: a pending exception is saved and restored around it. Keeps
// no reference to `obj` or to anything reachable from it.
void summarize_object(PyObject* obj, IOSummary* out);

}  // namespace mlprof
