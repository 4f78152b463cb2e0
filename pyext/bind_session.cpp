// ProfileSession's `with` protocol in C: __enter__ and __exit__ with no
// Python frame of ours. A session's start and stop is on the hot path
// (autoprofile starts one per sampled request): the Python methods cost four
// frames, and __exit__ and deactivate ran while the capture hook was
// installed, each one passing the hook (bench/RESULTS.md, "Issue 16, eighth
// session"). The rules stay in _session.py: anything but the plain case (a
// native engine that has not run, a GIL) goes to ProfileSession.activate or
// .deactivate, which raise the errors and log the failures.

#include <pybind11/pybind11.h>
#include <structmember.h>

#include <climits>
#include <memory>
#include <new>
#include <stdexcept>

#include "bindings.h"
#include "engine.h"
#include "probes.h"
#include "span_api.h"

namespace py = pybind11;

namespace mlprof {
namespace {

PyTypeObject* g_engine_type = nullptr;
const py::detail::type_info* g_engine_tinfo = nullptr;
PyObject* g_session_type = nullptr;  // ProfileSession: a subclass may override activate/deactivate
PyObject* g_empty = nullptr;         // ()
PyObject* g_str_engine = nullptr;
PyObject* g_str_deactivate = nullptr;
PyObject* g_str_depth = nullptr;
// Offsets of ProfileSession's __slots__ "_engine" and "depth" (_session.py).
Py_ssize_t g_engine_slot = 0;
Py_ssize_t g_depth_slot = 0;

PyObject** slot(PyObject* obj, Py_ssize_t offset) {
  return reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset);
}

// Sets a slot of a ProfileSession this file made (no other reference to it yet).
void set_slot(PyObject* obj, Py_ssize_t offset, PyObject* value) {
  Py_INCREF(value);
  Py_XSETREF(*slot(obj, offset), value);
}
PyObject* g_refresh = nullptr;    // _transparent.refresh, imported at first use
Py_ssize_t g_refreshed_for = -1;  // len(sys.modules) it last had nothing left to do for

// The native engine of a plain ProfileSession (a new reference in *obj), or
// null (no error set) for any other.
Engine* native_engine(PyObject* session, PyObject** obj) {
  *obj = nullptr;
  if (reinterpret_cast<PyObject*>(Py_TYPE(session)) != g_session_type) return nullptr;
  PyObject* engine = *slot(session, g_engine_slot);  // the class is ProfileSession itself
  if (!engine || Py_TYPE(engine) != g_engine_type) return nullptr;
  Py_INCREF(engine);
  *obj = engine;
  // pybind11's own layout for a class with one C++ type (what py::cast does
  // after its type lookup, which costs more than the rest of this function).
  return reinterpret_cast<py::detail::instance*>(*obj)->get_value_and_holder().value_ptr<Engine>();
}

// _transparent.refresh() when sys.modules changed since it last had nothing
// left to do (it returns the size it is complete for, or -1).
bool refresh_transparent() {
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  if (PyDict_GET_SIZE(modules) == g_refreshed_for) return true;
  if (!g_refresh) {
    PyObject* mod = PyImport_ImportModule("mlflow_profiler._transparent");
    if (!mod) return false;
    g_refresh = PyObject_GetAttrString(mod, "refresh");
    Py_DECREF(mod);
    if (!g_refresh) return false;
  }
  PyObject* r;
  {
    compat::Untraced untraced(compat::tstate());  // an enclosing session records none of it
    r = PyObject_CallNoArgs(g_refresh);
  }
  if (!r) return false;
  g_refreshed_for = PyLong_Check(r) ? PyLong_AsSsize_t(r) : -1;
  Py_DECREF(r);
  if (PyErr_Occurred()) PyErr_Clear();
  return true;
}

// Starts `session`, whose native engine is `e` (or null): in C when that
// engine is idle and the GIL is on, else through ProfileSession.activate,
// which raises the errors. False: an exception is set.
bool start_session(PyObject* session, Engine* e, int levels) {
#ifdef Py_GIL_DISABLED
  e = nullptr;  // activate() checks that the GIL is on
#endif
  if (!e || e->state() != Engine::State::kIdle) {
    PyObject* r = PyObject_CallMethod(session, "activate", "i", levels + 1);
    Py_XDECREF(r);
    return r != nullptr;
  }
  return refresh_transparent() && start_engine(*e, session, levels);
}

// __enter__(self, levels_above=0): levels_above counts the profiler's Python
// frames between the caller whose calls are the roots and this function.
PyObject* session_enter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError,
                    "ProfileSession.__enter__() takes self and an optional levels_above");
    return nullptr;
  }
  PyObject* self = args[0];
  int levels = 0;
  if (nargs == 2) {
    levels = PyLong_AsLong(args[1]);
    if (levels == -1 && PyErr_Occurred()) return nullptr;
  }
  PyObject* obj = nullptr;
  const bool ok = start_session(self, native_engine(self, &obj), levels);
  Py_XDECREF(obj);
  if (!ok) return nullptr;
  Py_INCREF(self);
  return self;
}

// __exit__(self, *exc_info): ends capture; False (never swallows the
// exception). Failures and notes are logged by deactivate().
PyObject* session_exit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(
        PyExc_TypeError,
        "ProfileSession.__exit__() takes self and the exception, if any (type, value, traceback)");
    return nullptr;
  }
  PyObject* self = args[0];
  PyObject* obj = nullptr;
  if (Engine* e = native_engine(self, &obj)) {
    bool quiet = false;
    try {
      e->stop();
      quiet = e->failures().empty() && e->notes().empty();
    } catch (abi::__forced_unwind&) {
      throw;
    } catch (...) {  // deactivate() stops again (idempotent) and logs what goes wrong
    }
    Py_DECREF(obj);
    if (quiet) Py_RETURN_FALSE;
  }
  PyObject* r = PyObject_CallMethodNoArgs(self, g_str_deactivate);
  if (!r) return nullptr;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

// A new Engine of these options, as a Python object (null: an exception set).
// pybind11's constructor (ten arguments cast, its keyword defaults, the
// instance registered twice) took 4,000 instructions of an empty session's
// 22,000, and py::cast's path without them 1,300 (3.12). This is the layout
// py::cast makes, with the instance left out of pybind11's registry: that
// maps C++ pointers back to their Python objects, and no binding returns an
// Engine (its insert and erase were 700 instructions a session).
PyObject* make_engine(const EngineOptions& o) {
  try {
    auto engine = std::make_unique<Engine>(o);
    PyObject* obj = py::detail::make_new_instance(g_engine_type);
    if (!obj) throw py::error_already_set();
    auto* inst = reinterpret_cast<py::detail::instance*>(obj);
    auto v_h = inst->get_value_and_holder(g_engine_tinfo);
    v_h.value_ptr() = engine.get();
    using Holder = std::unique_ptr<Engine>;
    new (std::addressof(v_h.holder<Holder>())) Holder(std::move(engine));
    v_h.set_holder_constructed();
    inst->owned = true;
    return obj;
  } catch (py::error_already_set& err) {
    err.restore();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& err) {
    PyErr_SetString(PyExc_RuntimeError, err.what());
  }
  return nullptr;
}

// An Engine with every option but depth and max_events at its default.
PyObject* make_engine(int depth, size_t max_events) {
  EngineOptions o;
  o.depth = depth;
  o.max_events = max_events;
  return make_engine(o);
}

// Options checked once for many sessions (autoprofile's sampled calls): each
// session's Engine is a copy, made without pybind11's dispatch.
struct EngineTemplate {
  EngineOptions options;
  explicit EngineTemplate(EngineOptions o) : options(std::move(o)) { options.hold_codes(+1); }
  EngineTemplate(const EngineTemplate&) = delete;
  EngineTemplate& operator=(const EngineTemplate&) = delete;
  ~EngineTemplate() { options.hold_codes(-1); }
};

PyTypeObject* g_template_type = nullptr;

// start_prepared(template, attrs, site, levels_above): a ProfileSession with
// the attributes in `attrs` and an Engine copied from `template`, flagged
// AUTOPROFILE with its site (an object, or None), and started as
// __enter__(levels_above) starts one. One call, where the Python version
// made four and a pybind11 dispatch: a sampled call starts with cold caches,
// and each of those cost several microseconds there (bench/RESULTS.md).
PyObject* start_prepared(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || Py_TYPE(args[0]) != g_template_type || !PyDict_Check(args[1]) ||
      !PyLong_Check(args[3]) || !g_session_type) {
    PyErr_SetString(PyExc_TypeError,
                    "start_prepared(template, attrs, site, levels_above) takes an EngineTemplate, "
                    "a dict, an object or None, and an int (after set_session_class)");
    return nullptr;
  }
  const int levels = PyLong_AsLong(args[3]);
  if (levels == -1 && PyErr_Occurred()) return nullptr;
  const auto* tmpl = reinterpret_cast<py::detail::instance*>(args[0])
                         ->get_value_and_holder()
                         .value_ptr<EngineTemplate>();
  PyObject* engine = make_engine(tmpl->options);
  if (!engine) return nullptr;
  auto* e =
      reinterpret_cast<py::detail::instance*>(engine)->get_value_and_holder().value_ptr<Engine>();
  auto* type = reinterpret_cast<PyTypeObject*>(g_session_type);
  PyObject* session = PyBaseObject_Type.tp_new(type, g_empty, nullptr);
  PyObject* dict = session ? PyObject_GenericGetDict(session, nullptr) : nullptr;
  bool made = dict && PyDict_Update(dict, args[1]) == 0;
  if (made) {  // attrs' depth goes to its slot, which the dict's entry would not reach
    PyObject* depth = PyDict_GetItemWithError(dict, g_str_depth);  // borrowed
    if (depth) {
      set_slot(session, g_depth_slot, depth);
      made = PyDict_DelItem(dict, g_str_depth) == 0;
    } else {
      made = !PyErr_Occurred();
    }
  }
  if (made) set_slot(session, g_engine_slot, engine);
  Py_XDECREF(dict);
  Py_DECREF(engine);
  if (!made) {
    Py_XDECREF(session);
    return nullptr;
  }
  probes::mark_autoprofile(e->serial());
  if (args[2] != Py_None) e->set_site(reinterpret_cast<uintptr_t>(args[2]));
  if (!start_session(session, e, levels)) Py_CLEAR(session);
  return session;
}

PyMethodDef g_start_prepared_def = {
    "start_prepared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(start_prepared)),
    METH_FASTCALL,
    "start_prepared(template, attrs, site, levels_above, /)\n--\n\n"
    "A started ProfileSession: attributes from attrs, an Engine copied from template, flagged "
    "AUTOPROFILE with its site (autoprofile's sampled calls)."};

// profiling() itself: its plain case here, every other in Python. Called with
// a depth (an int of -1 or more) and every other option at its default,
// outside serving (no mlflow.pyfunc), it is object.__new__(ProfileSession)
// with depth and its engine set, the other options left to the class's
// defaults; anything else goes to the Python
// function it wraps, which raises the errors and takes the other paths, and
// whose signature, docstring and annotations it shows. The Python function
// cost 4,400 instructions of an empty session's 17,800 (3.12), its frame and
// keyword-only defaults most of them.
struct PlainProfiling {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* general;   // profiling() in Python
  PyObject* doc;       // its docstring: pydoc reads __doc__ past tp_getattro
  PyObject* weaklist;  // a function can be weakly referenced
};

PyObject* g_default_depth = nullptr;  // profiling()'s defaults, read once from it
PyObject* g_kwdefaults = nullptr;     // its keyword-only ones, by name
size_t g_default_max_events = 0;
PyObject* g_str_pyfunc = nullptr;

// The depth of a plain call, or null: at most one positional argument, and
// every keyword argument but depth given its default itself (a value equal to
// one takes the general path), or, for engine, "native".
PyObject* plain_depth(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs > 1) return nullptr;
  PyObject* depth = nargs ? args[0] : g_default_depth;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = args[nargs + i];
    if (name == g_str_depth || PyUnicode_Compare(name, g_str_depth) == 0) {
      if (nargs) return nullptr;  // given twice
      depth = value;
      continue;
    }
    PyObject* def = PyDict_GetItemWithError(g_kwdefaults, name);  // borrowed
    if (!def) return nullptr;                                     // not an option
    if (value == def) continue;
    if (PyUnicode_Check(def) && PyUnicode_Check(value) && PyUnicode_Compare(value, def) == 0)
      continue;  // engine="native"
    return nullptr;
  }
  return depth;
}

PyObject* profiling_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* depth = plain_depth(args, PyVectorcall_NARGS(nargsf), kwnames);
  long d = -2;
  if (depth && PyLong_CheckExact(depth)) {
    int overflow = 0;
    d = PyLong_AsLongAndOverflow(depth, &overflow);
    if (overflow || d > INT_MAX) d = -2;
  }
  const int serving = PyDict_Contains(PyImport_GetModuleDict(), g_str_pyfunc);
  if (d < -1 || serving != 0 || PyErr_Occurred() || !g_session_type) {
    PyErr_Clear();
    return PyObject_Vectorcall(reinterpret_cast<PlainProfiling*>(self)->general, args, nargsf,
                               kwnames);
  }
  PyObject* engine = make_engine(static_cast<int>(d), g_default_max_events);
  if (!engine) return nullptr;
  auto* type = reinterpret_cast<PyTypeObject*>(g_session_type);
  PyObject* session = PyBaseObject_Type.tp_new(type, g_empty, nullptr);
  if (session) {
    set_slot(session, g_depth_slot, depth);
    set_slot(session, g_engine_slot, engine);
  }
  Py_DECREF(engine);
  return session;
}

void profiling_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);  // a heap type: each instance holds a reference
  if (reinterpret_cast<PlainProfiling*>(self)->weaklist) PyObject_ClearWeakRefs(self);
  Py_CLEAR(reinterpret_cast<PlainProfiling*>(self)->general);
  Py_CLEAR(reinterpret_cast<PlainProfiling*>(self)->doc);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* profiling_repr(PyObject* self) {
  return PyObject_Repr(reinterpret_cast<PlainProfiling*>(self)->general);
}

// The Python function's attributes (__module__, __name__, __annotations__
// ...) but for its own (__wrapped__, __doc__, the type's slots).
PyObject* profiling_getattr(PyObject* self, PyObject* name) {
  PyObject* general = reinterpret_cast<PlainProfiling*>(self)->general;
  if (PyUnicode_CompareWithASCIIString(name, "__module__") == 0)
    return PyObject_GetAttr(general, name);
  // The Python function, which takes every call: tools that model a callable
  // object by its __call__ (mock.create_autospec) see its signature.
  if (PyUnicode_CompareWithASCIIString(name, "__call__") == 0) {
    Py_INCREF(general);
    return general;
  }
  PyObject* r = PyObject_GenericGetAttr(self, name);
  if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyErr_Clear();
  return PyObject_GetAttr(general, name);
}

PyMemberDef profiling_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PlainProfiling, vectorcall), READONLY, nullptr},
    {"__wrapped__", T_OBJECT, offsetof(PlainProfiling, general), READONLY,
     "profiling() in Python, which takes every call but the plain one"},
    {"__doc__", T_OBJECT, offsetof(PlainProfiling, doc), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(PlainProfiling, weaklist), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

// Pickled by reference, as a function is: its module's attribute of its name.
PyObject* profiling_reduce(PyObject* self, PyObject*) {
  return PyObject_GetAttrString(reinterpret_cast<PlainProfiling*>(self)->general, "__qualname__");
}

PyMethodDef profiling_methods[] = {{"__reduce__", profiling_reduce, METH_NOARGS, nullptr},
                                   {nullptr, nullptr, 0, nullptr}};

PyType_Slot profiling_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(profiling_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(bind_like_function)},  // binds as a function does
    {Py_tp_getattro, reinterpret_cast<void*>(profiling_getattr)},
    {Py_tp_repr, reinterpret_cast<void*>(profiling_repr)},
    {Py_tp_members, profiling_members},
    {Py_tp_methods, profiling_methods},
    {0, nullptr}};

PyType_Spec profiling_spec = {
    // "function": help() titles it by its type ("function in module ...").
    "mlflow_profiler._core.function", sizeof(PlainProfiling), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    profiling_slots};

// profiling_in_c(general): the function above around profiling() in Python.
py::object profiling_in_c(py::object general) {
  if (!PyFunction_Check(general.ptr())) throw py::type_error("profiling_in_c() takes a function");
  const py::tuple defaults = general.attr("__defaults__");
  if (!g_str_pyfunc) {
    g_default_depth = py::object(defaults[0]).release().ptr();
    g_kwdefaults = py::object(general.attr("__kwdefaults__")).release().ptr();
    g_default_max_events = py::cast<size_t>(PyDict_GetItemString(g_kwdefaults, "max_events"));
    g_str_pyfunc = PyUnicode_InternFromString("mlflow.pyfunc");
    if (!g_str_pyfunc) throw py::error_already_set();
  }
  PyObject* type = PyType_FromSpec(&profiling_spec);
  if (!type) throw py::error_already_set();
  auto* self = PyObject_New(PlainProfiling, reinterpret_cast<PyTypeObject*>(type));
  Py_DECREF(type);  // the instance holds it
  if (!self) throw py::error_already_set();
  self->vectorcall = profiling_call;
  self->weaklist = nullptr;
  self->doc = py::object(general.attr("__doc__")).release().ptr();
  self->general = general.release().ptr();
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(self));
}

PyMethodDef g_enter_def = {
    "__enter__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(session_enter)),
    METH_FASTCALL,
    "__enter__(self, levels_above=0, /)\n--\n\n"
    "Starts capture (ProfileSession.activate, without its frames)."};
PyMethodDef g_exit_def = {
    "__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(session_exit)),
    METH_FASTCALL,
    "__exit__(self, *exc_info)\n--\n\n"
    "Ends capture (ProfileSession.deactivate, without its frames); returns False."};

// A C function that binds like a Python method (instancemethod).
py::object method(PyMethodDef* def, py::module_& m) {
  PyObject* fn = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
  if (!fn) throw py::error_already_set();
  add_own_function(def);
  PyObject* im = PyInstanceMethod_New(fn);
  Py_DECREF(fn);
  if (!im) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(im);
}

// The offset of the object slot `name` that `cls` declares in __slots__.
Py_ssize_t slot_offset(const py::object& cls, PyObject* name) {
  if (!PyType_Check(cls.ptr())) throw py::type_error("set_session_class() takes a class");
  PyObject* d = PyDict_GetItemWithError(reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_dict, name);
  if (!d && PyErr_Occurred()) throw py::error_already_set();
  if (!d || Py_TYPE(d) != &PyMemberDescr_Type ||
      reinterpret_cast<PyMemberDescrObject*>(d)->d_member->type != T_OBJECT_EX)
    throw py::type_error("set_session_class(): the class must declare " +
                         py::cast<std::string>(name) + " in __slots__");
  return reinterpret_cast<PyMemberDescrObject*>(d)->d_member->offset;
}

}  // namespace

EngineOptions engine_options(int depth, size_t max_events, bool all_threads, bool capture_c_calls,
                             bool capture_io, int io_depth, const py::list& transparent_codes,
                             const py::list& fold_parents, const py::list& fold_codes, int values) {
  EngineOptions o;
  auto code_of = [](py::handle code, const char* what) {
    if (!PyCode_Check(code.ptr())) throw py::type_error(std::string(what) + ": code objects only");
    return code.ptr();
  };
  for (py::handle code : transparent_codes)
    o.transparent_codes.push_back(code_of(code, "transparent_codes"));
  for (py::handle code : fold_parents) o.fold_parents.push_back(code_of(code, "fold_parents"));
  for (py::handle pair : fold_codes) {  // (code, label)
    auto t = py::cast<py::tuple>(pair);
    o.fold_codes.emplace_back(code_of(t[0], "fold_codes"),
                              intern_label(py::cast<std::string>(t[1])));
  }
  o.depth = depth;
  o.max_events = max_events;
  o.all_threads = all_threads;
  o.capture_c_calls = capture_c_calls;
  o.capture_io = capture_io;
  o.io_depth = io_depth;
  if (values < 0 || values >= (1 << kValueKinds))
    throw py::value_error("values: a mask of ValueKind bits");
  o.values = static_cast<uint8_t>(values);
  return o;
}

bool start_engine(Engine& e, PyObject* session, int levels_above) {
  try {
    e.start(session, levels_above);
    return true;
  } catch (const std::bad_alloc&) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
  } catch (const std::runtime_error& err) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, err.what());
  } catch (const std::exception& err) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, err.what());
  }
  return false;
}

void bind_session(py::module_& m) {
  g_engine_type = reinterpret_cast<PyTypeObject*>(py::type::of<Engine>().ptr());
  g_engine_tinfo = py::detail::get_type_info(typeid(Engine), /*throw_if_missing=*/true);
  g_str_engine = PyUnicode_InternFromString("_engine");
  g_str_depth = PyUnicode_InternFromString("depth");
  g_str_deactivate = PyUnicode_InternFromString("deactivate");
  g_empty = PyTuple_New(0);
  if (!g_str_engine || !g_str_depth || !g_str_deactivate || !g_empty) throw py::error_already_set();
  py::class_<EngineTemplate> template_class(
      m, "EngineTemplate",
      "An Engine's options, checked once; start_prepared() starts sessions from copies.");
  def_engine_init<EngineTemplate>(template_class);
  g_template_type = reinterpret_cast<PyTypeObject*>(py::type::of<EngineTemplate>().ptr());
  add_own_function(&g_start_prepared_def);
  {
    PyObject* fn = PyCFunction_NewEx(&g_start_prepared_def, nullptr, m.attr("__name__").ptr());
    if (!fn || PyModule_AddObject(m.ptr(), "start_prepared", fn) < 0) {
      Py_XDECREF(fn);
      throw py::error_already_set();
    }
  }
  m.def(
      "set_session_class",
      [](py::object cls) {
        const Py_ssize_t engine = slot_offset(cls, g_str_engine);
        const Py_ssize_t depth = slot_offset(cls, g_str_depth);
        Py_XDECREF(g_session_type);
        g_session_type = cls.release().ptr();
        g_engine_slot = engine;
        g_depth_slot = depth;
      },
      "The class whose instances session_enter/session_exit start and stop without its\n"
      "methods; its __slots__ hold _engine and depth.");
  m.def("profiling_in_c", &profiling_in_c,
        "profiling() with its plain case in C (bind_session.cpp), around the\n"
        "Python function, which takes every other call.");
  m.attr("session_enter") = method(&g_enter_def, m);
  m.attr("session_exit") = method(&g_exit_def, m);
}

}  // namespace mlprof
