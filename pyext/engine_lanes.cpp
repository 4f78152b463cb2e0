// Threads, contexts and their lanes: an Engine opens a lane per (thread,
// context) it records in, hung under the span that started the thread or
// created the task (context ids in lane_var tell a task's creator), with its
// depth and ceiling, thread name and native id.
#include "engine_internal.h"

#include <pythread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <exception>

#include "exception_state.h"
#include "loop_watch.h"

namespace mlprof {

using compat::utf8;

namespace {
uint64_t native_tid() {
  // once per thread: the syscall, and libstdc++'s exception state (exception_state.h)
  thread_local uint64_t tid = (reach_exception_state(), static_cast<uint64_t>(syscall(SYS_gettid)));
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
    if (a && PyDict_Check(a))
      active = a;  // a strong reference, kept
    else
      Py_XDECREF(a);
    Py_DECREF(threading);
  }
  PyErr_Clear();
  return active;
}

// The calling thread's threading.Thread (a new reference), or null: no
// _DummyThread is made for a thread threading does not know. Found in
// threading._active by its ident, then kept in the thread state's dict,
// which ends with the thread: a thread's Thread object is the same for its
// life, and that int-keyed lookup was 400 instructions of each session's
// start. (Only this function's own errors are cleared.)
PyObject* current_thread_object(uint64_t ident) {
  static PyObject* cache_key = [] {
    PyObject* key = PyUnicode_InternFromString("mlflow_profiler.thread");
    if (!key) PyErr_Clear();
    return key;
  }();
  PyObject* tsdict = cache_key ? PyThreadState_GetDict() : nullptr;  // borrowed
  if (tsdict) {
    if (PyObject* th = PyDict_GetItemWithError(tsdict, cache_key)) {
      Py_INCREF(th);
      return th;
    }
    if (PyErr_Occurred()) PyErr_Clear();
  }
  PyObject* active = threading_active();
  if (!active) return nullptr;
  PyObject* key = PyLong_FromUnsignedLongLong(ident);
  if (!key) {
    PyErr_Clear();  // MemoryError
    return nullptr;
  }
  PyObject* th = PyDict_GetItemWithError(active, key);  // borrowed; an int key's cannot fail
  Py_DECREF(key);
  if (!th) return nullptr;  // not cached: threading may make its _DummyThread later
  Py_INCREF(th);
  if (tsdict && PyDict_SetItem(tsdict, cache_key, th) < 0) PyErr_Clear();
  return th;
}

std::string thread_name(PyObject* thread, uint64_t ident) {
  // thread._name (not the property: no Python frame inside a hook). Once per
  // lane: a session start costs a lookup, not an import and two attribute
  // lookups by C string.
  static PyObject* name_attr = [] {
    PyObject* name = PyUnicode_InternFromString("_name");
    if (!name) PyErr_Clear();
    return name;
  }();
  std::string out;
  if (thread && name_attr) {
    PyObject* name = PyObject_GetAttr(thread, name_attr);
    if (name) {
      out = utf8(name);
      Py_DECREF(name);
    } else {
      PyErr_Clear();
    }
  }
  if (out.empty()) out = "Thread-" + std::to_string(ident);
  return out;
}
}  // namespace

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

}  // namespace

// The lane no longer holds its context (the session ended).
void unmark_context(CaptureLane& L) {
  if (!L.context_id) return;
  auto it = g_context_ids.find(L.context);
  if (it != g_context_ids.end() && --it->second.lanes <= 0) g_context_ids.erase(it);
  L.context_id = 0;
}

namespace {
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
  // The event buffer is made at the first event (grow_events): a session that
  // records nothing allocates none. Its first 4 KiB (256 events) a short
  // session frees cheaply; 64 KiB and up makes glibc's free() consolidate its
  // fast bins every time.
  L.out.thread_id = thread_id;
  L.out.native_tid = native_tid();
  PyObject* thread = current_thread_object(thread_id);
  L.out.thread_name = thread_name(thread, thread_id);
  std::unordered_map<PyObject*, CaptureLane*>* per_thread = nullptr;
  if (!lanes_.empty()) {
    per_thread = &lane_index_[thread_key];
    L.out.task = static_cast<uint32_t>(per_thread->size() + (first_thread_ == thread_key));
  }
  // A task's context: in the session's thread, or, in a thread bound to it, a
  // copy of a task's context (refresh asks awaited_context).
  const bool in_bound_thread = bound_here(this);
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
  lanes_.push_back(std::move(lane));
  if (per_thread) {
    (*per_thread)[context] = &L;
  } else {
    first_thread_ = thread_key;
    first_context_ = context;
  }
  loop_watched_ = loop_watch::watch_selectors() || loop_watched_;
  // A v2 tracer knows lane 0's thread from session_begin and the rest from
  // session_spans: one probe hit per session saved.
  if (L.index != 0 || !probes::spans_traced()) {
    probes::lane_begin(serial_, L.index, L.out.parent_lane, L.out.parent_call, L.out.task,
                       thread_id, L.out.thread_name);
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
  if (!lanes_.empty() && first_thread_ == thread_key && first_context_ == context)
    return lanes_.front().get();
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

}  // namespace mlprof
