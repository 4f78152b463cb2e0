// Which mechanisms a session uses on this interpreter (capture.h), and what
// happens when one cannot run.

#include <string>

#include "../engine.h"
#include "mechanisms.h"

namespace mlprof::capture {

uint64_t g_events = 0;

void thread_bound();  // thread_binder.cpp calls it in a newly bound thread

namespace {
int g_users = 0;  // native sessions installed
}  // namespace

uint64_t event_count() { return g_events; }

#if MLPROF_HAS_MONITORING
// ---------------------------------------------------------------- 3.12+ ---------
namespace {
int g_global_users = 0;   // sessions that want every frame from sys.monitoring
int g_c_users = 0;        // sessions that want C calls
bool g_fallback = false;  // the evaluation hook was lost: every frame from sys.monitoring

bool apply(std::string* error) {
  const bool frames = g_global_users > 0 || g_fallback;
  // C calls by local events on window frames' code; with every frame global,
  // globally. No tool id is needed until a session meets a generator or wants
  // C calls (monitoring.cpp claims one then).
  bool ok = true;
  if (frames || g_c_users > 0 || monitoring::holding()) {
    ok = monitoring::acquire(error) &&
         monitoring::set_global(frames, frames && g_c_users > 0, error);
  }
  eval::sync();  // the evaluation function is out while sys.monitoring reports every frame
  return ok;
}
}  // namespace

void init() { monitoring::prepare(); }

bool every_frame_reported() { return g_global_users > 0 || g_fallback; }

[[gnu::cold, gnu::noinline]] void eval_lost(const std::string& why) {
  if (g_fallback || g_users == 0) return;
  g_fallback = true;
  std::string error;
  if (!apply(&error)) {
    for (Engine* e : collecting_engines())
      e->fail("frames could not be reported: " + why + "; " + error);
    return;
  }
  for (Engine* e : collecting_engines())
    e->note(why + "; sys.monitoring reports every frame from then on");
}

const char* name() {
  return every_frame_reported() ? "sys.monitoring" : "eval_frame+sys.monitoring";
}

bool install(Engine* engine, std::string* error) {
  const EngineOptions& o = engine->options();
  const bool global = o.depth < 0 || !eval::available();
  g_global_users += global;
  g_c_users += o.capture_c_calls;
  if (!apply(error)) {
    g_global_users -= global;
    g_c_users -= o.capture_c_calls;
    return false;
  }
  engine->set_global_frames(global);
  ++g_users;
  monitoring::watch_running_generators();
  return true;
}

void uninstall(Engine* engine) {
  if (g_users == 0) return;
  const EngineOptions& o = engine->options();
  g_global_users -= engine->global_frames();
  g_c_users -= o.capture_c_calls;
  if (--g_users == 0) {
    g_global_users = g_c_users = 0;
    g_fallback = false;
    eval::all_sessions_ended();
  }
  std::string ignored;
  if (g_users > 0 || monitoring::holding()) apply(&ignored);
  if (g_users == 0) monitoring::release();
}

int frame_depth(PyThreadState* ts) { return ts->py_recursion_limit - ts->py_recursion_remaining; }

int entering_frame_depth(int levels_above) { return frame_depth() - levels_above; }

void thread_bound() { set_window(current_lanes_want_callees()); }

void keep_between_sessions(bool keep) { monitoring::keep_between_sessions(keep); }

#elif MLPROF_HAS_EVAL_HOOK
// ---------------------------------------------------------------- 3.11 ----------
namespace {
// Decided by the first of the sessions running together: the evaluation
// hook, or (unlimited depth, where every frame is reported anyway, or another
// frame evaluator holding the hook) the profile function for every event.
bool g_profile_mode = false;
}  // namespace

void init() {}

bool every_frame_reported() { return g_profile_mode; }

[[gnu::cold, gnu::noinline]] void eval_lost(const std::string& why) {
  if (g_users == 0 || g_profile_mode) return;
  // The profile function takes over on this thread (3.12+ has sys.monitoring
  // for all threads). Sessions with lanes on other threads, whose frames
  // from here on would go unseen there, stop recording rather than give a
  // partial tree.
  std::vector<Engine*> here;
  int installs = 0;
  for (Engine* e : collecting_engines()) {
    if (e->records_only_here()) {
      here.push_back(e);
      installs += !e->options().capture_c_calls;  // those installed it already
    } else {
      e->fail(why);
    }
  }
  if (here.empty()) return;
  for (Engine* e : here) e->note(why + "; the profile function reports every frame from then on");
  g_profile_mode = true;
  profile_func::take_over(installs, eval::frame_depth());
}

const char* name() { return g_profile_mode ? "setprofile" : "eval_frame"; }

bool install(Engine* engine, std::string* /*error*/) {
  const EngineOptions& o = engine->options();
  // Unlimited depth uses the hook too (about half the instructions of the
  // profile function a call: bench/RESULTS.md), with the profile function
  // taking over if the C stack guard steps aside. Not with all_threads (a
  // deep worker could not be taken over from its own thread), nor in a
  // session entered by a coroutine or generator (the tasks it starts run
  // from the event loop, above it, where no window is open).
  if (g_users == 0) {
    g_profile_mode =
        (o.depth < 0 && (o.all_threads || engine->entering_generator_)) || !eval::available();
  }
  if (g_profile_mode) {
    profile_func::install_here(true);
  } else if (o.capture_c_calls) {
    profile_func::install_here(false);
  }
  ++g_users;
  return true;
}

void uninstall(Engine* engine) {
  if (g_users == 0) return;
  if (g_profile_mode || engine->options().capture_c_calls) profile_func::uninstall_here();
  if (--g_users == 0) {
    g_profile_mode = false;
    eval::all_sessions_ended();
  }
}

int frame_depth(PyThreadState*) {
  return g_profile_mode ? profile_func::frame_depth() : eval::frame_depth();
}

int entering_frame_depth(int levels_above) {
  return g_profile_mode ? profile_func::frame_depth() - levels_above
                        : eval::entering_frame_depth(levels_above);
}

void thread_bound() {
  if (g_profile_mode) {
    profile_func::install_here(true);
  } else {
    if (current_lanes_want_c_calls()) profile_func::install_here(false);
    set_window(current_lanes_want_callees());
  }
}

int tool_id() { return -1; }
void watch_generator_code(PyCodeObject*) {}
void watch_c_calls(PyCodeObject*) {}
void watch_calls(PyCodeObject*) {}
void keep_between_sessions(bool) {}

#else
// ---------------------------------------------------------------- 3.9, 3.10 -----

State state() { return State{}; }

void init() {}
const char* name() { return "setprofile"; }
bool every_frame_reported() { return true; }

bool install(Engine* /*engine*/, std::string* /*error*/) {
  profile_func::install_here(true);
  ++g_users;
  return true;
}

void uninstall(Engine* /*engine*/) {
  if (g_users == 0) return;
  profile_func::uninstall_here();
  --g_users;
}

int frame_depth(PyThreadState*) { return profile_func::frame_depth(); }
int entering_frame_depth(int levels_above) { return frame_depth() - levels_above; }
void thread_bound() { profile_func::install_here(true); }
void set_window(bool) {}
int tool_id() { return -1; }
void watch_generator_code(PyCodeObject*) {}
void watch_c_calls(PyCodeObject*) {}
void watch_calls(PyCodeObject*) {}
void keep_between_sessions(bool) {}

#endif

}  // namespace mlprof::capture
