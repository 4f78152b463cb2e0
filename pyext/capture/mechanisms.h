#pragma once
// What the capture files offer each other; capture.cpp decides which run.

#include <cstdint>
#include <string>
#include <string_view>

#include "capture.h"

namespace mlprof::capture {

// capture.cpp, 3.11+: the frame evaluation function is lost (another took
// the hook, or the C stack guard stepped aside); the sessions go on without it.
void eval_lost(std::string_view why);

namespace eval {  // eval_frame.cpp, 3.11+
// False when another frame evaluator holds the interpreter's hook (the
// caller then reports frames another way).
bool available();
// Installs or takes out the function after a change of mode.
void sync();
// The C stack guard stepped aside during the sessions running now (set
// until the last of them ends); `why` says where.
bool stepped_aside(std::string* why = nullptr);
// No native session collects any more: every window flag is void.
void all_sessions_ended();
// 3.12+: a PY_RETURN or PY_UNWIND of a plain frame. If it is this thread's
// closed ceiling (a frame at the ceiling whose calls run without the hook),
// puts the hook back in for its teardown and returns true.
#if PY_VERSION_HEX >= 0x030C0000
bool ceiling_returns(PyThreadState* ts);
#endif
int frame_depth();                           // 3.11: frames the hook ran on this thread
int entering_frame_depth(int levels_above);  // 3.11
}  // namespace eval

namespace monitoring {  // monitoring.cpp, 3.12+
// Looks up sys.monitoring's functions once (at import).
void prepare();
// Claims a tool id (4, 3 if taken, then the standard ones) and registers the
// callbacks, unless held already.
bool acquire(std::string* error);
// The last session ended: removes our local events and frees the id, unless
// kept between sessions (autoprofile) and not `force`d.
void release(bool force = false);
void keep_between_sessions(bool keep);
bool holding();  // a tool id is held now
// Every Python frame through sys.monitoring (unlimited depth, or no frame
// evaluation hook), with C calls if `c_calls`; off: generators and C-call
// codes only (their local events).
bool set_global(bool frames, bool c_calls, std::string* error);
bool global_frames();
// At session start: the generators and coroutines running on this thread
// (the one entering the session and those awaiting it) are watched.
void watch_running_generators();
// Closed ceilings: PY_RETURN local events on `code`, claiming a tool id if
// none is held (never failing a session for it). False where they cannot be
// had (no id free, or the code's returns were given up on: its frames also
// run below the ceiling, and each of their returns would be a callback).
bool watch_returns(PyCodeObject* code);
bool returns_watched(PyCodeObject* code);  // on already: no call, no claim
// Counts a call made by a frame of `code` at the ceiling, over all its frames
// in this claim of the tool id; at the `close_after`th, watch_returns(code).
bool ceiling_call(PyCodeObject* code, int close_after);
}  // namespace monitoring

namespace profile_func {  // profile_func.cpp, 3.9-3.11
// Installs the C profile function on this thread (chaining to one installed
// before it). all_events false: C calls only (3.11 with capture_c_calls).
void install_here(bool all_events);
void uninstall_here();
// 3.11: the profile function takes over every frame on this thread from the
// frame evaluation function, for `sessions` more sessions (each uninstalls
// it once), counting frame depth on from `depth` (the hook's current one).
void take_over(int sessions, int depth);
int frame_depth();  // 3.9/3.10: calls minus returns seen on this thread
}  // namespace profile_func

}  // namespace mlprof::capture
