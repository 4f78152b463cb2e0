// A lane's stack of open levels (CaptureLane::rec): a frame that starts
// arrives at its depth (closing what ended unseen), is recorded, kept
// transparent or dropped, and its return closes it and what it opened. Also
// the counters read at each event (cpu_time, alloc_bytes, the CPU clock for
// waiting), and whether an asyncio task's coroutine is the loop's main one.
// The inline halves the hot path uses are in engine_internal.h.
#include "engine_internal.h"

#include <algorithm>
#include <climits>
#include <new>

#include "on_cpu.h"
#include "py_util.h"

namespace mlprof {

namespace {
// The lane's counters (cpu_time, alloc_bytes) now, as readings of `event`:
// how many were written to `out`. The thread's CPU clock is a system call
// (no vDSO): ~10x a tick.
size_t read_counters(const CaptureLane& L, uint32_t event, Reading* out) {
  size_t n = 0;
  if (L.values & (1u << static_cast<int>(ValueKind::kAllocBytes))) {
    out[n++] = {event, ValueKind::kAllocBytes, static_cast<int64_t>(alloc_count::thread_bytes())};
  }
  if (L.values & (1u << static_cast<int>(ValueKind::kCpuNs))) {
    out[n++] = {event, ValueKind::kCpuNs, on_cpu::thread_cpu_ns()};
  }
  return n;
}
}  // namespace

// The lane's counters for the event just written.
// The noinline helpers of the quick paths catch what they throw (guarded):
// the quick paths themselves are not guarded.
[[gnu::noinline]] void take_readings(CaptureLane& L) {
  guarded([&] {
    Reading now[kValueKinds];
    const size_t n = read_counters(L, static_cast<uint32_t>(L.out.events.size() - 1), now);
    L.out.readings.insert(L.out.readings.end(), now, now + n);
  });
}

// Reads the thread's CPU clock for running vs waiting (views/waiting.h). The
// reading's time is now, not its event's: the profiler's work since the event
// (naming a code) is CPU time of a stretch cut from the timeline, and a
// reading must pair the wall and CPU clocks of one moment (overhead_cut.h).
// A thread that has not left the CPU since its last read (on_cpu.h) needs no
// system call: its CPU clock is that read's plus the wall time since, which
// the profile's build works out (CpuRead::since).
[[gnu::noinline]] void read_off_cpu(CaptureLane& L) {
  int64_t now = clock::ticks();  // before asking: a switch after the answer clears it
  on_cpu::Read last;
  CpuRead r;
  if (on_cpu::stayed_since(&last)) {
    r = CpuRead{now, last.cpu_ns, last.ticks};
  } else {
    const on_cpu::Read read = on_cpu::read_now();
    now = read.ticks;
    r = CpuRead{now, read.cpu_ns, 0};
  }
  guarded([&] { L.cpu_reads.push_back(r); });
  L.off_read_ticks = now;
}

// The event buffer is full: it grows, copying every event so far into fresh
// pages (4 MB at 262,144 events), which is the profiler's own time: cut from
// the thread's timeline, not left in whichever span was open (a leaf of 20 ns
// took the copy's time). Past 1 MB it quadruples: a deep session copies less
// than half of what doubling copies (7.3 MB against 16.8 MB by 600,000
// events), and pages it never writes are never touched. Never past the
// lane's hard cap, which no event passes. Out of memory (an address-space
// limit), it doubles instead, and failing that the lane stops recording with
// the reason: a bad_alloc thrown through the interpreter's hook ended the
// process (std::terminate).
bool grow_events(CaptureLane& L) {
  constexpr size_t kQuadrupleFrom = 65536;  // events: 1 MB
  auto& events = L.out.events;
  const size_t cap = events.capacity();
  // Each within [cap + 1, hard_cap + 1].
  const auto bounded = [&](size_t n) { return std::max(std::min(n, L.hard_cap + 1), cap + 1); };
  const size_t want = bounded(cap < 256 ? 256 : cap * (cap >= kQuadrupleFrom ? 4 : 2));
  const size_t fallback = bounded(cap * 2);
  try {
    const int64_t since = thread_stretch_start();
    try {
      events.reserve(want);
    } catch (const std::bad_alloc&) {
      if (fallback >= want) throw;  // no smaller step to try
      events.reserve(fallback);
    }
    note_thread_overhead(since);
    return true;
  } catch (const std::exception&) {
    L.truncated = true;
    L.out.truncated = true;
    try {
      L.engine->fail("out of memory for the session's events: recording stopped");
    } catch (const std::exception&) {  // the lane's truncated flag still tells
    }
    return events.size() < events.capacity();
  }
}

[[gnu::noinline]] void push_resume_read(CaptureLane& L, uint32_t call, int64_t ts, bool fold) {
  guarded([&] {
    Reading now[kValueKinds];
    const size_t n = read_counters(L, 0, now);
    append_resume(L.out, call, ts, fold, now, n);
  });
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
      L.inferred = CaptureLane::Inferred{
          e.code, e.pydepth, e.call_index,
          static_cast<uint32_t>(L.out.events.size() + returns_before), e.want_io};
      break;
    }
    if (e.call_index != kNoEvent) ++returns_before;
  }
  close_entries(L, from, false, ts);
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
  // Or one between a coroutine the lane tracks and the blocks opened deeper in
  // its chain, which its segment carried (lane_yield): where every resume is
  // reported (the profile function, global events), the chain's frames resume
  // outermost first, each above those blocks. They are still open.
  if (key && !L.rec.empty() && L.rec.back().kind == EntryKind::kBlock) {
    size_t i = L.rec.size();
    while (i > 0 && L.rec[i - 1].kind == EntryKind::kBlock && L.rec[i - 1].key &&
           L.rec[i - 1].pydepth > pydepth)
      --i;
    if (carried_by_tracked(L, i, pydepth)) return INT32_MIN;
  }
  close_ended_now(L, pydepth);
  return depth_at(L, pydepth);
}

namespace {
// Whether a frame at `depth` is the lane's to track, and how.
inline bool track_transparent(CaptureLane& L, PyCodeObject* code, int32_t depth, int32_t pydepth,
                              uint32_t fid) {
  const bool under_hidden = !L.rec.empty() && L.rec.back().hides;
  const bool loop_main = L.rec.empty() && L.loop_main == code;
  if (!under_hidden && fid != kTransparent && !loop_main && !session_transparent(L, code)) {
    const uint32_t label = L.engine->options().fold_codes.empty() ? 0 : fold_label(L, code);
    if (!label) return false;
    push(L, EventKind::kLabel, label, kEvRelabel, clock::ticks());
  }
  StackEntry e{kNoEvent, depth - 1, pydepth, EntryKind::kTransparent, 0, code};
  e.hides = under_hidden || (fid == kTransparent && !hidden_codes().empty() &&
                             hidden_codes().count(reinterpret_cast<PyObject*>(code)));
  L.rec.push_back(e);
  return true;
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
    pyutil::Ref loop(running && tasks && PyDict_Check(tasks.get()) &&
                             PyCFunction_Check(running.get())
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
        yes = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) > 0 &&
              PyTuple_GET_ITEM(entry, 0) == done.get();
      }
    }
  }
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
  return yes;
}

}  // namespace

bool lane_start(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame,
                bool continued, IOTargets* io) {
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
  const int64_t since = first_sight ? thread_stretch_start() : 0;
  const uint32_t fid = function_id(code);
  if (first_sight) note_thread_overhead(since);
  // (Only under a recorded span: with none, as in a session entered around
  // asyncio.run, the coroutine is the root its work hangs under.)
  if (key && d == 0 && L.rec.empty() && !L.loop_main_checked && L.out.task > 0 && !L.thread_lane &&
      L.out.parent_lane >= 0) {
    L.loop_main_checked = true;
    const int64_t since_check = thread_stretch_start();
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
  if (!label &&
      (reinterpret_cast<uintptr_t>(compat::code_extra(code, g_extra_index)) & kExtraLabelled)) {
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

}  // namespace mlprof
