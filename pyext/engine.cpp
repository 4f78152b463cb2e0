// The engine's hot path: the per-thread cache of the lanes current in a
// thread and context, and the entry points the capture mechanisms call on
// every event (on_*, and the quick_* paths that serve the common frame
// events), with the questions the frame evaluation hook asks about its
// window. It stays one translation unit, and what it runs per event is inline
// in engine_internal.h, so that the compiler inlines it all (gnu::flatten)
// without link-time optimization. The rest of the engine is in the files
// engine_internal.h lists.
#define MLPROF_USDT_DEFINE_SEMAPHORES  // this TU owns the probes' semaphores
#include "engine_internal.h"

#include <algorithm>
#include <climits>

#include "capture/capture.h"
#include "clock.h"
#include "probes.h"
#include "span_api.h"
#include "suspend_resume.h"

namespace mlprof {

int g_native_collecting = 0;
int g_reference_collecting = 0;

PyObject* g_session_var = nullptr;
// A task lane's context carries the lane's context id here, so that a copy
// made in it (a task created inside that task) names its creator.
PyObject* g_lane_var = nullptr;
Py_ssize_t g_extra_index = -1;
uint64_t g_generation = 1;
uint64_t g_next_serial = 1;
std::unordered_map<PyObject*, Engine*> g_by_session;  // collecting engines by session object
std::unordered_map<uint64_t, Engine*> g_by_serial;    // collecting engines by serial

namespace {

// Per-thread cache of the lanes current in this thread and context.
struct ThreadCache {
  const HookFrame* hook_frame = nullptr;  // the event being reported (Site::hook)
  uint64_t generation = 0;
  PyObject* context = nullptr;
  uint64_t context_ver = 0;
  CurrentLanes current{};
  bool awaits_roots = false;  // a session entered by a coroutine of this thread collects
  const int* suspended =
      nullptr;              // 3.11: this thread's entry of g_thread_suspended, once it has one
  Engine* bound = nullptr;  // all_threads binding
  uint64_t bound_serial = 0;
  uint64_t thread_key = 0;  // unique per OS thread; idents are reused once a thread exits
};
thread_local ThreadCache t_cache;
}  // namespace
const HookFrame* hook_frame_now() { return t_cache.hook_frame; }
uint64_t g_next_thread_key = 1;

// Suspended segments that keep the hook (Suspended::keeps_hook) per thread,
// over every lane and session of the thread (3.11: while a thread has one,
// the evaluation hook stays in for it, since only the hook sees a resume;
// current_lanes_keep_hook).
std::unordered_map<uint64_t, int> g_thread_suspended;

uint64_t thread_key() {
  if (!t_cache.thread_key) t_cache.thread_key = g_next_thread_key++;
  return t_cache.thread_key;
}

namespace {

void find_lanes(ThreadCache& c, PyThreadState* ts) {
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
      if (it != g_by_serial.end())
        e = it->second;
      else
        c.bound = nullptr;
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
        CaptureLane* lane =
            e->lane_for(key, e == c.bound ? e->awaited_context(ts->context) : ts->context);
        if (lane) c.current.lanes[c.current.n++] = lane;
      }
      e = e->parent();
    }
  }
  c.generation = g_generation;
  c.context = ts->context;
  c.context_ver = ts->context_ver;
}

// Out of line, and guarded: the quick paths that call it are not (a try
// there cost about 13 instructions a call).
[[gnu::noinline]] void refresh(ThreadCache& c, PyThreadState* ts) {
  try {
    find_lanes(c, ts);
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {  // no lanes here: the sessions stopped (new_lane out of memory)
    c.current.n = 0;
    hook_failed();
  }
}

inline ThreadCache& cache_now(PyThreadState* ts) {
  ThreadCache* cp = &t_cache;
  // Opaque to the optimizer, so that it keeps the address in a register:
  // GCC would rather derive it again after each call, and in a module loaded
  // with dlopen every derivation is a call (a TLS descriptor's, or __tls_get_addr).
  asm("" : "+r"(cp));
  ThreadCache& c = *cp;
  if (c.generation != g_generation || c.context != ts->context ||
      c.context_ver != ts->context_ver) {
    refresh(c, ts);
  }
  return c;
}
inline const CurrentLanes& lanes_now(PyThreadState* ts = compat::tstate()) {
  return cache_now(ts).current;
}

// An event's lanes, with its frame described to the engine while it runs.
class Reporting {
 public:
  explicit Reporting(const Site& site) : c_(cache_now(site.ts)) { c_.hook_frame = site.hook; }
  ~Reporting() { c_.hook_frame = nullptr; }
  const CurrentLanes& lanes() const { return c_.current; }

 private:
  ThreadCache& c_;
};

}  // namespace

PyObject* session_var() { return g_session_var; }

const CurrentLanes& current_lanes() { return lanes_now(); }

bool records_here(Engine* engine) {
  return (t_cache.bound == engine && t_cache.bound_serial == engine->serial()) ||
         engine->entered_in(thread_key());
}

void bind_thread(Engine* engine) {
  t_cache.bound = engine;
  t_cache.bound_serial = engine->serial();
  t_cache.generation = 0;  // force a refresh
}

bool bound_here(const Engine* engine) {
  return t_cache.bound == engine && t_cache.bound_serial == engine->serial();
}

// The profiler starts working in this thread (naming a code, running a
// labeller): now, with the CPU clock read for each lane recording here once
// a quantum, so the stretch is bracketed by readings (note_stretch).
int64_t thread_stretch_start() {
  const int64_t now = clock::ticks();
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) maybe_read_off_cpu(*cl.lanes[i], now);
  return now;
}

// The profiler worked in this thread from `since` to now: every session
// recording here leaves it out.
void note_thread_overhead(int64_t since) {
  const int64_t now = clock::ticks();
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) note_stretch(*cl.lanes[i], since, now);
}

// --- entry points of the capture mechanisms -------------------------------------

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

bool below_every_ceiling(PyThreadState* ts, int pydepth, bool count) {
  return lanes_below(lanes_now(ts), pydepth, count);
}

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
  for (int i = 0; i < cl.n; ++i)
    tracked |= lane_start(*cl.lanes[i], code, pydepth, frame, false, &io);
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
  if (!v || (v & (kExtraTransparent | kExtraLabelled)) || session_transparent(L, code) ||
      session_folds(L, code)) {
    return false;  // the full path interns, hides or folds it
  }
  if (L.rec.size() == L.rec.capacity()) return false;  // the full path grows it, guarded
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
[[gnu::flatten]] bool quick_return(PyThreadState* ts, PyCodeObject* code, int pydepth,
                                   bool exception) {
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

[[gnu::flatten]] bool quick_below(PyThreadState* ts, PyCodeObject* code, int pydepth) {
  // A generator's start may be the entering coroutine's, whose lane follows it.
  return !compat::is_generator_code(code) && lanes_below(lanes_now(ts), pydepth, true);
}

// What lane_return leaves as it is: a frame deeper than the lane's innermost
// open entry (nothing ended unseen), whose end was not inferred earlier.
[[gnu::flatten]] bool quick_unheld_return(PyThreadState* ts, PyCodeObject* code, int pydepth) {
  if (compat::is_generator_code(code)) return false;
  const CurrentLanes& cl = lanes_now(ts);
  for (int i = 0; i < cl.n; ++i)
    if (!lane_return_leaves(*cl.lanes[i], code, pydepth)) return false;
  return true;
}

// What on_yield does when the generator's frame is the lane's innermost
// entry, recorded, with nothing opened in it and its caller's entry below it.
[[gnu::flatten]] bool quick_yield(PyThreadState* ts, PyCodeObject* code, int pydepth) {
  const CurrentLanes& cl = lanes_now(ts);
  if (cl.n != 1) return false;
  CaptureLane& L = *cl.lanes[0];
  if (!L.quick || L.truncated || L.rec.size() < 2 || L.out.events.size() >= L.hard_cap)
    return false;
  const StackEntry& e = L.rec.back();
  if (e.code != code || e.pydepth != pydepth || e.kind != EntryKind::kFrame || !e.key ||
      e.call_index == kNoEvent || L.rec[L.rec.size() - 2].pydepth >= pydepth ||
      pydepth <= L.base_pydepth) {
    return false;
  }
  const uint32_t idx = e.call_index;
  if (!L.last_was_suspend) {
    L.chain_top = idx;
    L.chain_top_depth = e.depth;
  }
  if (!detach_guarded(L, e.key, L.rec.size() - 1, pydepth)) return true;  // e is gone after this
  L.last_was_suspend = true;
  push(L, EventKind::kSuspend, idx, 0, clock::ticks());
  probes::span_suspend(L.engine->serial(), L.index, idx);
  update_window(cl, pydepth - 1);
  return true;
}

// What on_resume does for a segment the lane holds, resumed by the lane's
// innermost entry.
[[gnu::flatten]] bool quick_resume(PyThreadState* ts, PyCodeObject* code, int pydepth,
                                   uintptr_t generator) {
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
  const uint32_t first_recorded = reattach_guarded(L, k, t.depth + 1, pydepth);
  if (first_recorded != kNoEvent) {
    push_resume(L, first_recorded, clock::ticks(), code);
    probes::span_resume(L.engine->serial(), L.index, first_recorded);
  }
  L.last_was_suspend = false;
  update_window(cl, pydepth);
  return true;
}

void on_resume(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame,
               bool continued) {
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

void on_return(const Site& site, PyCodeObject* code, int pydepth, bool exception,
               PyObject* retval) {
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
    if (caller && is_transparent(caller)) continue;      // the profiler's own calls
    if (!L.rec.empty() && L.rec.back().hides) continue;  // inside a hidden code
    if (is_own_callable(callable)) continue;
    if (L.out.events.size() >= L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    uint32_t fid = cfunction_id(callable);
    auto idx = static_cast<uint32_t>(L.out.events.size());
    push(L, EventKind::kCall, fid, kEvCFunction, clock::ticks());
    L.rec.push_back(StackEntry{idx, d, pydepth, EntryKind::kCCall,
                               reinterpret_cast<uintptr_t>(callable), nullptr});
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
        L.rec.back().key != reinterpret_cast<uintptr_t>(callable) ||
        L.rec.back().pydepth != pydepth) {
      continue;
    }
    close_entries(L, L.rec.size() - 1, exception, clock::ticks());
  }
  update_window(cl, pydepth);
}

}  // namespace mlprof
