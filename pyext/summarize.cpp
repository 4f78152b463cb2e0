#include "summarize.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clock.h"

namespace mlprof {
namespace {

// --- references and errors -----------------------------------------------------

// An owned reference.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* p) : p_(p) {}  // steals p
  ~Ref() { Py_XDECREF(p_); }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(Ref&& o) noexcept {
    if (this != &o) {
      Py_XDECREF(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  PyObject* get() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

Ref borrow(PyObject* p) {
  Py_XINCREF(p);
  return Ref(p);
}

// Clears a pending error. A KeyboardInterrupt is not lost: it is raised again
// at the next chance, in the user's code rather than inside the summary.
void clear_error() {
  if (!PyErr_Occurred()) return;
  const bool interrupt = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
  PyErr_Clear();
  if (interrupt) PyErr_SetInterrupt();
}

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

// --- interned attribute names ----------------------------------------------------

// Attribute names, interned once.
PyObject* intern(const char* text) { return PyUnicode_InternFromString(text); }

struct Names {
  PyObject* mgr = intern("_mgr");
  PyObject* blocks = intern("blocks");
  PyObject* axes = intern("axes");
  PyObject* blknos = intern("blknos");
  PyObject* blknos_ = intern("_blknos");
  PyObject* values = intern("values");
  PyObject* dtype = intern("dtype");
  PyObject* dtype_ = intern("_dtype");
  PyObject* dtypes = intern("dtypes");
  PyObject* mask_ = intern("_mask");
  PyObject* ndarray_ = intern("_ndarray");
  PyObject* cache_ = intern("_cache");
  PyObject* engine_ = intern("_engine");
  PyObject* range_ = intern("_range");
  PyObject* nbytes = intern("nbytes");
  PyObject* memory_usage_ = intern("_memory_usage");
  PyObject* sizeof_ = intern("sizeof");
  PyObject* sizeof_dunder = intern("__sizeof__");
  PyObject* start = intern("start");
  PyObject* stop = intern("stop");
  PyObject* step = intern("step");
  PyObject* shape = intern("shape");
  PyObject* sum = intern("sum");
  PyObject* tolist = intern("tolist");
  PyObject* itemsize = intern("itemsize");
  PyObject* str = intern("str");
  PyObject* deep = intern("deep");
  PyObject* data = intern("data");
  PyObject* indices = intern("indices");
  PyObject* indptr = intern("indptr");
  PyObject* row = intern("row");
  PyObject* col = intern("col");
  PyObject* coords = intern("coords");
  PyObject* offsets = intern("offsets");
  PyObject* format = intern("format");
  PyObject* nnz = intern("nnz");
  PyObject* device = intern("device");
  PyObject* element_size = intern("element_size");
  PyObject* numel = intern("numel");
  PyObject* num_rows = intern("num_rows");
  PyObject* num_columns = intern("num_columns");
  PyObject* schema = intern("schema");
  PyObject* type = intern("type");
  PyObject* bit_length = intern("bit_length");
  PyObject* module = intern("__module__");
  PyObject* qualname = intern("__qualname__");
  PyObject* func = intern("func");
  PyObject* fget = intern("fget");
  PyObject* type_name = intern("type_name");
  PyObject* length = intern("length");
  PyObject* size_bytes = intern("size_bytes");
  PyObject* repr_short = intern("repr_short");
  PyObject* data_ = intern("_data");
  PyObject* memory_usage = intern("memory_usage");
  PyObject* types = intern("types");
  PyObject* estimated_size = intern("estimated_size");
};

// Never destroyed: the strings outlive the interpreter's teardown of statics.
const Names& names() {
  static const Names* n = new Names();
  return *n;
}

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

// `r` (a str) bounded to kReprMax characters. A string literal is cut inside
// its quotes ('abc...', b'abc...', bytearray(b'abc...')), without splitting an
// escape; anything else is cut at the end ("Foo(a=1, ..."). `source_cut`:
// r is the repr of a prefix of the value, so it is marked cut even if short.
std::string bounded(PyObject* r, bool source_cut = false) {
  if (!r || !PyUnicode_Check(r)) {
    return {};
  }
  // A summary is one line: a multi-line repr (an estimator's pretty print)
  // has its whitespace runs collapsed, as " ".join(r.split()) would. A str's
  // repr escapes its newlines, so string literals are never changed.
  Ref single_line;
  for (const Py_UCS4 c : {'\n', '\r', '\t'}) {
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

std::string bounded_text(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) {
    --cut;  // UTF-8 boundary
  }
  s.resize(cut);
  return s + "...";
}

// --- process-wide state -----------------------------------------------------------------

enum class Kind : uint8_t {
  kGeneric,
  kNone,
  kBool,
  kInt,
  kFloat,
  kComplex,
  kStr,
  kBytes,
  kByteArray,
  kList,
  kTuple,
  kDict,
  kSet,
  kFrozenSet,
  kNumpyArray,
  kNumpyScalar,
  kNumpyDtype,
  kPandasFrame,
  kPandasSeries,
  kPandasIndex,
  kPandasArray,  // a pandas ExtensionArray (Categorical, IntegerArray, ...)
  kTorchTensor,
  kScipySparse,
  kArrowTable,  // pyarrow Table, RecordBatch
  kArrowArray,  // pyarrow Array, ChunkedArray
  kPolarsFrame,
  kPolarsSeries,
  kPolarsLazy,
  kFunction,  // a Python function: its qualified name, without the address
  kMethod,    // a bound method: never repr(self) (an estimator's repr takes ms)
  kCRepr,     // a builtin function, a class, a range or a slice: CPython's short repr, in C
};

// How a pandas Index or ExtensionArray type reports its memory. Chosen per
// type by the implementation its methods resolve to, so internals are read
// only where they compute exactly what the public method would.
enum class Flavor : uint8_t {
  kPublic,         // call the public method
  kRangeIndex,     // RangeIndex.memory_usage: sizeof the range and its 3 ints
  kBaseIndex,      // Index.memory_usage: _data's bytes (+ the engine if built)
  kNdarrayBacked,  // NDArrayBackedExtensionArray.nbytes: _ndarray.nbytes
  kMasked,         // BaseMaskedArray.nbytes: _data.nbytes + _mask.nbytes
  kUsageMethod,    // has memory_usage (Categorical): call it
  kNbytes,         // its own nbytes property: call it
};

struct TypeInfo {
  PyObject* type = nullptr;        // strong: the cache key stays valid
  PyObject* summarizer = nullptr;  // strong: the registered fn of the most specific class
  Kind kind = Kind::kGeneric;
  Flavor flavor = Flavor::kPublic;
  int64_t sizeof_extra = -1;  // sys.getsizeof(x) - x.__sizeof__() for its instances
  bool no_nbytes = false;     // a tensor type without .nbytes (torch < 1.14)
  bool repr_seen = false;     // its __repr__ was called once
  uint8_t repr_strikes = 0;   // consecutive slow calls of its __repr__
  bool repr_slow = false;     // two in a row: not called again
  std::string type_name;
  TypeInfo() = default;
  TypeInfo(const TypeInfo&) = delete;
  TypeInfo& operator=(const TypeInfo&) = delete;
  ~TypeInfo() {  // only ever destroyed with the GIL held
    Py_XDECREF(type);
    Py_XDECREF(summarizer);
  }
};
using TypeInfoPtr = std::shared_ptr<TypeInfo>;

struct State {
  std::unordered_map<PyTypeObject*, TypeInfoPtr> types;
  std::vector<std::pair<PyObject*, PyObject*>> registry;  // (class, fn), strong
  PyObject* summary_class = nullptr;                      // strong
  PyObject* log = nullptr;                                // strong: log_once(kind, message)
  PyObject* getsizeof = nullptr;                          // strong: sys.getsizeof
  PyTypeObject* ndarray = nullptr;                        // numpy's static types, once seen
  PyTypeObject* dtype = nullptr;
};

// Never destroyed: it holds references that must not be released after the
// interpreter is gone.
State& state() {
  static State* s = new State();
  return *s;
}

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

// Describes and clears the pending exception: "ValueError: boom".
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

// --- type classification ---------------------------------------------------------------

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

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::string_view(s).substr(0, prefix.size()) == prefix;
}

bool in_package(const std::string& module, std::string_view package) {
  return module.size() >= package.size() && starts_with(module, package) &&
         (module.size() == package.size() || module[package.size()] == '.');
}

// numpy's layouts (public C API; unchanged from numpy 1.7 through 2.x).
struct NumpyArrayFields {  // PyArrayObject_fields
  PyObject_HEAD char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
struct NumpyDescrHead {  // the head of PyArray_Descr, the same in 1.x and 2.x
  PyObject_HEAD PyTypeObject* typeobj;
  char kind;
  char type;
  char byteorder;
  char flags;
  int type_num;
};

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
    if (PyFunction_Check(v)) {
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

// Kind and flavor of a type, without holding its entry (no refcount traffic).
struct TypeFacts {
  Kind kind;
  Flavor flavor;
};

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

// --- numpy --------------------------------------------------------------------------------

struct DtypeName {
  std::string name;
  int64_t itemsize = -1;
};

// str(dtype) costs microseconds (numpy formats it in Python), so names are
// computed once: per (type number, byte order) for the fixed-size builtin
// types, per parameter (length, unit) for strings and datetimes.
constexpr int kNumpyTypes = 24;  // NPY_BOOL .. NPY_HALF
DtypeName g_builtin_dtypes[kNumpyTypes][4];
constexpr size_t kParametricMax = 256;

bool is_parametric(int type_num) { return type_num >= 18 && type_num <= 22; }  // S U V M m
bool is_keyed_parametric(int type_num) {
  return type_num == 18 || type_num == 19 || type_num == 21 || type_num == 22;
}

int byteorder_index(char b) {
  switch (b) {
    case '=':
      return 0;
    case '<':
      return 1;
    case '>':
      return 2;
    case '|':
      return 3;
    default:
      return -1;
  }
}

bool dtype_by_python(PyObject* descr, DtypeName* out) {
  Ref s(PyObject_Str(descr));
  if (!s) {
    clear_error();
    return false;
  }
  out->name = bounded_text(compat::utf8(s.get()), summarize::kDtypeMax);
  Ref size = get_attr(descr, names().itemsize);
  if (!to_int64(size.get(), &out->itemsize)) out->itemsize = -1;
  return !out->name.empty();
}

bool is_numpy_dtype(PyObject* o) {
  State& st = state();
  if (!st.dtype) {
    kind_of(o);  // classifying a dtype's type records numpy.dtype
  }
  return st.dtype && PyObject_TypeCheck(o, st.dtype);
}

bool is_ndarray(PyObject* o) {
  State& st = state();
  if (!st.ndarray) {
    if (kind_of(o) != Kind::kNumpyArray) return false;
  }
  return st.ndarray && PyObject_TypeCheck(o, st.ndarray);
}

// Parametric dtypes (bytes and str of a given length, datetimes of a given
// unit) are keyed by what parametrises them, read from the descr in place.
// Its layout depends on the numpy ABI, told apart by the struct sizes:
// numpy 2 (_PyArray_LegacyDescr, 120 bytes; np.dtype 88: elsize an intp at
// 40, c_metadata at 112) and numpy 1 (PyArray_Descr, 96 bytes: elsize an int
// at 32, c_metadata at 80). A datetime's c_metadata is
// PyArray_DatetimeDTypeMetaData: an NpyAuxData header of 4 pointers, then
// {unit, num}. 0 when unsure: the caller asks numpy.
std::unordered_map<uint64_t, DtypeName> g_parametric_dtypes;

uint64_t parametric_key(PyObject* descr, int type_num, int byteorder) {
  const Py_ssize_t size = Py_TYPE(descr)->tp_basicsize;
  const Py_ssize_t base = state().dtype ? state().dtype->tp_basicsize : 0;
  const bool numpy2 = size == 120 && base == 88;
  const bool numpy1 = size == 96 && base == 96;
  if (!numpy1 && !numpy2) return 0;
  const char* d = reinterpret_cast<const char*>(descr);
  uint32_t param = 0;
  if (type_num == 18 || type_num == 19) {  // S, U: the item size
    int64_t elsize = 0;
    if (numpy2) {
      Py_ssize_t v = 0;
      std::memcpy(&v, d + 40, sizeof(v));
      elsize = v;
    } else {
      int v = 0;
      std::memcpy(&v, d + 32, sizeof(v));
      elsize = v;
    }
    if (elsize < 0 || elsize > 0xFFFFFFFFll) return 0;
    param = static_cast<uint32_t>(elsize);
  } else {  // M, m: unit and multiplier
    const char* meta = nullptr;
    std::memcpy(&meta, d + (numpy2 ? 112 : 80), sizeof(meta));
    if (!meta) return 0;
    int unit = 0, num = 0;
    std::memcpy(&unit, meta + 4 * sizeof(void*), sizeof(int));
    std::memcpy(&num, meta + 4 * sizeof(void*) + sizeof(int), sizeof(int));
    if (unit < 0 || unit >= 64 || num < 0 || num >= (1 << 24)) return 0;
    param = (static_cast<uint32_t>(unit) << 24) | static_cast<uint32_t>(num);
  }
  return (static_cast<uint64_t>(type_num) << 40) | (static_cast<uint64_t>(byteorder + 1) << 32) |
         param;
}

// Name and item size of a numpy dtype object.
bool numpy_dtype(PyObject* descr, DtypeName* out) {
  if (!descr || !is_numpy_dtype(descr)) return false;
  const auto* h = reinterpret_cast<const NumpyDescrHead*>(descr);
  const int tn = h->type_num;
  const int bo = byteorder_index(h->byteorder);
  if (tn >= 0 && tn < kNumpyTypes && bo >= 0 && !is_parametric(tn)) {
    DtypeName& slot = g_builtin_dtypes[tn][bo];
    if (slot.itemsize < 0) {
      DtypeName computed;
      if (!dtype_by_python(descr, &computed) || computed.itemsize < 0) return false;
      slot = computed;
    }
    *out = slot;
    return true;
  }
  if (is_keyed_parametric(tn)) {  // S, U, M, m
    const uint64_t key = parametric_key(descr, tn, bo);
    if (key) {
      auto it = g_parametric_dtypes.find(key);
      if (it != g_parametric_dtypes.end()) {
        *out = it->second;
        return true;
      }
      if (!dtype_by_python(descr, out)) return false;
      if (g_parametric_dtypes.size() >= kParametricMax) g_parametric_dtypes.clear();
      g_parametric_dtypes.emplace(key, *out);
      return true;
    }
  }
  return dtype_by_python(descr, out);  // structured, user-defined: rare
}

// The name of a dtype-like object: numpy dtypes through the cache above,
// anything else (pandas, arrow, polars, torch dtypes) by str().
std::string dtype_name(PyObject* dtype) {
  if (!dtype) {
    return {};
  }
  DtypeName d;
  if (numpy_dtype(dtype, &d)) return d.name;
  return bounded_text(str_of(dtype), summarize::kDtypeMax);
}

// Shape, bytes and dtype of an ndarray, read from its struct.
struct ArrayFacts {
  int nd = 0;
  const Py_ssize_t* dims = nullptr;
  int64_t size = 1;
  int64_t nbytes = -1;
  DtypeName dtype;
};

bool ndarray_facts(PyObject* o, ArrayFacts* out) {
  if (!is_ndarray(o)) return false;
  const auto* a = reinterpret_cast<const NumpyArrayFields*>(o);
  if (a->nd < 0 || a->nd > 64 || (a->nd > 0 && !a->dimensions)) return false;
  if (!numpy_dtype(a->descr, &out->dtype)) return false;
  out->nd = a->nd;
  out->dims = a->dimensions;
  out->size = 1;
  for (int i = 0; i < a->nd; ++i) out->size *= static_cast<int64_t>(a->dimensions[i]);
  if (out->dtype.itemsize < 0) {  // an uncached exotic dtype: ask numpy
    Ref nb = get_attr(o, names().nbytes);
    if (!to_int64(nb.get(), &out->nbytes)) out->nbytes = -1;
  } else {
    out->nbytes = out->size * out->dtype.itemsize;
  }
  return true;
}

void summarize_ndarray(PyObject* o, IOSummary* out) {
  ArrayFacts f;
  if (!ndarray_facts(o, &f)) return;
  out->has_shape = true;
  out->shape.assign(f.dims, f.dims + f.nd);
  out->dtype = f.dtype.name;
  out->size_bytes = f.nbytes;
  if (f.nd > 0) out->length = f.dims[0];
}

// --- pandas ---------------------------------------------------------------------------------

// Bytes, dtype and dimensions of a block's (or a Series') values: an ndarray
// or an ExtensionArray. dims: up to 2, as the values hold them.
struct ValuesFacts {
  int64_t nbytes = -1;
  std::string dtype;
  int nd = 0;
  int64_t dims[2] = {0, 0};
};

void take_dims(const ArrayFacts& f, ValuesFacts* out) {
  out->nd = f.nd < 2 ? f.nd : 2;
  for (int i = 0; i < out->nd; ++i) out->dims[i] = f.dims[i];
}

std::string ea_dtype(PyObject* values) {
  Ref d = get_attr(values, names().dtype);
  return dtype_name(d.get());
}

bool values_facts(PyObject* values, ValuesFacts* out) {
  ArrayFacts f;
  if (ndarray_facts(values, &f)) {
    out->nbytes = f.nbytes;
    out->dtype = f.dtype.name;
    take_dims(f, out);
    return out->nbytes >= 0;
  }
  const TypeFacts type = type_facts(Py_TYPE(values));
  if (type.kind != Kind::kPandasArray) return false;
  const Names& n = names();
  switch (type.flavor) {
    case Flavor::kNdarrayBacked: {
      Ref nd = own_attr(values, n.ndarray_);
      if (!nd || !ndarray_facts(nd.get(), &f)) return false;
      out->nbytes = f.nbytes;
      take_dims(f, out);
      break;
    }
    case Flavor::kMasked: {
      Ref data = own_attr(values, n.data_), mask = own_attr(values, n.mask_);
      ArrayFacts m;
      if (!data || !mask || !ndarray_facts(data.get(), &f) || !ndarray_facts(mask.get(), &m)) {
        return false;
      }
      out->nbytes = f.nbytes + m.nbytes;
      take_dims(f, out);
      break;
    }
    default: {
      Ref nb = type.flavor == Flavor::kUsageMethod ? call_deep_false(values, n.memory_usage)
                                                   : get_attr(values, n.nbytes);
      if (!to_int64(nb.get(), &out->nbytes)) return false;
      const Py_ssize_t len = PyObject_Length(values);
      if (len < 0) {
        clear_error();
        return false;
      }
      out->nd = 1;
      out->dims[0] = len;
    }
  }
  if (type.flavor == Flavor::kNdarrayBacked) {
    // DatetimeArray and TimedeltaArray keep a numpy dtype in _dtype, which
    // their dtype property (Python) returns; anything else goes through it.
    Ref d = own_attr(values, n.dtype_);
    DtypeName dn;
    if (d && numpy_dtype(d.get(), &dn)) {
      out->dtype = std::move(dn.name);
      return out->nbytes >= 0;
    }
  }
  out->dtype = ea_dtype(values);
  return out->nbytes >= 0;
}

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

// sys.getsizeof of an int depends only on its number of digits, so of its
// bit length: measured once per bit length.
int64_t int_sizeof(PyObject* v) {
  if (!PyLong_CheckExact(v)) return getsizeof(v);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow || (x == -1 && PyErr_Occurred())) {
    clear_error();
    return getsizeof(v);
  }
  const unsigned long long magnitude =
      x < 0 ? 0ull - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
  const int bits = magnitude ? 64 - __builtin_clzll(magnitude) : 0;
  static int64_t sizes[65] = {};  // 0: not measured yet
  if (sizes[bits] <= 0) sizes[bits] = getsizeof(v);
  return sizes[bits];
}

// sys.getsizeof of a range: ranges have a fixed size.
int64_t range_sizeof(PyObject* rng) {
  static int64_t size = 0;
  if (size <= 0) size = getsizeof(rng);
  return size;
}

struct IndexFacts {
  int64_t length = -1;
  int64_t nbytes = -1;
  std::string dtype;
};

// Length, index.memory_usage(deep=False) and dtype of a pandas Index.
bool pandas_index(PyObject* index, IndexFacts* out, bool want_dtype) {
  const TypeFacts type = type_facts(Py_TYPE(index));
  if (type.kind != Kind::kPandasIndex) return false;
  const Names& n = names();
  switch (type.flavor) {
    case Flavor::kRangeIndex: {
      Ref rng = own_attr(index, n.range_);
      if (!rng || !PyRange_Check(rng.get())) return false;
      out->length = PyObject_Length(rng.get());
      if (out->length < 0) {
        clear_error();
        return false;
      }
      // RangeIndex.nbytes (cached by pandas): getsizeof of the range and of
      // its start, stop and step.
      Ref cache = own_attr(index, n.cache_);
      PyObject* cached = cache && PyDict_Check(cache.get())
                             ? PyDict_GetItemWithError(cache.get(), n.nbytes)
                             : nullptr;
      if (!cached) clear_error();
      if (!to_int64(cached, &out->nbytes)) {
        int64_t total = range_sizeof(rng.get());
        for (PyObject* part : {n.start, n.stop, n.step}) {
          Ref v = get_attr(rng.get(), part);
          const int64_t size = v ? int_sizeof(v.get()) : -1;
          total = (total < 0 || size < 0) ? -1 : total + size;
        }
        if (total < 0) return false;
        out->nbytes = total;
      }
      if (want_dtype) out->dtype = ea_dtype(index);
      return true;
    }
    case Flavor::kBaseIndex: {
      Ref data = own_attr(index, n.data_);
      ValuesFacts v;
      if (!data || !values_facts(data.get(), &v) || v.nd != 1) return false;
      out->length = v.dims[0];
      out->nbytes = v.nbytes;
      out->dtype = std::move(v.dtype);
      // Index.memory_usage adds its hash table once it has been built.
      Ref cache = own_attr(index, n.cache_);
      if (!cache || !PyDict_Check(cache.get())) return false;
      PyObject* engine = PyDict_GetItemWithError(cache.get(), n.engine_);  // borrowed
      if (engine) {
        Ref keep = borrow(engine);
        Ref size = call_method0(engine, n.sizeof_);
        int64_t s = 0;
        if (!to_int64(size.get(), &s)) return false;
        out->nbytes += s;
      } else if (PyErr_Occurred()) {
        clear_error();
        return false;
      }
      return true;
    }
    default: {
      out->length = PyObject_Length(index);
      if (out->length < 0) {
        clear_error();
        return false;
      }
      Ref usage = call_deep_false(index, n.memory_usage);
      if (!to_int64(usage.get(), &out->nbytes)) return false;
      if (want_dtype) out->dtype = ea_dtype(index);
      return true;
    }
  }
}

constexpr size_t kMaxFrameDtypes = 8;

// Distinct dtype names in order, joined by ","; at most kMaxFrameDtypes.
// Fixed storage: dtype names are short, so nothing here allocates.
struct DtypeList {
  std::array<std::string, kMaxFrameDtypes> names;
  size_t count = 0;
  bool cut = false;
  bool empty() const { return count == 0; }
  void add(const std::string& name) {
    const std::string& n = name.empty() ? unknown() : name;
    for (size_t i = 0; i < count; ++i) {
      if (names[i] == n) return;
    }
    if (count == names.size()) {
      cut = true;
      return;
    }
    names[count++] = n;
  }
  std::string joined() const {
    std::string out;
    for (size_t i = 0; i < count; ++i) {
      if (i) out += ',';
      out += names[i];
    }
    if (cut) out += ",...";
    return bounded_text(std::move(out), summarize::kDtypeMax);
  }
  static const std::string& unknown() {
    static const std::string* q = new std::string("?");
    return *q;
  }
};

// A 1-d intp ndarray (BlockManager.blknos) read in place.
bool intp_vector(PyObject* o, const int64_t** data, Py_ssize_t* len, Py_ssize_t* stride) {
  if (!is_ndarray(o)) return false;
  const auto* a = reinterpret_cast<const NumpyArrayFields*>(o);
  if (a->nd != 1 || !a->descr || !is_numpy_dtype(a->descr)) return false;
  const auto* d = reinterpret_cast<const NumpyDescrHead*>(a->descr);
  DtypeName name;
  if (d->kind != 'i' || !numpy_dtype(a->descr, &name) || name.itemsize != 8 ||
      d->byteorder == '>') {
    return false;
  }
  *data = reinterpret_cast<const int64_t*>(a->data);
  *len = a->dimensions[0];
  *stride = a->strides[0];
  return true;
}

// DataFrame from its BlockManager: the blocks' values and the index, as
// df.memory_usage(deep=False).sum() counts them, dtypes in column order.
bool pandas_frame_internals(PyObject* df, IOSummary* out) {
  const Names& n = names();
  Ref mgr = own_attr(df, n.mgr);
  if (!mgr) return false;
  Ref blocks = own_attr(mgr.get(), n.blocks), axes = own_attr(mgr.get(), n.axes);
  if (!blocks || !PyTuple_Check(blocks.get()) || !axes || !PyList_Check(axes.get()) ||
      PyList_GET_SIZE(axes.get()) != 2) {
    return false;
  }
  IndexFacts index;
  Ref row_index = borrow(PyList_GET_ITEM(axes.get(), 1));  // held: Python code may change axes
  if (!pandas_index(row_index.get(), &index, false)) return false;
  const Py_ssize_t nblocks = PyTuple_GET_SIZE(blocks.get());
  int64_t total = index.nbytes;
  int64_t cols = 0;
  // A frame has a few blocks (one per dtype once consolidated): stack storage.
  constexpr Py_ssize_t kInline = 32;
  std::array<std::string, kInline> inline_dtypes;
  std::array<bool, kInline> inline_seen{};
  std::vector<std::string> many_dtypes;
  std::vector<char> many_seen;
  std::string* block_dtypes = inline_dtypes.data();
  bool* seen = inline_seen.data();
  if (nblocks > kInline) {
    many_dtypes.resize(static_cast<size_t>(nblocks));
    many_seen.assign(static_cast<size_t>(nblocks), 0);
    block_dtypes = many_dtypes.data();
    seen = reinterpret_cast<bool*>(many_seen.data());
  }
  for (Py_ssize_t i = 0; i < nblocks; ++i) {
    Ref values = own_attr(PyTuple_GET_ITEM(blocks.get(), i), n.values);
    ValuesFacts v;
    if (!values || !values_facts(values.get(), &v)) return false;
    total += v.nbytes;
    cols += v.nd == 2 ? v.dims[0] : 1;
    block_dtypes[i] = std::move(v.dtype);
  }
  DtypeList dtypes;
  if (nblocks == 1) {
    dtypes.add(block_dtypes[0]);
  } else if (nblocks > 1) {
    // Blocks are not in column order; blknos maps each column to its block.
    Ref blknos = own_attr(mgr.get(), n.blknos_);  // the property below computes it when None
    if (blknos.get() == Py_None) blknos = own_attr(mgr.get(), n.blknos);
    const int64_t* data = nullptr;
    Py_ssize_t len = 0, stride = 0;
    if (!blknos || !intp_vector(blknos.get(), &data, &len, &stride) || len != cols) return false;
    Py_ssize_t remaining = nblocks;
    const char* p = reinterpret_cast<const char*>(data);
    for (Py_ssize_t j = 0; j < len && remaining > 0 && !dtypes.cut; ++j, p += stride) {
      const int64_t b = *reinterpret_cast<const int64_t*>(p);
      if (b < 0 || b >= nblocks) return false;
      if (seen[b]) continue;
      seen[b] = true;
      --remaining;
      dtypes.add(block_dtypes[b]);
    }
  }
  out->has_shape = true;
  out->shape = {index.length, cols};
  out->length = index.length;
  out->size_bytes = total;
  if (!dtypes.empty()) out->dtype = dtypes.joined();
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

// Public API, where the internals are not what we expect.
void pandas_frame_public(PyObject* df, IOSummary* out) {
  const Names& n = names();
  Ref shape = get_attr(df, n.shape);
  if (fill_shape(shape.get(), out)) set_length_from_shape(out);
  Ref usage = call_deep_false(df, n.memory_usage);
  Ref total = usage ? call_method0(usage.get(), n.sum) : Ref();
  if (!to_int64(total.get(), &out->size_bytes)) out->size_bytes = -1;
  Ref dtypes = get_attr(df, n.dtypes);
  Ref list = dtypes ? call_method0(dtypes.get(), n.tolist) : Ref();
  if (list && PyList_Check(list.get())) {
    DtypeList names_in_order;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()) && !names_in_order.cut; ++i) {
      Ref item = borrow(PyList_GET_ITEM(list.get(), i));
      names_in_order.add(dtype_name(item.get()));
    }
    if (!names_in_order.empty()) out->dtype = names_in_order.joined();
  }
}

void summarize_pandas_frame(PyObject* df, IOSummary* out) {
  const std::string type_name = std::move(out->type_name);
  if (!pandas_frame_internals(df, out)) {
    *out = IOSummary{};
    pandas_frame_public(df, out);
  }
  out->type_name = type_name;
}

bool pandas_series_internals(PyObject* s, IOSummary* out) {
  const Names& n = names();
  Ref mgr = own_attr(s, n.mgr);
  if (!mgr) return false;
  Ref blocks = own_attr(mgr.get(), n.blocks), axes = own_attr(mgr.get(), n.axes);
  if (!blocks || !PyTuple_Check(blocks.get()) || PyTuple_GET_SIZE(blocks.get()) != 1 || !axes ||
      !PyList_Check(axes.get()) || PyList_GET_SIZE(axes.get()) != 1) {
    return false;
  }
  Ref values = own_attr(PyTuple_GET_ITEM(blocks.get(), 0), n.values);
  Ref index_obj = borrow(PyList_GET_ITEM(axes.get(), 0));  // held: Python code may change axes
  ValuesFacts v;
  IndexFacts index;
  if (!values || !values_facts(values.get(), &v) || v.nd != 1 ||
      !pandas_index(index_obj.get(), &index, false)) {
    return false;
  }
  out->has_shape = true;
  out->shape = {v.dims[0]};
  out->length = v.dims[0];
  out->size_bytes = v.nbytes + index.nbytes;
  out->dtype = std::move(v.dtype);
  return true;
}

void summarize_pandas_series(PyObject* s, IOSummary* out) {
  if (pandas_series_internals(s, out)) return;
  const Names& n = names();
  const std::string type_name = std::move(out->type_name);
  *out = IOSummary{};
  out->type_name = type_name;
  Ref shape = get_attr(s, n.shape);
  if (fill_shape(shape.get(), out)) set_length_from_shape(out);
  Ref usage = call_deep_false(s, n.memory_usage);
  if (!to_int64(usage.get(), &out->size_bytes)) out->size_bytes = -1;
  Ref d = get_attr(s, n.dtype);
  out->dtype = dtype_name(d.get());
}

void summarize_pandas_index(PyObject* index, IOSummary* out) {
  IndexFacts f;
  if (!pandas_index(index, &f, true)) return;
  out->has_shape = true;
  out->shape = {f.length};
  out->length = f.length;
  out->size_bytes = f.nbytes;
  out->dtype = std::move(f.dtype);
}

void summarize_pandas_array(PyObject* values, IOSummary* out) {
  ValuesFacts v;
  if (!values_facts(values, &v)) return;
  out->has_shape = true;
  out->shape.assign(v.dims, v.dims + v.nd);
  if (v.nd > 0) out->length = v.dims[0];
  out->size_bytes = v.nbytes;
  out->dtype = std::move(v.dtype);
}

// --- torch, scipy, arrow, polars ------------------------------------------------------------

// Nothing here reads tensor values or syncs a device: shape, dtype, device
// and nbytes are metadata.
void summarize_torch(PyObject* t, TypeInfo& info, IOSummary* out) {
  const Names& n = names();
  Ref shape = get_attr(t, n.shape);
  if (fill_shape(shape.get(), out)) set_length_from_shape(out);
  Ref dtype = get_attr(t, n.dtype);
  std::string d = str_of(dtype.get());
  if (starts_with(d, "torch.")) d.erase(0, 6);
  out->dtype = bounded_text(d, summarize::kDtypeMax);
  Ref device = get_attr(t, n.device);
  out->device = bounded_text(str_of(device.get()), 64);
  // Tensor.nbytes is torch >= 1.14; before, a miss would cost an exception
  // per call, so the type remembers.
  Ref nbytes = info.no_nbytes ? Ref() : get_attr(t, n.nbytes);
  if (!to_int64(nbytes.get(), &out->size_bytes)) {
    if (!nbytes) info.no_nbytes = true;
    Ref item = call_method0(t, n.element_size), count = call_method0(t, n.numel);
    int64_t a = 0, b = 0;
    out->size_bytes = to_int64(item.get(), &a) && to_int64(count.get(), &b) ? a * b : -1;
  }
}

int64_t sum_array_bytes(PyObject* o, std::initializer_list<PyObject*> attrs, bool* any) {
  int64_t total = 0;
  for (PyObject* name : attrs) {
    Ref v = get_attr(o, name);
    ArrayFacts f;
    if (v && ndarray_facts(v.get(), &f) && f.nbytes >= 0) {
      total += f.nbytes;
      *any = true;
    }
  }
  return total;
}

void summarize_scipy_sparse(PyObject* m, IOSummary* out) {
  const Names& n = names();
  Ref shape = get_attr(m, n.shape);
  fill_shape(shape.get(), out);
  Ref dtype = get_attr(m, n.dtype);
  out->dtype = dtype_name(dtype.get());
  Ref nnz = get_attr(m, n.nnz);
  int64_t count = 0;
  if (to_int64(nnz.get(), &count)) out->repr_short = "nnz=" + std::to_string(count);
  Ref format = get_attr(m, n.format);
  const std::string fmt = str_of(format.get());
  bool any = false;
  int64_t total = 0;
  if (fmt == "csr" || fmt == "csc" || fmt == "bsr") {
    total = sum_array_bytes(m, {n.data, n.indices, n.indptr}, &any);
  } else if (fmt == "coo") {
    total = sum_array_bytes(m, {n.data}, &any);
    Ref coords = get_attr(m, n.coords);  // scipy >= 1.13; row/col before
    if (coords && PyTuple_Check(coords.get())) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(coords.get()); ++i) {
        ArrayFacts f;
        if (ndarray_facts(PyTuple_GET_ITEM(coords.get(), i), &f) && f.nbytes >= 0) {
          total += f.nbytes;
          any = true;
        }
      }
    } else {
      total += sum_array_bytes(m, {n.row, n.col}, &any);
    }
  } else if (fmt == "dia") {
    total = sum_array_bytes(m, {n.data, n.offsets}, &any);
  }
  // lil and dok keep their entries in Python lists and dicts: no array
  // holds them, so their size is not known cheaply.
  if (any) out->size_bytes = total;
}

// Distinct str() of the items of a list-like, in order.
std::string joined_dtypes(PyObject* seq) {
  if (!seq) {
    return {};
  }
  Ref fast(PySequence_Fast(seq, "dtypes"));
  if (!fast) {
    clear_error();
    return {};
  }
  DtypeList list;
  // The size is read again each time and the item held: str() runs Python
  // code, which may change the list.
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()) && !list.cut; ++i) {
    Ref item = borrow(PySequence_Fast_GET_ITEM(fast.get(), i));
    list.add(dtype_name(item.get()));
  }
  return list.empty() ? std::string() : list.joined();
}

void summarize_arrow(PyObject* o, Kind kind, IOSummary* out) {
  const Names& n = names();
  if (kind == Kind::kArrowTable) {
    Ref rows = get_attr(o, n.num_rows), cols = get_attr(o, n.num_columns);
    int64_t r = 0, c = 0;
    if (to_int64(rows.get(), &r) && to_int64(cols.get(), &c)) {
      out->has_shape = true;
      out->shape = {r, c};
      out->length = r;
    }
    Ref schema = get_attr(o, n.schema);
    Ref types = schema ? get_attr(schema.get(), n.types) : Ref();
    out->dtype = joined_dtypes(types.get());
  } else {
    const Py_ssize_t len = PyObject_Length(o);
    if (len >= 0) {
      out->length = len;
    } else {
      clear_error();
    }
    Ref type = get_attr(o, n.type);
    out->dtype = bounded_text(str_of(type.get()), summarize::kDtypeMax);
  }
  Ref nbytes = get_attr(o, n.nbytes);
  if (!to_int64(nbytes.get(), &out->size_bytes)) out->size_bytes = -1;
}

void summarize_polars(PyObject* o, Kind kind, IOSummary* out) {
  const Names& n = names();
  Ref shape = get_attr(o, n.shape);
  if (fill_shape(shape.get(), out)) set_length_from_shape(out);
  if (kind == Kind::kPolarsFrame) {
    Ref dtypes = get_attr(o, n.dtypes);
    out->dtype = joined_dtypes(dtypes.get());
  } else {
    Ref dtype = get_attr(o, n.dtype);
    out->dtype = bounded_text(str_of(dtype.get()), summarize::kDtypeMax);
  }
  Ref size = call_method0(o, n.estimated_size);
  if (!to_int64(size.get(), &out->size_bytes)) out->size_bytes = -1;
}

// --- builtins and the rest -------------------------------------------------------------------

bool g_repr_objects = false;  // summarize::set_repr_objects

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
        out->repr_short = bounded_text(
            (kind == Kind::kMethod ? "<bound method " : "<function ") + compat::utf8(qualname.get()) + ">",
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

// --- registered summarizers --------------------------------------------------------------------

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

}  // namespace

void summarize_object(PyObject* obj, IOSummary* out) {
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

bool from_python(PyObject* summary, IOSummary* out, std::string* why) {
  return summary_from_python(summary, out, why);
}

void set_support(PyObject* summary_class, PyObject* log) {
  State& st = state();
  Py_XINCREF(summary_class);
  Py_XINCREF(log);
  Ref old_class(st.summary_class), old_log(st.log);
  st.summary_class = summary_class;
  st.log = log;
}

PyObject* summary_class() { return state().summary_class; }

void set_summarizer(PyObject* type, PyObject* fn) {
  State& st = state();
  Ref released;  // dropped after the registry is consistent again
  auto it = st.registry.begin();
  for (; it != st.registry.end(); ++it) {
    if (it->first == type) break;
  }
  if (it != st.registry.end()) {
    released = Ref(it->second);
    if (fn) {
      Py_INCREF(fn);
      it->second = fn;
    } else {
      Ref cls(it->first);
      st.registry.erase(it);
      clear_types();
      return;
    }
  } else if (fn) {
    Py_INCREF(type);
    Py_INCREF(fn);
    st.registry.emplace_back(type, fn);
  }
  clear_types();
}

size_t summarizer_count() { return state().registry.size(); }

size_t cache_size() { return state().types.size(); }

void set_repr_objects(bool on) { g_repr_objects = on; }

}  // namespace summarize
}  // namespace mlprof
