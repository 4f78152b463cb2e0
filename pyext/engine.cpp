#include "engine.h"
#include "summarize.h"

#include <pythread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "alloc_count.h"
#include "clock.h"
#include "gil_range.h"
#include "loop_watch.h"
#include "model/resume.h"
#include "views/group.h"
#define MLPROF_USDT_DEFINE_SEMAPHORES  // this TU owns the probes' semaphores
#include "probes.h"
#include "py_util.h"
#include "span_api.h"
#include "trace_context.h"
#include "capture/capture.h"
#include "capture/frame_access.h"

namespace mlprof {

int g_native_collecting = 0;
int g_reference_collecting = 0;

namespace {

PyObject* g_session_var = nullptr;
// A task lane's context carries the lane's context id here, so that a copy
// made in it (a task created inside that task) names its creator.
PyObject* g_lane_var = nullptr;
Py_ssize_t g_extra_index = -1;
uint64_t g_generation = 1;
uint64_t g_next_serial = 1;
std::unordered_map<PyObject*, Engine*> g_by_session;  // collecting engines by session object
std::unordered_map<uint64_t, Engine*> g_by_serial;    // collecting engines by serial

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
constexpr uintptr_t kExtraTransparent = 1;
constexpr uint32_t kTransparent = UINT32_MAX;
// A code's extra slot (g_extra_index): 0 not seen yet, kExtraTransparent, or
// its function id, encoded by these two, with kExtraLabelled when a labeller
// names its calls (add_labeller).
constexpr uintptr_t kExtraLabelled = 2;
constexpr uintptr_t extra_of_id(uint32_t id) { return (static_cast<uintptr_t>(id) + 1) << 2; }
constexpr uint32_t id_of_extra(uintptr_t v) { return static_cast<uint32_t>((v >> 2) - 1); }

// Process-wide, strong references, never freed (like the function table).
std::unordered_map<PyObject*, PyObject*>& labellers() {  // code -> labeller
  static auto* m = new std::unordered_map<PyObject*, PyObject*>();
  return *m;
}
std::unordered_set<PyObject*>& hidden_codes() {
  static auto* s = new std::unordered_set<PyObject*>();
  return *s;
}

using compat::utf8;

const HookFrame* hook_frame_now();  // the frame of the event being reported (Site::hook), or null

std::string module_of_current_frame(PyCodeObject* code) {
  // Cold path (first sight of a code object): the module is the frame's __name__.
#if MLPROF_HAS_EVAL_HOOK
  if (const HookFrame* h = hook_frame_now(); h && h->frame) {
    PyObject* globals = mlprof_frame_globals(h->frame);
    return globals && PyDict_Check(globals) ? utf8(PyDict_GetItemString(globals, "__name__")) : std::string();
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
    PyObject_HEAD
    PyObject* callable;
  };
  struct Property {
    PyObject_HEAD
    PyObject *get, *set, *del;
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
    value = dict && PyDict_Check(dict) ? PyDict_GetItemString(dict, "__wrapped__") : nullptr;  // borrowed
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
  if (code->co_argcount < 1 || !PyTuple_Check(code->co_varnames) || PyTuple_GET_SIZE(code->co_varnames) < 1) return name;
  const std::string first_name = utf8(PyTuple_GET_ITEM(code->co_varnames, 0));
  if (first_name != "self" && first_name != "cls") return name;
  PyFrameObject* f = PyEval_GetFrame();  // at a call event: the called frame
  if (!f || f->f_code != code) return name;
  PyObject* first = f->f_localsplus[0];
  if (!first && PyTuple_Check(code->co_cellvars)) {
    // Captured by a closure: the argument was moved into its cell.
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_cellvars) && !first; ++i) {
      PyObject* cell = f->f_localsplus[code->co_nlocals + i];
      if (utf8(PyTuple_GET_ITEM(code->co_cellvars, i)) == first_name && cell && PyCell_Check(cell)) {
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
  PyObject* name = PyUnicode_FromStringAndSize(module.data(), static_cast<Py_ssize_t>(module.size()));
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

// Transparent code objects by value: a code equal to one (==, as Python
// compares code: not by file) is transparent too, as it is for the reference
// engine's `code in CODES`. cloudpickle rebuilds a class saved by value, its
// methods' wrappers included, as such copies.
std::unordered_multimap<Py_hash_t, PyObject*>& transparent_by_value() {
  static auto* codes = new std::unordered_multimap<Py_hash_t, PyObject*>();
  return *codes;
}

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

inline uint32_t function_id(PyCodeObject* code) {
  void* extra = nullptr;
  if (compat::get_code_extra(reinterpret_cast<PyObject*>(code), g_extra_index, &extra) < 0) {
    PyErr_Clear();
    return kTransparent;
  }
  auto v = reinterpret_cast<uintptr_t>(extra);
  if (v == kExtraTransparent) return kTransparent;
  if (v) return id_of_extra(v);
  if (equals_transparent(code)) {  // first sight only: the extra remembers
    compat::set_code_extra(reinterpret_cast<PyObject*>(code), g_extra_index, reinterpret_cast<void*>(kExtraTransparent));
    return kTransparent;
  }
  uint32_t id = intern_code(code);
  uintptr_t x = extra_of_id(id);
  if (!labellers().empty() && labellers().count(reinterpret_cast<PyObject*>(code))) x |= kExtraLabelled;
  compat::set_code_extra(reinterpret_cast<PyObject*>(code), g_extra_index, reinterpret_cast<void*>(x));
  return id;
}

inline bool is_transparent(PyCodeObject* code) {
  void* extra = nullptr;
  if (compat::get_code_extra(reinterpret_cast<PyObject*>(code), g_extra_index, &extra) < 0) {
    PyErr_Clear();
    return false;
  }
  return reinterpret_cast<uintptr_t>(extra) == kExtraTransparent;
}

// Transparent for this lane's session only (EngineOptions::transparent_codes).
inline bool session_transparent(const CaptureLane& L, PyCodeObject* code) {
  const auto& codes = L.engine->options().transparent_codes;
  if (codes.empty()) return false;
  return std::find(codes.begin(), codes.end(), reinterpret_cast<PyObject*>(code)) != codes.end();
}

// The profiler worked in this thread from `since` to now (naming a code,
// running a labeller): every session recording here leaves it out.
void note_thread_overhead(int64_t since) {
  const int64_t now = clock::ticks();
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) cl.lanes[i]->overhead.emplace_back(since, now);
}

// A code this session may fold (EngineOptions::fold_codes); the full path decides.
inline bool session_folds(const CaptureLane& L, PyCodeObject* code) {
  const auto& codes = L.engine->options().fold_codes;
  return std::any_of(codes.begin(), codes.end(),
                     [code](const auto& c) { return c.first == reinterpret_cast<PyObject*>(code); });
}

// The label of a fold of `code` into the lane's innermost recorded span, or
// 0: a fold code whose nearest non-transparent entry is a fold parent's frame.
uint32_t fold_label(const CaptureLane& L, PyCodeObject* code) {
  const auto& o = L.engine->options();
  auto c = std::find_if(o.fold_codes.begin(), o.fold_codes.end(),
                        [code](const auto& f) { return f.first == reinterpret_cast<PyObject*>(code); });
  if (c == o.fold_codes.end()) return 0;
  auto e = std::find_if(L.rec.rbegin(), L.rec.rend(),
                        [](const StackEntry& x) { return x.kind != EntryKind::kTransparent; });
  if (e == L.rec.rend() || e->kind != EntryKind::kFrame) return 0;
  if (std::find(o.fold_parents.begin(), o.fold_parents.end(), e->code) == o.fold_parents.end()) return 0;
  return c->second;
}

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

// Per-thread cache of the lanes current in this thread and context.
struct ThreadCache {
  const HookFrame* hook_frame = nullptr;  // the event being reported (Site::hook)
  uint64_t generation = 0;
  PyObject* context = nullptr;
  uint64_t context_ver = 0;
  CurrentLanes current{};
  bool awaits_roots = false;  // a session entered by a coroutine of this thread collects
  const int* suspended = nullptr;  // 3.11: this thread's entry of g_thread_suspended, once it has one
  Engine* bound = nullptr;  // all_threads binding
  uint64_t bound_serial = 0;
  uint64_t thread_key = 0;  // unique per OS thread; idents are reused once a thread exits
};
thread_local ThreadCache t_cache;
const HookFrame* hook_frame_now() { return t_cache.hook_frame; }
uint64_t g_next_thread_key = 1;

// Suspended segments that keep the hook (Suspended::keeps_hook) per thread,
// over every lane and session of the thread (3.11: while a thread has one,
// the evaluation hook stays in for it, since only the hook sees a resume;
// current_lanes_keep_hook).
std::unordered_map<uint64_t, int> g_thread_suspended;
inline void count_suspended(const CaptureLane& L, int delta) {
#if MLPROF_HAS_MONITORING
  (void)L, (void)delta;  // sys.monitoring sees every resume: nothing keeps a hook in
#else
  if (delta) g_thread_suspended[L.thread_key] += delta;
#endif
}

uint64_t thread_key() {
  if (!t_cache.thread_key) t_cache.thread_key = g_next_thread_key++;
  return t_cache.thread_key;
}

uint64_t native_tid() {
  thread_local uint64_t tid = static_cast<uint64_t>(syscall(SYS_gettid));  // one syscall per thread
  return tid;
}

// threading._active, once threading is imported: the module clears and
// refills that dict (after a fork) but never rebinds it, so it is kept.
PyObject* threading_active() {
  static PyObject* active = nullptr;
  if (active) return active;
  PyObject* modname = PyUnicode_FromString("threading");
  PyObject* threading = modname ? PyImport_GetModule(modname) : nullptr;
  Py_XDECREF(modname);
  if (threading) {
    PyObject* a = PyObject_GetAttrString(threading, "_active");
    if (a && PyDict_Check(a)) active = a;  // a strong reference, kept
    else Py_XDECREF(a);
    Py_DECREF(threading);
  }
  PyErr_Clear();
  return active;
}

// threading._active[ident] (a new reference), or null: no _DummyThread is
// made for a thread threading does not know.
PyObject* active_thread(uint64_t ident) {
  PyObject* th = nullptr;
  if (PyObject* active = threading_active()) {
    PyObject* key = PyLong_FromUnsignedLongLong(ident);
    th = key ? PyDict_GetItem(active, key) : nullptr;
    Py_XDECREF(key);
    Py_XINCREF(th);
  }
  PyErr_Clear();
  return th;
}

std::string thread_name(PyObject* thread, uint64_t ident) {
  // thread._name (not the property: no Python frame inside a hook). Once per
  // lane: a session start costs a lookup, not an import and two attribute
  // lookups by C string.
  static PyObject* name_attr = PyUnicode_InternFromString("_name");
  std::string out;
  if (thread && name_attr) {
    PyObject* name = PyObject_GetAttr(thread, name_attr);
    out = utf8(name);
    Py_XDECREF(name);
  }
  PyErr_Clear();
  if (out.empty()) out = "Thread-" + std::to_string(ident);
  return out;
}

[[gnu::noinline]] void refresh(ThreadCache& c, PyThreadState* ts) {
  // The frame evaluation function asks with an exception pending (one being
  // thrown into a generator); a new lane's thread name lookup would clear it.
  compat::PendingError pending;
  c.current.n = 0;
  c.awaits_roots = false;
  if (g_native_collecting > 0) {
    Engine* e = nullptr;
    PyObject* val = nullptr;
    if (PyContextVar_Get(g_session_var, nullptr, &val) < 0) {
      PyErr_Clear();
    } else if (val) {
      e = engine_for_session(val);
      Py_DECREF(val);
    }
    if (!e && c.bound) {
      auto it = g_by_serial.find(c.bound_serial);
      if (it != g_by_serial.end()) e = it->second;
      else c.bound = nullptr;
    }
    uint64_t key = thread_key();
    for (auto& [serial, engine] : g_by_serial) {
      c.awaits_roots = c.awaits_roots || (engine->entered_by_coroutine_ && engine->entered_in(key));
    }
    // A thread that only runs a context carrying the session (asyncio.to_thread,
    // run_in_executor, 3.14t's inherited contexts) is not recorded: a session
    // records where it was entered, in threads all_threads bound to it, and,
    // as the outer session of one entered here, where that one was.
    bool here = false;
    while (e && c.current.n < 4) {
      here = here || e == c.bound || e->entered_in(key);
      if (here && e->state() == Engine::State::kCollecting) {
        // A thread bound by all_threads has one lane for all its contexts:
        // 3.14 runs a thread's target in a context of its own, entered after
        // the thread's first event (Thread(context=...)).
        // A copy of a task's context (asyncio.to_thread) has a lane of its
        // own there, hung under the task's span that awaits the work.
        CaptureLane* lane = e->lane_for(key, e == c.bound ? e->awaited_context(ts->context) : ts->context);
        if (lane) c.current.lanes[c.current.n++] = lane;
      }
      e = e->parent();
    }
  }
  c.generation = g_generation;
  c.context = ts->context;
  c.context_ver = ts->context_ver;
}

inline ThreadCache& cache_now(PyThreadState* ts) {
  ThreadCache* cp = &t_cache;
  // Opaque to the optimizer, so that it keeps the address in a register:
  // GCC would rather derive it again after each call, and in a module loaded
  // with dlopen every derivation is a call to __tls_get_addr.
  asm("" : "+r"(cp));
  ThreadCache& c = *cp;
  if (c.generation != g_generation || c.context != ts->context || c.context_ver != ts->context_ver) {
    refresh(c, ts);
  }
  return c;
}
inline const CurrentLanes& lanes_now(PyThreadState* ts = compat::tstate()) { return cache_now(ts).current; }

// An event's lanes, with its frame described to the engine while it runs.
class Reporting {
 public:
  explicit Reporting(const Site& site) : c_(cache_now(site.ts)) { c_.hook_frame = site.hook; }
  ~Reporting() { c_.hook_frame = nullptr; }
  const CurrentLanes& lanes() const { return c_.current; }

 private:
  ThreadCache& c_;
};

// The lane's counters (cpu_time, alloc_bytes) now, as readings of `event`:
// how many were written to `out`. The thread's CPU clock is a system call
// (no vDSO): ~10x a tick.
size_t read_counters(const CaptureLane& L, uint32_t event, Reading* out) {
  size_t n = 0;
  if (L.values & (1u << static_cast<int>(ValueKind::kAllocBytes))) {
    out[n++] = {event, ValueKind::kAllocBytes, static_cast<int64_t>(alloc_count::thread_bytes())};
  }
  if (L.values & (1u << static_cast<int>(ValueKind::kCpuNs))) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    out[n++] = {event, ValueKind::kCpuNs, int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec};
  }
  return n;
}

// The lane's counters for the event just written.
[[gnu::noinline]] void take_readings(CaptureLane& L) {
  Reading now[kValueKinds];
  const size_t n = read_counters(L, static_cast<uint32_t>(L.out.events.size() - 1), now);
  L.out.readings.insert(L.out.readings.end(), now, now + n);
}

// Reads the thread's CPU clock for running vs waiting (views/waiting.h), at
// event time `ts`.
[[gnu::noinline]] void read_off_cpu(CaptureLane& L, int64_t ts) {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  L.cpu_reads.emplace_back(ts, int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec);
  L.off_read_ticks = ts;
}

// At most once a quantum of wall time per lane: one compare on the hot path.
inline void maybe_read_off_cpu(CaptureLane& L, int64_t ts) {
  if (__builtin_expect(ts - L.off_read_ticks >= L.off_quantum, 0)) read_off_cpu(L, ts);
}

inline void push(CaptureLane& L, EventKind kind, uint32_t id, uint8_t flags, int64_t ts) {
  L.out.events.push_back(Event{ts, id, kind, flags, 0});
  if (kind == EventKind::kLabel) return;
  if (__builtin_expect(L.values != 0, 0)) take_readings(L);
  maybe_read_off_cpu(L, ts);
}

// Whether a resume of `code` may fold (model/resume.h): a plain generator's,
// while no v1 tracer rebuilds the lanes from per-event probes (its kCall
// indices count every kSuspend and kResume). A coroutine's or an async
// generator's suspension is an await, where its task waits: it keeps its
// kSuspend/kResume, so timelines, bubbles and the kernel's attribution see it.
inline bool may_fold(PyCodeObject* code) {
  constexpr int kAwaits = CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR;
  return code != nullptr && !(code->co_flags & kAwaits) && !MLPROF_USDT_ENABLED(span_resume);
}

[[gnu::noinline]] void push_resume_read(CaptureLane& L, uint32_t call, int64_t ts, bool fold) {
  Reading now[kValueKinds];
  const size_t n = read_counters(L, 0, now);
  append_resume(L.out, call, ts, fold, now, n);
}

// The resume of the span whose kCall is at `call`: written by the core's one
// writer of resumes, which folds it when the generator went straight back to
// its consumer (model/resume.h), so a busy generator costs no events.
inline void push_resume(CaptureLane& L, uint32_t call, int64_t ts, PyCodeObject* code) {
  if (__builtin_expect(L.values != 0, 0)) {
    push_resume_read(L, call, ts, may_fold(code));
  } else {
    append_resume(L.out, call, ts, may_fold(code));
  }
  maybe_read_off_cpu(L, ts);
}

// Room for one more event of any kind; past the hard cap the lane stops.
inline bool room_for_structure(CaptureLane& L) {
  if (L.out.events.size() < L.hard_cap) return true;
  L.truncated = true;
  L.out.truncated = true;
  return false;
}

// Closes rec[from..] innermost first (recorded entries get their kReturn) and
// drops them.
void close_entries(CaptureLane& L, size_t from, bool exception, int64_t ts) {
  for (size_t i = L.rec.size(); i > from; --i) {
    const StackEntry& e = L.rec[i - 1];
    if (e.call_index == kNoEvent) continue;
    if (!room_for_structure(L)) break;
    uint8_t flags = exception ? kEvException : 0;
    if (e.children_dropped) flags |= kEvChildrenDropped;
    push(L, EventKind::kReturn, 0, flags, ts);
    probes::span_exit(L.engine->serial(), L.index, e.call_index, flags);
  }
  L.rec.resize(from);
}

inline bool frame_like(const StackEntry& e) {
  return e.kind == EntryKind::kFrame || e.kind == EntryKind::kTransparent || e.kind == EntryKind::kDropped;
}

// Entries whose frame has ended without its end being reported (a frame at
// the same or a shallower frame depth is running now) are closed here: at
// most they end late. The innermost recorded frame among them is remembered,
// so that its own report, if it comes, still gives it its flag and value.
void close_ended(CaptureLane& L, int32_t pydepth, int64_t ts) {
  size_t from = L.rec.size();
  while (from > 0 && L.rec[from - 1].pydepth >= pydepth) --from;
  if (from == L.rec.size()) return;
  uint32_t returns_before = 0;  // kReturn events close_entries writes before this entry's
  for (size_t i = L.rec.size(); i > from; --i) {
    const StackEntry& e = L.rec[i - 1];
    if (e.kind == EntryKind::kFrame && e.call_index != kNoEvent) {
      L.inferred = CaptureLane::Inferred{e.code, e.pydepth, e.call_index,
                                         static_cast<uint32_t>(L.out.events.size() + returns_before), e.want_io};
      break;
    }
    if (e.call_index != kNoEvent) ++returns_before;
  }
  close_entries(L, from, false, ts);
}

// close_ended, reading the clock only when something ended unseen (a clock
// read costs as much as the rest of an event).
inline void close_ended_now(CaptureLane& L, int32_t pydepth) {
  if (!L.rec.empty() && L.rec.back().pydepth >= pydepth) close_ended(L, pydepth, clock::ticks());
}

// The tree depth a frame at frame depth `pydepth` has in the lane: counted
// from the innermost open entry (or the lane's base), one level per frame in
// between. Frames in between that were never reported ran below the ceiling
// (a window reports every frame), so they count as plain levels.
inline int32_t depth_at(const CaptureLane& L, int32_t pydepth) {
  if (L.rec.empty()) return -1 + (pydepth - L.base_pydepth);
  const StackEntry& t = L.rec.back();
  return t.depth + (pydepth - t.pydepth);
}

inline int32_t next_depth(const CaptureLane& L) { return (L.rec.empty() ? -1 : L.rec.back().depth) + 1; }

inline bool is_origin(const CaptureLane& L) { return L.index == 0; }

inline uintptr_t generator_key(PyFrameObject* frame) {
  if (!frame) {
    if (const HookFrame* h = hook_frame_now()) return h->generator;
    frame = PyEval_GetFrame();
  }
  return frame ? compat::frame_generator(frame) : 0;
}
// --- I/O capture (capture_io) --------------------------------------------------
// Summarizing runs Python code (properties of a DataFrame ...), during which
// other threads may run and end the session. So the hooks first note which
// lanes want the I/O of a span (by engine serial, not by pointer), summarize
// once for all of them, and then look the lanes up again.

constexpr int kMaxIOArguments = 16;  // a summary per parameter, at most this many

inline void want_io(IOTargets* io, const CaptureLane& L, uint32_t call) {
  if (io && io->n < 4) io->t[io->n++] = IOTarget{L.engine->serial(), L.index, call};
}

CaptureLane* target_lane(const IOTarget& t);

// span_io for each target still collecting: the summary is formatted once.
[[gnu::cold, gnu::noinline]] void fire_io(const IOTargets& io, IORole role, const std::string& name,
                                          const IOSummary& summary) {
  std::string text = format_io(summary);
  if (text.size() > MLPROF_IO_SUMMARY_LEN - 1) text.resize(MLPROF_IO_SUMMARY_LEN - 1);
  for (int i = 0; i < io.n; ++i) {
    if (target_lane(io.t[i])) probes::fire_span_io(io.t[i].serial, io.t[i].lane, io.t[i].call, role, name, text);
  }
}

// The target's lane if its session is still collecting, else null.
CaptureLane* target_lane(const IOTarget& t) {
  auto it = g_by_serial.find(t.serial);
  if (it == g_by_serial.end() || it->second->state() != Engine::State::kCollecting) return nullptr;
  const auto& lanes = it->second->lanes();
  return t.lane < lanes.size() ? lanes[t.lane].get() : nullptr;
}

void append_io(const IOTargets& io, IORole role, const std::string& name, const IOSummary& summary) {
  for (int i = 0; i < io.n; ++i) {
    if (CaptureLane* L = target_lane(io.t[i])) L->out.io.push_back(IORecord{io.t[i].call, role, name, summary});
  }
  if (probes::io_traced()) fire_io(io, role, name, summary);
}

// The profiler's work from `since` to now, on each target's lane: removed
// from the lane's timeline at build (CaptureLane::overhead).
void note_overhead(const IOTargets& io, int64_t since) {
  const int64_t now = clock::ticks();
  for (int i = 0; i < io.n; ++i) {
    if (CaptureLane* L = target_lane(io.t[i])) L->overhead.emplace_back(since, now);
  }
}

// The span of kCall `call` starts again (restart_calls): so do its readings.
[[gnu::noinline]] void restart_readings(CaptureLane& L, uint32_t call) {
  std::vector<Reading>& r = L.out.readings;
  const size_t end = r.size();
  take_readings(L);  // fresh readings, tied to the last event: moved onto the call's
  const size_t fresh = r.size();
  for (size_t i = end; i-- > 0 && r[i].event >= call;) {
    if (r[i].event != call) continue;
    for (size_t j = end; j < fresh; ++j) {
      if (r[j].kind == r[i].kind) r[i].value = r[j].value;
    }
  }
  r.resize(end);
}

// Summarizing the arguments happened after the span's start was taken: the
// span starts again now, so its time is the call's and not the summary's (a
// first repr of an estimator takes milliseconds); the stretch is the
// profiler's, taken out of the callers' time at build.
void restart_calls(const IOTargets& io, int64_t since) {
  const int64_t ts = clock::ticks();
  for (int i = 0; i < io.n; ++i) {
    CaptureLane* L = target_lane(io.t[i]);
    if (!L) continue;
    if (io.t[i].call < L->out.events.size()) L->out.events[io.t[i].call].ts_ns = ts;
    if (L->values) restart_readings(*L, io.t[i].call);
    L->overhead.emplace_back(since, ts);
  }
}

void capture_arguments(PyCodeObject* code, PyFrameObject* frame, const IOTargets& io) {
  const int64_t since = clock::ticks();
  IOSummary summary;
  bool first = true;
  auto each = [&](PyObject* name, PyObject* value) {
    std::string n = utf8(name);
    // The receiver of a method is the model object itself, not data flowing through.
    bool receiver = first && (n == "self" || n == "cls");
    first = false;
    if (receiver) return;
    summary = IOSummary{};
    summarize_object(value, &summary);
    append_io(io, IORole::kArgument, n, summary);
  };
#if MLPROF_HAS_EVAL_HOOK
  const HookFrame* hook = frame ? nullptr : hook_frame_now();
  if (hook && hook->frame) {
    struct _PyInterpreterFrame* f = hook->frame;
    compat::for_each_parameter_of([f](int i) { return mlprof_frame_local(f, i); }, code, kMaxIOArguments, each);
    restart_calls(io, since);
    return;
  }
#endif
  if (!frame) frame = PyEval_GetFrame();  // the frame that is starting
  if (!frame || compat::frame_code(frame) != code) return;
  compat::for_each_parameter(frame, code, kMaxIOArguments, each);
  restart_calls(io, since);
}

void capture_return(PyObject* retval, const IOTargets& io) {
  if (!retval) return;
  const int64_t since = clock::ticks();
  IOSummary summary;
  summarize_object(retval, &summary);
  append_io(io, IORole::kReturn, std::string(), summary);
  note_overhead(io, since);
}

// Before an event about a frame at frame depth `pydepth` that starts or
// resumes: what that frame replaces has ended, and a lane with nothing open
// (other than the origin) takes its base from it (a task's coroutine resumed
// by the event loop, a callback). Returns the frame's tree depth, or INT32_MIN
// when it runs at or above the lane's base: above the root, not the lane's.
int32_t arrive(CaptureLane& L, int32_t pydepth, uintptr_t key) {
  if (!is_origin(L) && L.rec.empty()) {
    L.base_pydepth = pydepth - 1;
    L.base_known = true;
  } else if (is_origin(L) && key && key == L.engine->entering_generator_) {
    // The coroutine that entered the session resumes, perhaps deeper or
    // shallower than it was: the base follows it.
    L.base_pydepth = pydepth;
    return -1;
  }
  if (pydepth <= L.base_pydepth) return INT32_MIN;
  // A generator the lane does not track resuming inside its own block, its
  // yield unreported (no window was open there): nothing ended, nothing to record.
  if (key && !L.rec.empty() && L.rec.back().kind == EntryKind::kBlock && L.rec.back().key == key &&
      L.rec.back().pydepth == pydepth) {
    return INT32_MIN;
  }
  close_ended_now(L, pydepth);
  return depth_at(L, pydepth);
}

// Whether a frame at `depth` is the lane's to track, and how.
inline bool track_transparent(CaptureLane& L, PyCodeObject* code, int32_t depth, int32_t pydepth, uint32_t fid) {
  const bool under_hidden = !L.rec.empty() && L.rec.back().hides;
  const bool loop_main = L.rec.empty() && L.loop_main == code;
  if (!under_hidden && fid != kTransparent && !loop_main && !session_transparent(L, code)) {
    const uint32_t label = L.engine->options().fold_codes.empty() ? 0 : fold_label(L, code);
    if (!label) return false;
    push(L, EventKind::kLabel, label, kEvRelabel, clock::ticks());
  }
  StackEntry e{kNoEvent, depth - 1, pydepth, EntryKind::kTransparent, 0, code};
  e.hides = under_hidden ||
            (fid == kTransparent && !hidden_codes().empty() && hidden_codes().count(reinterpret_cast<PyObject*>(code)));
  L.rec.push_back(e);
  return true;
}

// Calls fn(name, value) for the first `limit` parameters of the frame of
// `code` that is starting (borrowed references).
template <typename Fn>
void for_each_argument(PyCodeObject* code, PyFrameObject* frame, int limit, Fn&& each) {
#if MLPROF_HAS_EVAL_HOOK
  const HookFrame* hook = frame ? nullptr : hook_frame_now();
  if (hook && hook->frame) {
    struct _PyInterpreterFrame* f = hook->frame;
    compat::for_each_parameter_of([f](int i) { return mlprof_frame_local(f, i); }, code, limit, each);
    return;
  }
#endif
  if (!frame) frame = PyEval_GetFrame();  // the frame that is starting
  if (!frame || compat::frame_code(frame) != code) return;
  compat::for_each_parameter(frame, code, limit, each);
}

// The label the code's labeller gives this call, or 0. The event runs
// untraced; the labeller's time is the profiler's, cut like I/O summaries.
uint32_t call_labeller(CaptureLane& L, PyCodeObject* code, PyFrameObject* frame) {
  auto it = labellers().find(reinterpret_cast<PyObject*>(code));
  if (it == labellers().end()) return 0;
  const int64_t since = clock::ticks();
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
    L.engine->note("a labeller raised " + pyutil::take_error() + " naming a call of " + utf8(code->co_name) +
                   "; such calls keep the function's name");
  } else {
    if (PyUnicode_Check(result)) label = intern_label(utf8(result));
    Py_DECREF(result);
  }
  note_thread_overhead(since);
  return label;
}

// sys.modules[module].<name> from the module's namespace (no getattr: a
// module __getattr__ runs Python code), as a new reference, or null.
PyObject* loaded_module_attr(const char* module, const char* name) {
  pyutil::Ref key(PyUnicode_FromString(module));
  pyutil::Ref mod(key ? PyImport_GetModule(key.get()) : nullptr);
  PyObject* ns = mod && PyModule_Check(mod.get()) ? PyModule_GetDict(mod.get()) : nullptr;
  PyObject* value = ns ? PyDict_GetItemString(ns, name) : nullptr;  // borrowed
  Py_XINCREF(value);
  return value;
}

// The running task of this thread's loop, as a new reference, or null: C
// calls only (_asyncio's current_task on 3.12+, its _current_tasks before).
PyObject* current_c_task() {
  pyutil::Ref type(loaded_module_attr("_asyncio", "Task"));
  if (!type) return nullptr;
  pyutil::Ref task;
  if (pyutil::Ref current{loaded_module_attr("_asyncio", "current_task")}) {
    if (PyCFunction_Check(current.get())) task = pyutil::Ref(PyObject_CallNoArgs(current.get()));
  } else {
    pyutil::Ref tasks(loaded_module_attr("_asyncio", "_current_tasks"));
    pyutil::Ref running(loaded_module_attr("_asyncio", "get_running_loop"));
    pyutil::Ref loop(running && tasks && PyDict_Check(tasks.get()) && PyCFunction_Check(running.get())
                         ? PyObject_CallNoArgs(running.get())
                         : nullptr);
    if (loop) task = pyutil::borrow(PyDict_GetItemWithError(tasks.get(), loop.get()));
  }
  // Exactly asyncio's C task: a subclass's or a Python task's methods would
  // run Python code under the hook.
  if (!task || reinterpret_cast<PyObject*>(Py_TYPE(task.get())) != type.get()) return nullptr;
  return task.release();
}

// Whether the coroutine `generator` (its object's address) is the one an
// event loop runs to completion: the current task's coroutine, and the task
// carries run_until_complete's done callback (asyncio.run runs its main
// coroutine so). Any error: no, and the pending state is as it was.
bool runs_to_completion(uintptr_t generator) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  bool yes = false;
  {
    pyutil::Ref done(loaded_module_attr("asyncio.base_events", "_run_until_complete_cb"));
    pyutil::Ref task(done ? current_c_task() : nullptr);
    pyutil::Ref coro(task ? PyObject_CallMethod(task.get(), "get_coro", nullptr) : nullptr);
    pyutil::Ref callbacks(coro && reinterpret_cast<uintptr_t>(coro.get()) == generator
                              ? PyObject_GetAttrString(task.get(), "_callbacks")
                              : nullptr);
    if (callbacks && PyList_Check(callbacks.get())) {
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(callbacks.get()) && !yes; ++i) {
        PyObject* entry = PyList_GET_ITEM(callbacks.get(), i);
        yes = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) > 0 && PyTuple_GET_ITEM(entry, 0) == done.get();
      }
    }
  }
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
  return yes;
}

bool lane_start(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame, bool continued,
                IOTargets* io) {
  const bool generator = compat::is_generator_code(code);
  const uintptr_t key = generator ? generator_key(frame) : 0;
  const int32_t d = arrive(L, pydepth, key);
  if (d == INT32_MIN || d < 0) return false;
  if (d > L.ceiling) {
    ++L.skipped;
    return false;
  }
  // First sight of a code (naming it, finding its module) is the profiler's work.
  const bool first_sight = !compat::code_extra(code, g_extra_index);
  const int64_t since = first_sight ? clock::ticks() : 0;
  const uint32_t fid = function_id(code);
  if (first_sight) note_thread_overhead(since);
  // (Only under a recorded span: with none, as in a session entered around
  // asyncio.run, the coroutine is the root its work hangs under.)
  if (key && d == 0 && L.rec.empty() && !L.loop_main_checked && L.out.task > 0 && !L.thread_lane &&
      L.out.parent_lane >= 0) {
    L.loop_main_checked = true;
    const int64_t since_check = clock::ticks();
    if (runs_to_completion(key)) L.loop_main = code;
    note_thread_overhead(since_check);
    // Its callees are at its own level: their calls are to be seen (lane_start).
    if (L.loop_main && L.engine->options().capture_c_calls) capture::watch_c_calls(code);
    if constexpr (capture::kUnspecializeCalls) {
      if (L.loop_main && !capture::every_frame_reported()) capture::watch_calls(code);
    }
  }
  if (track_transparent(L, code, d, pydepth, fid)) return true;
  if (L.truncated) return false;
  if (L.out.events.size() >= L.soft_cap) {
    ++L.out.dropped;
    if (!L.rec.empty()) L.rec.back().children_dropped = true;
    L.rec.push_back(StackEntry{kNoEvent, d, pydepth, EntryKind::kDropped, key, code});
    return true;
  }
  uint32_t label = 0, resource = 0;
  if (L.pending_code == reinterpret_cast<PyObject*>(code)) {
    label = L.pending_label;
    resource = L.pending_resource;
    L.pending_code = nullptr;
  } else if (key && !L.engine->gen_labels_.empty()) {
    auto it = L.engine->gen_labels_.find(key);
    if (it != L.engine->gen_labels_.end() && it->second.code == reinterpret_cast<PyObject*>(code)) {
      label = it->second.label;
      resource = it->second.resource;
      L.engine->gen_labels_.erase(it);
    }
  }
  if (!label && (reinterpret_cast<uintptr_t>(compat::code_extra(code, g_extra_index)) & kExtraLabelled)) {
    label = call_labeller(L, code, frame);
  }
  const int64_t ts = clock::ticks();
  if (label) push(L, EventKind::kLabel, label, 0, ts);
  if (resource) push(L, EventKind::kLabel, resource, kEvResource, ts);
  const auto idx = static_cast<uint32_t>(L.out.events.size());
  const uint8_t flags = continued ? kEvContinued : 0;
  push(L, EventKind::kCall, fid, flags, ts);
  // A continued coroutine's locals are not its arguments any more.
  const bool io_here = d <= L.io_ceiling;
  L.rec.push_back(StackEntry{idx, d, pydepth, EntryKind::kFrame, key, code, false, io_here});
  L.last_was_suspend = false;
  probes::span_enter(L.engine->serial(), L.index, idx, fid, label, d, flags);
  if (io_here && !continued) want_io(io, L, idx);
  // The C calls of a frame whose callees are within the ceiling.
  if (d < L.ceiling && L.engine->options().capture_c_calls) capture::watch_c_calls(code);
  if constexpr (capture::kUnspecializeCalls) {
    if (d < L.ceiling && !capture::every_frame_reported()) capture::watch_calls(code);
  }
  return true;
}

void lane_return(CaptureLane& L, PyCodeObject* code, int32_t pydepth, bool exception, IOTargets* io) {
  if (pydepth <= L.base_pydepth) return;  // a frame above the root
  const int64_t ts = clock::ticks();
  close_ended(L, pydepth + 1, ts);
  // The frame's own entries: the blocks and C calls it opened, then itself.
  size_t j = L.rec.size();
  while (j > 0 && L.rec[j - 1].pydepth == pydepth && !frame_like(L.rec[j - 1])) --j;
  if (j > 0 && L.rec[j - 1].pydepth == pydepth && L.rec[j - 1].code == code) {
    const StackEntry& e = L.rec[j - 1];
    if (e.want_io && !exception && e.call_index != kNoEvent) want_io(io, L, e.call_index);
    close_entries(L, j - 1, exception, ts);
    L.last_was_suspend = false;
    return;
  }
  if (j < L.rec.size()) close_entries(L, j, exception, ts);  // blocks of a frame the lane does not track
  // Its end was inferred earlier (a finalizer started in its teardown).
  CaptureLane::Inferred& inf = L.inferred;
  if (inf.code == code && inf.pydepth == pydepth) {
    if (exception && inf.return_index < L.out.events.size()) L.out.events[inf.return_index].flags |= kEvException;
    if (inf.want_io && !exception) want_io(io, L, inf.call_index);
    inf = CaptureLane::Inferred{};
  }
}

// Detaches rec[from..] into the segment of generator `key` (one it left
// here before, its address reused, is replaced); `pydepth`: its frame depth.
Suspended& detach_segment(CaptureLane& L, uintptr_t key, size_t from, int32_t pydepth) {
  Suspended* s = nullptr;
  for (Suspended& old : L.suspended) {
    if (old.key == key) s = &old;
  }
  if (!s) {
    L.suspended.emplace_back();
    s = &L.suspended.back();
  }
  const bool kept = s->keeps_hook;
  s->key = key;
  s->frame_pydepth = pydepth;
  s->count = 0;
  s->more.clear();
  s->keeps_hook = false;
  for (size_t i = from; i < L.rec.size(); ++i) {
    s->add(L.rec[i]);
    // Transparent frames only (autoprofile's set_prediction_context): resumed
    // where the hook is out, which is below the ceiling, their callees would
    // be below it too, so missing the resume changes nothing.
    s->keeps_hook |= L.rec[i].kind != EntryKind::kTransparent;
  }
  count_suspended(L, int(s->keeps_hook) - int(kept));
  L.rec.resize(from);
  s->frame_depth = depth_at(L, pydepth);
  return *s;
}

// Removes segment k; first puts its entries back on the lane (if `push_back`)
// with its frame at tree depth `d` and frame depth `pydepth`. Returns the
// call index of its first recorded span, or kNoEvent.
uint32_t reattach_segment(CaptureLane& L, size_t k, int32_t d, int32_t pydepth, bool push_back) {
  Suspended& s = L.suspended[k];
  uint32_t first_recorded = kNoEvent;
  // Transparent frames resumed below the ceiling: a start there, skipped (as
  // the reference engine, which keeps no segment for them, counts it).
  if (!s.keeps_hook && d > L.ceiling) ++L.skipped;
  if (push_back) {
    const int32_t shift = d - s.frame_depth;
    const int32_t pyshift = pydepth - s.frame_pydepth;
    for (uint32_t i = 0; i < s.count; ++i) {
      StackEntry e = s.at(i);
      e.depth += shift;
      e.pydepth += pyshift;
      if (first_recorded == kNoEvent) first_recorded = e.call_index;
      L.rec.push_back(e);
    }
  }
  count_suspended(L, -int(s.keeps_hook));
  // Swap with the last: the segments' order does not matter.
  if (k + 1 != L.suspended.size()) std::swap(L.suspended[k], L.suspended.back());
  L.suspended.pop_back();
  return first_recorded;
}

void lane_yield(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame) {
  if (pydepth < L.base_pydepth) return;  // above the frame that entered the session
  const int64_t ts = clock::ticks();
  // Blocks opened deeper, by frames whose yields no hook reported (below the
  // ceiling: a request's block in a client's coroutine under one at the
  // ceiling), are in the chain that suspends with this frame: they leave
  // with it rather than end. Anything else deeper ended unseen.
  size_t chain = L.rec.size();
  while (chain > 0 && L.rec[chain - 1].pydepth > pydepth && L.rec[chain - 1].kind == EntryKind::kBlock) --chain;
  if (chain == L.rec.size() || (chain > 0 && L.rec[chain - 1].pydepth > pydepth)) {
    close_ended(L, pydepth + 1, ts);
    chain = L.rec.size();
  }
  // The segment that leaves with the generator: its frame's entry (if the
  // lane tracks it), the blocks opened in it, and those deeper in its chain.
  size_t from = chain;
  while (from > 0 && L.rec[from - 1].pydepth == pydepth) --from;
  if (from == L.rec.size()) return;
  // A coroutine the lane does not track, with only blocks of its own, awaited
  // by one it tracks (3.11 reports such a yield): its blocks wait for the
  // awaiting coroutine's yield, so that one suspend holds the whole chain.
  if (!frame_like(L.rec[from]) && (code->co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE)) && from > 0 &&
      frame_like(L.rec[from - 1]) && L.rec[from - 1].key && L.rec[from - 1].pydepth < pydepth) {
    return;
  }
  const uintptr_t key = frame_like(L.rec[from]) && L.rec[from].key ? L.rec[from].key : generator_key(frame);
  if (!key || L.truncated || !room_for_structure(L)) {
    close_entries(L, from, false, ts);
    return;
  }
  (void)code;
  Suspended* s = &detach_segment(L, key, from, pydepth);
  if (pydepth == L.base_pydepth && is_origin(L)) s->frame_depth = -1;  // the entering coroutine
  uint32_t first_recorded = kNoEvent;
  for (uint32_t i = 0; i < s->count && first_recorded == kNoEvent; ++i) first_recorded = s->at(i).call_index;
  if (first_recorded != kNoEvent) {
    const StackEntry& last = s->at(s->count - 1);
    if (!L.last_was_suspend) {
      L.chain_top = last.call_index != kNoEvent ? last.call_index : first_recorded;
      L.chain_top_depth = last.depth;
    }
    L.last_was_suspend = true;
    push(L, EventKind::kSuspend, first_recorded, 0, ts);
    probes::span_suspend(L.engine->serial(), L.index, first_recorded);
  }
}

// Returns true if a suspended segment was pushed back.
bool lane_resume(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame) {
  if (L.suspended.empty()) return false;
  const uintptr_t key = generator_key(frame);
  size_t k = 0;
  while (k < L.suspended.size() && L.suspended[k].key != key) ++k;
  if (!key || k == L.suspended.size()) return false;
  const int32_t d = arrive(L, pydepth, key);
  if (d == INT32_MIN) return false;
  (void)code;
  const bool push_back = !L.truncated && room_for_structure(L);
  const uint32_t first_recorded = reattach_segment(L, k, d, pydepth, push_back);
  if (!push_back) return true;
  if (first_recorded != kNoEvent) {
    push_resume(L, first_recorded, clock::ticks(), code);
    probes::span_resume(L.engine->serial(), L.index, first_recorded);
  }
  L.last_was_suspend = false;
  return true;
}

// Whether this lane wants the frame evaluation hook while the frame at frame
// depth `current` runs: it does while that frame is one it tracks within the
// ceiling (or the frame that entered the session), so that everything that
// frame runs is seen, its callees and the finalizers of its own teardown
// alike. A frame below the ceiling runs without it.
inline bool lane_in_window(const CaptureLane& L, int32_t current) {
  if (L.truncated || L.ceiling < 0) return false;
  // Nothing open: the roots are next (or the session is starting in our own
  // frames), unless this is a bound thread whose target has returned.
  if (L.rec.empty()) return !(L.thread_lane && !L.out.events.empty());
  const StackEntry& t = L.rec.back();
#if MLPROF_HAS_MONITORING
  // A generator or coroutine running at the ceiling: sys.monitoring, not the
  // window, reports its own yield, return or unwind (after which its caller's
  // window opens again), and what it calls is below every ceiling here, so
  // its window is closed: each of its calls would otherwise pass the frame
  // evaluation function only to take it out (docs/capture.md, "Closed
  // ceilings").
  if (t.depth == L.ceiling && t.pydepth == current && t.kind == EntryKind::kFrame && t.key) return false;
#endif
  return t.pydepth >= current && t.depth <= L.ceiling;
}

}  // namespace

int64_t now_ns() { return clock::monotonic_ns(); }

PyObject* session_var() { return g_session_var; }

void init_engine_module(PyObject* module) {
  if (!g_session_var) g_session_var = PyContextVar_New("mlflow_profiler.session", nullptr);
  if (!g_lane_var) g_lane_var = PyContextVar_New("mlflow_profiler.lane", nullptr);
  if (g_extra_index < 0) g_extra_index = compat::request_code_extra_index();
  clock::init();
  Py_INCREF(g_session_var);
  PyModule_AddObject(module, "session_var", g_session_var);
}

void set_library_prefixes(std::vector<std::string> prefixes) {
  path_rules().library_prefixes = std::move(prefixes);
}

bool is_user_file(std::string_view file) { return classify_user_code(file, path_rules()); }

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
  const auto v = reinterpret_cast<uintptr_t>(compat::code_extra(reinterpret_cast<PyCodeObject*>(code), g_extra_index));
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

uint32_t intern_label(std::string_view label) { return registry().strings().intern(label); }

uint32_t block_function(std::string_view label) {
  return registry().add(label, "", "", 0, FunctionKind::kBlock, true);
}

Engine* engine_for_session(PyObject* session) {
  auto it = g_by_session.find(session);
  return it == g_by_session.end() ? nullptr : it->second;
}

const CurrentLanes& current_lanes() { return lanes_now(); }

std::vector<Engine*> collecting_engines() {
  std::vector<Engine*> out;
  for (auto& [serial, e] : g_by_serial) out.push_back(e);
  return out;
}

Engine* newest_all_threads_engine() {
  Engine* best = nullptr;
  for (auto& [serial, e] : g_by_serial) {
    if (e->options().all_threads && (!best || serial > best->serial())) best = e;
  }
  return best;
}

bool any_engine_wants_c_calls() {
  for (auto& [serial, e] : g_by_serial) {
    if (e->options().capture_c_calls) return true;
  }
  return false;
}

bool records_here(Engine* engine) {
  return (t_cache.bound == engine && t_cache.bound_serial == engine->serial()) ||
         engine->entered_in(thread_key());
}

void bind_thread(Engine* engine) {
  t_cache.bound = engine;
  t_cache.bound_serial = engine->serial();
  t_cache.generation = 0;  // force a refresh
}

// --- USDT probes (probes.h): the cold halves --------------------------------------

namespace {
// Serials of sessions that autoprofile started (probes::mark_autoprofile),
// until they begin. One or two at a time, so a vector.
std::vector<uint64_t> g_autoprofile_serials;

// session_begin's flags; consumes the session's autoprofile mark.
uint32_t begin_flags(const EngineOptions& o, uint64_t serial) {
  uint32_t flags = 0;
  if (o.capture_io) flags |= MLPROF_SESSION_CAPTURE_IO;
  if (o.all_threads) flags |= MLPROF_SESSION_ALL_THREADS;
  auto it = std::find(g_autoprofile_serials.begin(), g_autoprofile_serials.end(), serial);
  if (it != g_autoprofile_serials.end()) {
    flags |= MLPROF_SESSION_AUTOPROFILE;
    g_autoprofile_serials.erase(it);
  }
  return flags;
}
}  // namespace

namespace probes {

void mark_autoprofile(uint64_t session) {
  if (std::find(g_autoprofile_serials.begin(), g_autoprofile_serials.end(), session) ==
      g_autoprofile_serials.end()) {
    g_autoprofile_serials.push_back(session);
  }
}

void fire_session_begin(uint64_t session, int64_t ceiling, uint32_t flags) {
  uint64_t gil = 0, gil_bytes = 0;  // the agent tells GIL waits by it
  mlprof_gil_range(&gil, &gil_bytes);
  MLPROF_USDT_SESSION_BEGIN(session, ceiling, flags, gil, gil_bytes);
}

void fire_session_end(uint64_t session, uint64_t dropped) { MLPROF_USDT_SESSION_END(session, dropped); }

void fire_lane_begin(uint64_t session, uint32_t lane, int32_t parent_lane, uint32_t parent_call,
                     uint32_t task, uint64_t ident, const std::string& thread_name) {
  const uint32_t parent = parent_lane < 0 ? MLPROF_NO_PARENT_LANE : static_cast<uint32_t>(parent_lane);
  MLPROF_USDT_LANE_BEGIN(session, lane, parent, parent_call, task, ident, thread_name.c_str());
}

void fire_span_enter(uint64_t session, uint32_t lane, uint32_t index, uint32_t function, uint32_t label,
                     int32_t depth, uint32_t flags) {
  // The registry's strings live as long as the process: the pointers stay valid.
  const FunctionTable& table = registry();
  const FunctionInfo& f = table.get(function);
  const StringTable& strings = table.strings();
  const char* label_text = label ? strings.get(label).c_str() : nullptr;
  MLPROF_USDT_SPAN_ENTER(session, lane, index, function, label, depth, flags, strings.get(f.name).c_str(),
                         strings.get(f.module).c_str(), strings.get(f.file).c_str(),
                         static_cast<long long>(f.line), label_text);
}

void fire_span_exit(uint64_t session, uint32_t lane, uint32_t index, uint32_t flags) {
  MLPROF_USDT_SPAN_EXIT(session, lane, index, flags);
}

void fire_span_suspend(uint64_t session, uint32_t lane, uint32_t index) {
  MLPROF_USDT_SPAN_SUSPEND(session, lane, index);
}

void fire_span_resume(uint64_t session, uint32_t lane, uint32_t index) {
  MLPROF_USDT_SPAN_RESUME(session, lane, index);
}

void fire_span_io(uint64_t session, uint32_t lane, uint32_t index, IORole role, const std::string& name,
                  const std::string& summary) {
  MLPROF_USDT_SPAN_IO(session, lane, index, static_cast<unsigned>(role), name.c_str(), summary.c_str());
}

}  // namespace probes

// --- Engine --------------------------------------------------------------------

Engine::Engine(EngineOptions opts) : opts_(opts), serial_(g_next_serial++) {
  for (PyObject* code : opts_.transparent_codes) Py_INCREF(code);
  for (PyObject* code : opts_.fold_parents) Py_INCREF(code);
  for (const auto& fold : opts_.fold_codes) Py_INCREF(fold.first);
}

Engine::~Engine() {
  if (state_ == State::kCollecting) stop();
  begin_flags(opts_, serial_);  // forgets an autoprofile mark of a session never started
  Py_XDECREF(parent_session_);
  Py_XDECREF(token_);
  for (PyObject* code : opts_.transparent_codes) Py_DECREF(code);
  for (PyObject* code : opts_.fold_parents) Py_DECREF(code);
  for (const auto& fold : opts_.fold_codes) Py_DECREF(fold.first);
}

const char* Engine::hook_name() const {
  return state_ == State::kIdle || mechanism_.empty() ? capture::name() : mechanism_.c_str();
}

bool Engine::records_only_here() const {
  const uint64_t here = thread_key();
  if (start_thread_ != here || !resumed_in_.empty()) return false;
  for (const auto& L : lanes_) {
    if (L->thread_key != here) return false;
  }
  return true;
}

void Engine::note(const std::string& what) {
  for (const auto& n : notes_) {
    if (n == what) return;
  }
  notes_.push_back(what);
}

void Engine::fail(const std::string& why) {
  for (const auto& f : failures_) {
    if (f == why) return;
  }
  failures_.push_back(why);
  for (auto& lane : lanes_) lane->truncated = true;
}

namespace {
// Per context object that some collecting session's task lane holds (the
// lane's strong reference keeps the address unique): the id it was given in
// lane_var, the id it carried before (its creator's), and how many lanes use it.
struct ContextIds {
  uint64_t id = 0;
  uint64_t from = 0;
  int lanes = 0;
};
std::unordered_map<PyObject*, ContextIds> g_context_ids;
uint64_t g_next_context_id = 1;

// The context id the current context carries in lane_var; 0: none.
uint64_t context_id_now() {
  PyObject* v = nullptr;
  if (PyContextVar_Get(g_lane_var, nullptr, &v) < 0 || !v) {
    PyErr_Clear();
    return 0;
  }
  const uint64_t id = PyLong_AsUnsignedLongLong(v);
  Py_DECREF(v);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return id;
}

// Gives `context` (the current one) its id in lane_var, once for all the
// sessions that open a lane for it, and returns the id it carried before:
// its creator's, when it is a copy of a context a lane was opened for.
// Returns 0 and sets nothing when it cannot (the lane then hangs as before).
uint64_t mark_context(CaptureLane& L, PyObject* context) {
  auto [it, fresh] = g_context_ids.try_emplace(context);
  ContextIds& c = it->second;
  if (fresh) {
    c.from = context_id_now();
    PyObject* id = PyLong_FromUnsignedLongLong(g_next_context_id);
    PyObject* token = id ? PyContextVar_Set(g_lane_var, id) : nullptr;
    Py_XDECREF(id);
    if (!token) {
      PyErr_Clear();
      g_context_ids.erase(it);
      return 0;
    }
    Py_DECREF(token);
    c.id = g_next_context_id++;
  }
  ++c.lanes;
  L.context_id = c.id;
  return c.from;
}

// The lane no longer holds its context (the session ended).
void unmark_context(CaptureLane& L) {
  if (!L.context_id) return;
  auto it = g_context_ids.find(L.context);
  if (it != g_context_ids.end() && --it->second.lanes <= 0) g_context_ids.erase(it);
  L.context_id = 0;
}

// The lane's innermost open span, or the innermost span of its last
// suspended chain when it has none open (a task lane's creator awaiting).
// `awaiting`: for work another thread runs for the lane's task, which may
// still be running rather than awaiting it (a pool thread can start
// asyncio.to_thread's function while the task is inside Thread.start): the
// innermost coroutine or generator open in it, where it will await.
bool innermost_span(const CaptureLane& L, uint32_t* call, int32_t* depth, bool awaiting = false) {
  if (awaiting) {
    auto gen = std::find_if(L.rec.rbegin(), L.rec.rend(), [](const StackEntry& e) {
      return e.call_index != kNoEvent && e.kind == EntryKind::kFrame && e.key;
    });
    if (gen != L.rec.rend()) {
      *call = gen->call_index;
      *depth = gen->depth;
      return true;
    }
  }
  auto recorded = std::find_if(L.rec.rbegin(), L.rec.rend(),
                               [](const StackEntry& e) { return e.call_index != kNoEvent; });
  if (recorded != L.rec.rend()) {
    *call = recorded->call_index;
    *depth = L.rec.back().depth;  // a transparent entry holds its caller's depth
    return true;
  }
  if (L.last_was_suspend && L.chain_top != UINT32_MAX) {
    *call = L.chain_top;
    *depth = L.chain_top_depth;
    return true;
  }
  return false;
}
}  // namespace

void Engine::note_thread_start(PyObject* thread) {
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) {
    const CaptureLane& L = *cl.lanes[i];
    if (L.engine != this) continue;
    uint32_t call = kNoEvent;  // no span open: a root
    int32_t depth;
    innermost_span(L, &call, &depth);
    Py_INCREF(thread);
    thread_origins_.push_back(ThreadOrigin{thread, L.index, call});
    return;
  }
  // Started by a thread this session does not record in: the new thread's
  // lane samples the origin lane when it binds, as before.
}

// A thread lane whose Thread.start this session saw (note_thread_start)
// hangs where its thread was started, not where the origin lane is when the
// new thread first runs (it may be scheduled after its starter moved on).
void Engine::adopt_thread_origin(CaptureLane& L, PyObject* thread) {
  if (!thread) return;
  for (auto it = thread_origins_.begin(); it != thread_origins_.end(); ++it) {
    if (it->thread != thread) continue;
    L.out.parent_lane = it->call == kNoEvent ? -1 : static_cast<int32_t>(it->lane);
    L.out.parent_call = it->call == kNoEvent ? 0 : it->call;
    Py_DECREF(it->thread);
    thread_origins_.erase(it);
    return;
  }
}

CaptureLane* Engine::new_lane(uint64_t thread_key, PyObject* context) {
  uint64_t thread_id = PyThread_get_thread_ident();  // lanes are created in their thread
  auto lane = std::make_unique<CaptureLane>();
  CaptureLane& L = *lane;
  L.engine = this;
  L.index = static_cast<uint32_t>(lanes_.size());
  L.thread_id = thread_id;
  L.thread_key = thread_key;
  L.context = context;
  Py_XINCREF(context);  // held while collecting: a freed Context's address is reused by new ones
  L.quick = !opts_.capture_c_calls;
  L.soft_cap = opts_.max_events;
  L.hard_cap = opts_.max_events * 2 + 64;
  L.off_quantum = clock::ticks_for(kOffCpuQuantumNs);
  // 4 KiB: a short session (autoprofile's predict) frees its buffer cheaply;
  // 64 KiB and up makes glibc's free() consolidate its fast bins every time.
  L.out.events.reserve(std::min<size_t>(opts_.max_events, 256));
  L.out.thread_id = thread_id;
  L.out.native_tid = native_tid();
  PyObject* thread = active_thread(thread_id);
  L.out.thread_name = thread_name(thread, thread_id);
  auto& per_thread = lane_index_[thread_key];
  L.out.task = static_cast<uint32_t>(per_thread.size());
  // A task's context: in the session's thread, or, in a thread bound to it, a
  // copy of a task's context (refresh asks awaited_context).
  const bool in_bound_thread = t_cache.bound == this && t_cache.bound_serial == serial_;
  const bool task_context = context && (thread_key == start_thread_ || in_bound_thread);
  int base = 0;
  if (!lanes_.empty()) {
    // A lane opened inside the session hangs under the innermost span of
    // the lane its context was copied from: the lane whose id the copy
    // carries (a task created in a task), else the origin lane. A creator
    // with no span open passes on where it hangs itself.
    const CaptureLane* creator = lanes_.front().get();
    if (task_context) {
      auto it = lane_by_context_id_.find(mark_context(L, context));
      if (it != lane_by_context_id_.end()) creator = lanes_[it->second].get();
      if (L.context_id) lane_by_context_id_[L.context_id] = L.index;
    }
    uint32_t call;
    int32_t depth;
    if (innermost_span(*creator, &call, &depth, thread_key != start_thread_)) {
      L.out.parent_lane = static_cast<int32_t>(creator->index);
      L.out.parent_call = call;
      base = creator->depth_base + depth + 1;
    } else {
      L.out.parent_lane = creator->out.parent_lane;
      L.out.parent_call = creator->out.parent_call;
      base = creator->depth_base;
    }
  }
  // A task lane continues its creator's depth (its coroutines are the
  // creator's callees). A thread lane gets the whole ceiling for its own
  // frames: its target is its root, shown under the span that started it.
  if (thread_key != start_thread_ && !task_context) {
    base = 0;
    L.thread_lane = true;
    adopt_thread_origin(L, thread);
  }
  Py_XDECREF(thread);
  L.depth_base = base;
  L.ceiling = opts_.depth < 0 ? INT32_MAX : opts_.depth - base;
  L.values = opts_.values;
  if (opts_.capture_io) {
    L.io_ceiling = opts_.io_depth < 0 ? L.ceiling : std::min(L.ceiling, opts_.io_depth - base);
  }
  per_thread[context] = &L;
  lanes_.push_back(std::move(lane));
  loop_watched_ = loop_watch::watch_selectors() || loop_watched_;
  // A v2 tracer knows lane 0's thread from session_begin and the rest from
  // session_spans: one probe hit per session saved.
  if (L.index != 0 || !probes::spans_traced()) {
    probes::lane_begin(serial_, L.index, L.out.parent_lane, L.out.parent_call, L.out.task, thread_id,
                       L.out.thread_name);
  }
  return &L;
}

PyObject* Engine::awaited_context(PyObject* context) const {
  if (!context || lane_by_context_id_.empty()) return nullptr;
  auto it = lane_by_context_id_.find(context_id_now());
  if (it == lane_by_context_id_.end()) return nullptr;
  const CaptureLane& L = *lanes_[it->second];
  return L.out.task > 0 && !L.thread_lane ? context : nullptr;
}

CaptureLane* Engine::lane_for(uint64_t thread_key, PyObject* context) {
  auto t = lane_index_.find(thread_key);
  if (t != lane_index_.end()) {
    auto c = t->second.find(context);
    if (c != t->second.end()) return c->second;
  }
  try {
    return new_lane(thread_key, context);
  } catch (const std::exception& e) {
    fail(std::string("could not create a lane: ") + e.what());
    return nullptr;
  }
}

void Engine::start(PyObject* session, int levels_above) {
  if (state_ != State::kIdle) {
    throw std::runtime_error(
        "this ProfileSession has already run; a session records once. Create a new one "
        "with profiling()");
  }
  PyObject* current = nullptr;
  if (PyContextVar_Get(g_session_var, nullptr, &current) < 0) throw std::runtime_error("session_var");
  if (current) {
    parent_ = engine_for_session(current);
    if (parent_) parent_session_ = current;  // keep the reference
    else Py_DECREF(current);
  }
  token_ = PyContextVar_Set(g_session_var, session);
  if (!token_) throw std::runtime_error("could not set the session context variable");
  session_ = session;
  start_anchor_ = clock::anchor();
  start_ns_ = start_anchor_.ns;
  timespec wall{};
  clock_gettime(CLOCK_REALTIME, &wall);
  start_unix_ns_ = static_cast<int64_t>(wall.tv_sec) * 1'000'000'000 + wall.tv_nsec;
  start_thread_ = thread_key();
  std::string error;
  constexpr uint8_t kAlloc = 1u << static_cast<int>(ValueKind::kAllocBytes);
  if (opts_.values & kAlloc) {
    counting_alloc_ = alloc_count::start(&error);
    if (!counting_alloc_) {
      opts_.values &= static_cast<uint8_t>(~kAlloc);
      note(error);
      static bool warned = false;  // once per process
      if (!warned && PyErr_WarnEx(PyExc_RuntimeWarning, error.c_str(), 1) < 0) PyErr_Clear();
      warned = true;
      error.clear();
    }
  }
  // Before the session is announced: the agent's session record carries it.
  if (opts_.trace_id.empty()) {
    trace_context::read(&opts_.trace_id, &opts_.span_id, &error);
    if (!error.empty()) {
      note(error);
      error.clear();
    }
  }
  // Before capture starts: threading.setprofile is Python code we must not record.
  bool binder_ok = !opts_.all_threads || capture::install_thread_binder(&error);
  PyThreadState* ts = compat::tstate();
  // A tracer sees the session before its origin lane (the contract's order).
  usdt_flags_ = begin_flags(opts_, serial_);
  // Before session_begin: the checkpoint thread this may start is then no
  // thread the session started (the agent follows those).
  if (probes::spans_traced()) {
    usdt_counted_ = true;
    usdt_next_checkpoint_ = start_ns_ + MLPROF_CHECKPOINT_AFTER_NS;
    probes::checkpoints_session_started(start_ns_);
  }
  probes::session_begin(serial_, opts_.depth, usdt_flags_);
  g_by_session[session] = this;
  g_by_serial[serial_] = this;
  ++g_native_collecting;
  ++g_generation;
  state_ = State::kCollecting;
  note_entering_frame(levels_above);  // before install: 3.11 picks its mechanism by it
  const bool installed = binder_ok && capture::install(this, &error);
  mechanism_ = capture::name();
  // The origin lane: the frame that entered the session is its depth -1.
  CaptureLane* origin = new_lane(start_thread_, ts->context);
  origin->base_pydepth = capture::entering_frame_depth(levels_above);
  origin->base_known = true;
  note_running_frames(levels_above);
  if (!installed) {
    fail("could not install the profiling hook: " + error);
    return;
  }
#if MLPROF_HAS_EVAL_HOOK
  capture::set_window(current_lanes_want_callees());
#endif
}

#if MLPROF_HAS_EVAL_HOOK
namespace {
// The frame that entered the session (no frame object made).
struct _PyInterpreterFrame* entering_frame(int levels_above) {
  auto python = [](struct _PyInterpreterFrame* f) {  // past the shims of C-to-Python calls
    while (f && !mlprof_frame_is_python(f)) f = mlprof_frame_previous(f);
    return f;
  };
  struct _PyInterpreterFrame* f = python(mlprof_current_frame(compat::tstate()));
  for (int i = 0; i < levels_above && f; ++i) f = python(mlprof_frame_previous(f));
  return f;
}
}  // namespace
#endif

void Engine::note_entering_frame(int levels_above) {
  // When it is a coroutine's or a generator's (`async with profiling()`),
  // its resumes move the origin lane.
#if MLPROF_HAS_EVAL_HOOK
  struct _PyInterpreterFrame* f = entering_frame(levels_above);
  if (f && mlprof_frame_code(f)) {
    entering_generator_ = reinterpret_cast<uintptr_t>(mlprof_frame_generator(f));
    entered_by_coroutine_ = mlprof_frame_code(f)->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE);
  }
#else
  PyFrameObject* f = PyEval_GetFrame();  // borrowed; 3.9/3.10 frames always have one
  for (int i = 0; i < levels_above && f; ++i) f = f->f_back;
  if (f && compat::is_generator_code(compat::frame_code(f))) entering_generator_ = compat::frame_generator(f);
  origin_awaits_ = f && (compat::frame_code(f)->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE));
#endif
#if MLPROF_HAS_EVAL_HOOK
  origin_awaits_ = entered_by_coroutine_;
#endif
}

void Engine::note_running_frames(int levels_above) {
#if MLPROF_HAS_EVAL_HOOK
  // The entering frame's C calls are roots (lane_start watches those of the
  // frames it records).
  struct _PyInterpreterFrame* f = entering_frame(levels_above);
  if (f && opts_.capture_c_calls) capture::watch_c_calls(mlprof_frame_code(f));
#else
  (void)levels_above;
#endif
}

bool Engine::pause() {
  if (state_ != State::kCollecting || !token_) return false;
  if (PyContextVar_Reset(g_session_var, token_) < 0) {
    PyErr_Clear();
    return false;
  }
  Py_CLEAR(token_);
  ++g_generation;  // setting a context variable does not bump ts->context_ver
#if MLPROF_HAS_EVAL_HOOK
  capture::set_window(current_lanes_want_callees());
#endif
  return true;
}

bool Engine::resume() {
  if (state_ != State::kCollecting || token_) return false;
  token_ = PyContextVar_Set(g_session_var, session_);
  if (!token_) {
    PyErr_Clear();
    return false;
  }
  uint64_t key = thread_key();
  if (!entered_in(key)) resumed_in_.push_back(key);
  ++g_generation;
#if MLPROF_HAS_EVAL_HOOK
  capture::set_window(current_lanes_want_callees());
#endif
  return true;
}

void Engine::stop() {
  if (state_ != State::kCollecting) return;
  end_anchor_ = clock::anchor();
  end_ns_ = end_anchor_.ns;
  state_ = State::kFinalized;
  g_by_session.erase(session_);
  g_by_serial.erase(serial_);
  --g_native_collecting;
  ++g_generation;
  capture::uninstall(this);
  if (opts_.all_threads) capture::uninstall_thread_binder();
  if (counting_alloc_) alloc_count::stop();
  counting_alloc_ = false;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // stop() runs while an exception may be propagating
  if (token_ && PyContextVar_Reset(g_session_var, token_) < 0) {
    PyErr_Clear();
    // Left in another context (manual __exit__ elsewhere): the variable there
    // still names this session, which now records nothing.
    fail("the session was ended in a different context than it was entered in");
  }
  for (auto& o : thread_origins_) Py_DECREF(o.thread);  // started, never bound
  thread_origins_.clear();
  PyErr_Restore(type, value, tb);
  Py_CLEAR(token_);
  ++g_generation;  // the variable changed: lanes cached for this context are stale
#if MLPROF_HAS_EVAL_HOOK
  if (g_native_collecting > 0) capture::set_window(current_lanes_want_callees());
#endif
  for (auto& lane : lanes_) {
    unmark_context(*lane);
    Py_CLEAR(lane->context);
  }
  for (auto& lane : lanes_) {
    for (const Suspended& s : lane->suspended) count_suspended(*lane, -int(s.keeps_hook));
    lane->suspended.clear();
  }
  gen_labels_.clear();
  session_ = nullptr;
  // A v2 tracer gets the whole session here, in one probe hit (before
  // session_end, which ends the session for a v1 tracer).
  if (probes::spans_traced()) {
    probes::fire_session_spans(*this, registry(), clock::mapping(start_anchor_, end_anchor_), usdt_flags_,
                               true);
  }
  loop_watch::unwatch_when_idle();
  if (usdt_counted_) probes::checkpoints_session_stopped();
  usdt_counted_ = false;
  if (MLPROF_USDT_ENABLED(session_end)) {
    uint64_t dropped = 0;
    for (auto& lane : lanes_) dropped += lane->out.dropped;
    probes::fire_session_end(serial_, dropped);
  }
}

void Engine::usdt_checkpoint(int64_t now_ns) {
  if (state_ != State::kCollecting || now_ns < usdt_next_checkpoint_) return;
  // Each checkpoint sends the whole session so far: at intervals as long as
  // its age, what is sent in all stays under twice its last body.
  usdt_next_checkpoint_ = now_ns + std::max<int64_t>(MLPROF_CHECKPOINT_AFTER_NS, now_ns - start_ns_);
  probes::fire_session_spans(*this, registry(), clock::mapping(start_anchor_, clock::anchor()), usdt_flags_,
                             false);
}

std::shared_ptr<Profile> Engine::profile() {
  if (profile_) return profile_;
  profile_ = std::make_shared<Profile>();
  Profile& p = *profile_;
  p.captured_depth = opts_.depth;
  p.start_ns = start_ns_;
  p.end_ns = end_ns_;
  clock::Mapping clk = clock::mapping(start_anchor_, end_anchor_);
  p.meta["clock_source"] = clock::g_use_tsc ? "tsc" : "clock_gettime";
  p.meta["clock_error_ns"] = std::to_string(clk.error_ns);
  p.meta["engine"] = mechanism_.empty() ? capture::name() : mechanism_;
  p.meta["python"] = Py_GetVersion();
  p.meta["python"] = p.meta["python"].substr(0, p.meta["python"].find(' '));
  p.meta["pid"] = std::to_string(getpid());
  if (loop_watched_) p.meta["loop_waits"] = "selector";
  else if (origin_awaits_) p.meta["loop_waits"] = "awaits";
  p.meta["start_unix_ns"] = std::to_string(start_unix_ns_);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  p.meta["host"] = host;
  // Copy the functions and labels this session uses into its own table.
  const FunctionTable& g = registry();
  std::unordered_map<uint32_t, uint32_t> fmap, smap;
  auto local_fn = [&](uint32_t id) {
    auto it = fmap.find(id);
    if (it != fmap.end()) return it->second;
    const FunctionInfo& f = g.get(id);
    uint32_t nid = p.functions.add(g.strings().get(f.name), g.strings().get(f.module),
                                   g.strings().get(f.file), f.line, f.kind, f.user_code);
    fmap[id] = nid;
    return nid;
  };
  auto local_str = [&](uint32_t id) {
    auto it = smap.find(id);
    if (it != smap.end()) return it->second;
    uint32_t nid = p.functions.strings().intern(g.strings().get(id));
    smap[id] = nid;
    return nid;
  };
  uint64_t captured = 0, skipped = 0;
  // The profiler's stretches leave its thread's timeline, every lane of that
  // thread alike (an asyncio task's lane and the lane whose span runs the
  // loop keep their order): a time after some moves back by their length,
  // one inside a stretch to its start.
  std::unordered_map<uint64_t, std::vector<std::pair<int64_t, int64_t>>> cuts;
  for (auto& lp : lanes_) {
    auto& c = cuts[lp->thread_id];
    c.insert(c.end(), lp->overhead.begin(), lp->overhead.end());
  }
  int64_t overhead_ticks = 0;
  for (auto& [thread, c] : cuts) {  // sorted, overlaps merged (a stretch noted for several lanes)
    std::sort(c.begin(), c.end());
    size_t n = 0;
    for (const auto& iv : c) {
      if (n && iv.first <= c[n - 1].second) {
        c[n - 1].second = std::max(c[n - 1].second, iv.second);
      } else {
        c[n++] = iv;
      }
    }
    c.resize(n);
    for (const auto& [from, to] : c) overhead_ticks += to - from;
  }
  for (auto& lp : lanes_) {
    Lane lane = std::move(lp->out);
    const auto& cut = cuts[lp->thread_id];
    // A tick time on the cut timeline, in ns, for times in increasing order.
    size_t next_cut = 0;
    int64_t shift = 0;
    auto on_cut_timeline = [&](int64_t t) {
      while (next_cut < cut.size() && cut[next_cut].second <= t) {
        shift += cut[next_cut].second - cut[next_cut].first;
        ++next_cut;
      }
      if (next_cut < cut.size() && cut[next_cut].first < t) t = cut[next_cut].first;
      return clk.to_ns(t - shift);
    };
    for (Event& e : lane.events) {
      if (e.kind == EventKind::kLabel) {
        e.id = local_str(e.id);
        continue;
      }
      if (e.kind == EventKind::kMark) e.id = local_str(e.id);
      e.ts_ns = on_cut_timeline(e.ts_ns);
      if (e.kind == EventKind::kCall) e.id = local_fn(e.id);
    }
    // Off-CPU time between the CPU clock's readings: against the raw wall
    // time (the profiler's stretches ran on the CPU too), placed at the
    // reading's time on the cut timeline, as the events are.
    next_cut = 0;
    shift = 0;
    const auto& reads = lp->cpu_reads;
    for (size_t r = 1; r < reads.size(); ++r) {
      const int64_t off = (clk.to_ns(reads[r].first) - clk.to_ns(reads[r - 1].first)) -
                          (reads[r].second - reads[r - 1].second);
      const int64_t at = on_cut_timeline(reads[r].first);
      if (off >= kOffCpuMinNs) lane.off_cpu.push_back({at, off});
    }
    captured += lane.events.size();
    skipped += lp->skipped;
    lane.trace_id = opts_.trace_id;
    lane.span_id = opts_.span_id;
    p.lanes.push_back(std::move(lane));
  }
  p.stats.events_captured = captured;
  p.stats.events_skipped = skipped;
  // Reported once (the tree's footer, the report's header, statistics()).
  p.meta["profiler_overhead_ns"] = std::to_string(clk.to_ns(overhead_ticks) - clk.to_ns(0));
  drop_empty_lanes(p);
  build_tree(p);
  group_framework_spans(p);  // MLflow's own calls as one node per run
  lanes_.clear();  // the events now live in the profile
  lane_index_.clear();
  lane_by_context_id_.clear();
  return profile_;
}

// --- entry points of the capture mechanisms -------------------------------------

namespace {
// After each event: whether this thread's current lanes want their callees
// reported (capture/eval_frame.cpp installs its function while any thread does).
inline void update_window(const CurrentLanes& cl, int32_t current) {
#if MLPROF_HAS_EVAL_HOOK
  if (cl.n == 0 || capture::every_frame_reported()) return;  // no window wanted, or none needed
  bool open = current_lanes_keep_hook();
  for (int i = 0; i < cl.n && !open; ++i) open = lane_in_window(*cl.lanes[i], current);
  capture::set_window(open);
#else
  (void)cl, (void)current;
#endif
}}  // namespace

namespace {
inline bool lanes_want_callees(const CurrentLanes& cl, int32_t current) {
  for (int i = 0; i < cl.n; ++i) {
    if (lane_in_window(*cl.lanes[i], current)) return true;
  }
  return false;
}

inline bool lanes_below(const CurrentLanes& cl, int pydepth, bool count) {
  for (int i = 0; i < cl.n; ++i) {
    const CaptureLane& L = *cl.lanes[i];
    if (L.truncated) continue;
    if (L.rec.empty()) return false;  // the roots are next, or the lane takes a new base
    const StackEntry& t = L.rec.back();
    if (t.pydepth >= pydepth) return false;  // what ended unseen is closed on the full path
    if (t.depth + (pydepth - t.pydepth) <= L.ceiling) return false;
  }
  if (count) {
    for (int i = 0; i < cl.n; ++i) ++cl.lanes[i]->skipped;
  }
  return true;
}
}  // namespace

bool current_lanes_want_callees(PyThreadState* ts) {
  if (current_lanes_keep_hook()) return true;
  const CurrentLanes& cl = lanes_now(ts);
  return cl.n && lanes_want_callees(cl, capture::frame_depth(ts));
}

bool below_every_ceiling(PyThreadState* ts, int pydepth, bool count) { return lanes_below(lanes_now(ts), pydepth, count); }

Callee classify_callee(PyThreadState* ts, int current, int pydepth, bool ask_below, bool count) {
  const ThreadCache& c = cache_now(ts);
  const CurrentLanes& cl = c.current;
  if (!current_lanes_keep_hook() && !lanes_want_callees(cl, current)) {
    return cl.n == 0 && c.awaits_roots ? Callee::kNotHere : Callee::kNotWanted;
  }
  return ask_below && lanes_below(cl, pydepth, count) ? Callee::kBelow : Callee::kWithin;
}

uint64_t lanes_generation() { return g_generation; }

bool current_lanes_keep_hook() {
#if !MLPROF_HAS_MONITORING
  // Any context of this thread: a task's coroutine resumes after the event
  // loop, which runs in another context, switched to it. The map's entries
  // are never erased, so the thread keeps a pointer to its own (asked for on
  // every frame the evaluation function sees while it is installed).
  ThreadCache* cp = &t_cache;
  asm("" : "+r"(cp));
  if (!cp->suspended) {
    if (g_thread_suspended.empty()) return false;
    auto it = g_thread_suspended.find(thread_key());
    if (it == g_thread_suspended.end()) return false;
    cp->suspended = &it->second;
  }
  return *cp->suspended > 0;
#else
  return false;
#endif
}

bool current_lanes_want_c_calls() {
  const CurrentLanes& cl = lanes_now();
  for (int i = 0; i < cl.n; ++i) {
    if (cl.lanes[i]->engine->options().capture_c_calls) return true;
  }
  return false;
}

bool on_start(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame) {
  const Reporting r(site);
  const CurrentLanes& cl = r.lanes();
  IOTargets io;
  bool tracked = false;
  for (int i = 0; i < cl.n; ++i) tracked |= lane_start(*cl.lanes[i], code, pydepth, frame, false, &io);
  if (io.n) capture_arguments(code, frame, io);
  update_window(cl, pydepth);
  return tracked;
}

// What on_start does, for a lane whose innermost open entry is the caller and
// whose code was seen before (its function id is in the code's extra):
// arrive(), lane_start() and update_window() reduced to what is left of them.
[[gnu::flatten]] bool quick_start(PyThreadState* ts, PyCodeObject* code, int pydepth, bool windowed,
                                  bool* at_ceiling) {
  const CurrentLanes& cl = lanes_now(ts);
  if (cl.n != 1 || compat::is_generator_code(code)) return false;
  CaptureLane& L = *cl.lanes[0];
  if (!L.quick || L.rec.empty() || L.pending_code) return false;
  const StackEntry& t = L.rec.back();
  if (t.pydepth != pydepth - 1 || t.hides) return false;  // a new base, or frames that ended unseen
  const int32_t d = t.depth + 1;
  if (d > L.ceiling || d <= L.io_ceiling || L.out.events.size() >= L.soft_cap) return false;
  const auto v = reinterpret_cast<uintptr_t>(compat::code_extra(code, g_extra_index));
  if (!v || (v & (kExtraTransparent | kExtraLabelled)) || session_transparent(L, code) || session_folds(L, code)) {
    return false;  // the full path interns, hides or folds it
  }
  const uint32_t fid = id_of_extra(v);
  const auto idx = static_cast<uint32_t>(L.out.events.size());
  push(L, EventKind::kCall, fid, 0, clock::ticks());
  L.rec.push_back(StackEntry{idx, d, pydepth, EntryKind::kFrame, 0, code, false, false});
  L.last_was_suspend = false;
  probes::span_enter(L.engine->serial(), L.index, idx, fid, 0, d, 0);
  if constexpr (capture::kUnspecializeCalls) {
    if (windowed && d < L.ceiling) capture::watch_calls(code);
  }
  if (at_ceiling) *at_ceiling = d >= L.ceiling;
  return true;
}

// What on_return does when the lane's innermost entry is the returning frame.
[[gnu::flatten]] bool quick_return(PyThreadState* ts, PyCodeObject* code, int pydepth, bool exception) {
  const CurrentLanes& cl = lanes_now(ts);
  if (cl.n != 1) return false;
  CaptureLane& L = *cl.lanes[0];
  if (!L.quick || L.rec.size() < 2) return false;  // the last entry: the window may close
  const StackEntry& e = L.rec.back();
  if (e.code != code || e.pydepth != pydepth || e.kind != EntryKind::kFrame || e.want_io ||
      e.call_index == kNoEvent || L.out.events.size() >= L.hard_cap) {
    return false;
  }
  uint8_t flags = exception ? kEvException : 0;
  if (e.children_dropped) flags |= kEvChildrenDropped;
  const uint32_t idx = e.call_index;
  push(L, EventKind::kReturn, 0, flags, clock::ticks());
  L.rec.pop_back();
  L.last_was_suspend = false;
  probes::span_exit(L.engine->serial(), L.index, idx, flags);
  return true;
}

// What on_yield does when the generator's frame is the lane's innermost
// entry, recorded, with nothing opened in it and its caller's entry below it.
[[gnu::flatten]] bool quick_yield(PyThreadState* ts, PyCodeObject* code, int pydepth) {
  const CurrentLanes& cl = lanes_now(ts);
  if (cl.n != 1) return false;
  CaptureLane& L = *cl.lanes[0];
  if (!L.quick || L.truncated || L.rec.size() < 2 || L.out.events.size() >= L.hard_cap) return false;
  const StackEntry& e = L.rec.back();
  if (e.code != code || e.pydepth != pydepth || e.kind != EntryKind::kFrame || !e.key ||
      e.call_index == kNoEvent || L.rec[L.rec.size() - 2].pydepth >= pydepth || pydepth <= L.base_pydepth) {
    return false;
  }
  const uint32_t idx = e.call_index;
  if (!L.last_was_suspend) {
    L.chain_top = idx;
    L.chain_top_depth = e.depth;
  }
  detach_segment(L, e.key, L.rec.size() - 1, pydepth);  // e is gone after this
  L.last_was_suspend = true;
  push(L, EventKind::kSuspend, idx, 0, clock::ticks());
  probes::span_suspend(L.engine->serial(), L.index, idx);
  update_window(cl, pydepth - 1);
  return true;
}

// What on_resume does for a segment the lane holds, resumed by the lane's
// innermost entry.
[[gnu::flatten]] bool quick_resume(PyThreadState* ts, PyCodeObject* code, int pydepth, uintptr_t generator) {
  (void)code;
  const CurrentLanes& cl = lanes_now(ts);
  if (cl.n != 1 || !generator) return false;
  CaptureLane& L = *cl.lanes[0];
  if (!L.quick || L.truncated || L.rec.empty() || L.suspended.empty() ||
      L.out.events.size() >= L.hard_cap || generator == L.engine->entering_generator_) {
    return false;
  }
  const StackEntry& t = L.rec.back();
  if (t.pydepth != pydepth - 1 || t.hides) return false;  // a new base, or frames that ended unseen
  size_t k = 0;
  while (k < L.suspended.size() && L.suspended[k].key != generator) ++k;
  if (k == L.suspended.size()) return false;
  const uint32_t first_recorded = reattach_segment(L, k, t.depth + 1, pydepth, true);
  if (first_recorded != kNoEvent) {
    push_resume(L, first_recorded, clock::ticks(), code);
    probes::span_resume(L.engine->serial(), L.index, first_recorded);
  }
  L.last_was_suspend = false;
  update_window(cl, pydepth);
  return true;
}

void on_resume(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame, bool continued) {
  const Reporting r(site);
  const CurrentLanes& cl = r.lanes();
  IOTargets io;
  for (int i = 0; i < cl.n; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (!lane_resume(L, code, pydepth, frame)) lane_start(L, code, pydepth, frame, continued, &io);
  }
  if (io.n) capture_arguments(code, frame, io);
  update_window(cl, pydepth);
}

void on_return(const Site& site, PyCodeObject* code, int pydepth, bool exception, PyObject* retval) {
  const Reporting r(site);
  const CurrentLanes& cl = r.lanes();
  IOTargets io;
  for (int i = 0; i < cl.n; ++i) lane_return(*cl.lanes[i], code, pydepth, exception, &io);
  if (io.n) capture_return(retval, io);
  update_window(cl, pydepth - 1);
}

void on_yield(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame) {
  const Reporting r(site);
  const CurrentLanes& cl = r.lanes();
  for (int i = 0; i < cl.n; ++i) lane_yield(*cl.lanes[i], code, pydepth, frame);
  update_window(cl, pydepth - 1);
}

void on_c_call(const Site& site, PyObject* callable, PyCodeObject* caller, int pydepth) {
  const Reporting r(site);
  const CurrentLanes& cl = r.lanes();
  for (int i = 0; i < cl.n; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (!L.engine->options().capture_c_calls || L.truncated) continue;
    if (pydepth < L.base_pydepth) continue;  // a frame above the one that entered the session
    close_ended_now(L, pydepth + 1);
    const int32_t d = depth_at(L, pydepth) + 1;
    if (d < 0 || d > L.ceiling) continue;
    if (caller && is_transparent(caller)) continue;  // the profiler's own calls
    if (!L.rec.empty() && L.rec.back().hides) continue;  // inside a hidden code
    if (is_own_callable(callable)) continue;
    if (L.out.events.size() >= L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    uint32_t fid = cfunction_id(callable);
    auto idx = static_cast<uint32_t>(L.out.events.size());
    push(L, EventKind::kCall, fid, kEvCFunction, clock::ticks());
    L.rec.push_back(StackEntry{idx, d, pydepth, EntryKind::kCCall, reinterpret_cast<uintptr_t>(callable), nullptr});
    probes::span_enter(L.engine->serial(), L.index, idx, fid, 0, d, kEvCFunction);
    L.last_was_suspend = false;
  }
  update_window(cl, pydepth);
}

void on_c_return(const Site& site, PyObject* callable, int pydepth, bool exception) {
  const Reporting r(site);
  const CurrentLanes& cl = r.lanes();
  for (int i = 0; i < cl.n; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (pydepth < L.base_pydepth) continue;
    close_ended_now(L, pydepth + 1);
    // Same callable, opened by this frame, innermost: an unrecorded nested
    // call of the same builtin (sorted inside a key function) must not close it.
    if (L.rec.empty() || L.rec.back().kind != EntryKind::kCCall ||
        L.rec.back().key != reinterpret_cast<uintptr_t>(callable) || L.rec.back().pydepth != pydepth) {
      continue;
    }
    close_entries(L, L.rec.size() - 1, exception, clock::ticks());
  }
  update_window(cl, pydepth);
}

namespace {
// An open span of the lane names a resource: its kCall follows a kLabel
// flagged kEvResource (lane_start and block_enter write them in that order).
bool open_span_names_resource(const CaptureLane& L) {
  const std::vector<Event>& ev = L.out.events;
  return std::any_of(L.rec.begin(), L.rec.end(), [&ev](const StackEntry& e) {
    return e.call_index != kNoEvent && e.call_index > 0 && e.call_index < ev.size() &&
           ev[e.call_index - 1].kind == EventKind::kLabel && (ev[e.call_index - 1].flags & kEvResource);
  });
}
}  // namespace

int block_enter(uint32_t function, uint32_t resource, BlockToken* out, int max, bool automatic) {
  const CurrentLanes& cl = lanes_now();
  if (cl.n == 0) return 0;
  const int pydepth = capture::frame_depth();  // the frame that opens the block
  // A generator's block: its resumes are not the end of the block (arrive).
  PyFrameObject* opener = PyEval_GetFrame();
  const uintptr_t generator = opener ? compat::frame_generator(opener) : 0;
  int n = 0;
  for (int i = 0; i < cl.n && n < max; ++i) {
    CaptureLane& L = *cl.lanes[i];
    // A task lane with nothing open took its base from the last frame that
    // arrived, which may have returned since (a semaphore's acquire): the
    // frame opening the block is the lane's base then.
    if (!is_origin(L) && L.rec.empty() && pydepth < L.base_pydepth) L.base_pydepth = pydepth - 1;
    if (L.truncated || pydepth < L.base_pydepth) continue;
    close_ended_now(L, pydepth + 1);
    const int32_t d = depth_at(L, pydepth) + 1;
    // A block that names a resource is a call the user asked to see: below
    // the ceiling too, as a leaf (nothing under it is deeper than d).
    if (d < 0 || (d > L.ceiling && !resource)) continue;
    if (automatic && open_span_names_resource(L)) continue;  // the user's name wins
    if (L.out.events.size() >= L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    const int64_t ts = clock::ticks();
    if (resource) push(L, EventKind::kLabel, resource, kEvResource, ts);
    auto idx = static_cast<uint32_t>(L.out.events.size());
    push(L, EventKind::kCall, function, kEvBlock, ts);
    L.rec.push_back(StackEntry{idx, d, pydepth, EntryKind::kBlock, generator, nullptr});
    probes::span_enter(L.engine->serial(), L.index, idx, function, 0, d, kEvBlock);
    L.last_was_suspend = false;
    out[n++] = BlockToken{L.engine->serial(), L.index, idx, d <= L.io_ceiling};
  }
  update_window(cl, pydepth);
  return n;
}

void block_exit(const BlockToken* tokens, int n, bool exception) {
  for (int t = 0; t < n; ++t) {
    auto it = g_by_serial.find(tokens[t].serial);
    if (it == g_by_serial.end()) continue;
    Engine* e = it->second;
    if (tokens[t].lane >= e->lanes().size()) continue;
    CaptureLane& L = *e->lanes()[tokens[t].lane];
    for (size_t j = L.rec.size(); j > 0; --j) {
      if (L.rec[j - 1].kind == EntryKind::kBlock && L.rec[j - 1].call_index == tokens[t].call_index) {
        close_entries(L, j - 1, exception, clock::ticks());
        break;
      }
    }
  }
  if (n > 0) update_window(lanes_now(), capture::frame_depth());
}

int mark(uint32_t name, uint32_t resource) {
  const CurrentLanes& cl = lanes_now();
  int n = 0;
  for (int i = 0; i < cl.n; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (L.truncated) continue;
    if (L.out.events.size() >= L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    const int64_t ts = clock::ticks();
    if (resource) push(L, EventKind::kLabel, resource, kEvResource, ts);
    push(L, EventKind::kMark, name, 0, ts);
    ++n;
  }
  return n;
}

uint32_t wait_function(std::string_view name, std::string_view module, std::string_view file, int line) {
  return registry().add(name, module, file, line, FunctionKind::kPython, false);
}

int wait_begin(WaitToken* out, int max) {
  const CurrentLanes& cl = lanes_now();
  if (cl.n == 0) return 0;
  const int pydepth = capture::frame_depth();  // the loop's frame that calls select
  int n = 0;
  for (int i = 0; i < cl.n && n < max; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (L.truncated || pydepth < L.base_pydepth) continue;
    close_ended_now(L, pydepth + 1);
    // Nothing open: no span waited (the loop runs outside the session's roots).
    const bool open = std::any_of(L.rec.begin(), L.rec.end(),
                                  [](const StackEntry& e) { return e.call_index != kNoEvent; });
    if (!open) continue;
    out[n++] = WaitToken{L.engine->serial(), L.index, L.out.events.size(), L.rec.back().depth + 1};
  }
  return n;
}

void wait_end(const WaitToken* tokens, int n, uint32_t function, int64_t start, int64_t end) {
  for (int t = 0; t < n; ++t) {
    auto it = g_by_serial.find(tokens[t].serial);
    if (it == g_by_serial.end() || tokens[t].lane >= it->second->lanes().size()) continue;
    CaptureLane& L = *it->second->lanes()[tokens[t].lane];
    std::vector<Event>& ev = L.out.events;
    if (L.truncated) continue;
    if (ev.size() > tokens[t].events) {
      // The select frame itself was recorded (within the ceiling): it is the wait.
      Event& first = ev[tokens[t].events];
      if (first.kind == EventKind::kCall && first.id == function) first.flags |= kEvWait;
      continue;  // else something else ran in between (a signal handler): no leaf
    }
    if (ev.size() + 2 > L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    const auto idx = static_cast<uint32_t>(ev.size());
    push(L, EventKind::kCall, function, kEvWait, start);
    push(L, EventKind::kReturn, 0, 0, end);
    probes::span_enter(L.engine->serial(), L.index, idx, function, 0, tokens[t].depth, kEvWait);
    probes::span_exit(L.engine->serial(), L.index, idx, 0);
    L.last_was_suspend = false;
  }
}

namespace {
IOTargets io_targets(const BlockToken* tokens, int n) {
  IOTargets io;
  for (int i = 0; i < n && io.n < 4; ++i) {
    if (tokens[i].want_io) io.t[io.n++] = IOTarget{tokens[i].serial, tokens[i].lane, tokens[i].call_index};
  }
  return io;
}
}  // namespace

void block_arguments_io(const BlockToken* tokens, int n, PyObject* const* args, size_t nargs,
                        PyObject* kwnames) {
  const IOTargets io = io_targets(tokens, n);
  if (!io.n) return;
  const int64_t since = clock::ticks();
  const Py_ssize_t npos = PyVectorcall_NARGS(nargs);
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  IOSummary summary;
  for (Py_ssize_t i = 0; i < npos + nkw && i < kMaxIOArguments; ++i) {
    std::string name = i < npos ? "args[" + std::to_string(i) + "]"
                                : utf8(PyTuple_GET_ITEM(kwnames, i - npos));
    summary = IOSummary{};
    summarize_object(args[i], &summary);
    append_io(io, IORole::kArgument, name, summary);
  }
  restart_calls(io, since);
}

void block_return_io(const BlockToken* tokens, int n, PyObject* retval) {
  const IOTargets io = io_targets(tokens, n);
  if (io.n) capture_return(retval, io);
}

void set_pending_label(PyObject* code, uint32_t label, uint32_t resource) {
  const CurrentLanes& cl = lanes_now();
  for (int i = 0; i < cl.n; ++i) {
    cl.lanes[i]->pending_code = code;
    cl.lanes[i]->pending_label = label;
    cl.lanes[i]->pending_resource = resource;
  }
}

void clear_pending_label(PyObject* code) {
  const CurrentLanes& cl = lanes_now();
  for (int i = 0; i < cl.n; ++i) {
    if (cl.lanes[i]->pending_code == code) cl.lanes[i]->pending_code = nullptr;
  }
}

void label_generator(PyObject* gen, PyObject* code, uint32_t label, uint32_t resource) {
  const CurrentLanes& cl = lanes_now();
  for (int i = 0; i < cl.n; ++i) {
    cl.lanes[i]->engine->gen_labels_[reinterpret_cast<uintptr_t>(gen)] = Engine::GenLabel{label, code, resource};
  }
}

}  // namespace mlprof
