#include "py_util.h"

namespace mlprof::pyutil {

void clear_error() {
  if (!PyErr_Occurred()) return;
  const bool interrupt = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
  PyErr_Clear();
  if (interrupt) PyErr_SetInterrupt();
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
  if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
    clear_error();
    return "KeyboardInterrupt";
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
