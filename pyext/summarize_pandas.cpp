// pandas DataFrame, Series, Index and ExtensionArray: read from their
// internals (BlockManager, ndarrays) where they are what pandas' own methods
// would read, by the public API otherwise.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "summarize_internal.h"

namespace mlprof::summarize::detail {
namespace {

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

}  // namespace

void summarize_pandas_frame(PyObject* df, IOSummary* out) {
  const std::string type_name = std::move(out->type_name);
  if (!pandas_frame_internals(df, out)) {
    *out = IOSummary{};
    pandas_frame_public(df, out);
  }
  out->type_name = type_name;
}

namespace {

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

}  // namespace

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

}  // namespace mlprof::summarize::detail
