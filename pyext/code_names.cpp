// Naming and interning what events name: the process-wide function table,
// a Python code object's name, module and file (found once, at its first
// sight; 3.9/3.10 find a method's qualified name from its class), a C
// function's name, and the labels, blocks and waits of profile_span,
// profile_block and the loop watch. Code objects cache their id in a PEP 523
// extra slot (engine_internal.h's function_id), so the hot path never hashes.
#include "engine_internal.h"

#include <cstring>
#include <string>

#include "capture/frame_access.h"

namespace mlprof {

using compat::utf8;

// Process-wide interning of what events name. Code objects cache their id in
// a PEP 523 extra slot, so the hot path never hashes; the profile copies out
// the entries it uses when it is built.
FunctionTable& registry() {
  static FunctionTable* table = new FunctionTable();  // never freed: ids outlive sessions
  return *table;
}
PathRules& path_rules() {
  static PathRules* rules = new PathRules();
  return *rules;
}

namespace {
std::string module_of_current_frame(PyCodeObject* code) {
  // Cold path (first sight of a code object): the module is the frame's __name__.
#if MLPROF_HAS_EVAL_HOOK
  if (const HookFrame* h = hook_frame_now(); h && h->frame) {
    PyObject* globals = mlprof_frame_globals(h->frame);
    return globals && PyDict_Check(globals) ? utf8(PyDict_GetItemString(globals, "__name__"))
                                            : std::string();
  }
#endif
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  if (!f || compat::frame_code(f) != code) return {};
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* globals = PyFrame_GetGlobals(f);  // new ref
#else
  PyObject* globals = f->f_globals;
  Py_XINCREF(globals);
#endif
  std::string out;
  if (globals && PyDict_Check(globals)) out = utf8(PyDict_GetItemString(globals, "__name__"));
  Py_XDECREF(globals);
  return out;
}

#if PY_VERSION_HEX < 0x030B0000
// The function with `code` that `value` (a class namespace entry) is or
// holds: a plain function, a staticmethod's or classmethod's, a property's
// accessor, or what one of these wraps (`__wrapped__` in an instance dict,
// as functools.update_wrapper sets it: decorators, sklearn's available_if,
// profile_span). Read from the C structs and dicts: no Python code runs.
PyObject* function_with_code(PyObject* value, PyCodeObject* code) {
  struct Wrapper {  // staticmethod and classmethod keep the callable first
    PyObject_HEAD PyObject* callable;
  };
  struct Property {
    PyObject_HEAD PyObject *get, *set, *del;
  };
  const auto is_code_of = [code](PyObject* f) {
    return f && PyFunction_Check(f) && PyFunction_GET_CODE(f) == reinterpret_cast<PyObject*>(code);
  };
  for (int hops = 0; hops < 4 && value; ++hops) {
    if (is_code_of(value)) return value;
    if (Py_TYPE(value) == &PyStaticMethod_Type || Py_TYPE(value) == &PyClassMethod_Type) {
      value = reinterpret_cast<Wrapper*>(value)->callable;
      continue;
    }
    if (Py_TYPE(value) == &PyProperty_Type) {
      auto* prop = reinterpret_cast<Property*>(value);
      for (PyObject* f : {prop->get, prop->set, prop->del}) {
        if (is_code_of(f)) return f;
      }
      return nullptr;
    }
    PyObject** dictptr = _PyObject_GetDictPtr(value);
    PyObject* dict = dictptr ? *dictptr : nullptr;
    value = dict && PyDict_Check(dict) ? PyDict_GetItemString(dict, "__wrapped__")
                                       : nullptr;  // borrowed
  }
  return nullptr;
}

// 3.9/3.10 have no co_qualname. A method's name is found from its first
// argument (`self`, or `cls` holding a class): the function with this code
// in the namespace of a class in that argument's MRO gives its __qualname__,
// which is what the compiler makes co_qualname from on 3.11+. Anything else
// (a plain or nested function, a static method) keeps co_name. Once per
// code object.
std::string name_before_311(PyCodeObject* code) {
  std::string name = utf8(code->co_name);
  if (code->co_argcount < 1 || !PyTuple_Check(code->co_varnames) ||
      PyTuple_GET_SIZE(code->co_varnames) < 1)
    return name;
  const std::string first_name = utf8(PyTuple_GET_ITEM(code->co_varnames, 0));
  if (first_name != "self" && first_name != "cls") return name;
  PyFrameObject* f = PyEval_GetFrame();  // at a call event: the called frame
  if (!f || f->f_code != code) return name;
  PyObject* first = f->f_localsplus[0];
  if (!first && PyTuple_Check(code->co_cellvars)) {
    // Captured by a closure: the argument was moved into its cell.
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_cellvars) && !first; ++i) {
      PyObject* cell = f->f_localsplus[code->co_nlocals + i];
      if (utf8(PyTuple_GET_ITEM(code->co_cellvars, i)) == first_name && cell &&
          PyCell_Check(cell)) {
        first = PyCell_GET(cell);
      }
    }
  }
  if (!first) return name;
  // `cls` in a classmethod holds the class; in a metaclass method, too.
  PyTypeObject* candidates[2] = {Py_TYPE(first), nullptr};
  if (first_name == "cls" && PyType_Check(first)) {
    candidates[0] = reinterpret_cast<PyTypeObject*>(first);
    candidates[1] = Py_TYPE(first);
  }
  for (PyTypeObject* type : candidates) {
    PyObject* mro = type ? type->tp_mro : nullptr;
    if (!mro || !PyTuple_Check(mro)) continue;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
      PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
      if (!dict || !PyDict_Check(dict)) continue;
      Py_ssize_t pos = 0;
      PyObject *key, *value;
      while (PyDict_Next(dict, &pos, &key, &value)) {
        PyObject* fn = function_with_code(value, code);
        if (!fn) continue;
        std::string qualname = utf8(reinterpret_cast<PyFunctionObject*>(fn)->func_qualname);
        return qualname.empty() ? name : qualname;
      }
    }
  }
  return name;
}
#endif

// sys.modules[module].__file__, or "" (not loaded, no file, not a str).
std::string loaded_module_file(const std::string& module) {
  if (module.empty()) return {};
  PyObject* name =
      PyUnicode_FromStringAndSize(module.data(), static_cast<Py_ssize_t>(module.size()));
  PyObject* mod = name ? PyImport_GetModule(name) : nullptr;
  Py_XDECREF(name);
  // Its namespace, not getattr: a module __getattr__ may import or warn.
  PyObject* ns = mod && PyModule_Check(mod) ? PyModule_GetDict(mod) : nullptr;
  PyObject* file = ns ? PyDict_GetItemString(ns, "__file__") : nullptr;  // borrowed
  std::string out = file && PyUnicode_Check(file) ? utf8(file) : std::string();
  Py_XDECREF(mod);
  PyErr_Clear();
  return out;
}

}  // namespace

uint32_t intern_code(PyCodeObject* code) {
#if PY_VERSION_HEX >= 0x030B0000
  std::string name = utf8(code->co_qualname);
#else
  std::string name = name_before_311(code);
#endif
  std::string file = utf8(code->co_filename);
  std::string module = module_of_current_frame(code);
  const std::string module_file = file == kDynamicCode ? loaded_module_file(module) : std::string();
  return registry().add(name, module, file, code->co_firstlineno, FunctionKind::kPython,
                        classify_user_code(file, path_rules(), module_file));
}

namespace {
// C functions: keyed by (method def or type, self type); names resolved once.
struct PairHash {
  size_t operator()(const std::pair<const void*, const void*>& p) const {
    return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
  }
};
std::unordered_map<std::pair<const void*, const void*>, uint32_t, PairHash> g_cfuncs;

std::string type_module(PyTypeObject* t) {
  const char* dot = strrchr(t->tp_name, '.');
  return dot ? std::string(t->tp_name, static_cast<size_t>(dot - t->tp_name)) : "builtins";
}
std::string type_short(PyTypeObject* t) {
  const char* dot = strrchr(t->tp_name, '.');
  return dot ? dot + 1 : t->tp_name;
}
}  // namespace

uint32_t cfunction_id(PyObject* callable) {
  const void* k1 = nullptr;
  const void* k2 = nullptr;
  std::string name, module;
  if (PyCFunction_Check(callable)) {
    auto* fn = reinterpret_cast<PyCFunctionObject*>(callable);
    PyObject* self = fn->m_self;
    k1 = fn->m_ml;
    k2 = (self && !PyModule_Check(self)) ? static_cast<const void*>(Py_TYPE(self)) : nullptr;
    auto it = g_cfuncs.find({k1, k2});
    if (it != g_cfuncs.end()) return it->second;
    if (k2) {
      name = type_short(Py_TYPE(self)) + "." + fn->m_ml->ml_name;
      module = type_module(Py_TYPE(self));
    } else {
      name = fn->m_ml->ml_name;
      module = fn->m_module && PyUnicode_Check(fn->m_module) ? utf8(fn->m_module) : "builtins";
    }
  } else if (Py_TYPE(callable) == &PyMethodDescr_Type) {
    auto* d = reinterpret_cast<PyMethodDescrObject*>(callable);
    k1 = d->d_method;
    k2 = d->d_common.d_type;
    auto it = g_cfuncs.find({k1, k2});
    if (it != g_cfuncs.end()) return it->second;
    name = type_short(d->d_common.d_type) + "." + d->d_method->ml_name;
    module = type_module(d->d_common.d_type);
  } else if (PyType_Check(callable)) {
    k1 = callable;  // types live as long as their instances' code; fine as identity
    auto it = g_cfuncs.find({k1, k2});
    if (it != g_cfuncs.end()) return it->second;
    auto* t = reinterpret_cast<PyTypeObject*>(callable);
    name = type_short(t);
    module = type_module(t);
  } else {
    // Any other callable (numpy ufuncs...): its type plus __name__ when it has one.
    PyObject* n = PyObject_GetAttrString(callable, "__name__");
    std::string sn = n ? utf8(n) : std::string();
    Py_XDECREF(n);
    if (!n) PyErr_Clear();
    name = sn.empty() ? type_short(Py_TYPE(callable)) : sn;
    module = type_module(Py_TYPE(callable));
    return registry().add(name, module, "", 0, FunctionKind::kC, false);
  }
  uint32_t id = registry().add(name, module, "", 0, FunctionKind::kC, false);
  g_cfuncs[{k1, k2}] = id;
  return id;
}

void set_library_prefixes(std::vector<std::string> prefixes) {
  path_rules().library_prefixes = std::move(prefixes);
}

bool is_user_file(std::string_view file) { return classify_user_code(file, path_rules()); }

uint32_t intern_label(std::string_view label) { return registry().strings().intern(label); }

uint32_t block_function(std::string_view label) {
  return registry().add(label, "", "", 0, FunctionKind::kBlock, true);
}

uint32_t wait_function(std::string_view name, std::string_view module, std::string_view file,
                       int line) {
  return registry().add(name, module, file, line, FunctionKind::kPython, false);
}

}  // namespace mlprof
