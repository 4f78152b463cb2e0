#pragma once
// The native capture engine: one Engine per ProfileSession, one CaptureLane
// per (thread, execution context) that the session sees. The hooks
// (hooks.cpp: sys.monitoring on 3.12+, PyEval_SetProfile below) translate
// interpreter events into the on_* calls at the bottom of this file; the
// semantics are docs/capture.md.
//
// Everything here runs with the GIL held; the GIL is what makes the shared
// maps safe without locks.

#include "compat.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/event.h"
#include "core/functions.h"
#include "core/tree.h"
#include "clock.h"

namespace mlprof {

class Engine;

// Entries of a lane's stack of recorded open spans.
enum class EntryKind : uint8_t { kFrame, kBlock, kCCall };

struct StackEntry {
  uint32_t call_index;  // index of the kCall event in the lane
  int32_t depth;        // depth counter value of this entry
  EntryKind kind;
  uintptr_t key;  // frame: generator identity (0: plain frame); C call: the callable
  const void* code;  // frame: its code object (identity only)
  bool children_dropped = false;  // a call under it was dropped (buffer full)
};

struct CaptureLane {
  Engine* engine = nullptr;
  uint32_t index = 0;   // position in the engine's lanes
  uint64_t thread_id = 0;
  PyObject* context = nullptr;  // strong reference while collecting (see new_lane)
  int ceiling = 0;      // levels this lane may record: engine ceiling minus base depth
  int io_ceiling = -1;  // deepest level whose I/O is summarized (same base); -1: none
  int depth = -1;       // depth of the innermost open level; -1: the entering frame
  bool truncated = false;
  uint64_t skipped = 0;  // frame events below the ceiling
  size_t soft_cap = 0, hard_cap = 0;
  std::vector<StackEntry> rec;       // recorded open entries, innermost last
  PyObject* pending_code = nullptr;  // profile_span: label the next start of this code
  uint32_t pending_label = 0;
  uint32_t chain_top = UINT32_MAX;   // innermost span of the last suspended chain
  int32_t chain_top_depth = 0;
  bool last_was_suspend = false;
  Lane out;  // events and metadata handed to the core
};

// A segment of a lane's stack detached by a yield/await.
struct Suspended {
  uint32_t lane;
  int32_t frame_depth;  // depth of the suspended frame when it yielded
  std::vector<StackEntry> entries;
};

struct EngineOptions {
  int depth = 2;                  // -1: unlimited
  size_t max_events = 1000000;    // per lane
  bool all_threads = false;
  bool capture_c_calls = false;
  bool capture_io = false;        // summarize arguments and return values
  int io_depth = -1;              // deepest level with I/O; -1: the ceiling
  // Code objects transparent for this session only (autoprofile: the user's
  // PythonModel.predict, whose calls are the root's children). Strong refs
  // held by the Engine; a handful at most, so a linear scan.
  std::vector<PyObject*> transparent_codes;
};

class Engine {
 public:
  enum class State { kIdle, kCollecting, kFinalized };

  explicit Engine(EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Sets session_var to `session` in the current context and installs the
  // hook. Raises (C++ exception) if the engine was already used.
  void start(PyObject* session);
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

  // The built profile (built on first call, after stop()).
  std::shared_ptr<Profile> profile();
  // Failures recorded during capture, logged once per kind when the session ends.
  const std::vector<std::string>& failures() const { return failures_; }
  int64_t start_ns() const { return start_ns_; }
  int64_t end_ns() const { return end_ns_; }
  const std::vector<std::unique_ptr<CaptureLane>>& lanes() const { return lanes_; }
  const char* hook_name() const;

  // --- used by the hooks -------------------------------------------------
  CaptureLane* lane_for(uint64_t thread_key, PyObject* context);  // thread_key: see thread_key()
  void fail(const std::string& why);  // disables capture, remembers why
  std::unordered_map<uintptr_t, Suspended> suspended_;
  struct GenLabel {
    uint32_t label;
    PyObject* code;
  };
  std::unordered_map<uintptr_t, GenLabel> gen_labels_;  // generator object -> label
  // Generators and coroutines running on the starting thread when the session
  // started (the coroutine that entered it, and those awaiting it), when the
  // hook cannot see them suspend or finish (hooks::sees_running_frames). Each
  // is caught up with at the origin lane's first event after it did, or at
  // its own first resume. gen: a strong reference until stop().
  struct Unseen {
    PyObject* gen;
    PyCodeObject* code;  // the generator keeps it alive
  };
  std::vector<Unseen> unseen_suspends_;

 private:
  CaptureLane* new_lane(uint64_t thread_key, PyObject* context);
  void note_running_generators();

  EngineOptions opts_;
  State state_ = State::kIdle;
  uint64_t serial_;
  PyObject* session_ = nullptr;  // borrowed while collecting (session_var holds it)
  PyObject* token_ = nullptr;
  Engine* parent_ = nullptr;
  PyObject* parent_session_ = nullptr;  // strong ref: keeps parent_ alive
  uint64_t start_thread_ = 0;  // thread key of the starting thread
  int64_t start_ns_ = 0, end_ns_ = 0;
  int64_t start_unix_ns_ = 0;  // CLOCK_REALTIME at start: when, for pprof and the report
  clock::Anchor start_anchor_, end_anchor_;
  std::vector<std::unique_ptr<CaptureLane>> lanes_;
  std::unordered_map<uint64_t, std::unordered_map<PyObject*, CaptureLane*>> lane_index_;
  std::vector<std::string> failures_;
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
// Registers a code object as transparent (docs/capture.md).
void add_transparent(PyObject* code);
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
Engine* newest_all_threads_engine();
bool any_engine_wants_c_calls();

// --- events from the hooks (GIL held, never raise) -----------------------------
// 3.12/3.13's frame evaluation hook reports a frame before the interpreter
// makes it current, so PyEval_GetFrame() is still the caller's: the hook
// describes the frame here for the duration of its on_* call (null otherwise).
struct HookFrame {
  uintptr_t generator;     // the generator/coroutine that owns it, 0 for a plain frame
  PyObject* globals;       // borrowed
  PyObject* const* locals;  // its fast locals, parameters first
};
void set_hook_frame(const HookFrame* frame);
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
// A frame's return seen before its value is known (the hook, when a
// finalizer runs in the frame's teardown): its spans end now, and `pending`
// names those that want the value, which on_left_frame_value then summarizes.
void on_frame_left(PyCodeObject* code, bool exception, IOTargets* pending);
void on_left_frame_value(PyObject* retval, const IOTargets& pending);
void on_start(PyCodeObject* code, PyFrameObject* frame);   // frame may be null (3.12+)
// A resume (3.12+: PY_RESUME/PY_THROW; below: a call event of generator code).
// If no suspended span matches, it is a start, flagged continued if `continued`.
void on_resume(PyCodeObject* code, PyFrameObject* frame, bool continued);
// retval: the return value (borrowed; null on an exception or when unknown).
void on_return(PyCodeObject* code, PyFrameObject* frame, bool exception, PyObject* retval);
void on_yield(PyCodeObject* code, PyFrameObject* frame);
void on_c_call(PyObject* callable, PyCodeObject* caller);  // caller: skip our own frames
void on_c_return(PyObject* callable, bool exception);
// A Python frame of `code` is about to start on this thread (3.11's frame
// evaluation hook asks, to run such frames untraced): true when every
// session current here would skip it, being below each lane's ceiling; it is
// then counted in their events_skipped as lane_start would. False for
// generator and coroutine code (a resume may reopen a recorded span) and when
// no session is current here.
bool skip_below_ceiling(PyCodeObject* code);

// profile_block / profile_span support.
struct BlockToken {
  uint64_t serial;
  uint32_t lane;
  uint32_t call_index;
  bool want_io;  // within the lane's I/O depth (capture_io)
};
int block_enter(uint32_t function, BlockToken* out, int max);  // returns tokens written
void block_exit(const BlockToken* tokens, int n, bool exception);
// profile_span around a callable without a Python frame: the I/O of its
// block, from the call's own arguments ("args[0]", ..., keyword names) and result.
void block_arguments_io(const BlockToken* tokens, int n, PyObject* const* args, size_t nargs,
                        PyObject* kwnames);
void block_return_io(const BlockToken* tokens, int n, PyObject* retval);
void set_pending_label(PyObject* code, uint32_t label);
void clear_pending_label(PyObject* code);
void label_generator(PyObject* gen, PyObject* code, uint32_t label);

// Hook installation (hooks.cpp).
namespace hooks {
bool install(Engine* engine, std::string* error);  // first native session in the process/thread
void uninstall(Engine* engine);
bool install_thread_binder(std::string* error);  // all_threads: threading.setprofile
void uninstall_thread_binder();
const char* name();
int tool_id();  // the sys.monitoring tool id held, -1 if none
// False when Python frames are reported by a frame evaluation hook (3.12,
// 3.13): a frame already running when it was installed is never seen to
// suspend or return. sys.monitoring and setprofile see those too.
bool sees_running_frames();
// A generator or coroutine object's state where the hook needs it (3.12/3.13):
// < 0 suspended, 0 running (or unknown), > 0 finished.
int generator_state(PyObject* gen);
// Whether this thread's hook wraps the current run of `gen` (it will see it
// suspend or finish); true where the hook sees running frames anyway.
bool wraps_generator_run(PyObject* gen);
uint64_t event_count();  // interpreter events delivered to the hook so far
}  // namespace hooks

int64_t now_ns();

}  // namespace mlprof
