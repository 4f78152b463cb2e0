// Which mechanisms a session uses on this interpreter (capture.h), and what
// happens when one cannot run.

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>

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

// Which mechanism a site's sessions use (docs/capture.md, "Sites"). A
// session entered alone at a ceiling of 1 or more, without C calls, is
// measured: hook events (capture::event_count) per event it recorded. A
// window costs about 650 instructions a hook event, a global event about
// 420 (3.12, callgrind: bench_instructions.py's calls and tabular predicts
// at depths 1 to 3), so a site whose global session sent fewer than
// kGlobalRatio times the hook events per recorded event of its windows
// session costs less with global events. The first measured session of a
// site runs in windows; the next, global (the probe); from then on the
// cheaper one, each session updating its mechanism's figure. The figure of
// the mechanism not in use ages (a site's predicts may change shape: a
// deep predict's global figure kept a shallow one in windows for good), so
// after kFirstReprobe sessions the other runs once again, and the interval
// doubles each time that confirms the choice (up to kMaxReprobe).
namespace {
constexpr double kGlobalRatio = 1.4;
constexpr uint64_t kMinRecorded = 1000;  // fewer: either costs little, nothing is learnt
constexpr size_t kMaxSites = 1024;       // more: new sites run in windows
constexpr uint32_t kFirstReprobe = 8;
constexpr uint32_t kMaxReprobe = 1024;
struct SiteCosts {
  double windows = 0;        // hook events per recorded event, last windows session (0: none)
  double global = 0;         // the same, last global session
  uint32_t since_probe = 0;  // measured sessions since the other last ran
  uint32_t probe_every = kFirstReprobe;  // sessions between runs of the other
  bool prefers_global() const { return global < kGlobalRatio * windows; }
  bool use_global() const {
    if (windows == 0) return false;  // the first: windows
    if (global == 0) return true;    // the probe
    return since_probe >= probe_every ? !prefers_global() : prefers_global();
  }
  void update(bool global_session, double per) {
    const bool both = windows > 0 && global > 0;
    const bool was = prefers_global();
    const bool other = both && global_session != was;  // the aged figure, measured again
    (global_session ? global : windows) = per;
    if (!other) {
      ++since_probe;
      return;
    }
    since_probe = 0;
    probe_every = prefers_global() == was ? std::min(probe_every * 2, kMaxReprobe) : kFirstReprobe;
  }
};
std::map<std::pair<uint64_t, int>, SiteCosts> g_sites;  // (site, depth)
Engine* g_measured = nullptr;                           // the session being measured, if any
uint64_t g_measured_from = 0;                           // event_count() at its install

bool measurable(const Engine* engine) {
  const EngineOptions& o = engine->options();
  return engine->site() != 0 && o.depth >= 1 && !o.capture_c_calls && eval::available() &&
         g_users == 0;
}

void learn(Engine* engine) {
  const uint64_t recorded = engine->events_held();
  if (recorded < kMinRecorded) return;
  const auto key = std::make_pair(engine->site(), engine->options().depth);
  auto it = g_sites.find(key);
  if (it == g_sites.end()) {
    if (g_sites.size() >= kMaxSites) return;
    it = g_sites.emplace(key, SiteCosts{}).first;
  }
  const double per = double(g_events - g_measured_from) / double(recorded);
  it->second.update(engine->global_frames(), per);
}
}  // namespace

void init() { monitoring::prepare(); }

bool every_frame_reported() { return g_global_users > 0 || g_fallback; }

[[gnu::cold, gnu::noinline]] void eval_lost_now(const std::string& why) {
  if (g_fallback || g_users == 0) return;
  g_fallback = true;
  g_measured = nullptr;  // its windows are gone
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
  bool global = o.depth < 0 || !eval::available();
  Engine* measured = nullptr;
  if (measurable(engine)) {
    const auto it = g_sites.find({engine->site(), o.depth});
    global = it != g_sites.end() && it->second.use_global();
    measured = engine;
  }
  g_global_users += global;
  g_c_users += o.capture_c_calls;
  bool ok = apply(error);
  if (!ok && global && measured) {  // no tool id for global events: windows need none yet
    --g_global_users;
    global = false;
    error->clear();
    ok = apply(error);
  }
  if (!ok) {
    g_global_users -= global;
    g_c_users -= o.capture_c_calls;
    return false;
  }
  engine->set_global_frames(global);
  g_measured = measured;  // another session starting ends the measurement of the one running
  g_measured_from = g_events;
  ++g_users;
  monitoring::watch_running_generators();
  return true;
}

void uninstall(Engine* engine) {
  if (g_users == 0) return;
  const EngineOptions& o = engine->options();
  if (engine == g_measured) {
    learn(engine);
    g_measured = nullptr;
  }
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

[[gnu::cold, gnu::noinline]] void eval_lost_now(const std::string& why) {
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

#if MLPROF_HAS_MONITORING || MLPROF_HAS_EVAL_HOOK
// Guarded: the frame evaluation function's paths that reach it are not.
void eval_lost(std::string_view why) {
  guarded([&] { eval_lost_now(std::string(why)); });
}
#endif

}  // namespace mlprof::capture
