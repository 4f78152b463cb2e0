// The Engine's lifecycle and the profile it builds: start (set the session
// variable, announce the session, install the capture mechanism, open the
// origin lane), pause and resume, stop, and profile(), which copies the
// functions a session uses into its own table, takes the profiler's own
// stretches out of each thread's timeline and hands the lanes to the core's
// tree builder. Also the module's set-up and the lists of collecting engines.
#include "engine_internal.h"

#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>

#include "capture/frame_access.h"
#include "on_cpu.h"
#include "overhead_cut.h"
#include "trace_context.h"
#include "views/group.h"

namespace mlprof {

int64_t now_ns() { return clock::monotonic_ns(); }

void init_engine_module(PyObject* module) {
  if (!g_session_var) g_session_var = PyContextVar_New("mlflow_profiler.session", nullptr);
  if (!g_lane_var) g_lane_var = PyContextVar_New("mlflow_profiler.lane", nullptr);
  if (g_extra_index < 0) g_extra_index = compat::request_code_extra_index();
  clock::init();
  on_cpu::init();
  Py_INCREF(g_session_var);
  PyModule_AddObject(module, "session_var", g_session_var);
}

namespace {
// The registries of collecting engines keep the node a session's end takes
// out, for the next session's start: one allocation and one free less
// each, per session (3.12, callgrind: about 300 of an empty session's
// 13,800 instructions).
template <class Map>
struct Registry {
  Map& map;
  typename Map::node_type spare;
  void put(const typename Map::key_type& key, Engine* engine) {
    if (spare.empty()) {
      map[key] = engine;
      return;
    }
    spare.key() = key;
    spare.mapped() = engine;
    auto r = map.insert(std::move(spare));
    if (!r.inserted) {
      r.position->second = engine;
      spare = std::move(r.node);
    }
  }
  void take(const typename Map::key_type& key) {
    auto node = map.extract(key);
    if (spare.empty()) spare = std::move(node);
  }
};
Registry<decltype(g_by_session)> g_sessions{g_by_session, {}};
Registry<decltype(g_by_serial)> g_serials{g_by_serial, {}};
}  // namespace

Engine* engine_for_session(PyObject* session) {
  auto it = g_by_session.find(session);
  return it == g_by_session.end() ? nullptr : it->second;
}

[[gnu::cold, gnu::noinline]] std::vector<Engine*> collecting_engines() {
  std::vector<Engine*> out;
  out.reserve(g_by_serial.size());
  for (auto& [serial, e] : g_by_serial) out.push_back(e);
  return out;
}

Engine* newest_all_threads_engine() {
  Engine* best = nullptr;
  for (auto& [serial, e] : g_by_serial) {
    if (e->options().all_threads && (!best || serial > best->serial())) best = e;
  }
  return best;
}

bool any_engine_wants_c_calls() {
  for (auto& [serial, e] : g_by_serial) {
    if (e->options().capture_c_calls) return true;
  }
  return false;
}

// --- Engine --------------------------------------------------------------------

void EngineOptions::hold_codes(int delta) const {
  auto hold = [delta](PyObject* code) {
    if (delta > 0)
      Py_INCREF(code);
    else
      Py_DECREF(code);
  };
  for (PyObject* code : transparent_codes) hold(code);
  for (PyObject* code : fold_parents) hold(code);
  for (const auto& fold : fold_codes) hold(fold.first);
}

Engine::Engine(EngineOptions opts) : opts_(std::move(opts)), serial_(g_next_serial++) {
  opts_.hold_codes(+1);
}

Engine::~Engine() {
  if (state_ == State::kCollecting) stop();
  begin_flags(opts_, serial_);  // forgets an autoprofile mark of a session never started
  Py_XDECREF(parent_session_);
  Py_XDECREF(token_);
  opts_.hold_codes(-1);
}

const char* Engine::hook_name() const {
  return state_ == State::kIdle || !mechanism_ ? capture::name() : mechanism_;
}

bool Engine::records_only_here() const {
  const uint64_t here = thread_key();
  if (start_thread_ != here || !resumed_in_.empty()) return false;
  for (const auto& L : lanes_) {
    if (L->thread_key != here) return false;
  }
  return true;
}

[[gnu::cold, gnu::noinline]] void Engine::note(const std::string& what) {
  for (const auto& n : notes_) {
    if (n == what) return;
  }
  notes_.push_back(what);
}

[[gnu::cold, gnu::noinline]] void Engine::fail(const std::string& why) {
  for (auto& lane : lanes_) {  // first: noting why may run out of memory
    lane->truncated = true;
    lane->quick = false;  // the full paths, which see `truncated`
  }
  for (const auto& f : failures_) {
    if (f == why) return;
  }
  failures_.push_back(why);
}

void hook_failed() noexcept {
  const char* why = "the profiling hook failed: recording stopped";
  try {
    throw;  // the exception being handled: which one
  } catch (const std::bad_alloc&) {
    why = "out of memory in the profiling hook: recording stopped";
  } catch (...) {
  }
  for (auto& [serial, e] : g_by_serial) {
    try {
      e->fail(why);
    } catch (...) {  // its lanes stopped all the same; the reason could not be kept
    }
  }
}

void Engine::start(PyObject* session, int levels_above) {
  if (state_ != State::kIdle) {
    throw std::runtime_error(
        "this ProfileSession has already run; a session records once. Create a new one "
        "with profiling()");
  }
  PyObject* current = nullptr;
  if (PyContextVar_Get(g_session_var, nullptr, &current) < 0)
    throw std::runtime_error("session_var");
  if (current) {
    parent_ = engine_for_session(current);
    if (parent_)
      parent_session_ = current;  // keep the reference
    else
      Py_DECREF(current);
  }
  token_ = PyContextVar_Set(g_session_var, session);
  if (!token_) throw std::runtime_error("could not set the session context variable");
  session_ = session;
  start_anchor_ = clock::anchor();
  start_ns_ = start_anchor_.ns;
  start_unix_ns_ = clock::realtime_ns();
  start_thread_ = thread_key();
  std::string error;
  constexpr uint8_t kAlloc = 1u << static_cast<int>(ValueKind::kAllocBytes);
  if (opts_.values & kAlloc) {
    counting_alloc_ = alloc_count::start(&error);
    if (!counting_alloc_) {
      opts_.values &= static_cast<uint8_t>(~kAlloc);
      note(error);
      static bool warned = false;  // once per process
      if (!warned && PyErr_WarnEx(PyExc_RuntimeWarning, error.c_str(), 1) < 0) PyErr_Clear();
      warned = true;
      error.clear();
    }
  }
  // Before the session is announced: the agent's session record carries it.
  if (opts_.trace_id.empty()) {
    trace_context::read(&opts_.trace_id, &opts_.span_id, &error);
    if (!error.empty()) {
      note(error);
      error.clear();
    }
  }
  // Before capture starts: threading.setprofile is Python code we must not record.
  bool binder_ok = !opts_.all_threads || capture::install_thread_binder(&error);
  PyThreadState* ts = compat::tstate();
  // A tracer sees the session before its origin lane (the contract's order).
  usdt_flags_ = begin_flags(opts_, serial_);
  // Before session_begin: the checkpoint thread this may start is then no
  // thread the session started (the agent follows those).
  if (probes::spans_traced()) {
    usdt_counted_ = true;
    usdt_next_checkpoint_ = start_ns_ + MLPROF_CHECKPOINT_AFTER_NS;
    probes::checkpoints_session_started(start_ns_);
  }
  probes::session_begin(serial_, opts_.depth, usdt_flags_);
  g_sessions.put(session, this);
  g_serials.put(serial_, this);
  ++g_native_collecting;
  ++g_generation;
  state_ = State::kCollecting;
  note_entering_frame(levels_above);  // before install: 3.11 picks its mechanism by it
  const bool installed = binder_ok && capture::install(this, &error);
  mechanism_ = capture::name();
  // The origin lane: the frame that entered the session is its depth -1.
  CaptureLane* origin = new_lane(start_thread_, ts->context);
  origin->base_pydepth = capture::entering_frame_depth(levels_above);
  origin->base_known = true;
  note_running_frames(levels_above);
  if (!installed) {
    fail("could not install the profiling hook: " + error);
    return;
  }
#if MLPROF_HAS_EVAL_HOOK
  capture::set_window(current_lanes_want_callees());
#endif
}

#if MLPROF_HAS_EVAL_HOOK
namespace {
// The frame that entered the session (no frame object made).
struct _PyInterpreterFrame* entering_frame(int levels_above) {
  auto python = [](struct _PyInterpreterFrame* f) {  // past the shims of C-to-Python calls
    while (f && !mlprof_frame_is_python(f)) f = mlprof_frame_previous(f);
    return f;
  };
  struct _PyInterpreterFrame* f = python(mlprof_current_frame(compat::tstate()));
  for (int i = 0; i < levels_above && f; ++i) f = python(mlprof_frame_previous(f));
  return f;
}
}  // namespace
#endif

void Engine::note_entering_frame(int levels_above) {
  // When it is a coroutine's or a generator's (`async with profiling()`),
  // its resumes move the origin lane.
#if MLPROF_HAS_EVAL_HOOK
  struct _PyInterpreterFrame* f = entering_frame(levels_above);
  if (f && mlprof_frame_code(f)) {
    if (site_ == 0) site_ = reinterpret_cast<uintptr_t>(mlprof_frame_code(f));
    entering_generator_ = reinterpret_cast<uintptr_t>(mlprof_frame_generator(f));
    entered_by_coroutine_ = mlprof_frame_code(f)->co_flags &
                            (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE);
  }
#else
  PyFrameObject* f = PyEval_GetFrame();  // borrowed; 3.9/3.10 frames always have one
  for (int i = 0; i < levels_above && f; ++i) f = f->f_back;
  if (f && compat::is_generator_code(compat::frame_code(f)))
    entering_generator_ = compat::frame_generator(f);
  origin_awaits_ = f && (compat::frame_code(f)->co_flags &
                         (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE));
#endif
#if MLPROF_HAS_EVAL_HOOK
  origin_awaits_ = entered_by_coroutine_;
#endif
}

uint64_t Engine::events_held() const {
  uint64_t n = 0;
  for (const auto& lane : lanes_) n += lane->out.events.size();
  return n;
}

void Engine::note_running_frames(int levels_above) {
#if MLPROF_HAS_EVAL_HOOK
  // The entering frame's C calls are roots (lane_start watches those of the
  // frames it records).
  struct _PyInterpreterFrame* f = entering_frame(levels_above);
  if (f && opts_.capture_c_calls) capture::watch_c_calls(mlprof_frame_code(f));
#else
  (void)levels_above;
#endif
}

bool Engine::pause() {
  if (state_ != State::kCollecting || !token_) return false;
  if (PyContextVar_Reset(g_session_var, token_) < 0) {
    PyErr_Clear();
    return false;
  }
  Py_CLEAR(token_);
  ++g_generation;  // setting a context variable does not bump ts->context_ver
#if MLPROF_HAS_EVAL_HOOK
  capture::set_window(current_lanes_want_callees());
#endif
  return true;
}

bool Engine::resume() {
  if (state_ != State::kCollecting || token_) return false;
  token_ = PyContextVar_Set(g_session_var, session_);
  if (!token_) {
    PyErr_Clear();
    return false;
  }
  uint64_t key = thread_key();
  if (!entered_in(key)) resumed_in_.push_back(key);
  ++g_generation;
#if MLPROF_HAS_EVAL_HOOK
  capture::set_window(current_lanes_want_callees());
#endif
  return true;
}

void Engine::stop() {
  if (state_ != State::kCollecting) return;
  end_anchor_ = clock::anchor();
  end_ns_ = end_anchor_.ns;
  state_ = State::kFinalized;
  g_sessions.take(session_);
  g_serials.take(serial_);
  --g_native_collecting;
  ++g_generation;
  capture::uninstall(this);
  if (opts_.all_threads) capture::uninstall_thread_binder();
  if (counting_alloc_) alloc_count::stop();
  counting_alloc_ = false;
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  if (PyErr_Occurred()) PyErr_Fetch(&type, &value, &tb);  // an exception may be propagating
  if (token_ && PyContextVar_Reset(g_session_var, token_) < 0) {
    PyErr_Clear();
    // Left in another context (manual __exit__ elsewhere): the variable there
    // still names this session, which now records nothing.
    fail("the session was ended in a different context than it was entered in");
  }
  for (auto& o : thread_origins_) Py_DECREF(o.thread);  // started, never bound
  thread_origins_.clear();
  if (type || value || tb) PyErr_Restore(type, value, tb);
  Py_CLEAR(token_);
  ++g_generation;  // the variable changed: lanes cached for this context are stale
#if MLPROF_HAS_EVAL_HOOK
  if (g_native_collecting > 0) capture::set_window(current_lanes_want_callees());
#endif
  for (auto& lane : lanes_) {
    unmark_context(*lane);
    Py_CLEAR(lane->context);
  }
  for (auto& lane : lanes_) {
    for (const Suspended& s : lane->suspended) count_suspended(*lane, -int(s.keeps_hook));
    lane->suspended.clear();
  }
  gen_labels_.clear();
  session_ = nullptr;
  // A v2 tracer gets the whole session here, in one probe hit (before
  // session_end, which ends the session for a v1 tracer).
  if (probes::spans_traced()) {
    probes::fire_session_spans(*this, registry(), clock::mapping(start_anchor_, end_anchor_),
                               usdt_flags_, true);
  }
  if (usdt_counted_) probes::checkpoints_session_stopped();
  usdt_counted_ = false;
  if (MLPROF_USDT_ENABLED(session_end)) {
    uint64_t dropped = 0;
    for (auto& lane : lanes_) dropped += lane->out.dropped;
    probes::fire_session_end(serial_, dropped);
  }
}

void Engine::usdt_checkpoint(int64_t now_ns) {
  if (state_ != State::kCollecting || now_ns < usdt_next_checkpoint_) return;
  // Each checkpoint sends the whole session so far: at intervals as long as
  // its age, what is sent in all stays under twice its last body.
  usdt_next_checkpoint_ =
      now_ns + std::max<int64_t>(MLPROF_CHECKPOINT_AFTER_NS, now_ns - start_ns_);
  probes::fire_session_spans(*this, registry(), clock::mapping(start_anchor_, clock::anchor()),
                             usdt_flags_, false);
}

std::shared_ptr<Profile> Engine::profile() {
  if (profile_) return profile_;
  profile_ = std::make_shared<Profile>();
  Profile& p = *profile_;
  p.captured_depth = opts_.depth;
  p.start_ns = start_ns_;
  p.end_ns = end_ns_;
  clock::Mapping clk = clock::mapping(start_anchor_, end_anchor_);
  p.meta["clock_source"] = clock::g_use_tsc ? "tsc" : "clock_gettime";
  p.meta["clock_error_ns"] = std::to_string(clk.error_ns);
  p.meta["engine"] = mechanism_ ? mechanism_ : capture::name();
  p.meta["python"] = Py_GetVersion();
  p.meta["python"] = p.meta["python"].substr(0, p.meta["python"].find(' '));
  p.meta["pid"] = std::to_string(getpid());
  if (loop_watched_)
    p.meta["loop_waits"] = "selector";
  else if (origin_awaits_)
    p.meta["loop_waits"] = "awaits";
  p.meta["start_unix_ns"] = std::to_string(start_unix_ns_);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  p.meta["host"] = host;
  // Copy the functions and labels this session uses into its own table.
  const FunctionTable& g = registry();
  std::unordered_map<uint32_t, uint32_t> fmap, smap;
  auto local_fn = [&](uint32_t id) {
    auto it = fmap.find(id);
    if (it != fmap.end()) return it->second;
    const FunctionInfo& f = g.get(id);
    uint32_t nid = p.functions.add(g.strings().get(f.name), g.strings().get(f.module),
                                   g.strings().get(f.file), f.line, f.kind, f.user_code);
    fmap[id] = nid;
    return nid;
  };
  auto local_str = [&](uint32_t id) {
    auto it = smap.find(id);
    if (it != smap.end()) return it->second;
    uint32_t nid = p.functions.strings().intern(g.strings().get(id));
    smap[id] = nid;
    return nid;
  };
  uint64_t captured = 0, skipped = 0;
  // The profiler's stretches leave its thread's timeline, every lane of that
  // thread alike (overhead_cut.h).
  std::unordered_map<uint64_t, TimePairs> cuts;
  for (auto& lp : lanes_) {
    auto& c = cuts[lp->thread_id];
    c.insert(c.end(), lp->overhead.begin(), lp->overhead.end());
  }
  const int64_t overhead_ticks = merge_stretches(cuts);
  const auto to_ns = [&clk](int64_t t) { return clk.to_ns(t); };
  // Each lane's readings as (ticks, CPU ns): one taken without a system call
  // is its thread's last read plus the wall time since (CpuRead).
  std::vector<TimePairs> lane_reads(lanes_.size());
  std::unordered_map<uint64_t, TimePairs> thread_reads;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    auto& out = lane_reads[i];
    for (const CpuRead& r : lanes_[i]->cpu_reads) {
      out.emplace_back(r.ticks, r.since ? r.cpu_ns + (to_ns(r.ticks) - to_ns(r.since)) : r.cpu_ns);
    }
    auto& t = thread_reads[lanes_[i]->thread_id];
    t.insert(t.end(), out.begin(), out.end());
  }
  const auto inside = off_cpu_inside(cuts, thread_reads, to_ns);
  for (size_t li = 0; li < lanes_.size(); ++li) {
    auto& lp = lanes_[li];
    Lane lane = std::move(lp->out);
    const auto& cut = cuts[lp->thread_id];
    CutTimeline on_cut(cut);
    for (Event& e : lane.events) {
      if (e.kind == EventKind::kLabel) {
        e.id = local_str(e.id);
        continue;
      }
      if (e.kind == EventKind::kMark) e.id = local_str(e.id);
      e.ts_ns = clk.to_ns(on_cut(e.ts_ns));
      if (e.kind == EventKind::kCall) e.id = local_fn(e.id);
    }
    add_off_cpu(lane_reads[li], cut, inside.at(lp->thread_id), to_ns, lane.off_cpu);
    captured += lane.events.size();
    skipped += lp->skipped;
    lane.trace_id = opts_.trace_id;
    lane.span_id = opts_.span_id;
    p.lanes.push_back(std::move(lane));
  }
  p.stats.events_captured = captured;
  p.stats.events_skipped = skipped;
  // Reported once (the tree's footer, the report's header, statistics()).
  p.meta["profiler_overhead_ns"] = std::to_string(clk.to_ns(overhead_ticks) - clk.to_ns(0));
  drop_empty_lanes(p);
  build_tree(p);
  group_framework_spans(p);  // MLflow's own calls as one node per run
  lanes_.clear();            // the events now live in the profile
  lane_index_.clear();
  lane_by_context_id_.clear();
  return profile_;
}
}  // namespace mlprof
