/* The floor for bench_overhead.py: the cheapest hook the interpreter allows,
 * measured in the same run as the profilers.
 *
 *   3.12+: noop is a METH_FASTCALL C function that returns None; the bench
 *          registers it with sys.monitoring for the same events the native
 *          engine enables (PY_START, PY_RESUME, PY_THROW, PY_RETURN,
 *          PY_UNWIND, PY_YIELD), so the floor pays the same dispatch.
 *   all:   set_profile() installs a C profile function (PyEval_SetProfile)
 *          that returns 0 at once: the floor of the 3.9-3.11 hook path.
 *
 * Built by bench/run.sh with the C compiler against the venv's headers;
 * not part of the package. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject* noop(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  (void)args;
  (void)nargs;
  Py_RETURN_NONE;
}

static int noop_profile(PyObject* obj, PyFrameObject* frame, int what, PyObject* arg) {
  (void)obj;
  (void)frame;
  (void)what;
  (void)arg;
  return 0;
}

static PyObject* set_profile(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  PyEval_SetProfile(noop_profile, NULL);
  Py_RETURN_NONE;
}

static PyObject* clear_profile(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  PyEval_SetProfile(NULL, NULL);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"noop", (PyCFunction)(void (*)(void))noop, METH_FASTCALL, "Does nothing; returns None."},
    {"set_profile", set_profile, METH_NOARGS, "Install a C profile function that returns at once."},
    {"clear_profile", clear_profile, METH_NOARGS, "Remove the profile function."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mlprof_floor",
                                    "No-op hooks: the floor for bench_overhead.py", -1, methods};

PyMODINIT_FUNC PyInit__mlprof_floor(void) { return PyModule_Create(&module); }
