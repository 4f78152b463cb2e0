#pragma once
// The engine's internal interfaces, shared by its translation units (engine.h
// is what the rest of the extension sees). Its jobs, a file each: engine.cpp
// (the thread cache and the on_*/quick_* entry points: the hot path, in one
// translation unit), lane_stack.cpp (a lane's stack of open levels),
// suspend_resume.h (generators and coroutines that yield and resume),
// code_names.cpp (naming and interning), code_registries.cpp (transparent,
// hidden and labelled codes), engine_lanes.cpp (threads, contexts and their
// lanes), engine_session.cpp (the Engine's lifecycle and profile build),
// io_capture.cpp (data summaries of arguments and results), blocks.cpp
// (profile_block, marks, waits, pending labels), usdt_fire.cpp (the probes'
// cold halves), overhead_cut.h (the profiler's own time cut from the
// timeline at build, shared with the reference engine's build). What the
// hot path runs per Python call and return is inline here, so that it stays
// as fast as when the engine was one file.

#include "engine.h"

#include <unordered_map>
#include <unordered_set>

#include "alloc_count.h"
#include "capture/capture.h"
#include "clock.h"
#include "model/resume.h"
#include "probes.h"

namespace mlprof {

// Internal to the module: with hidden visibility, the other translation units
// reach these globals directly, not through the GOT. The inline helpers have
// internal linkage (an unnamed namespace), as when the engine was one file:
// GCC inlines them by the same rules, so the hot path compiles as before.
#pragma GCC visibility push(hidden)

// --- process-wide state and the thread cache (engine.cpp) --------------------

extern PyObject* g_session_var;
extern PyObject* g_lane_var;
extern Py_ssize_t g_extra_index;
extern uint64_t g_generation;
extern uint64_t g_next_serial;
extern std::unordered_map<PyObject*, Engine*> g_by_session;
extern std::unordered_map<uint64_t, Engine*> g_by_serial;
extern std::unordered_map<uint64_t, int> g_thread_suspended;

uint64_t thread_key();              // unique per OS thread; idents are reused once a thread exits
const HookFrame* hook_frame_now();  // the frame of the event being reported (Site::hook), or null
bool bound_here(const Engine* engine);  // the calling thread is bound to it (all_threads)
int64_t thread_stretch_start();  // now, a stretch of the profiler's work starts (note_stretch)
void note_thread_overhead(int64_t since);

// --- code naming and interning (code_names.cpp) ------------------------------

FunctionTable& registry();
PathRules& path_rules();
uint32_t intern_code(PyCodeObject* code);
uint32_t cfunction_id(PyObject* callable);

constexpr uintptr_t kExtraTransparent = 1;
constexpr uint32_t kTransparent = UINT32_MAX;
// A code's extra slot (g_extra_index): 0 not seen yet, kExtraTransparent, or
// its function id, encoded by these two, with kExtraLabelled when a labeller
// names its calls (add_labeller).
constexpr uintptr_t kExtraLabelled = 2;
constexpr uintptr_t extra_of_id(uint32_t id) { return (static_cast<uintptr_t>(id) + 1) << 2; }
constexpr uint32_t id_of_extra(uintptr_t v) { return static_cast<uint32_t>((v >> 2) - 1); }

// --- transparent, hidden and labelled codes (code_registries.cpp) ------------

std::unordered_map<PyObject*, PyObject*>& labellers();  // code -> labeller
std::unordered_set<PyObject*>& hidden_codes();
bool equals_transparent(PyCodeObject* code);
uint32_t fold_label(const CaptureLane& L, PyCodeObject* code);
uint32_t call_labeller(CaptureLane& L, PyCodeObject* code, PyFrameObject* frame);

namespace {
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
    compat::set_code_extra(reinterpret_cast<PyObject*>(code), g_extra_index,
                           reinterpret_cast<void*>(kExtraTransparent));
    return kTransparent;
  }
  uint32_t id = intern_code(code);
  uintptr_t x = extra_of_id(id);
  if (!labellers().empty() && labellers().count(reinterpret_cast<PyObject*>(code)))
    x |= kExtraLabelled;
  compat::set_code_extra(reinterpret_cast<PyObject*>(code), g_extra_index,
                         reinterpret_cast<void*>(x));
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

// A code this session may fold (EngineOptions::fold_codes); the full path decides.
inline bool session_folds(const CaptureLane& L, PyCodeObject* code) {
  const auto& codes = L.engine->options().fold_codes;
  return std::any_of(codes.begin(), codes.end(), [code](const auto& c) {
    return c.first == reinterpret_cast<PyObject*>(code);
  });
}
}  // namespace

// --- the lane stack (lane_stack.cpp) -----------------------------------------

[[gnu::noinline]] void take_readings(CaptureLane& L);
[[gnu::noinline]] void read_off_cpu(CaptureLane& L);
[[gnu::noinline]] void push_resume_read(CaptureLane& L, uint32_t call, int64_t ts, bool fold);
[[gnu::cold, gnu::noinline]] bool grow_events(CaptureLane& L);  // false: no room, nothing pushed
void close_entries(CaptureLane& L, size_t from, bool exception, int64_t ts);
void close_ended(CaptureLane& L, int32_t pydepth, int64_t ts);
int32_t arrive(CaptureLane& L, int32_t pydepth, uintptr_t key);
bool lane_start(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame,
                bool continued, IOTargets* io);

namespace {
inline void count_suspended(const CaptureLane& L, int delta) {
#if MLPROF_HAS_MONITORING
  (void)L, (void)delta;  // sys.monitoring sees every resume: nothing keeps a hook in
#else
  if (delta) g_thread_suspended[L.thread_key] += delta;
#endif
}

// At most once a quantum of wall time per lane: one compare on the hot path.
inline void maybe_read_off_cpu(CaptureLane& L, int64_t ts) {
  if (__builtin_expect(ts - L.off_read_ticks >= L.off_quantum, 0)) read_off_cpu(L);
}

// A stretch of the profiler's own work on lane L, from `since` (taken by
// the caller after maybe_read_off_cpu) to `now`: cut from its timeline at
// build. One a quantum long (a repr that sleeps, a preempted summary) is
// closed by a reading, so the off-CPU time inside it is known and goes with
// it (overhead_cut.h off_cpu_inside).
inline void note_stretch(CaptureLane& L, int64_t since, int64_t now) {
  L.overhead.emplace_back(since, now);
  if (now - since >= L.off_quantum) read_off_cpu(L);
}

// Room in the event buffer for one more event (it grows when full); false:
// none, the lane stopped (out of memory).
// (Full is `size == capacity`: `size < capacity` compiles to two divisions.)
inline bool event_slot(CaptureLane& L) {
  return !__builtin_expect(L.out.events.size() == L.out.events.capacity(), 0) || grow_events(L);
}

inline void push(CaptureLane& L, EventKind kind, uint32_t id, uint8_t flags, int64_t ts) {
  if (!event_slot(L)) return;
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

// The resume of the span whose kCall is at `call`: written by the core's one
// writer of resumes, which folds it when the generator went straight back to
// its consumer (model/resume.h), so a busy generator costs no events.
inline void push_resume(CaptureLane& L, uint32_t call, int64_t ts, PyCodeObject* code) {
  if (!event_slot(L)) return;
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

inline bool frame_like(const StackEntry& e) {
  return e.kind == EntryKind::kFrame || e.kind == EntryKind::kTransparent ||
         e.kind == EntryKind::kDropped;
}

// Whether the lane's entries from `from` on are blocks that a coroutine chain
// carries: the entry under them is a coroutine (or generator) the lane
// tracks, above `pydepth`. Its segment holds them (lane_yield defers the
// yields of the frames in between; arrive keeps them open as those resume).
inline bool carried_by_tracked(const CaptureLane& L, size_t from, int32_t pydepth) {
  return from > 0 && from < L.rec.size() && !frame_like(L.rec[from]) &&
         frame_like(L.rec[from - 1]) && L.rec[from - 1].key && L.rec[from - 1].pydepth < pydepth;
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

inline int32_t next_depth(const CaptureLane& L) {
  return (L.rec.empty() ? -1 : L.rec.back().depth) + 1;
}

inline bool is_origin(const CaptureLane& L) { return L.index == 0; }

inline uintptr_t generator_key(PyFrameObject* frame) {
  if (!frame) {
    if (const HookFrame* h = hook_frame_now()) return h->generator;
    frame = PyEval_GetFrame();
  }
  return frame ? compat::frame_generator(frame) : 0;
}
}  // namespace

// --- I/O capture (io_capture.cpp) --------------------------------------------

void capture_arguments(PyCodeObject* code, PyFrameObject* frame, const IOTargets& io);
void capture_return(PyObject* retval, const IOTargets& io);

namespace {
inline void want_io(IOTargets* io, const CaptureLane& L, uint32_t call) {
  if (io && io->n < 4) io->t[io->n++] = IOTarget{L.engine->serial(), L.index, call};
}

// Whether lane_return leaves the lane as it is: a frame above the root, or
// one deeper than the lane's innermost entry whose end was not inferred.
inline bool lane_return_leaves(const CaptureLane& L, PyCodeObject* code, int32_t pydepth) {
  if (pydepth <= L.base_pydepth) return true;
  if (!L.rec.empty() && L.rec.back().pydepth >= pydepth) return false;
  return !(L.inferred.code == code && L.inferred.pydepth == pydepth);
}

// A frame returns (lane_stack.cpp has the rest of the lane stack); inline:
// once per Python return, in on_return.
inline void lane_return(CaptureLane& L, PyCodeObject* code, int32_t pydepth, bool exception,
                        IOTargets* io) {
  if (lane_return_leaves(L, code, pydepth)) return;
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
  if (j < L.rec.size())
    close_entries(L, j, exception, ts);  // blocks of a frame the lane does not track
  // Its end was inferred earlier (a finalizer started in its teardown).
  CaptureLane::Inferred& inf = L.inferred;
  if (inf.code == code && inf.pydepth == pydepth) {
    if (exception && inf.return_index < L.out.events.size())
      L.out.events[inf.return_index].flags |= kEvException;
    if (inf.want_io && !exception) want_io(io, L, inf.call_index);
    inf = CaptureLane::Inferred{};
  }
}
}  // namespace

// --- threads, contexts and their lanes (engine_lanes.cpp) --------------------

void unmark_context(CaptureLane& L);  // the lane no longer holds its context

// --- the probes' cold halves (usdt_fire.cpp) ---------------------------------

uint32_t begin_flags(const EngineOptions& o, uint64_t serial);

// --- the frame evaluation hook's window (engine.cpp) -------------------------

namespace {
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
  if (t.depth == L.ceiling && t.pydepth == current && t.kind == EntryKind::kFrame && t.key)
    return false;
#endif
  return t.pydepth >= current && t.depth <= L.ceiling;
}
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
}
}  // namespace

#pragma GCC visibility pop

}  // namespace mlprof
