#include "summarize.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "summarize_internal.h"

// The entry point: types classified once (cached), then dispatched by kind to
// summarize_numpy.cpp, summarize_pandas.cpp, summarize_others.cpp,
// bounded_repr.cpp and summarize_registry.cpp.

namespace mlprof::summarize::detail {
namespace {

// --- references and errors -----------------------------------------------------

// The exception being propagated when the hook called us, put back on exit.
class SavedError {
 public:
  SavedError() {
#if PY_VERSION_HEX >= 0x030C0000
    exc_ = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&type_, &value_, &tb_);
#endif
  }
  ~SavedError() {
    clear_error();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc_);
#else
    PyErr_Restore(type_, value_, tb_);
#endif
  }
  SavedError(const SavedError&) = delete;
  SavedError& operator=(const SavedError&) = delete;

 private:
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* exc_ = nullptr;
#else
  PyObject *type_ = nullptr, *value_ = nullptr, *tb_ = nullptr;
#endif
};

// Summaries nest when a registered summarizer calls summarize(); past this
// depth only the type name is filled (a summarizer summarizing itself).
constexpr int kMaxNesting = 8;
thread_local int t_nesting = 0;

struct Nesting {
  Nesting() { ++t_nesting; }
  ~Nesting() { --t_nesting; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;
};

}  // namespace

// --- small Python helpers (each clears the error it causes) -----------------------

Ref get_attr(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_GetAttr(o, name);
  if (!r) clear_error();
  return Ref(r);
}

// Attribute lookup without the type's __getattr__/__getattribute__ hooks:
// for library internals (pandas' _mgr), where a miss must be cheap and quiet.
Ref own_attr(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_GenericGetAttr(o, name);
  if (!r) clear_error();
  return Ref(r);
}

Ref call_method0(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(o, name);
  if (!r) clear_error();
  return Ref(r);
}

// o.name(deep=False)
Ref call_deep_false(PyObject* o, PyObject* name) {
  Ref method = get_attr(o, name);
  if (!method) {
    return {};
  }
  Ref kwargs(PyDict_New());
  if (!kwargs || PyDict_SetItem(kwargs.get(), names().deep, Py_False) < 0) {
    clear_error();
    return {};
  }
  Ref args(PyTuple_New(0));
  if (!args) {
    clear_error();
    return {};
  }
  PyObject* r = PyObject_Call(method.get(), args.get(), kwargs.get());
  if (!r) clear_error();
  return Ref(r);
}

// An integer (int, numpy integer, anything with __index__) as int64.
bool to_int64(PyObject* v, int64_t* out) {
  if (!v) return false;
  Ref idx = PyLong_Check(v) ? borrow(v) : Ref(PyNumber_Index(v));
  if (!idx) {
    clear_error();
    return false;
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(idx.get(), &overflow);
  if (overflow || (x == -1 && PyErr_Occurred())) {
    clear_error();
    return false;
  }
  *out = static_cast<int64_t>(x);
  return true;
}

bool fill_shape(PyObject* shape, IOSummary* out) {
  if (!shape || !PyTuple_Check(shape)) {
    return false;  // torch.Size is a tuple
  }
  const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  if (nd > 64) return false;
  out->has_shape = true;
  out->shape.clear();
  for (Py_ssize_t i = 0; i < nd; ++i) {
    int64_t d = -1;
    if (!to_int64(PyTuple_GET_ITEM(shape, i), &d)) {
      d = -1;  // symbolic, unknown
    }
    out->shape.push_back(d);
  }
  return true;
}

void set_length_from_shape(IOSummary* out) {
  if (out->has_shape && !out->shape.empty() && out->shape[0] >= 0) out->length = out->shape[0];
}

// --- process-wide state (the types: summarize_internal.h) ------------------------------

// Empties the type cache. The old entries are released after the swap:
// releasing a type can run Python code that summarizes again.
void clear_types() {
  std::unordered_map<PyTypeObject*, TypeInfoPtr> old;
  old.swap(state().types);
}

void log_failure(const std::string& kind, const std::string& message) {
  PyObject* log = state().log;
  if (!log) return;
  Ref fn = borrow(log);
  Ref k(PyUnicode_DecodeUTF8(kind.data(), static_cast<Py_ssize_t>(kind.size()), "replace"));
  Ref m(PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  if (k && m) Ref(PyObject_CallFunctionObjArgs(fn.get(), k.get(), m.get(), nullptr));
  clear_error();
}

// --- type classification ---------------------------------------------------------------

namespace {

// Module and qualified name of a class, read from the type itself (no Python
// code runs: a metaclass cannot intervene).
void class_names(PyTypeObject* t, std::string* module, std::string* qualname) {
  if (t->tp_flags & Py_TPFLAGS_HEAPTYPE) {
    auto* ht = reinterpret_cast<PyHeapTypeObject*>(t);
    *qualname = compat::utf8(ht->ht_qualname);
    if (qualname->empty()) *qualname = t->tp_name;
    module->clear();
    if (t->tp_dict) {
      PyObject* m = PyDict_GetItemWithError(t->tp_dict, names().module);  // borrowed
      if (m) {
        *module = compat::utf8(m);
      } else {
        clear_error();
      }
    }
    return;
  }
  // A static type: "numpy.ndarray"; no dot means builtins.
  const char* name = t->tp_name;
  const char* dot = std::strrchr(name, '.');
  if (dot) {
    module->assign(name, static_cast<size_t>(dot - name));
    qualname->assign(dot + 1);
  } else {
    *module = "builtins";
    *qualname = name;
  }
}

bool in_package(const std::string& module, std::string_view package) {
  return module.starts_with(package) &&
         (module.size() == package.size() || module[package.size()] == '.');
}

// Only numpy's own static types are read as numpy structs: a class that
// merely calls itself numpy.ndarray is a heap type.
bool is_numpy_static(PyTypeObject* t, const char* name, size_t min_size) {
  return !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) && std::strcmp(t->tp_name, name) == 0 &&
         static_cast<size_t>(t->tp_basicsize) >= min_size;
}

bool builtin_kind(PyTypeObject* base, Kind* kind) {
  struct Exact {
    PyTypeObject* type;
    Kind kind;
  };
  static const Exact exact[] = {
      {&PyBool_Type, Kind::kBool},
      {&PyLong_Type, Kind::kInt},
      {&PyFloat_Type, Kind::kFloat},
      {&PyComplex_Type, Kind::kComplex},
      {&PyUnicode_Type, Kind::kStr},
      {&PyBytes_Type, Kind::kBytes},
      {&PyByteArray_Type, Kind::kByteArray},
      {&PyList_Type, Kind::kList},
      {&PyTuple_Type, Kind::kTuple},
      {&PyDict_Type, Kind::kDict},
      {&PySet_Type, Kind::kSet},
      {&PyFrozenSet_Type, Kind::kFrozenSet},
      {Py_TYPE(Py_None), Kind::kNone},
      {&PyFunction_Type, Kind::kFunction},
      {&PyMethod_Type, Kind::kMethod},
      {&PyCFunction_Type, Kind::kCRepr},
      {&PyType_Type, Kind::kCRepr},
      {&PyRange_Type, Kind::kCRepr},
      {&PySlice_Type, Kind::kCRepr},
      {&PyBaseObject_Type, Kind::kGeneric},
  };
  for (const Exact& e : exact) {
    if (base == e.type) {
      *kind = e.kind;
      return true;
    }
  }
  std::string module, qn;
  class_names(base, &module, &qn);
  State& st = state();
  if (module == "numpy") {
    if (qn == "ndarray" && is_numpy_static(base, "numpy.ndarray", sizeof(NumpyArrayFields))) {
      if (!st.ndarray) {
        Py_INCREF(base);
        st.ndarray = base;
      }
      *kind = Kind::kNumpyArray;
      return true;
    }
    if (qn == "dtype" && is_numpy_static(base, "numpy.dtype", sizeof(NumpyDescrHead))) {
      if (!st.dtype) {
        Py_INCREF(base);
        st.dtype = base;
      }
      *kind = Kind::kNumpyDtype;
      return true;
    }
    if (qn == "generic") {
      *kind = Kind::kNumpyScalar;
      return true;
    }
    return false;
  }
  if (in_package(module, "pandas")) {  // pandas >= 3 says "pandas", before "pandas.core.frame"
    if (qn == "DataFrame") {
      *kind = Kind::kPandasFrame;
    } else if (qn == "Series") {
      *kind = Kind::kPandasSeries;
    } else if (qn == "Index") {
      *kind = Kind::kPandasIndex;
    } else if (qn == "ExtensionArray") {
      *kind = Kind::kPandasArray;
    } else {
      return false;
    }
    return true;
  }
  if ((module == "torch" && qn == "Tensor") ||
      (module == "torch._C" && (qn == "TensorBase" || qn == "_TensorBase"))) {
    *kind = Kind::kTorchTensor;
    return true;
  }
  if (in_package(module, "scipy.sparse") && (qn == "_spbase" || qn == "spmatrix")) {
    *kind = Kind::kScipySparse;
    return true;
  }
  if (module == "pyarrow.lib") {
    if (qn == "Table" || qn == "RecordBatch") {
      *kind = Kind::kArrowTable;
    } else if (qn == "Array" || qn == "ChunkedArray") {
      *kind = Kind::kArrowArray;
    } else {
      return false;
    }
    return true;
  }
  if (in_package(module, "polars")) {
    if (qn == "DataFrame") {
      *kind = Kind::kPolarsFrame;
    } else if (qn == "Series") {
      *kind = Kind::kPolarsSeries;
    } else if (qn == "LazyFrame") {
      *kind = Kind::kPolarsLazy;
    } else {
      return false;
    }
    return true;
  }
  return false;
}

// The qualified name of the function that attribute `name` resolves to on
// type t (a plain function, or the fget/func of a property-like descriptor);
// "" if none, "?" if it is something else.
std::string implementation(PyTypeObject* t, PyObject* name) {
  Ref mro = borrow(t->tp_mro);
  if (!mro || !PyTuple_Check(mro.get())) {
    return {};
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro.get()); ++i) {
    auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro.get(), i));
    if (!base->tp_dict) continue;
    PyObject* v = PyDict_GetItemWithError(base->tp_dict, name);  // borrowed
    if (!v) {
      clear_error();
      continue;
    }
    Ref holder = borrow(v);
    Ref fn;
    if (PyFunction_Check(v)) {  // NOLINT(bugprone-branch-clone): checked before the attributes
      fn = borrow(v);
    } else if (PyObject_HasAttr(v, names().fget)) {
      fn = get_attr(v, names().fget);  // property, CachedProperty
    } else if (PyObject_HasAttr(v, names().func)) {
      fn = get_attr(v, names().func);
    } else {
      fn = borrow(v);  // a Cython property: a getset descriptor has its own __qualname__
    }
    Ref qualname = fn ? get_attr(fn.get(), names().qualname) : Ref();
    const std::string name = compat::utf8(qualname.get());
    return name.empty() ? "?" : name;
  }
  return {};
}

Flavor pandas_flavor(PyTypeObject* t, Kind kind) {
  const Names& n = names();
  if (kind == Kind::kPandasIndex) {
    const std::string usage = implementation(t, n.memory_usage);
    if (usage == "RangeIndex.memory_usage" && implementation(t, n.nbytes) == "RangeIndex.nbytes") {
      return Flavor::kRangeIndex;
    }
    if (usage == "Index.memory_usage" &&
        implementation(t, n.memory_usage_) == "IndexOpsMixin._memory_usage") {
      return Flavor::kBaseIndex;
    }
    return Flavor::kPublic;
  }
  if (!implementation(t, n.memory_usage).empty()) return Flavor::kUsageMethod;
  const std::string nbytes = implementation(t, n.nbytes);
  // pandas < 3 in Python, pandas 3 in Cython: both return _ndarray.nbytes.
  if (nbytes == "NDArrayBackedExtensionArray.nbytes" || nbytes == "NDArrayBacked.nbytes") {
    return Flavor::kNdarrayBacked;
  }
  if (nbytes == "BaseMaskedArray.nbytes") return Flavor::kMasked;
  return Flavor::kNbytes;
}

PyObject* registered_for(PyTypeObject* base) {
  for (const auto& [cls, fn] : state().registry) {
    if (cls == reinterpret_cast<PyObject*>(base)) return fn;
  }
  return nullptr;
}

TypeInfoPtr classify(PyTypeObject* t) {
  auto info = std::make_shared<TypeInfo>();
  Py_INCREF(t);
  info->type = reinterpret_cast<PyObject*>(t);
  std::string module, qn;
  class_names(t, &module, &qn);
  info->type_name = module == "builtins" || module.empty() ? qn : module + "." + qn;
  Ref mro = borrow(t->tp_mro);
  bool have_kind = false;
  if (mro && PyTuple_Check(mro.get())) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro.get()); ++i) {
      auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro.get(), i));
      if (!info->summarizer) {
        if (PyObject* fn = registered_for(base)) {
          Py_INCREF(fn);
          info->summarizer = fn;
        }
      }
      Kind k = Kind::kGeneric;
      if (builtin_kind(base, &k)) {
        if (!have_kind) info->kind = k;
        have_kind = true;
        // numpy.str_ and numpy.bytes_ put str/bytes before numpy.generic in
        // their MRO: they are numpy scalars all the same.
        if (k == Kind::kNumpyScalar) info->kind = k;
      }
    }
  }
  if (info->kind == Kind::kPandasIndex || info->kind == Kind::kPandasArray) {
    info->flavor = pandas_flavor(t, info->kind);
  }
  return info;
}

TypeInfoPtr type_info(PyTypeObject* t) {
  State& st = state();
  auto it = st.types.find(t);
  if (it != st.types.end()) return it->second;
  TypeInfoPtr info = classify(t);
  if (st.types.size() >= summarize::kTypeCacheMax) clear_types();
  st.types.emplace(t, info);
  return info;
}

}  // namespace

TypeFacts type_facts(PyTypeObject* t) {
  State& st = state();
  auto it = st.types.find(t);
  if (it != st.types.end()) {
    return {it->second->kind, it->second->flavor};
  }
  TypeInfoPtr info = type_info(t);
  return {info->kind, info->flavor};
}

Kind kind_of(PyObject* o) { return type_facts(Py_TYPE(o)).kind; }

// --- builtins and the rest -------------------------------------------------------------------

namespace {

bool g_repr_objects = false;  // summarize::set_repr_objects

}  // namespace

int64_t getsizeof(PyObject* o) {
  State& st = state();
  if (!st.getsizeof) {
    PyObject* fn = PySys_GetObject("getsizeof");  // borrowed
    if (!fn) return -1;
    Py_INCREF(fn);
    st.getsizeof = fn;
  }
  Ref fn = borrow(st.getsizeof);
  Ref r(PyObject_CallOneArg(fn.get(), o));
  if (!r) clear_error();
  int64_t v = -1;
  return to_int64(r.get(), &v) ? v : -1;
}

namespace {

// sys.getsizeof(o) is o.__sizeof__() plus what the interpreter puts before
// the object (the GC header; 3.12+ also managed dict/weakref pointers): a
// constant per type, measured once, so later calls skip getsizeof's own
// call and argument parsing.
int64_t container_sizeof(PyObject* o, TypeInfo& info) {
  Ref size(PyObject_VectorcallMethod(names().sizeof_dunder, &o, 1, nullptr));
  int64_t own = -1;
  if (!to_int64(size.get(), &own) || own < 0) {
    clear_error();
    return getsizeof(o);
  }
  if (info.sizeof_extra < 0) {
    const int64_t full = getsizeof(o);
    if (full < own) return full;
    info.sizeof_extra = full - own;
  }
  return own + info.sizeof_extra;
}

int64_t container_length(PyObject* o, Kind kind) {
  switch (kind) {
    case Kind::kList:
      return PyList_GET_SIZE(o);
    case Kind::kTuple:
      return PyTuple_GET_SIZE(o);
    case Kind::kDict:
      return PyDict_GET_SIZE(o);
    default:
      return PySet_GET_SIZE(o);
  }
}

void summarize_builtin(PyObject* o, TypeInfo& info, IOSummary* out) {
  const Kind kind = info.kind;
  switch (kind) {
    case Kind::kNone:
    case Kind::kPolarsLazy:  // its repr would render the query plan: the type only
      return;
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kComplex: {
      PyTypeObject* base = kind == Kind::kInt     ? &PyLong_Type
                           : kind == Kind::kFloat ? &PyFloat_Type
                           : kind == Kind::kBool  ? &PyBool_Type
                                                  : &PyComplex_Type;
      if (Py_TYPE(o)->tp_repr == base->tp_repr || !g_repr_objects) {
        summarize_number(o, kind, out);  // a subclass (IntEnum): the value, by the builtin's repr
      } else {
        guarded_repr(o, info, out);  // its own __repr__, asked for (configure(repr_objects=True))
      }
      return;
    }
    case Kind::kStr:
    case Kind::kBytes:
    case Kind::kByteArray: {
      out->length = kind == Kind::kStr     ? PyUnicode_GetLength(o)
                    : kind == Kind::kBytes ? PyBytes_GET_SIZE(o)
                                           : PyByteArray_GET_SIZE(o);
      PyTypeObject* base = kind == Kind::kStr     ? &PyUnicode_Type
                           : kind == Kind::kBytes ? &PyBytes_Type
                                                  : &PyByteArray_Type;
      if (Py_TYPE(o)->tp_repr == base->tp_repr || !g_repr_objects) {
        prefix_repr(o, kind, out);  // a subclass: its text, by the builtin's repr
      } else {
        guarded_repr(o, info, out);  // its own __repr__, asked for (configure(repr_objects=True))
      }
      return;
    }
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kDict:
    case Kind::kSet:
    case Kind::kFrozenSet:
      // Shallow: never iterates, so huge and recursive containers cost the same.
      out->length = container_length(o, kind);
      out->size_bytes = container_sizeof(o, info);
      return;
    case Kind::kNumpyArray:
      summarize_ndarray(o, out);
      return;
    case Kind::kNumpyScalar: {
      Ref d = get_attr(o, names().dtype);
      DtypeName dt;
      if (numpy_dtype(d.get(), &dt)) {
        out->dtype = dt.name;
        out->size_bytes = dt.itemsize;
      }
      out->has_shape = true;  // shape ()
      guarded_repr(o, info, out);
      return;
    }
    case Kind::kPandasFrame:
      summarize_pandas_frame(o, out);
      return;
    case Kind::kPandasSeries:
      summarize_pandas_series(o, out);
      return;
    case Kind::kPandasIndex:
      summarize_pandas_index(o, out);
      return;
    case Kind::kPandasArray:
      summarize_pandas_array(o, out);
      return;
    case Kind::kTorchTensor:
      summarize_torch(o, info, out);
      return;
    case Kind::kScipySparse:
      summarize_scipy_sparse(o, out);
      return;
    case Kind::kArrowTable:
    case Kind::kArrowArray:
      summarize_arrow(o, kind, out);
      return;
    case Kind::kPolarsFrame:
    case Kind::kPolarsSeries:
      summarize_polars(o, kind, out);
      return;
    case Kind::kFunction:
    case Kind::kMethod: {
      PyObject* fn = kind == Kind::kMethod ? PyMethod_GET_FUNCTION(o) : o;
      Ref qualname = get_attr(fn, names().qualname);
      if (qualname && PyUnicode_Check(qualname.get())) {
        out->repr_short = bounded_text((kind == Kind::kMethod ? "<bound method " : "<function ") +
                                           compat::utf8(qualname.get()) + ">",
                                       summarize::kReprMax);
      }
      return;
    }
    case Kind::kNumpyDtype:
      guarded_repr(o, info, out);
      return;
    case Kind::kCRepr: {
      // CPython's own repr, unless a subclass (a metaclass) has its own.
      const reprfunc own = Py_TYPE(o)->tp_repr;
      if (g_repr_objects || own == PyCFunction_Type.tp_repr || own == PyType_Type.tp_repr ||
          own == PyRange_Type.tp_repr || own == PySlice_Type.tp_repr) {
        guarded_repr(o, info, out);
      }
      return;
    }
    case Kind::kGeneric:
      // Arbitrary code: only if asked for (configure(repr_objects=True)).
      if (g_repr_objects) guarded_repr(o, info, out);
      return;
  }
}

}  // namespace
}  // namespace mlprof::summarize::detail

namespace mlprof {

void summarize_object(PyObject* obj, IOSummary* out) {
  using namespace summarize::detail;
  if (!obj || !out) return;
  SavedError saved;
  Nesting nesting;
  try {
    TypeInfoPtr info = type_info(Py_TYPE(obj));
    out->type_name = info->type_name;
    if (t_nesting > kMaxNesting) return;
    if (info->summarizer && call_registered(obj, *info, out)) return;
    summarize_builtin(obj, *info, out);
  } catch (const std::exception&) {
    // Out of memory in a string: what was filled is still primitives only.
  }
}

namespace summarize {

void set_support(PyObject* summary_class, PyObject* log) {
  detail::State& st = detail::state();
  Py_XINCREF(summary_class);
  Py_XINCREF(log);
  detail::Ref old_class(st.summary_class), old_log(st.log);
  st.summary_class = summary_class;
  st.log = log;
}

PyObject* summary_class() { return detail::state().summary_class; }

size_t cache_size() { return detail::state().types.size(); }

void set_repr_objects(bool on) { detail::g_repr_objects = on; }

}  // namespace summarize
}  // namespace mlprof
