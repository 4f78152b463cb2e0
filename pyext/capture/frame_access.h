#pragma once
// Reads of CPython's interpreter frame (struct _PyInterpreterFrame) that no
// public C API offers, for the frame evaluation hook (eval_frame.cpp, 3.11+).
// frame_access.c is compiled as C against the interpreter's own internal
// headers, so each release's layout comes from that release (3.14 made the
// locals tagged stack references); the C++ side sees only these functions.

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

struct _PyInterpreterFrame;

// The frame's code object (borrowed), or NULL if it runs no code object.
PyCodeObject* mlprof_frame_code(struct _PyInterpreterFrame* f);
// The frame's globals (borrowed).
PyObject* mlprof_frame_globals(struct _PyInterpreterFrame* f);
// Fast local i (borrowed; NULL if unbound): the parameters come first.
PyObject* mlprof_frame_local(struct _PyInterpreterFrame* f, int i);
// The generator or coroutine that owns the frame (borrowed), NULL for a plain frame.
PyObject* mlprof_frame_generator(struct _PyInterpreterFrame* f);
// Index (in code units) of the instruction the frame last executed.
int mlprof_frame_lasti(struct _PyInterpreterFrame* f);
// A generator's state: < 0 created or suspended, 0 running, > 0 finished.
int mlprof_generator_state(PyObject* gen);
// Whether a frame is a Python function's (not a shim the interpreter pushes
// where C code calls into Python, 3.12+).
int mlprof_frame_is_python(struct _PyInterpreterFrame* f);
// The thread's innermost frame, and the frame below one (NULL at the bottom).
struct _PyInterpreterFrame* mlprof_current_frame(PyThreadState* ts);
struct _PyInterpreterFrame* mlprof_frame_previous(struct _PyInterpreterFrame* f);

#ifdef __cplusplus
}
#endif
