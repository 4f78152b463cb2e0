// numpy arrays, scalars and dtypes, read from numpy's structs.

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

#include "summarize_internal.h"

namespace mlprof::summarize::detail {
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace mlprof::summarize::detail
