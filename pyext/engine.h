#pragma once
// The native capture engine: one Engine per ProfileSession, one CaptureLane
// per (thread, execution context) that the session sees. The capture
// mechanisms (capture/: the profile function, the frame evaluation hook,
// sys.monitoring; capture/README.md says which runs where) translate
// interpreter events into the on_* calls at the bottom of this file; the
// semantics are docs/capture.md.
//
// Everything here runs with the GIL held; the GIL is what makes the shared
// maps safe without locks.

#include "compat.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "clock.h"
#include "model/event.h"
#include "model/functions.h"
#include "model/tree.h"

struct _PyInterpreterFrame;  // CPython's, internal (capture/frame_access.h reads it)

namespace mlprof {

class Engine;

// Entries of a lane's stack of open levels. kFrame, kBlock and kCCall are
// recorded spans; kTransparent (a transparent frame within the ceiling) and
// kDropped (a frame within the ceiling not recorded because the buffer was
// full) write no events but keep their place, so the depth of what they call
// is known.
enum class EntryKind : uint8_t { kFrame, kBlock, kCCall, kTransparent, kDropped };

constexpr uint32_t kNoEvent = UINT32_MAX;

struct StackEntry {
  uint32_t call_index;  // index of the kCall event in the lane; kNoEvent if none
  int32_t depth;        // tree depth; a transparent entry has its caller's
  // The Python frame depth (capture::frame_depth()) of the frame: of this
  // frame, or for a block or a C call of the frame that opened it. It is what
  // identifies a frame among the open ones: frames of one thread nest, so two
  // open frames never share it, and a frame the mechanism never reported
  // (running untraced below the ceiling) cannot be mistaken for one it did.
  int32_t pydepth;
  EntryKind kind;
  uintptr_t key;     // frame: generator identity (0: plain frame); C call: the callable
  const void* code;  // frame: its code object (identity only)
  bool children_dropped = false;  // a call under it was dropped (buffer full)
  bool want_io = false;           // a recorded frame within the I/O depth (capture_io)
  // A transparent entry of a hidden code (add_hidden) or under one: what it
  // calls is transparent too, so its whole time is its caller's self time.
  bool hides = false;
};

// A segment of a lane's stack detached by a yield/await: the generator's
// frame entry (if the lane tracks it) and the blocks opened in it. Nearly
// always one or two entries, kept inline: a yield allocates nothing.
struct Suspended {
  uintptr_t key = 0;          // the generator or coroutine
  int32_t frame_depth = 0;    // tree depth of the suspended frame when it yielded
  int32_t frame_pydepth = 0;  // and its frame depth
  uint32_t count = 0;
  // 3.11: whether a resume the evaluation hook does not see would change the
  // tree (the segment holds more than transparent frames), so that the hook
  // stays in while it is suspended (current_lanes_keep_hook).
  bool keeps_hook = false;
  StackEntry inline_entries[2];
  std::vector<StackEntry> more;  // entries past the first two
  const StackEntry& at(uint32_t i) const { return i < 2 ? inline_entries[i] : more[i - 2]; }
  void add(const StackEntry& e) {
    if (count < 2)
      inline_entries[count] = e;
    else
      more.push_back(e);
    ++count;
  }
};

// A reading of a lane's thread CPU clock: cpu_ns at ticks; or, where `since`
// is not 0, the thread had not left the CPU since its read at `since`
// (cpu_ns), so its clock at ticks is cpu_ns plus the wall time between
// (on_cpu.h), worked out with the session's clock mapping.
struct CpuRead {
  int64_t ticks = 0;
  int64_t cpu_ns = 0;
  int64_t since = 0;
};

struct CaptureLane {
  Engine* engine = nullptr;
  uint32_t index = 0;  // position in the engine's lanes
  uint64_t thread_id = 0;
  uint64_t thread_key = 0;
  PyObject* context = nullptr;  // strong reference while collecting (see new_lane)
  int ceiling = 0;              // levels this lane may record: engine ceiling minus base depth
  int io_ceiling = -1;          // deepest level whose I/O is summarized (same base); -1: none
  // The frame depth of the lane's base level (depth -1: the frame that entered
  // the session). A lane other than the origin takes it from its first frame
  // whenever it has nothing open (a task's coroutine is resumed from the
  // event loop, a callback called by it).
  int32_t base_pydepth = 0;
  bool base_known = false;
  bool thread_lane = false;  // a thread bound by all_threads (not the session's own thread)
  int32_t depth_base = 0;    // tree depth of the lane's own level 0 (below the span it hangs under)
  uint64_t context_id = 0;   // the id its context carries in lane_var (a task lane's); 0: none
  // A task lane's root coroutine when a loop runs its task to completion
  // (asyncio.run, run_until_complete): the body of the call that ran the
  // loop, so transparent at the lane's root (docs/capture.md, "asyncio").
  // Compared only; decided at the lane's first root start.
  const void* loop_main = nullptr;
  bool loop_main_checked = false;
  bool quick = false;  // quick_start/quick_return may serve it (no C calls wanted)
  bool truncated = false;
  uint8_t values =
      0;  // counters read at each span event: bit 1 << ValueKind (cpu_time, alloc_bytes)
  // Readings of the thread's CPU clock for running vs waiting (views/waiting.h),
  // at most one per off_quantum ticks; turned into the lane's OffCpuReadings
  // when the profile is built.
  std::vector<CpuRead> cpu_reads;
  int64_t off_quantum = 0;
  int64_t off_read_ticks = 0;
  uint64_t skipped = 0;              // frame events below the ceiling that reached the engine
  std::vector<Suspended> suspended;  // segments detached by a yield, by generator
  size_t soft_cap = 0, hard_cap = 0;
  std::vector<StackEntry> rec;       // open entries, innermost last
  PyObject* pending_code = nullptr;  // profile_span: label the next start of this code
  uint32_t pending_label = 0;
  uint32_t pending_resource = 0;    // profile_span(resource=): string id, 0 none
  uint32_t chain_top = UINT32_MAX;  // innermost span of the last suspended chain
  int32_t chain_top_depth = 0;
  bool last_was_suspend = false;
  // A frame whose end was inferred (a frame of the same depth started, or its
  // caller returned, before its own return was reported): the report that
  // comes later still gives it its flag and its return value.
  struct Inferred {
    const void* code = nullptr;
    int32_t pydepth = -1;
    uint32_t call_index = kNoEvent;
    uint32_t return_index = kNoEvent;
    bool want_io = false;
  } inferred;
  // Stretches (clock ticks) of the profiler's own work in this lane: I/O
  // summaries, labellers, the first sight of a code.
  // Taken out of the thread's timeline when the profile is built, so no
  // span, ancestors included, holds the profiler's work.
  std::vector<std::pair<int64_t, int64_t>> overhead;
  Lane out;  // events and metadata handed to the core
};

struct EngineOptions {
  int depth = 2;                // -1: unlimited
  size_t max_events = 1000000;  // per lane
  bool all_threads = false;
  bool capture_c_calls = false;
  bool capture_io = false;  // summarize arguments and return values
  int io_depth = -1;        // deepest level with I/O; -1: the ceiling
  uint8_t values = 0;       // per-span values: bit 1 << ValueKind (cpu_time, alloc_bytes)
  // Code objects transparent for this session only (autoprofile: the user's
  // PythonModel.predict, whose calls are the root's children). Strong refs
  // held by the Engine; a handful at most, so a linear scan.
  std::vector<PyObject*> transparent_codes;
  // profiling() with MLflow loaded: a PythonModel's predict (a code of
  // fold_codes) called by PyFuncModel.predict (a code of fold_parents)
  // through transparent frames only is folded into it: transparent, and its
  // label names the parent, so depth counts from the model's predict as
  // under autoprofile. Strong refs held by the Engine.
  std::vector<PyObject*> fold_parents;
  std::vector<std::pair<PyObject*, uint32_t>> fold_codes;  // code, label (intern_label)
  // The OpenTelemetry or MLflow trace context active where the session
  // started (docs/capture.md, "Traces"): lower-case hex, 32 and 16 digits,
  // or empty when none. Written to the profile's meta and sent to the agent.
  std::string trace_id;
  std::string span_id;

  // Takes (+1) or drops (-1) a reference to each code object above: the
  // holder of the options (an Engine, an EngineTemplate) owns them.
  void hold_codes(int delta) const;
};

class Engine {
 public:
  enum class State { kIdle, kCollecting, kFinalized };

  explicit Engine(EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Sets session_var to `session` in the current context and installs the
  // hook. `levels_above`: the profiler's own frames between the frame that
  // entered the session (the root's caller) and this call (ProfileSession's
  // activate and __enter__). Raises (C++ exception) if the engine was used.
  void start(PyObject* session, int levels_above = 1);
  // Ends capture; idempotent. Never raises.
  void stop();
  // A collecting session stops being current in this context (pause) and
  // becomes current again (resume), keeping its lanes: autoprofile's
  // predict_stream records only while the stream is advanced, not the
  // consumer's code between chunks. False if not collecting / not paused.
  bool pause();
  bool resume();
  State state() const { return state_; }
  const EngineOptions& options() const { return opts_; }
  uint64_t serial() const { return serial_; }
  Engine* parent() const { return parent_; }
  // The session records in a thread it was entered in (started, or resumed
  // there), not in every thread whose context carries it (docs/capture.md).
  bool entered_in(uint64_t thread_key) const {
    return thread_key == start_thread_ ||
           std::find(resumed_in_.begin(), resumed_in_.end(), thread_key) != resumed_in_.end();
  }

  // The built profile (built on first call, after stop()).
  std::shared_ptr<Profile> profile();
  // Failures recorded during capture, logged once per kind when the session ends.
  const std::vector<std::string>& failures() const { return failures_; }
  // What changed in how frames were reported (logged once per kind, capture goes on).
  const std::vector<std::string>& notes() const { return notes_; }
  void note(const std::string& what);
  // 3.12+: this session made sys.monitoring report every frame (capture.cpp).
  bool global_frames() const { return global_frames_; }
  void set_global_frames(bool on) { global_frames_ = on; }
  // Where the session was entered, for capture.cpp's choice of mechanism
  // (docs/capture.md, "Sites"): the entering frame's code, unless set
  // before start (autoprofile names the model's class). 0: unknown.
  uint64_t site() const { return site_; }
  void set_site(uint64_t site) { site_ = site; }
  // Events the session's lanes hold now.
  uint64_t events_held() const;
  int64_t start_ns() const { return start_ns_; }
  int64_t end_ns() const { return end_ns_; }
  const std::vector<std::unique_ptr<CaptureLane>>& lanes() const { return lanes_; }
  const char* hook_name() const;
  // Contract v2 checkpoints (session_spans.cpp): the session as it stands,
  // sent if one is due at `now_ns` (GIL held, collecting).
  bool usdt_counted() const { return usdt_counted_; }
  void usdt_checkpoint(int64_t now_ns);

  // --- used by the hooks -------------------------------------------------
  CaptureLane* lane_for(uint64_t thread_key, PyObject* context);  // thread_key: see thread_key()
  // In a thread bound to this session (all_threads), which has one lane for
  // all its contexts: `context` (the current one) if it is a copy of one of
  // this session's asyncio task contexts (asyncio.to_thread), which gets a
  // lane of its own; else null.
  PyObject* awaited_context(PyObject* context) const;
  // all_threads: the calling thread is starting `thread` (a threading.Thread,
  // from Thread.start): its lane will hang under the span of this thread's
  // lane that is open now, whenever the new thread gets to run.
  void note_thread_start(PyObject* thread);
  void fail(const std::string& why);  // disables capture, remembers why
  // Every lane of the session is on the calling thread (it started here).
  bool records_only_here() const;
  struct GenLabel {
    uint32_t label;
    PyObject* code;
    uint32_t resource;  // string id, 0 none
  };
  std::unordered_map<uintptr_t, GenLabel> gen_labels_;  // generator object -> label
  // The generator or coroutine whose frame entered the session (an `async
  // with`), 0 if a plain frame did: its resumes move the origin lane's base.
  uintptr_t entering_generator_ = 0;
  // That frame is a coroutine's (or an async generator's): the tasks it
  // starts run their steps from the event loop, above the session's root.
  bool entered_by_coroutine_ = false;

 private:
  CaptureLane* new_lane(uint64_t thread_key, PyObject* context);
  void adopt_thread_origin(CaptureLane& L, PyObject* thread);
  void note_entering_frame(int levels_above);
  void note_running_frames(int levels_above);

  EngineOptions opts_;
  State state_ = State::kIdle;
  uint64_t serial_;
  PyObject* session_ = nullptr;  // borrowed while collecting (session_var holds it)
  PyObject* token_ = nullptr;
  Engine* parent_ = nullptr;
  PyObject* parent_session_ = nullptr;  // strong ref: keeps parent_ alive
  uint64_t start_thread_ = 0;           // thread key of the starting thread
  std::vector<uint64_t> resumed_in_;    // other threads resume() ran in (predict_stream)
  int64_t start_ns_ = 0, end_ns_ = 0;
  uint32_t usdt_flags_ =
      0;  // MLPROF_SESSION_* as session_begin gave them (session_spans repeats them)
  bool usdt_counted_ = false;         // began while session_spans was traced (checkpoints watch it)
  int64_t usdt_next_checkpoint_ = 0;  // CLOCK_MONOTONIC ns
  bool counting_alloc_ = false;       // alloc_count::start() succeeded: stop() stops it
  int64_t start_unix_ns_ = 0;         // CLOCK_REALTIME at start: when, for pprof and the report
  clock::Anchor start_anchor_, end_anchor_;
  std::vector<std::unique_ptr<CaptureLane>> lanes_;
  // (thread, context) -> lane. The first lane (lanes_[0]) is kept apart:
  // most sessions have that one only, and the two maps' nodes were a fifth
  // of an empty session's start and stop (3.12, callgrind: about 1,000 of
  // 15,000 instructions). Its key is kept here, as the maps keep theirs:
  // stop() clears the lane's own context.
  uint64_t first_thread_ = 0;
  PyObject* first_context_ = nullptr;
  std::unordered_map<uint64_t, std::unordered_map<PyObject*, CaptureLane*>> lane_index_;
  std::unordered_map<uint64_t, uint32_t> lane_by_context_id_;  // CaptureLane::context_id -> index
  // Threads started in the session and not bound yet, with the span they
  // hang under (call kNoEvent: a root). `thread` is a strong reference.
  struct ThreadOrigin {
    PyObject* thread;
    uint32_t lane;
    uint32_t call;
  };
  std::vector<ThreadOrigin> thread_origins_;
  std::vector<std::string> failures_;
  std::vector<std::string> notes_;
  const char* mechanism_ = nullptr;  // capture::name() at start: a static string
  bool loop_watched_ = false;        // an event loop's selector was watched (loop_watch.h)
  bool origin_awaits_ = false;       // entered by a coroutine: its awaits are the loop's idle time
  bool global_frames_ = false;
  uint64_t site_ = 0;
  std::shared_ptr<Profile> profile_;
};

// --- process-wide state ------------------------------------------------------

// The ContextVar that holds the current ProfileSession (native or reference).
PyObject* session_var();
void init_engine_module(PyObject* module);  // creates session_var, the extra index
// Number of sessions collecting now (native); the wrappers' fast path reads it.
extern int g_native_collecting;
extern int g_reference_collecting;
// Library path prefixes for FunctionInfo::user_code (the stdlib).
void set_library_prefixes(std::vector<std::string> prefixes);
// Whether code in `file` is user code (FunctionInfo::user_code's rule).
bool is_user_file(std::string_view file);
// Registers a code object as transparent (docs/capture.md).
void add_transparent(PyObject* code);
// Registers a code object as hidden: transparent, and so is everything it
// calls (an attribute lookup's or an isinstance check's plumbing).
void add_hidden(PyObject* code);
// Registers `labeller` to name each call of `code`: called with the call's
// first two arguments (None where missing), it returns the span's label (a
// str) or None (docs/capture.md, "Names").
void add_labeller(PyObject* code, PyObject* labeller);
// Interns a label / block name into the process-wide function table.
uint32_t intern_label(std::string_view label);
uint32_t block_function(std::string_view label);

// Lanes of the sessions current in this thread and context (innermost first).
struct CurrentLanes {
  CaptureLane* lanes[4];
  int n;
};
const CurrentLanes& current_lanes();
// The engine whose session object this is, or null (a reference session).
Engine* engine_for_session(PyObject* session);
// Binds the calling thread to an engine (all_threads).
void bind_thread(Engine* engine);
// Whether the engine records in the calling thread already: entered there, or bound.
bool records_here(Engine* engine);
Engine* newest_all_threads_engine();
bool any_engine_wants_c_calls();

// --- events from the capture mechanisms (GIL held, never raise) ------------------
// `pydepth`: the Python frame depth of the frame an event is about
// (capture::frame_depth() counts them), which identifies it among the open
// ones. A frame evaluation hook reports a frame before the interpreter makes
// it current, so PyEval_GetFrame() is still the caller's: the hook describes
// the frame here for the duration of its on_* call (null otherwise).
struct HookFrame {
  uintptr_t generator;  // the generator/coroutine that owns it, 0 for a plain frame
  struct _PyInterpreterFrame* frame;
};
// Where an event comes from, as its mechanism knows it: the thread state
// (read once per event: each read, like each thread-local access of this
// module, is a call into the dynamic linker) and the HookFrame (or null).
struct Site {
  PyThreadState* ts;
  const HookFrame* hook = nullptr;
};
// Spans that want a summary of a value later (capture_io).
struct IOTarget {
  uint64_t serial;
  uint32_t lane;
  uint32_t call;  // index of the span's kCall event
};
struct IOTargets {
  IOTarget t[4];
  int n = 0;
};
// A frame starts. Returns true if a lane keeps an entry for it (recorded,
// transparent within the ceiling, or dropped): its end must then be reported.
// frame may be null (3.12+).
bool on_start(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame);
// A resume (3.12+: PY_RESUME/PY_THROW; below: a call event of generator code).
// If no suspended span matches, it is a start, flagged continued if `continued`.
void on_resume(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame,
               bool continued);
// retval: the return value (borrowed; null on an exception or when unknown).
void on_return(const Site& site, PyCodeObject* code, int pydepth, bool exception, PyObject* retval);
void on_yield(const Site& site, PyCodeObject* code, int pydepth, PyFrameObject* frame);
// The common frame events, tried before on_start and on_return: one lane on
// the thread, a plain frame called by the lane's innermost open entry (or
// that entry's return, not the lane's last), nothing else to decide. True
// when done; false, having changed nothing, when the full call must follow.
// `ts`: this thread's state. `windowed`: reported by the frame evaluation
// function (capture/eval_frame.cpp), which keeps its window open around them
// itself; `at_ceiling` (if given) is set to whether the frame's callees are
// below the lane's ceiling.
// Callers flatten themselves (gnu::flatten, the full path noinline), so that
// link-time optimization, which the wheel's build uses, inlines these. What a
// flattened caller can reach but never runs per event (sys.monitoring's
// set-up, failure reports) is gnu::cold and noinline: inlined, it made four
// callbacks about 100 KB each and the wheel's link 55 CPU-seconds longer.
bool quick_start(PyThreadState* ts, PyCodeObject* code, int pydepth, bool windowed = false,
                 bool* at_ceiling = nullptr);
bool quick_return(PyThreadState* ts, PyCodeObject* code, int pydepth, bool exception);
// Where every frame is reported (sys.monitoring's global events, the profile
// function): a plain frame's start below every lane's ceiling, under each
// lane's innermost open entry, only counted as skipped; a plain frame's
// return (or unwind) that no lane holds, left alone. True when that was all
// on_start/on_return had to do: it changes exactly what they would, without
// a clock read or the frame's description.
bool quick_below(PyThreadState* ts, PyCodeObject* code, int pydepth);
bool quick_unheld_return(PyThreadState* ts, PyCodeObject* code, int pydepth);
// The same for a generator's or coroutine's yield and resume (3.12+): one
// lane; a yield of the lane's innermost entry with nothing opened in it; a
// resume, of a segment the lane holds, called by the lane's innermost entry.
// `generator`: the generator or coroutine (its identity, not a reference).
bool quick_yield(PyThreadState* ts, PyCodeObject* code, int pydepth);
bool quick_resume(PyThreadState* ts, PyCodeObject* code, int pydepth, uintptr_t generator);
void on_c_call(const Site& site, PyObject* callable, PyCodeObject* caller,
               int pydepth);  // caller: skip our own frames
void on_c_return(const Site& site, PyObject* callable, int pydepth, bool exception);
// Whether this thread's current lanes want the frames their innermost open
// levels call (the next level is within a ceiling): what keeps the frame
// evaluation hook installed (capture/eval_frame.cpp).
// `ts`: this thread's state, which the frame evaluation function has at hand
// (reading it again is a call and a __tls_get_addr).
bool current_lanes_want_callees(PyThreadState* ts = compat::tstate());
// The frame evaluation hook's fast path: true when a frame at `pydepth`
// starting now is below the ceiling of every current lane (counted as
// skipped there); false when it may be recorded, or to be safe.
// `count`: a frame start (not a generator's creation call, which runs no
// code of it and is no event elsewhere).
bool below_every_ceiling(PyThreadState* ts, int pydepth, bool count = true);
// Both questions at once, for the frame evaluation function's every frame:
// kNotWanted (current_lanes_want_callees is false for frames at `current`),
// else kBelow (below_every_ceiling(ts, pydepth, count), asked only if
// `ask_below`) or kWithin.
// kNotHere: no lane in this context, but the thread runs a session that a
// coroutine entered, whose tasks and callbacks the event loop may start in a
// context of theirs with any frame: the window stays open through it.
enum class Callee { kNotWanted, kNotHere, kBelow, kWithin };
Callee classify_callee(PyThreadState* ts, int current, int pydepth, bool ask_below, bool count);
// Changes whenever sessions start, stop, pause or resume anywhere.
uint64_t lanes_generation();
// 3.11: whether this thread's lanes want the hook even through frames they do
// not track (a suspended span may resume anywhere).
bool current_lanes_keep_hook();
// Whether a collecting session wants C calls reported.
bool current_lanes_want_c_calls();

// profile_block / profile_span support.
struct BlockToken {
  uint64_t serial;
  uint32_t lane;
  uint32_t call_index;
  bool want_io;  // within the lane's I/O depth (capture_io)
};
// resource: the string id of the resource the block uses, 0 none.
// automatic: named by the profiler, not the user (an HTTP client's host,
// _clients.py): left out of a lane where an open span already names one.
int block_enter(uint32_t function, uint32_t resource, BlockToken* out, int max,
                bool automatic = false);  // returns tokens written
void block_exit(const BlockToken* tokens, int n, bool exception);
// An instant (kMark) named `name` (a string id) in the current lanes, about
// `resource` (string id, 0 none); returns the lanes it was recorded in.
int mark(uint32_t name, uint32_t resource);
// profile_span around a callable without a Python frame: the I/O of its
// block, from the call's own arguments ("args[0]", ..., keyword names) and result.
void block_arguments_io(const BlockToken* tokens, int n, PyObject* const* args, size_t nargs,
                        PyObject* kwnames);
void block_return_io(const BlockToken* tokens, int n, PyObject* retval);
// A selector waiting for I/O or a timer (pyext/loop_watch.cpp). A wait
// is a leaf span flagged kEvWait under the lane's innermost open span, or,
// when the selector's select frame was itself recorded (within the ceiling),
// that span flagged. wait_begin notes the current lanes before the call.
struct WaitToken {
  uint64_t serial;
  uint32_t lane;
  size_t events;  // the lane's events before the call
  int32_t depth;  // the leaf's tree depth
};
uint32_t wait_function(std::string_view name, std::string_view module, std::string_view file,
                       int line);
int wait_begin(WaitToken* out, int max);  // returns tokens written
void wait_end(const WaitToken* tokens, int n, uint32_t function, int64_t start, int64_t end);
void set_pending_label(PyObject* code, uint32_t label, uint32_t resource);
void clear_pending_label(PyObject* code);
void label_generator(PyObject* gen, PyObject* code, uint32_t label, uint32_t resource);
// Every collecting engine (capture/ switches them to another mechanism).
std::vector<Engine*> collecting_engines();

// Called in a catch block of a hook the interpreter calls (guarded, below):
// the collecting sessions stop recording with the reason. Never throws.
[[gnu::cold, gnu::noinline]] void hook_failed() noexcept;

// A thread that Python ends unwinds through every C++ frame on its stack:
// 3.11 to 3.13 end a daemon thread that wakes during interpreter exit with
// pthread_exit, a forced unwind (abi::__forced_unwind). A catch (...) that
// keeps it aborts the process ("FATAL: exception not rethrown"), and so does
// a noexcept frame. So every catch (...) in pyext lets it go on first,
//   } catch (abi::__forced_unwind&) { throw; } catch (...) { ... }
// (but hook_failed's own, which run no Python), and a hook's frames are
// not noexcept.

// Runs the engine's part of a hook. A C++ exception (std::bad_alloc under an
// address-space limit) must not go on through the interpreter's C frames,
// where it ended the process (std::terminate): it stops the sessions instead.
template <typename Fn>
inline void guarded(Fn&& body) {
  try {
    body();
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    hook_failed();
  }
}

int64_t now_ns();

}  // namespace mlprof
