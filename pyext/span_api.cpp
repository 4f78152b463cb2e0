// profile_span's wrapper and profile_block, as C types: with no session
// active they must cost next to nothing (target: 50 ns over a bare call), and
// a plain Python wrapper costs 130-160 ns here. They also create no Python
// frames, so they never show up in the tree themselves.

#include "span_api.h"

#include <structmember.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine.h"
#include "loop_watch.h"

namespace mlprof {

// A reference-engine session (pure Python) is current: let it do the work.
PyObject* reference_session() {
  if (!g_reference_collecting) return nullptr;
  PyObject* val = nullptr;
  if (PyContextVar_Get(session_var(), nullptr, &val) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  if (val) {
    if (engine_for_session(val)) Py_CLEAR(val);
    return val;
  }
  // A thread the reference engine records without the session in its
  // context (all_threads): ask it (_reference._thread_session).
  static PyObject* lookup = nullptr;
  if (!lookup) {
    PyObject* module = PyImport_ImportModule("mlflow_profiler._reference");
    lookup = module ? PyObject_GetAttrString(module, "_thread_session") : nullptr;
    Py_XDECREF(module);
    if (!lookup) {
      PyErr_Clear();
      return nullptr;
    }
  }
  PyObject* session = PyObject_CallNoArgs(lookup);
  if (!session) {
    PyErr_Clear();
    return nullptr;
  }
  if (session == Py_None) Py_CLEAR(session);
  return session;
}

PyObject* bind_like_function(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* call_reference(PyObject* session, const char* method, PyObject* label, PyObject* func,
                         PyObject* const* args, size_t nargsf, PyObject* kwnames, PyObject* extra) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* tuple = PyTuple_New(nargs);
  PyObject* kwargs = PyDict_New();
  if (!tuple || !kwargs) {
    Py_XDECREF(tuple);
    Py_XDECREF(kwargs);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(tuple, i, args[i]);
  }
  if (kwnames) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]);
    }
  }
  PyObject* r =
      extra ? PyObject_CallMethod(session, method, "OOOOO", label, func, tuple, kwargs, extra)
            : PyObject_CallMethod(session, method, "OOOO", label, func, tuple, kwargs);
  Py_DECREF(tuple);
  Py_DECREF(kwargs);
  return r;
}

namespace {

enum class WrapKind : int { kFunction = 0, kGenerator = 1, kOther = 2 };

struct SpanFunction {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* func;
  PyObject* label;     // str
  PyObject* resource;  // str, or null: the resource its calls use (model/resources.h)
  PyObject* code;      // func.__code__ for Python functions, else null
  PyObject* dict;
  PyObject* weakrefs;
  WrapKind kind;
  uint32_t label_id;  // interned on first use in a session
  uint32_t resource_id;
  uint32_t block_fn;
};

// resource=: a non-empty str, or None (stored as null).
bool check_resource(PyObject** resource) {
  if (*resource == Py_None) *resource = nullptr;
  if (*resource && (!PyUnicode_Check(*resource) || PyUnicode_GET_LENGTH(*resource) == 0)) {
    PyErr_Format(PyExc_TypeError, "resource must be a non-empty str or None, got %.100R",
                 *resource);
    return false;
  }
  return true;
}

// The string id of a resource name, interned on first use; 0 for none.
uint32_t resource_id(PyObject* resource, uint32_t* cached) {
  if (!resource) return 0;
  if (!*cached) *cached = intern_label(compat::utf8(resource));
  return *cached;
}

using compat::utf8;

PyObject* span_vectorcall(PyObject* self_, PyObject* const* args, size_t nargsf,
                          PyObject* kwnames) {
  auto* self = reinterpret_cast<SpanFunction*>(self_);
  if (!(g_native_collecting | g_reference_collecting)) {
    return PyObject_Vectorcall(self->func, args, nargsf, kwnames);  // the disabled path
  }
  if (PyObject* ref = reference_session()) {
    PyObject* r = call_reference(ref, "_label_call", self->label, self->func, args, nargsf, kwnames,
                                 self->resource);
    Py_DECREF(ref);
    return r;
  }
  const CurrentLanes& cl = current_lanes();
  if (cl.n == 0) return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
  switch (self->kind) {
    case WrapKind::kFunction: {
      guarded([&] {
        if (!self->label_id) self->label_id = intern_label(utf8(self->label));
        set_pending_label(self->code, self->label_id,
                          resource_id(self->resource, &self->resource_id));
      });
      PyObject* r = PyObject_Vectorcall(self->func, args, nargsf, kwnames);
      guarded([&] { clear_pending_label(self->code); });
      return r;
    }
    case WrapKind::kGenerator: {
      PyObject* r = PyObject_Vectorcall(self->func, args, nargsf, kwnames);
      if (r && (PyGen_Check(r) || PyCoro_CheckExact(r) || PyAsyncGen_CheckExact(r))) {
        guarded([&] {
          if (!self->label_id) self->label_id = intern_label(utf8(self->label));
          label_generator(r, self->code, self->label_id,
                          resource_id(self->resource, &self->resource_id));
        });
      }
      return r;
    }
    case WrapKind::kOther:
    default: {
      BlockToken tokens[4];
      int n = 0;
      guarded([&] {
        if (!self->block_fn) self->block_fn = block_function(utf8(self->label));
        n = block_enter(self->block_fn, resource_id(self->resource, &self->resource_id), tokens, 4);
        block_arguments_io(tokens, n, args, nargsf, kwnames);
      });
      PyObject* r = PyObject_Vectorcall(self->func, args, nargsf, kwnames);
      guarded([&] {
        block_exit(tokens, n, r == nullptr);
        block_return_io(tokens, n, r);  // after the exit: summarizing is not the call's time
      });
      return r;
    }
  }
}

int span_init(PyObject* self_, PyObject* args, PyObject* kwds) {
  auto* self = reinterpret_cast<SpanFunction*>(self_);
  static const char* kwlist[] = {"func", "label", "resource", nullptr};
  PyObject* func = nullptr;
  PyObject* label = nullptr;
  PyObject* resource = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OU|O", const_cast<char**>(kwlist), &func, &label,
                                   &resource)) {
    return -1;
  }
  if (!PyCallable_Check(func)) {
    PyErr_Format(PyExc_TypeError,
                 "profile_span decorates a callable, got %.100s; use profile_block for a region "
                 "of code",
                 Py_TYPE(func)->tp_name);
    return -1;
  }
  Py_INCREF(func);
  Py_XSETREF(self->func, func);
  Py_INCREF(label);
  Py_XSETREF(self->label, label);
  if (!check_resource(&resource)) return -1;
  Py_XINCREF(resource);
  Py_XSETREF(self->resource, resource);
  Py_CLEAR(self->code);
  self->kind = WrapKind::kOther;
  if (PyFunction_Check(func)) {
    PyObject* code = PyFunction_GET_CODE(func);
    Py_INCREF(code);
    self->code = code;
    self->kind = compat::is_generator_code(reinterpret_cast<PyCodeObject*>(code))
                     ? WrapKind::kGenerator
                     : WrapKind::kFunction;
  }
  self->label_id = 0;
  self->resource_id = 0;
  self->block_fn = 0;
  self->vectorcall = span_vectorcall;
  return 0;
}

int span_traverse(PyObject* self_, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<SpanFunction*>(self_);
  Py_VISIT(self->func);
  Py_VISIT(self->dict);
  return 0;
}

int span_clear(PyObject* self_) {
  auto* self = reinterpret_cast<SpanFunction*>(self_);
  Py_CLEAR(self->func);
  Py_CLEAR(self->label);
  Py_CLEAR(self->resource);
  Py_CLEAR(self->code);
  Py_CLEAR(self->dict);
  return 0;
}

void span_dealloc(PyObject* self_) {
  auto* self = reinterpret_cast<SpanFunction*>(self_);
  PyObject_GC_UnTrack(self_);
  if (self->weakrefs) PyObject_ClearWeakRefs(self_);
  span_clear(self_);
  PyTypeObject* type = Py_TYPE(self_);  // a heap type: each instance holds a reference
  type->tp_free(self_);
  Py_DECREF(type);
}

PyObject* span_repr(PyObject* self_) {
  auto* self = reinterpret_cast<SpanFunction*>(self_);
  return PyUnicode_FromFormat("<profile_span %R of %R>", self->label, self->func);
}

PyMemberDef span_members[] = {
    {"label", T_OBJECT, offsetof(SpanFunction, label), READONLY, "the span label"},
    {"resource", T_OBJECT, offsetof(SpanFunction, resource), READONLY,
     "the resource its calls use, or None"},
    {"__dictoffset__", T_PYSSIZET, offsetof(SpanFunction, dict), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(SpanFunction, weakrefs), READONLY, nullptr},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SpanFunction, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

// `__dict__` is what functools.update_wrapper copies the function's
// attributes into and sets `__wrapped__` in (inspect.signature and
// inspect.unwrap follow it; so does the 3.9/3.10 method naming in code_names.cpp).
PyGetSetDef span_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot span_slots[] = {
    {Py_tp_doc,
     const_cast<char*>("A callable labelled by profile_span (see mlflow_profiler.profile_span).")},
    {Py_tp_init, reinterpret_cast<void*>(span_init)},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(span_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(span_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(span_clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(bind_like_function)},
    {Py_tp_repr, reinterpret_cast<void*>(span_repr)},
    {Py_tp_members, span_members},
    {Py_tp_getset, span_getset},
    {0, nullptr}};

PyType_Spec span_spec = {"mlflow_profiler._core.SpanFunction", sizeof(SpanFunction), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                             Py_TPFLAGS_METHOD_DESCRIPTOR,
                         span_slots};

// ---------------------------------------------------------------- Block ------

struct Block {
  PyObject_HEAD PyObject* label;
  PyObject* resource;  // str or null
  uint32_t resource_id;
  PyObject* reference;  // token from a reference session, else null
  int automatic;        // named by the profiler (block_enter's `automatic`)
  int entered;
  int n;
  BlockToken tokens[4];
};

int block_init(PyObject* self_, PyObject* args, PyObject* kwds) {
  auto* self = reinterpret_cast<Block*>(self_);
  static const char* kwlist[] = {"label", "resource", "automatic", nullptr};
  PyObject* label = nullptr;
  PyObject* resource = nullptr;
  int automatic = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "U|O$p", const_cast<char**>(kwlist), &label,
                                   &resource, &automatic)) {
    return -1;
  }
  self->automatic = automatic;
  Py_INCREF(label);
  Py_XSETREF(self->label, label);
  if (!check_resource(&resource)) return -1;
  Py_XINCREF(resource);
  Py_XSETREF(self->resource, resource);
  self->resource_id = 0;
  self->entered = 0;
  self->n = 0;
  return 0;
}

void block_dealloc(PyObject* self_) {
  auto* self = reinterpret_cast<Block*>(self_);
  Py_CLEAR(self->label);
  Py_CLEAR(self->resource);
  Py_CLEAR(self->reference);
  PyTypeObject* type = Py_TYPE(self_);  // a heap type: each instance holds a reference
  type->tp_free(self_);
  Py_DECREF(type);
}

PyObject* block_enter_method(PyObject* self_, PyObject*) {
  auto* self = reinterpret_cast<Block*>(self_);
  if (self->entered++ == 0 && (g_native_collecting | g_reference_collecting)) {
    if (PyObject* ref = reference_session()) {
      PyObject* token = PyObject_CallMethod(ref, "_block_enter", "OOO", self->label,
                                            self->resource ? self->resource : Py_None,
                                            self->automatic ? Py_True : Py_False);
      Py_DECREF(ref);
      if (!token) return nullptr;
      Py_XSETREF(self->reference, token);
    } else {
      guarded([&] {
        self->n = block_enter(block_function(utf8(self->label)),
                              resource_id(self->resource, &self->resource_id), self->tokens, 4,
                              self->automatic != 0);
      });
    }
  }
  Py_INCREF(self_);
  return self_;
}

PyObject* block_exit_method(PyObject* self_, PyObject* const* args, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<Block*>(self_);
  bool exception = nargs > 0 && args[0] != Py_None;
  if (self->entered > 0 && --self->entered == 0) {
    if (self->reference) {
      PyObject* r =
          PyObject_CallMethod(self->reference, "exit", "O", exception ? Py_True : Py_False);
      Py_XDECREF(r);
      Py_CLEAR(self->reference);
      if (!r) return nullptr;
    } else if (self->n) {
      guarded([&] { block_exit(self->tokens, self->n, exception); });
      self->n = 0;
    }
  }
  Py_RETURN_FALSE;
}

PyMethodDef block_methods[] = {
    {"__enter__", block_enter_method, METH_NOARGS, "Open the block's span."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(block_exit_method)),
     METH_FASTCALL, "Close the block's span."},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef block_members[] = {
    {"label", T_OBJECT, offsetof(Block, label), READONLY, "the block label"},
    {"resource", T_OBJECT, offsetof(Block, resource), READONLY, "the resource it uses, or None"},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot block_slots[] = {
    {Py_tp_doc,
     const_cast<char*>(
         "profile_block(label, resource=None): a labelled span around a region of code.\n\n"
         "    with profile_block(\"tensor_conversion\"):\n"
         "        tensor = to_tensor(features)\n\n"
         "    async with slots:\n"
         "        with profile_block(\"ask\", resource=\"smart\"):  # a call in flight\n"
         "            answer = await client.post(...)\n\n"
         "Does nothing when no session is active. automatic=True (the profiler's\n"
         "HTTP client hooks): left out inside a span that already names a resource.")},
    {Py_tp_init, reinterpret_cast<void*>(block_init)},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(block_dealloc)},
    {Py_tp_methods, block_methods},
    {Py_tp_members, block_members},
    {0, nullptr}};

PyType_Spec block_spec = {"mlflow_profiler._core.profile_block", sizeof(Block), 0,
                          Py_TPFLAGS_DEFAULT, block_slots};

PyObject* g_span_type = nullptr;
PyObject* g_block_type = nullptr;

bool own_type(PyTypeObject* t) {
  return reinterpret_cast<PyObject*>(t) == g_span_type ||
         reinterpret_cast<PyObject*>(t) == g_block_type;
}

std::vector<PyMethodDef*> g_own_functions;  // a few, registered at import

}  // namespace

void add_own_function(PyMethodDef* def) {
  if (std::find(g_own_functions.begin(), g_own_functions.end(), def) == g_own_functions.end()) {
    g_own_functions.push_back(def);
  }
}

bool is_own_callable(PyObject* callable) {
  if (loop_watch::is_wrapper(callable)) return true;
  if (callable == g_span_type || callable == g_block_type || own_type(Py_TYPE(callable)))
    return true;
  if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);
  if (PyCFunction_Check(callable)) {
    PyMethodDef* def = reinterpret_cast<PyCFunctionObject*>(callable)->m_ml;
    for (PyMethodDef* own : g_own_functions) {
      if (own == def) return true;
    }
    PyObject* self = PyCFunction_GET_SELF(callable);
    return self && own_type(Py_TYPE(self));
  }
  if (Py_TYPE(callable) == &PyMethodDescr_Type) {
    return own_type(reinterpret_cast<PyMethodDescrObject*>(callable)->d_common.d_type);
  }
  return false;
}

namespace {
// _core.mark(name, resource=None): an instant in the current lanes (native
// sessions) or the reference session's (its _mark); nothing outside one.
PyObject* mark_function(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2 || !PyUnicode_Check(args[0]) ||
      (nargs == 2 && args[1] != Py_None && !PyUnicode_Check(args[1]))) {
    PyErr_SetString(PyExc_TypeError, "mark(name: str, resource: str | None = None)");
    return nullptr;
  }
  PyObject* resource = nargs == 2 && args[1] != Py_None ? args[1] : nullptr;
  if (!(g_native_collecting | g_reference_collecting)) Py_RETURN_NONE;
  if (PyObject* ref = reference_session()) {
    PyObject* r = PyObject_CallMethod(ref, "_mark", "OO", args[0], resource ? resource : Py_None);
    Py_DECREF(ref);
    return r;
  }
  mark(intern_label(utf8(args[0])), resource ? intern_label(utf8(resource)) : 0);
  Py_RETURN_NONE;
}

PyMethodDef g_mark_def = {
    "mark", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(mark_function)),
    METH_FASTCALL, "mark(name, resource=None): an instant in the current lanes."};
}  // namespace

bool add_span_types(PyObject* module) {
  add_own_function(&g_mark_def);
  PyObject* mark_fn = PyCFunction_NewEx(&g_mark_def, nullptr, nullptr);
  if (!mark_fn || PyModule_AddObject(module, "mark", mark_fn) < 0) return false;
  g_span_type = PyType_FromSpec(&span_spec);
  if (!g_span_type) return false;
  Py_INCREF(g_span_type);  // kept for is_own_callable
  if (PyModule_AddObject(module, "SpanFunction", g_span_type) < 0) return false;
  g_block_type = PyType_FromSpec(&block_spec);
  if (!g_block_type) return false;
  Py_INCREF(g_block_type);
  if (PyModule_AddObject(module, "profile_block", g_block_type) < 0) return false;
  return true;
}

}  // namespace mlprof
