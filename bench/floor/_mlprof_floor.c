/* The floor for bench_overhead.py: the cheapest hook the interpreter allows,
 * measured in the same run as the profilers.
 *
 *   3.12+: noop is a METH_FASTCALL C function that returns None; the bench
 *          registers it with sys.monitoring for the same events the native
 *          engine enables (PY_START, PY_RESUME, PY_THROW, PY_RETURN,
 *          PY_UNWIND, PY_YIELD), so the floor pays the same dispatch.
 *   all:   set_profile() installs a C profile function (PyEval_SetProfile)
 *          that returns 0 at once: the floor of the 3.9-3.11 hook path.
 *   stamp, set_stamp_profile: the same, but each event reads the capture
 *          clock (rdtsc where the engine uses it) and writes 16 bytes (the
 *          ticks and the code or frame) to a ring: a span's two events are
 *          the physical floor of recording it (two clock reads, the
 *          writes), on top of the dispatch that noop measures.
 *
 * Built by bench/run.sh with the C compiler against the venv's headers;
 * not part of the package. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t ticks(void) { return __rdtsc(); }
#else
#include <time.h>
static inline uint64_t ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

typedef struct {
  uint64_t ticks;
  uint64_t what;
} Stamp;
#define RING 4096 /* a power of two: 64 KiB, in cache as an event buffer is */
static Stamp ring[RING];
static size_t pos;

static inline void put(uint64_t what) {
  Stamp* s = &ring[pos++ & (RING - 1)];
  s->ticks = ticks();
  s->what = what;
}

static PyObject* noop(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  (void)args;
  (void)nargs;
  Py_RETURN_NONE;
}

static PyObject* stamp(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  put(nargs ? (uint64_t)(uintptr_t)args[0] : 0);
  Py_RETURN_NONE;
}

static int stamp_profile(PyObject* obj, PyFrameObject* frame, int what, PyObject* arg) {
  (void)obj;
  (void)arg;
  put((uint64_t)(uintptr_t)frame ^ (uint64_t)what);
  return 0;
}

static PyObject* set_stamp_profile(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  PyEval_SetProfile(stamp_profile, NULL);
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
    {"stamp", (PyCFunction)(void (*)(void))stamp, METH_FASTCALL,
     "Reads the clock and writes 16 bytes to a ring; returns None."},
    {"set_stamp_profile", set_stamp_profile, METH_NOARGS,
     "Install a C profile function that stamps each event (as stamp)."},
    {"set_profile", set_profile, METH_NOARGS, "Install a C profile function that returns at once."},
    {"clear_profile", clear_profile, METH_NOARGS, "Remove the profile function."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mlprof_floor",
                                    "No-op hooks: the floor for bench_overhead.py", -1, methods};

PyMODINIT_FUNC PyInit__mlprof_floor(void) { return PyModule_Create(&module); }
