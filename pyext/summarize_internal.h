#pragma once
// Private to summarize*.cpp and bounded_repr.cpp: what the pieces of
// summarize_object share. The public API is summarize.h.

#include "summarize.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "py_util.h"

namespace mlprof::summarize::detail {

using pyutil::borrow;
using pyutil::bounded_text;
using pyutil::clear_error;
using pyutil::Ref;
using pyutil::str_of;
using pyutil::take_error;

// --- interned attribute names ----------------------------------------------------

// Attribute names, interned once.
inline PyObject* intern(const char* text) { return PyUnicode_InternFromString(text); }

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
inline const Names& names() {
  static const Names* n = new Names();
  return *n;
}

// --- small Python helpers (each clears the error it causes); summarize.cpp -------

Ref get_attr(PyObject* o, PyObject* name);
Ref own_attr(PyObject* o, PyObject* name);
Ref call_method0(PyObject* o, PyObject* name);
Ref call_deep_false(PyObject* o, PyObject* name);
bool to_int64(PyObject* v, int64_t* out);
bool fill_shape(PyObject* shape, IOSummary* out);
void set_length_from_shape(IOSummary* out);

// --- process-wide state; summarize.cpp ------------------------------------------------

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
inline State& state() {
  static State* s = new State();
  return *s;
}

void clear_types();
void log_failure(const std::string& kind, const std::string& message);
int64_t getsizeof(PyObject* o);  // sys.getsizeof(o), -1 if it fails

// --- type classification; summarize.cpp -------------------------------------------------

// Kind and flavor of a type, without holding its entry (no refcount traffic).
struct TypeFacts {
  Kind kind;
  Flavor flavor;
};

TypeFacts type_facts(PyTypeObject* t);
Kind kind_of(PyObject* o);

// --- reprs, bounded; bounded_repr.cpp -----------------------------------------------------

std::string bounded(PyObject* r, bool source_cut = false);
void guarded_repr(PyObject* o, TypeInfo& info, IOSummary* out);
void prefix_repr(PyObject* o, Kind kind, IOSummary* out);
void summarize_number(PyObject* o, Kind kind, IOSummary* out);

// --- numpy; summarize_numpy.cpp --------------------------------------------------------------

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

struct DtypeName {
  std::string name;
  int64_t itemsize = -1;
};

bool is_numpy_dtype(PyObject* o);
bool is_ndarray(PyObject* o);
bool numpy_dtype(PyObject* descr, DtypeName* out);
std::string dtype_name(PyObject* dtype);

// Shape, bytes and dtype of an ndarray, read from its struct.
struct ArrayFacts {
  int nd = 0;
  const Py_ssize_t* dims = nullptr;
  int64_t size = 1;
  int64_t nbytes = -1;
  DtypeName dtype;
};

bool ndarray_facts(PyObject* o, ArrayFacts* out);
void summarize_ndarray(PyObject* o, IOSummary* out);

// Dtype lists: pandas frames, arrow tables, polars frames.
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

// --- pandas; summarize_pandas.cpp ------------------------------------------------------------

void summarize_pandas_frame(PyObject* df, IOSummary* out);
void summarize_pandas_series(PyObject* s, IOSummary* out);
void summarize_pandas_index(PyObject* index, IOSummary* out);
void summarize_pandas_array(PyObject* values, IOSummary* out);

// --- torch, scipy, arrow, polars; summarize_others.cpp ---------------------------------------

void summarize_torch(PyObject* t, TypeInfo& info, IOSummary* out);
void summarize_scipy_sparse(PyObject* m, IOSummary* out);
void summarize_arrow(PyObject* o, Kind kind, IOSummary* out);
void summarize_polars(PyObject* o, Kind kind, IOSummary* out);

// --- registered summarizers; summarize_registry.cpp ------------------------------------------

bool call_registered(PyObject* o, const TypeInfo& info, IOSummary* out);

}  // namespace mlprof::summarize::detail
