// Bindings for I/O summaries: _core.summarize (a plain METH_O function, so a
// call costs what the summary costs), the summarizer registry and a C++
// timing loop for bench/bench_summarize.py.

#include <pybind11/pybind11.h>

#include <structmember.h>

#include <cstdint>

#include "bindings.h"
#include "clock.h"
#include "summarize.h"

namespace py = pybind11;

namespace mlprof {
namespace {

#if PY_VERSION_HEX >= 0x030C0000
constexpr int kObjectEx = Py_T_OBJECT_EX;
#else
constexpr int kObjectEx = T_OBJECT_EX;
#endif

PyObject* optional_str(const std::string& v) {
  if (v.empty()) Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(v.data(), static_cast<Py_ssize_t>(v.size()), "replace");
}

PyObject* optional_int(int64_t v) {
  if (v < 0) Py_RETURN_NONE;
  return PyLong_FromLongLong(v);
}

constexpr int kFields = 7;
const char* const kFieldNames[kFields] = {"type_name",  "shape",  "dtype",     "length",
                                          "size_bytes", "device", "repr_short"};

// Where each field lives in an instance: the slot offsets of the dataclass
// (slots=True, 3.10+), or 0 where it keeps a __dict__ (3.9).
Py_ssize_t g_slot_offsets[kFields] = {};
PyObject* g_field_names[kFields] = {};

bool find_slots(PyObject* cls) {
  for (int i = 0; i < kFields; ++i) {
    g_slot_offsets[i] = 0;
    if (!g_field_names[i]) g_field_names[i] = PyUnicode_InternFromString(kFieldNames[i]);
    if (!g_field_names[i]) return false;
  }
  for (int i = 0; i < kFields; ++i) {
    PyObject* d = PyObject_GetAttr(cls, g_field_names[i]);
    if (!d) {
      PyErr_Clear();
      return true;
    }
    const bool member = Py_TYPE(d) == &PyMemberDescr_Type;
    PyMemberDef* def = member ? reinterpret_cast<PyMemberDescrObject*>(d)->d_member : nullptr;
    Py_DECREF(d);
    if (!def || def->type != kObjectEx || def->offset <= 0) {
      for (Py_ssize_t& off : g_slot_offsets) {
        off = 0;  // not all slots: use setattr
      }
      return true;
    }
    g_slot_offsets[i] = def->offset;
  }
  return true;
}

}  // namespace

// The Python IOSummary for s, built without running the dataclass' __init__
// (frozen: it would go through object.__setattr__ seven times): the instance
// is allocated and its fields stored in their slots (or set with the generic
// setattr, which a frozen dataclass' __setattr__ does not intercept).
PyObject* io_summary_object(const IOSummary& s) {
  PyObject* cls = summarize::summary_class();
  if (!cls) {
    PyErr_SetString(PyExc_RuntimeError,
                    "mlflow_profiler._summaries is not initialised: import mlflow_profiler");
    return nullptr;
  }
  PyObject* shape = Py_None;
  Py_INCREF(Py_None);
  if (s.has_shape) {
    Py_DECREF(Py_None);
    shape = PyTuple_New(static_cast<Py_ssize_t>(s.shape.size()));
    for (size_t i = 0; shape && i < s.shape.size(); ++i) {
      PyObject* d = optional_int(s.shape[i]);  // -1 (unknown) is None
      if (!d) {
        Py_CLEAR(shape);
      } else {
        PyTuple_SET_ITEM(shape, static_cast<Py_ssize_t>(i), d);
      }
    }
  }
  PyObject* values[kFields] = {
      PyUnicode_DecodeUTF8(s.type_name.data(), static_cast<Py_ssize_t>(s.type_name.size()),
                           "replace"),
      shape,
      optional_str(s.dtype),
      optional_int(s.length),
      optional_int(s.size_bytes),
      optional_str(s.device),
      optional_str(s.repr_short),
  };
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  PyObject* inst = type->tp_alloc(type, 0);
  bool ok = inst != nullptr;
  for (int i = 0; i < kFields; ++i) {
    ok = ok && values[i];
    if (!ok) {
      Py_XDECREF(values[i]);
    } else if (g_slot_offsets[i] > 0) {
      *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(inst) + g_slot_offsets[i]) =
          values[i];  // steals
    } else {
      ok = PyObject_GenericSetAttr(inst, g_field_names[i], values[i]) == 0;
      Py_DECREF(values[i]);
    }
  }
  if (!ok) {
    Py_XDECREF(inst);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return nullptr;
  }
  return inst;
}

namespace {

PyObject* py_summarize(PyObject*, PyObject* obj) {
  IOSummary s;
  summarize_object(obj, &s);
  return io_summary_object(s);
}

PyMethodDef g_summarize_def = {
    "summarize", py_summarize, METH_O,
    "summarize(obj) -> IOSummary\n--\n\nThe I/O summary of obj, as the capture hooks record it "
    "(mlflow_profiler.summarize documents it)."};

}  // namespace

void bind_io(py::module_& m) {
  PyObject* fn = PyCFunction_NewEx(&g_summarize_def, nullptr, m.attr("__name__").ptr());
  if (!fn) throw py::error_already_set();
  m.attr("summarize") = py::reinterpret_steal<py::object>(fn);

  m.def(
      "_io_setup",
      [](py::object summary_class, py::object log) {
        if (!PyType_Check(summary_class.ptr())) {
          throw py::type_error("summary_class must be a class");
        }
        if (!find_slots(summary_class.ptr())) throw py::error_already_set();
        summarize::set_support(summary_class.ptr(), log.is_none() ? nullptr : log.ptr());
      },
      py::arg("summary_class"), py::arg("log"),
      "Called by mlflow_profiler._summaries: the IOSummary class and log_once(kind, message).");
  m.def(
      "_set_summarizer",
      [](py::object cls, py::object fn) {
        if (!PyType_Check(cls.ptr())) throw py::type_error("cls must be a class");
        summarize::set_summarizer(cls.ptr(), fn.is_none() ? nullptr : fn.ptr());
      },
      py::arg("cls"), py::arg("fn"), "Registers fn for cls and its subclasses (None removes it).");
  m.def("_summarizer_count", &summarize::summarizer_count);
  m.def("_set_repr_objects", &summarize::set_repr_objects, py::arg("on"),
        "Whether I/O summaries of objects of unknown types carry their repr() "
        "(configure(repr_objects=)).");
  m.def("_summarize_cache_size", &summarize::cache_size,
        "Types classified in the summarizer's cache now.");
  m.def(
      "_summarize_loop",
      [](py::handle obj, int64_t n) {
        // As the capture hooks do: a fresh IOSummary per call, nothing else.
        const int64_t t0 = clock::monotonic_ns();
        for (int64_t i = 0; i < n; ++i) {
          IOSummary s;
          summarize_object(obj.ptr(), &s);
        }
        return static_cast<double>(clock::monotonic_ns() - t0) / static_cast<double>(n > 0 ? n : 1);
      },
      py::arg("obj"), py::arg("n"), "Nanoseconds per summarize_object(obj) over n calls in C++.");
}

}  // namespace mlprof
