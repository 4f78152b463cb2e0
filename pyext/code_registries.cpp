// The codes the engine treats apart, registered process-wide: transparent
// codes (their calls are their caller's time; also by value, as Python
// compares code), hidden codes (transparent with everything they call), and
// labellers (a callable that names each call of a code). Also the session's
// folds (a model's predict folded into MLflow's) and running a labeller.
// Registration marks the code's extra slot, which the hot path reads.
#include "engine_internal.h"

#include <algorithm>

#include "capture/frame_access.h"
#include "py_util.h"

namespace mlprof {

using compat::utf8;

// Process-wide, strong references, never freed (like the function table).
std::unordered_map<PyObject*, PyObject*>& labellers() {  // code -> labeller
  static auto* m = new std::unordered_map<PyObject*, PyObject*>();
  return *m;
}
std::unordered_set<PyObject*>& hidden_codes() {
  static auto* s = new std::unordered_set<PyObject*>();
  return *s;
}

namespace {
// Transparent code objects by value: a code equal to one (==, as Python
// compares code: not by file) is transparent too, as it is for the reference
// engine's `code in CODES`. cloudpickle rebuilds a class saved by value, its
// methods' wrappers included, as such copies.
std::unordered_multimap<Py_hash_t, PyObject*>& transparent_by_value() {
  static auto* codes = new std::unordered_multimap<Py_hash_t, PyObject*>();
  return *codes;
}
}  // namespace

bool equals_transparent(PyCodeObject* code) {
  auto& codes = transparent_by_value();
  if (codes.empty()) return false;
  const Py_hash_t h = PyObject_Hash(reinterpret_cast<PyObject*>(code));
  if (h == -1) {
    PyErr_Clear();
    return false;
  }
  auto [lo, hi] = codes.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    const int eq = PyObject_RichCompareBool(reinterpret_cast<PyObject*>(code), it->second, Py_EQ);
    if (eq < 0) PyErr_Clear();
    if (eq > 0) return true;
  }
  return false;
}

// The label of a fold of `code` into the lane's innermost recorded span, or
// 0: a fold code whose nearest non-transparent entry is a fold parent's frame.
uint32_t fold_label(const CaptureLane& L, PyCodeObject* code) {
  const auto& o = L.engine->options();
  auto c = std::find_if(o.fold_codes.begin(), o.fold_codes.end(), [code](const auto& f) {
    return f.first == reinterpret_cast<PyObject*>(code);
  });
  if (c == o.fold_codes.end()) return 0;
  auto e = std::find_if(L.rec.rbegin(), L.rec.rend(),
                        [](const StackEntry& x) { return x.kind != EntryKind::kTransparent; });
  if (e == L.rec.rend() || e->kind != EntryKind::kFrame) return 0;
  if (std::find(o.fold_parents.begin(), o.fold_parents.end(), e->code) == o.fold_parents.end())
    return 0;
  return c->second;
}

namespace {
// Calls fn(name, value) for the first `limit` parameters of the frame of
// `code` that is starting (borrowed references).
template <typename Fn>
void for_each_argument(PyCodeObject* code, PyFrameObject* frame, int limit, Fn&& each) {
#if MLPROF_HAS_EVAL_HOOK
  const HookFrame* hook = frame ? nullptr : hook_frame_now();
  if (hook && hook->frame) {
    struct _PyInterpreterFrame* f = hook->frame;
    compat::for_each_parameter_of([f](int i) { return mlprof_frame_local(f, i); }, code, limit,
                                  each);
    return;
  }
#endif
  if (!frame) frame = PyEval_GetFrame();  // the frame that is starting
  if (!frame || compat::frame_code(frame) != code) return;
  compat::for_each_parameter(frame, code, limit, each);
}

}  // namespace

// The label the code's labeller gives this call, or 0. The event runs
// untraced; the labeller's time is the profiler's, cut like I/O summaries.
uint32_t call_labeller(CaptureLane& L, PyCodeObject* code, PyFrameObject* frame) {
  auto it = labellers().find(reinterpret_cast<PyObject*>(code));
  if (it == labellers().end()) return 0;
  const int64_t since = thread_stretch_start();
  PyObject* args[2] = {Py_None, Py_None};
  int n = 0;
  for_each_argument(code, frame, 2, [&](PyObject*, PyObject* value) {
    if (n < 2 && value) args[n++] = value;
  });
  Py_INCREF(args[0]);
  Py_INCREF(args[1]);
  PyObject* result = PyObject_CallFunctionObjArgs(it->second, args[0], args[1], nullptr);
  Py_DECREF(args[0]);
  Py_DECREF(args[1]);
  uint32_t label = 0;
  if (!result) {
    L.engine->note("a labeller raised " + pyutil::take_error() + " naming a call of " +
                   utf8(code->co_name) + "; such calls keep the function's name");
  } else {
    if (PyUnicode_Check(result)) label = intern_label(utf8(result));
    Py_DECREF(result);
  }
  note_thread_overhead(since);
  return label;
}

void add_hidden(PyObject* code) {
  if (!PyCode_Check(code) || hidden_codes().count(code)) return;
  Py_INCREF(code);
  hidden_codes().insert(code);
  add_transparent(code);
}

void add_labeller(PyObject* code, PyObject* labeller) {
  if (!PyCode_Check(code)) return;
  Py_INCREF(labeller);
  auto [it, fresh] = labellers().emplace(code, labeller);
  if (fresh) {
    Py_INCREF(code);
  } else {
    Py_DECREF(it->second);
    it->second = labeller;
  }
  const auto v = reinterpret_cast<uintptr_t>(
      compat::code_extra(reinterpret_cast<PyCodeObject*>(code), g_extra_index));
  if (v && v != kExtraTransparent) {
    compat::set_code_extra(code, g_extra_index, reinterpret_cast<void*>(v | kExtraLabelled));
  }
}

void add_transparent(PyObject* code) {
  if (!PyCode_Check(code)) return;
  compat::set_code_extra(code, g_extra_index, reinterpret_cast<void*>(kExtraTransparent));
  const Py_hash_t h = PyObject_Hash(code);
  if (h == -1) {
    PyErr_Clear();
    return;
  }
  Py_INCREF(code);  // kept for the process, as the reference engine's CODES keeps it
  transparent_by_value().emplace(h, code);
}
}  // namespace mlprof
