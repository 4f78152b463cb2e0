// See gil_range.h. Reads two fields; changes nothing.
#include "gil_range.h"

// Before Python.h, as CPython builds itself: 3.12.1's cpython/objimpl.h
// otherwise defines a _PyGC_FINALIZED macro that pycore_gc.h then clashes with.
#define Py_BUILD_CORE 1
#include <Python.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#if PY_VERSION_HEX >= 0x030C0000
#include <internal/pycore_interp.h>
#else
#include <internal/pycore_runtime.h>
#endif
#pragma GCC diagnostic pop

void mlprof_gil_range(uint64_t* start, uint64_t* bytes) {
#if PY_VERSION_HEX >= 0x030C0000
  struct _gil_runtime_state* gil = PyInterpreterState_Get()->ceval.gil;
#else
  struct _gil_runtime_state* gil = &_PyRuntime.ceval.gil;
#endif
  *start = (uint64_t)(uintptr_t)gil;
  *bytes = gil != NULL ? (uint64_t)sizeof(*gil) : 0;
}
