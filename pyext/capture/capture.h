#pragma once
// The capture mechanisms as the engine sees them. What runs on which
// interpreter (capture/README.md has the why):
//   3.9, 3.10  profile_func.cpp  PyEval_SetProfile: every Python and C event
//   3.11       eval_frame.cpp    a PEP 523 function reports the frames within
//                                the ceiling, generators included
//              profile_func.cpp  C calls only, when capture_c_calls asks
//   3.12+      eval_frame.cpp    a PEP 523 function reports the plain frames
//                                within the ceiling
//              monitoring.cpp    sys.monitoring: generator and coroutine
//                                frames (local events on their code), C calls,
//                                and every frame at unlimited depth
// The PEP 523 function is installed only while some thread runs a frame whose
// callees are within its ceiling (a "window"): below every ceiling the
// interpreter runs as if no profiler were there.

#include <cstdint>
#include <string>

#include "../compat.h"

namespace mlprof {
class Engine;
}

namespace mlprof::capture {

// At import: what the mechanisms look up once per process (3.12+:
// sys.monitoring's functions), so that no session pays for it.
void init();
// A native session starts / ends. False (with `error`) if capture cannot run.
bool install(Engine* engine, std::string* error);
void uninstall(Engine* engine);
// all_threads: binds threads started by `threading` while a session collects.
bool install_thread_binder(std::string* error);
void uninstall_thread_binder();

// What reports Python frames now ("eval_frame", "sys.monitoring", "setprofile"):
// a static string, which an Engine keeps.
const char* name();
int tool_id();           // the sys.monitoring tool id held, -1 if none
uint64_t event_count();  // interpreter events that reached a mechanism so far
// The depth of this thread's innermost Python frame as this interpreter's
// mechanism counts frames (3.12+: the interpreter's own count; 3.11: the
// frames the evaluation hook ran; 3.9/3.10: the profile function's calls).
// Only differences between two values matter. `ts`: this thread's state.
int frame_depth(PyThreadState* ts);
inline int frame_depth() { return frame_depth(compat::tstate()); }
// The frame depth of the frame that entered a session: `levels_above` frames
// below the current one (the profiler's own activate/__enter__).
int entering_frame_depth(int levels_above);

// True while a mechanism reports every frame (sys.monitoring's global events,
// or 3.11's profile function): windows do not matter then.
bool every_frame_reported();

// The engine, after each event of this thread: whether its current lanes want
// their callees reported (the frame evaluation hook is installed while any
// thread does).
void set_window(bool open);

// Keeps what capture claimed (3.12+: the sys.monitoring tool id and the local
// events on watched code) between sessions, or lets it go when none runs.
void keep_between_sessions(bool keep);

// 3.12+: the code of a generator or coroutine reached within a ceiling, whose
// frames sys.monitoring reports from now on (local events, kept across
// sessions); and the code of a frame whose C calls a session records.
void watch_generator_code(PyCodeObject* code);
void watch_c_calls(PyCodeObject* code);
// 3.13: the code of a frame whose callees are within the ceiling gets CALL
// events, which keep its call sites unspecialized: 3.13's
// CALL_ALLOC_AND_ENTER_INIT runs a Python class's __init__ without the frame
// evaluation function (3.12 has no such call, 3.14 checks for the function).
void watch_calls(PyCodeObject* code);
#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
constexpr bool kUnspecializeCalls = true;
#else
constexpr bool kUnspecializeCalls = false;
#endif

// For tests and diagnostics: whether the frame evaluation function is
// installed now, the threads whose windows keep it, and whether sys.monitoring
// reports every frame now.
struct State {
  bool eval_installed;
  int window_threads;
  bool global_frames;
  bool stepped_aside;
};
State state();

// Internal: the mechanisms' shared counter.
extern uint64_t g_events;

}  // namespace mlprof::capture
