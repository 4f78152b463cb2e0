#include "py_util.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace mlprof::pyutil {
namespace {

// A pending call: raises `exc` (a reference it takes) where the interpreter
// runs signal handlers, at the program's next instruction.
int raise_again(void* exc) {
  auto* e = static_cast<PyObject*>(exc);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e)), e);
  Py_DECREF(e);
  return -1;
}

// The pending exception is the program's, not a failure of the Python code
// we ran: one that is not an Exception (SystemExit, KeyboardInterrupt, a
// timeout's BaseException), which a signal handler raises wherever the main
// thread is, in a summarizer too (sys.exit() on SIGTERM: the server that
// ignored it was killed at the end of its grace period). Signal handlers run
// on the main thread only: elsewhere it is the code's own.
bool programs_own() {
  return !PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_GeneratorExit) &&
         getpid() == syscall(SYS_gettid);
}

// Takes the pending exception and raises it again at the program's next
// instruction (a KeyboardInterrupt, if that cannot be queued, by SIGINT's
// handler again).
void hand_back() {
  const bool interrupt = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value && tb) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  if (value && Py_AddPendingCall(raise_again, value) == 0) return;
  Py_XDECREF(value);
  if (interrupt) PyErr_SetInterrupt();
}

}  // namespace

void clear_error() {
  if (!PyErr_Occurred()) return;
  if (programs_own()) {
    hand_back();
  } else {
    PyErr_Clear();
  }
}

std::string str_of(PyObject* o) {
  if (!o) {
    return {};
  }
  if (PyUnicode_Check(o)) return compat::utf8(o);
  Ref s(PyObject_Str(o));
  if (!s) {
    clear_error();
    return {};
  }
  return compat::utf8(s.get());
}

std::string bounded_text(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) {
    --cut;  // UTF-8 boundary
  }
  s.resize(cut);
  return s + "...";
}

std::string take_error() {
  if (!PyErr_Occurred()) return "no exception";
  if (programs_own()) {  // not the code's failure: described by its type only
    std::string out = reinterpret_cast<PyTypeObject*>(PyErr_Occurred())->tp_name;
    hand_back();
    return out;
  }
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  Ref t(type), v(value), b(tb);
  std::string out = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "exception";
  if (v) {
    std::string text = str_of(v.get());
    if (!text.empty()) out += ": " + bounded_text(text, 200);
  }
  clear_error();
  return out;
}

[[gnu::cold, gnu::noinline]] std::string take_error_message() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string out = "unknown error";
  if (value) {
    if (PyObject* s = PyObject_Str(value)) {
      out = compat::utf8(s);
      Py_DECREF(s);
    }
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return out;
}

}  // namespace mlprof::pyutil
