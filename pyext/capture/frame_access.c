// See frame_access.h. Only field reads: nothing here changes a frame.
#include "frame_access.h"

#if PY_VERSION_HEX >= 0x030B0000
#define Py_BUILD_CORE 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <internal/pycore_frame.h>
#if PY_VERSION_HEX >= 0x030E0000
// CPython's internal headers, in the order they build:
// clang-format off
#include <internal/pycore_interpframe.h>
#include <internal/pycore_stackref.h>
#include <internal/pycore_genobject.h>
// clang-format on
#endif
#pragma GCC diagnostic pop

#if PY_VERSION_HEX >= 0x030E0000
static inline PyObject* ref_object(_PyStackRef ref) {
  return PyStackRef_IsNull(ref) ? NULL : PyStackRef_AsPyObjectBorrow(ref);
}
#endif

PyCodeObject* mlprof_frame_code(struct _PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030E0000
  PyObject* c = ref_object(f->f_executable);
#elif PY_VERSION_HEX >= 0x030D0000
  PyObject* c = f->f_executable;
#else
  PyObject* c = (PyObject*)f->f_code;
#endif
  return c && PyCode_Check(c) ? (PyCodeObject*)c : NULL;
}

PyObject* mlprof_frame_globals(struct _PyInterpreterFrame* f) { return f->f_globals; }

PyObject* mlprof_frame_local(struct _PyInterpreterFrame* f, int i) {
#if PY_VERSION_HEX >= 0x030E0000
  return ref_object(f->localsplus[i]);
#else
  return f->localsplus[i];
#endif
}

PyObject* mlprof_frame_generator(struct _PyInterpreterFrame* f) {
  if (f->owner != FRAME_OWNED_BY_GENERATOR) return NULL;
#if PY_VERSION_HEX >= 0x030E0000
  return (PyObject*)_PyGen_GetGeneratorFromFrame(f);
#elif PY_VERSION_HEX >= 0x030C0000
  return (PyObject*)_PyFrame_GetGenerator(f);
#else
  return (PyObject*)((char*)f - offsetof(PyGenObject, gi_iframe));
#endif
}

int mlprof_frame_lasti(struct _PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_InterpreterFrame_GetLasti(f) / (int)sizeof(_Py_CODEUNIT);
#else
  return _PyInterpreterFrame_LASTI(f);
#endif
}

int mlprof_generator_state(PyObject* gen) {
  // Coroutines and async generators share the generator's head.
  // NOLINTNEXTLINE(bugprone-signed-char-misuse): the states below 0 are signed
  const int state = ((PyGenObject*)gen)->gi_frame_state;
  return state < FRAME_EXECUTING ? -1 : state == FRAME_EXECUTING ? 0 : 1;
}

struct _PyInterpreterFrame* mlprof_current_frame(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030D0000
  return ts->current_frame;
#else
  return ts->cframe->current_frame;
#endif
}

struct _PyInterpreterFrame* mlprof_frame_previous(struct _PyInterpreterFrame* f) {
  return f->previous;
}

int mlprof_frame_is_python(struct _PyInterpreterFrame* f) {
  // THREAD, GENERATOR and FRAME_OBJECT are 0-2 on every release; the shims
  // (CSTACK 3.12/3.13, INTERPRETER 3.14+) come after.
  return f->owner <= FRAME_OWNED_BY_FRAME_OBJECT;
}

#endif
