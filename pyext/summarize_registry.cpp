// Registered summarizers (summarize::set_summarizer): Python callables that
// return an IOSummary, checked field by field before it is used.

#include <cstdint>
#include <string>
#include <utility>

#include "summarize_internal.h"

namespace mlprof::summarize::detail {
namespace {

bool optional_text(PyObject* v, size_t max, std::string* out) {
  if (v == Py_None) {
    out->clear();
    return true;
  }
  if (!PyUnicode_Check(v)) return false;
  *out = bounded_text(compat::utf8(v), max);
  return true;
}

bool optional_int(PyObject* v, int64_t* out) {
  if (v == Py_None) {
    *out = -1;
    return true;
  }
  if (PyBool_Check(v) || !to_int64(v, out)) return false;
  if (*out < 0) *out = -1;
  return true;
}

// A Python IOSummary, checked field by field: the dataclass does not check
// its field types, so a summarizer can put anything there.
bool summary_from_python(PyObject* s, IOSummary* out, std::string* why) {
  const Names& n = names();
  Ref type_name = get_attr(s, n.type_name), shape = get_attr(s, n.shape),
      dtype = get_attr(s, n.dtype), length = get_attr(s, n.length),
      size = get_attr(s, n.size_bytes), device = get_attr(s, n.device),
      repr = get_attr(s, n.repr_short);
  if (!type_name || !shape || !dtype || !length || !size || !device || !repr) {
    *why = "a field could not be read";
    return false;
  }
  if (!PyUnicode_Check(type_name.get())) {
    *why = "type_name is not a str";
    return false;
  }
  out->type_name = bounded_text(compat::utf8(type_name.get()), 200);
  if (shape.get() != Py_None) {
    Ref fast(PySequence_Fast(shape.get(), "shape"));
    if (!fast || PySequence_Fast_GET_SIZE(fast.get()) > 64) {
      clear_error();
      *why = "shape is not a tuple of ints";
      return false;
    }
    out->has_shape = true;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
      int64_t d = -1;
      Ref item = borrow(PySequence_Fast_GET_ITEM(fast.get(), i));  // __index__ may change the list
      if (!optional_int(item.get(), &d)) {
        *why = "shape is not a tuple of ints";
        return false;
      }
      out->shape.push_back(d);
    }
  }
  if (!optional_text(dtype.get(), summarize::kDtypeMax, &out->dtype)) {
    *why = "dtype is not a str or None";
    return false;
  }
  if (!optional_text(device.get(), 64, &out->device)) {
    *why = "device is not a str or None";
    return false;
  }
  if (repr.get() != Py_None) {
    if (!PyUnicode_Check(repr.get())) {
      *why = "repr_short is not a str or None";
      return false;
    }
    out->repr_short = bounded(repr.get());
  }
  if (!optional_int(length.get(), &out->length) || !optional_int(size.get(), &out->size_bytes)) {
    *why = "length or size_bytes is not an int or None";
    return false;
  }
  return true;
}

}  // namespace

// True when the registered summarizer gave a usable summary.
bool call_registered(PyObject* o, const TypeInfo& info, IOSummary* out) {
  State& st = state();
  if (!st.summary_class) return false;
  Ref fn = borrow(info.summarizer);
  Ref cls = borrow(st.summary_class);
  Ref result(PyObject_CallOneArg(fn.get(), o));
  if (!result) {
    const std::string why = take_error();
    log_failure("summarize.summarizer-raised:" + info.type_name,
                "the registered summarizer raised " + why + " on a " + info.type_name +
                    "; the built-in summary is used instead");
    return false;
  }
  std::string why;
  if (!PyObject_TypeCheck(result.get(), reinterpret_cast<PyTypeObject*>(cls.get()))) {
    log_failure("summarize.summarizer-returned:" + info.type_name,
                "the registered summarizer returned a value of type " +
                    std::string(Py_TYPE(result.get())->tp_name) + ", not an IOSummary, for a " +
                    info.type_name + "; the built-in summary is used instead");
    return false;
  }
  IOSummary s;
  if (!summary_from_python(result.get(), &s, &why)) {
    log_failure("summarize.summarizer-invalid:" + info.type_name,
                "the registered summarizer returned an IOSummary whose " + why + ", for a " +
                    info.type_name + "; the built-in summary is used instead");
    return false;
  }
  *out = std::move(s);
  return true;
}

}  // namespace mlprof::summarize::detail

namespace mlprof::summarize {

bool from_python(PyObject* summary, IOSummary* out, std::string* why) {
  return detail::summary_from_python(summary, out, why);
}

void set_summarizer(PyObject* type, PyObject* fn) {
  detail::State& st = detail::state();
  detail::Ref released;  // dropped after the registry is consistent again
  auto it = st.registry.begin();
  for (; it != st.registry.end(); ++it) {
    if (it->first == type) break;
  }
  if (it != st.registry.end()) {
    released = detail::Ref(it->second);
    if (fn) {
      Py_INCREF(fn);
      it->second = fn;
    } else {
      detail::Ref cls(it->first);
      st.registry.erase(it);
      detail::clear_types();
      return;
    }
  } else if (fn) {
    Py_INCREF(type);
    Py_INCREF(fn);
    st.registry.emplace_back(type, fn);
  }
  detail::clear_types();
}

size_t summarizer_count() { return detail::state().registry.size(); }

}  // namespace mlprof::summarize
