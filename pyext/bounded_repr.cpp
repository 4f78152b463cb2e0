// Bounded reprs: the repr_short of a summary, cut to kReprMax characters,
// and the repr() calls that produce it, guarded against raising and slow
// __repr__s.

#include <string>

#include "clock.h"
#include "summarize_internal.h"

namespace mlprof::summarize::detail {
namespace {

void append_utf8(std::string& out, Py_UCS4 c) {
  if (c >= 0xD800 && c <= 0xDFFF) {
    c = '?';  // a lone surrogate cannot be encoded
  }
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

void append_chars(std::string& out, PyObject* s, Py_ssize_t from, Py_ssize_t to) {
  for (Py_ssize_t i = from; i < to; ++i) append_utf8(out, PyUnicode_ReadChar(s, i));
}

// Length of the repr token at i: an escape sequence is never cut in two.
Py_ssize_t escape_len(PyObject* s, Py_ssize_t i, Py_ssize_t end) {
  if (PyUnicode_ReadChar(s, i) != '\\' || i + 1 >= end) return 1;
  switch (PyUnicode_ReadChar(s, i + 1)) {
    case 'x':
      return 4;
    case 'u':
      return 6;
    case 'U':
      return 10;
    default:
      return 2;
  }
}

}  // namespace

// `r` (a str) bounded to kReprMax characters. A string literal is cut inside
// its quotes ('abc...', b'abc...', bytearray(b'abc...')), without splitting an
// escape; anything else is cut at the end ("Foo(a=1, ..."). `source_cut`:
// r is the repr of a prefix of the value, so it is marked cut even if short.
std::string bounded(PyObject* r, bool source_cut) {
  if (!r || !PyUnicode_Check(r)) {
    return {};
  }
  // A summary is one line: a multi-line repr (an estimator's pretty print)
  // has its whitespace runs collapsed, as " ".join(r.split()) would. A str's
  // repr escapes its newlines, so string literals are never changed.
  Ref single_line;
  for (const Py_UCS4 c : {U'\n', U'\r', U'\t'}) {
    if (PyUnicode_FindChar(r, c, 0, PyUnicode_GetLength(r), 1) < 0) continue;
    Ref words(PyUnicode_Split(r, nullptr, -1));
    Ref space(PyUnicode_FromString(" "));
    single_line = Ref(words && space ? PyUnicode_Join(space.get(), words.get()) : nullptr);
    if (!single_line) {
      clear_error();
      return {};
    }
    r = single_line.get();
    break;
  }
  const Py_ssize_t n = PyUnicode_GetLength(r);
  if (n < 0) {
    clear_error();
    return {};
  }
  const auto max = static_cast<Py_ssize_t>(summarize::kReprMax);
  if (n <= max && !source_cut) return compat::utf8(r);
  std::string out;
  Py_ssize_t close = -1;
  const Py_UCS4 last = PyUnicode_ReadChar(r, n - 1);
  if (last == '\'' || last == '"') {
    close = n - 1;
  } else if (last == ')' && n >= 2) {
    const Py_UCS4 q = PyUnicode_ReadChar(r, n - 2);
    if (q == '\'' || q == '"') close = n - 2;
  }
  if (close > 0) {
    const Py_UCS4 q = PyUnicode_ReadChar(r, close);
    Py_ssize_t open = -1;
    for (Py_ssize_t i = 0; i < close && i < max; ++i) {
      if (PyUnicode_ReadChar(r, i) == q) {
        open = i;
        break;
      }
    }
    const Py_ssize_t budget = max - (open + 1) - (n - close) - 3;
    if (open >= 0 && open < close && budget >= 0) {
      Py_ssize_t end = open + 1;
      while (end < close) {
        const Py_ssize_t len = escape_len(r, end, close);
        if (end + len - (open + 1) > budget) break;
        end += len;
      }
      append_chars(out, r, 0, end);
      out += "...";
      append_chars(out, r, close, n);
      return out;
    }
  }
  append_chars(out, r, 0, max - 3);
  out += "...";
  return out;
}

// repr() of an object, guarded: a raising __repr__ gives no repr (logged once
// per type); a slow one is not called again for its type.
void guarded_repr(PyObject* o, TypeInfo& info, IOSummary* out) {
  if (info.repr_slow || Py_TYPE(o)->tp_repr == PyBaseObject_Type.tp_repr) {
    return;  // no address noise
  }
  const int64_t t0 = clock::monotonic_ns();
  Ref r(PyObject_Repr(o));
  const int64_t took = clock::monotonic_ns() - t0;
  if (r) {
    out->repr_short = bounded(r.get());
  } else {
    const std::string why = take_error();
    log_failure(
        "summarize.repr-raised:" + info.type_name,
        "repr() of a " + info.type_name + " raised " + why + "; its I/O summaries have no repr");
  }
  // A type's first repr may import or warm caches (numpy's does): it gets
  // a larger allowance. One slow call is not enough: the thread may have
  // been preempted during it; two in a row are.
  const bool first = !info.repr_seen;
  info.repr_seen = true;
  const bool slow = took > (first ? summarize::kSlowFirstReprNs : summarize::kSlowReprNs);
  info.repr_strikes = slow ? info.repr_strikes + 1 : 0;
  if (info.repr_strikes >= 2) {
    info.repr_slow = true;
    log_failure("summarize.repr-slow:" + info.type_name,
                "repr() of a " + info.type_name + " took " + std::to_string(took / 1000) +
                    " us; it is not called again for I/O summaries of this type");
  }
}

// A prefix of a str, bytes or bytearray, repr'd: the cost does not grow with
// the value.
void prefix_repr(PyObject* o, Kind kind, IOSummary* out) {
  const auto max = static_cast<Py_ssize_t>(summarize::kReprMax);
  Ref prefix;
  bool cut = false;
  if (kind == Kind::kStr) {
    const Py_ssize_t n = PyUnicode_GetLength(o);
    cut = n > max;
    prefix = Ref(PyUnicode_Substring(o, 0, cut ? max : n));
  } else if (kind == Kind::kBytes) {
    const Py_ssize_t n = PyBytes_GET_SIZE(o);
    cut = n > max;
    prefix = Ref(PyBytes_FromStringAndSize(PyBytes_AS_STRING(o), cut ? max : n));
  } else {
    const Py_ssize_t n = PyByteArray_GET_SIZE(o);
    cut = n > max;
    prefix = Ref(PyByteArray_FromStringAndSize(PyByteArray_AS_STRING(o), cut ? max : n));
  }
  if (!prefix) {
    clear_error();
    return;
  }
  // The exact builtin's repr, also for a subclass unless its own was asked for.
  PyTypeObject* base = kind == Kind::kStr     ? &PyUnicode_Type
                       : kind == Kind::kBytes ? &PyBytes_Type
                                              : &PyByteArray_Type;
  Ref r(base->tp_repr(prefix.get()));
  if (!r) {
    clear_error();
    return;
  }
  out->repr_short = bounded(r.get(), cut);
}

void summarize_number(PyObject* o, Kind kind, IOSummary* out) {
  if (kind == Kind::kInt) {
    int overflow = 0;
    PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) {
      // A huge int's repr costs quadratic time (and is refused past 4300 digits).
      Ref bits = call_method0(o, names().bit_length);
      int64_t b = 0;
      if (to_int64(bits.get(), &b) && b > 256) {
        out->repr_short = "<" + std::to_string(b) + "-bit int>";
        return;
      }
    } else if (PyErr_Occurred()) {
      clear_error();
    }
  }
  PyTypeObject* base = kind == Kind::kInt     ? &PyLong_Type
                       : kind == Kind::kFloat ? &PyFloat_Type
                       : kind == Kind::kBool  ? &PyBool_Type
                                              : &PyComplex_Type;
  Ref r(base->tp_repr(o));
  if (r) {
    out->repr_short = bounded(r.get());
  } else {
    clear_error();
  }
}

}  // namespace mlprof::summarize::detail
