#pragma once
// CPython version shims for the capture mechanisms (3.9 to 3.15). Each shim
// says which release it covers; everything else uses the stable C API.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include <string>

#if PY_VERSION_HEX >= 0x030C0000
#define MLPROF_HAS_MONITORING 1  // sys.monitoring (PEP 669), 3.12+
#else
#define MLPROF_HAS_MONITORING 0
#endif
// 3.11+: a PEP 523 frame evaluation function reports the frames within the
// ceiling (capture/eval_frame.cpp).
#if PY_VERSION_HEX >= 0x030B0000
#define MLPROF_HAS_EVAL_HOOK 1
#else
#define MLPROF_HAS_EVAL_HOOK 0
#endif

namespace mlprof::compat {

// The runtime is finalizing (a thread that takes the GIL now is ended).
inline bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

inline PyThreadState* tstate() {
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked();
#else
  return _PyThreadState_UncheckedGet();
#endif
}

// The thread's tracing count raised for a scope, as CPython raises it around
// a trace or profile callback: the frames run meanwhile reach no profile or
// trace function, no sys.monitoring callback and no capture hook.
class Untraced {
 public:
  explicit Untraced(PyThreadState* ts) : ts_(ts) {
#if PY_VERSION_HEX >= 0x030B0000
    PyThreadState_EnterTracing(ts_);
#elif PY_VERSION_HEX >= 0x030A0000
    ++ts_->tracing;
    ts_->cframe->use_tracing = 0;
#else
    ++ts_->tracing;
    ts_->use_tracing = 0;
#endif
  }
  ~Untraced() {
#if PY_VERSION_HEX >= 0x030B0000
    PyThreadState_LeaveTracing(ts_);
#elif PY_VERSION_HEX >= 0x030A0000
    --ts_->tracing;
    ts_->cframe->use_tracing = (ts_->c_tracefunc != nullptr || ts_->c_profilefunc != nullptr);
#else
    --ts_->tracing;
    ts_->use_tracing = (ts_->c_tracefunc != nullptr || ts_->c_profilefunc != nullptr);
#endif
  }
  Untraced(const Untraced&) = delete;
  Untraced& operator=(const Untraced&) = delete;

 private:
  PyThreadState* ts_;
};

// Keeps an exception that is being raised or thrown in pending across work
// that must not see or clear it (a capture event run in the middle).
class PendingError {
 public:
  PendingError() {
    if (!PyErr_Occurred()) return;
#if PY_VERSION_HEX >= 0x030C0000
    value_ = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&type_, &value_, &tb_);
#endif
  }
  ~PendingError() {
    if (!value_ && !type_) return;
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(value_);
#else
    PyErr_Restore(type_, value_, tb_);
#endif
  }
  PendingError(const PendingError&) = delete;
  PendingError& operator=(const PendingError&) = delete;

 private:
  PyObject* type_ = nullptr;
  PyObject* value_ = nullptr;
  PyObject* tb_ = nullptr;
};

// PEP 523 per-code extra slots, renamed PyUnstable_* in 3.12.
inline Py_ssize_t request_code_extra_index() {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Eval_RequestCodeExtraIndex(nullptr);
#else
  return _PyEval_RequestCodeExtraIndex(nullptr);
#endif
}
inline int get_code_extra(PyObject* code, Py_ssize_t index, void** extra) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_GetExtra(code, index, extra);
#else
  return _PyCode_GetExtra(code, index, extra);
#endif
}
// get_code_extra without the call into the interpreter (two loads on every
// event of a full capture). The layout is CPython's internal
// _PyCodeObjectExtra, unchanged since 3.6; the free-threaded build keeps the
// API (it may synchronize the read).
inline void* code_extra(PyCodeObject* code, Py_ssize_t index) {
#ifdef Py_GIL_DISABLED
  void* extra = nullptr;
  if (get_code_extra(reinterpret_cast<PyObject*>(code), index, &extra) < 0) PyErr_Clear();
  return extra;
#else
  struct Extra {
    Py_ssize_t ce_size;
    void* ce_extras[1];
  };
  const auto* e = static_cast<const Extra*>(code->co_extra);
  return e && index >= 0 && index < e->ce_size ? e->ce_extras[index] : nullptr;
#endif
}
inline int set_code_extra(PyObject* code, Py_ssize_t index, void* extra) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_SetExtra(code, index, extra);
#else
  return _PyCode_SetExtra(code, index, extra);
#endif
}

// Borrowed code object of a frame (the setprofile path, 3.9-3.11).
inline PyCodeObject* frame_code(PyFrameObject* f) {
#if PY_VERSION_HEX >= 0x030B0000
  PyCodeObject* code = PyFrame_GetCode(f);  // new reference; the frame keeps it alive
  Py_DECREF(code);
  return code;
#else
  return f->f_code;
#endif
}

// Address of the generator/coroutine that owns a frame, 0 for plain frames.
// Only an identity: it is never dereferenced.
inline uintptr_t frame_generator(PyFrameObject* f) {
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* gen = PyFrame_GetGenerator(f);
  if (!gen) return 0;
  Py_DECREF(gen);  // the frame belongs to the generator, which is alive
  return reinterpret_cast<uintptr_t>(gen);
#else
  return reinterpret_cast<uintptr_t>(f->f_gen);
#endif
}

// Setprofile path: is this PyTrace_RETURN a yield/await rather than the end
// of the frame?
inline bool frame_is_suspending(PyFrameObject* f) {
#if PY_VERSION_HEX >= 0x030C0000
  (void)f;
  return false;  // 3.12+ uses sys.monitoring, which reports PY_YIELD itself
#elif PY_VERSION_HEX >= 0x030B0000
  // 3.11: YIELD_VALUE marks the generator FRAME_SUSPENDED (-1 in
  // internal/pycore_frame.h) before the profile function sees the return.
  PyObject* gen = PyFrame_GetGenerator(f);
  if (!gen) return false;
  bool suspended = reinterpret_cast<PyGenObject*>(gen)->gi_frame_state == -1;
  Py_DECREF(gen);
  return suspended;
#elif PY_VERSION_HEX >= 0x030A0000
  return f->f_gen != nullptr && f->f_state == FRAME_SUSPENDED;  // 3.10
#else
  return f->f_gen != nullptr && f->f_stacktop != nullptr;  // 3.9: set only by a yield
#endif
}

// A str as UTF-8; anything else (or a failed encoding) gives "".
inline std::string utf8(PyObject* s) {
  if (!s || !PyUnicode_Check(s)) return {};
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (!p) {
    PyErr_Clear();
    return {};
  }
  return std::string(p, static_cast<size_t>(n));
}

// Parameters of a frame's code at its start: calls fn(name, value) for each
// (value borrowed for the call), in declaration order, at most `max`. Reads
// the frame's fast locals without building f_locals where the C API allows:
// 3.12+ PyFrame_GetVar; 3.9/3.10 f_localsplus (an argument that is also a
// cell lives in its cell); 3.11 has neither, so it reads PyFrame_GetLocals.
template <typename Fn>
void for_each_parameter(PyFrameObject* frame, PyCodeObject* code, int max, Fn&& fn) {
  int n = code->co_argcount + code->co_kwonlyargcount + ((code->co_flags & CO_VARARGS) ? 1 : 0) +
          ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  if (n > max) n = max;
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* names = code->co_localsplusnames;
#else
  PyObject* names = code->co_varnames;
#endif
  if (!names || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) < n) return;
#if PY_VERSION_HEX >= 0x030C0000
  for (int i = 0; i < n; ++i) {
    PyObject* name = PyTuple_GET_ITEM(names, i);
    PyObject* value = PyFrame_GetVar(frame, name);  // new reference
    if (!value) {
      PyErr_Clear();
      continue;
    }
    fn(name, value);
    Py_DECREF(value);
  }
#elif PY_VERSION_HEX >= 0x030B0000
  PyObject* locals = PyFrame_GetLocals(frame);  // new reference
  if (!locals) {
    PyErr_Clear();
    return;
  }
  if (PyDict_Check(locals)) {
    for (int i = 0; i < n; ++i) {
      PyObject* name = PyTuple_GET_ITEM(names, i);
      if (PyObject* value = PyDict_GetItemWithError(locals, name))
        fn(name, value);
      else
        PyErr_Clear();
    }
  }
  Py_DECREF(locals);
#else
  for (int i = 0; i < n; ++i) {
    PyObject* value = frame->f_localsplus[i];
    if (!value && code->co_cell2arg) {
      // The argument was moved into its cell before the call event.
      const Py_ssize_t ncells = PyTuple_GET_SIZE(code->co_cellvars);
      for (Py_ssize_t c = 0; c < ncells; ++c) {
        if (code->co_cell2arg[c] != i) continue;
        PyObject* cell = frame->f_localsplus[code->co_nlocals + c];
        if (cell && PyCell_Check(cell)) value = PyCell_GET(cell);
        break;
      }
    }
    if (value) fn(PyTuple_GET_ITEM(names, i), value);
  }
#endif
}

// The same from a frame as the frame evaluation hook sees it (3.11+, before
// the frame runs or when a generator runs): `local(i)` gives fast local i,
// borrowed. An argument that is also a cell is in its cell once MAKE_CELL
// ran, which a generator has done before its first run.
template <typename Local, typename Fn>
void for_each_parameter_of(Local&& local, PyCodeObject* code, int max, Fn&& fn) {
#if PY_VERSION_HEX >= 0x030B0000
  constexpr unsigned char kFastCell = 0x40;  // CO_FAST_CELL, internal/pycore_code.h
  int n = code->co_argcount + code->co_kwonlyargcount + ((code->co_flags & CO_VARARGS) ? 1 : 0) +
          ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  if (n > max) n = max;
  PyObject* names = code->co_localsplusnames;
  PyObject* kinds = code->co_localspluskinds;
  if (!names || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) < n || !kinds ||
      !PyBytes_Check(kinds) || PyBytes_GET_SIZE(kinds) < n) {
    return;
  }
  for (int i = 0; i < n; ++i) {
    PyObject* value = local(i);
    if (value && (PyBytes_AS_STRING(kinds)[i] & kFastCell) && PyCell_Check(value))
      value = PyCell_GET(value);
    if (value) fn(PyTuple_GET_ITEM(names, i), value);
  }
#else
  (void)local, (void)code, (void)max, (void)fn;
#endif
}

constexpr int kGeneratorFlags =
    CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;

inline bool is_generator_code(PyCodeObject* code) {
  return (code->co_flags & kGeneratorFlags) != 0;
}

}  // namespace mlprof::compat
