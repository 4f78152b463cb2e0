// torch tensors, scipy sparse matrices, pyarrow tables and arrays, polars
// frames and series: their metadata, by their public API.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "summarize_internal.h"

namespace mlprof::summarize::detail {

// Nothing here reads tensor values or syncs a device: shape, dtype, device
// and nbytes are metadata.
void summarize_torch(PyObject* t, TypeInfo& info, IOSummary* out) {
  const Names& n = names();
  Ref shape = get_attr(t, n.shape);
  if (fill_shape(shape.get(), out)) set_length_from_shape(out);
  Ref dtype = get_attr(t, n.dtype);
  std::string d = str_of(dtype.get());
  if (d.starts_with("torch.")) d.erase(0, 6);
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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace mlprof::summarize::detail
