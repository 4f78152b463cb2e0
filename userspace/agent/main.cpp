// mlprof-ebpf: profiles predict() calls of Python processes from outside.
// run() takes the steps top to bottom: parse the command line; check
// privileges and BTF (preflight.h); open --store, -o and --health-file (a
// typo or a store of another version fails here, before anything attaches)
// and --continuous's sink and spool; resolve the targets; load the BPF
// programs; attach; poll the ring buffer, feeding the joiner, rescanning for
// targets that start or exit (the capture: capture.h); on SIGINT/SIGTERM,
// --duration or the last --pid gone: stop, write -o atomically, add to the
// store, print the summary. Exit codes: see kExit* below and docs/ebpf.md.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/bpf_loader.h"
#include "agent/capture.h"
#include "agent/cli.h"
#include "agent/clock.h"
#include "agent/continuous.h"
#include "agent/health.h"
#include "agent/inject.h"
#include "agent/joiner.h"
#include "agent/memory.h"
#include "agent/options.h"
#include "agent/preflight.h"
#include "agent/session_labels.h"
#include "agent/sink.h"
#include "agent/spool.h"
#include "agent/stall_report.h"
#include "agent/stapsdt.h"
#include "agent/store_sqlite.h"
#include "agent/store_writer.h"
#include "agent/targets.h"
#include "formats/export.h"
#include "mlprof_usdt.h"
#include "util/file_io.h"
#include "util/utf8.h"
#include "views/merge.h"

namespace {

using namespace mlprof;
using namespace mlprof::agent;

// Exit statuses (docs/ebpf.md, usage()).
constexpr int kExitOk = 0;
constexpr int kExitError =
    1;  // runtime error: writing the output or the store, reading the ring buffer
constexpr int kExitUsage = 2;      // the command line
constexpr int kExitPrivilege = 3;  // not privileged, no BTF, the kernel refused the programs
constexpr int kExitNoTarget = 4;   // no such pid / container / cgroup
constexpr int kExitLost = 5;       // events were lost (the outputs are written and say so)
constexpr int kExitNothing = 6;    // the capture ended without a single session
constexpr int kExitNotPython = 7;  // a --pid target is not Python, or never loaded the extension
constexpr int kExitHostPid = 8;    // the agent sees only its own container's pids (no hostPID)

// Each wakeup costs the agent ~0.1-0.5 ms of CPU however little it does
// (caches and TLB cold after the sleep, on a VM more so): at 10 wakeups and
// 2 rescans a second an idle agent used 5.4 ms of CPU a second, a third of
// its CPU per session at a few hundred sessions a second (bench/RESULTS.md).
constexpr int kPollMs = 250;                // ring-buffer poll timeout
constexpr int64_t kRescanNs = 500'000'000;  // target rescan period while looking for targets
// --pid with every pid attached: a rescan only looks for their exit.
constexpr int64_t kRescanAttachedNs = 2'000'000'000;
// How long a --pid Python process may take to load mlflow_profiler before
// the agent gives up on it (exit 7): a server imports it at startup.
constexpr int64_t kTargetWaitNs = 30'000'000'000;

int fail(int status, const std::string& line) {
  say(line);
  return status;
}

// The finder's notes (a runtime's state unreadable ...), each once.
void say_notes(TargetFinder& finder) {
  for (const std::string& line : finder.take_notes()) say(line);
}

// Where the node's state is read: --host-root for the Kubernetes names.
HostPaths host_paths(const Options& opts) {
  HostPaths paths;
  if (!opts.host_root.empty()) paths.host_root = opts.host_root;
  return paths;
}

// A process whose session bodies are of a newer contract than this agent
// reads (a newer mlflow_profiler): once, when its first body arrives.
void say_newer_contract(const JoinerStats& js) {
  static bool said = false;
  if (said || js.bodies_unknown_version == 0) return;
  said = true;
  say("pid " + std::to_string(js.unknown_version_pid) +
      ": its mlflow_profiler is newer (USDT contract v" + std::to_string(js.unknown_version) +
      " session bodies; this agent reads v" + std::to_string(MLPROF_USDT_VERSION) +
      "): its sessions are not captured; upgrade mlprof-ebpf");
}

// ---- the run, step by step ------------------------------------------------

// A step's answer: nullopt to go on, else the exit status to stop with.
using Stop = std::optional<int>;

// What the run opens before anything attaches and closes at its end.
// Declared in the order they open: they close in the reverse one.
struct Outputs {
  std::unique_ptr<SqliteStore> store;   // --store
  std::unique_ptr<HealthFile> health;   // --health-file
  std::unique_ptr<Sink> sink;           // --continuous: where the rotations go
  std::unique_ptr<Spool> spool;         // --continuous: the spool on disk
  std::unique_ptr<StoreWriter> writer;  // --store: the thread that adds to it
};

// --store, -o and --health-file, checked before anything attaches: a typo,
// a store of another version or a read-only mount is a clear line now, not
// a lost capture at the end.
Stop open_outputs(const Options& opts, Outputs& out) {
  if (!opts.store.empty()) {
    auto opened = SqliteStore::open(opts.store);
    if (!opened) {
      return fail(kExitError, "cannot use the store " + opts.store + ": " + opened.error().message);
    }
    out.store = std::move(opened.value());
  }
  // -o too: a directory that is missing or read-only is said now, not after the capture.
  if (!opts.output.empty()) {
    if (std::string m = output_unwritable(opts.output); !m.empty()) return fail(kExitError, m);
  }
  // --health-file: written now, so a missing or read-only mount is said at start.
  if (!opts.health_file.empty()) {
    out.health = std::make_unique<HealthFile>(opts.health_file);
    if (auto w = out.health->start(health_clock_ns()); !w) {
      return fail(kExitError,
                  "--health-file: " + w.error().message + " (mount a writable emptyDir there)");
    }
  }
  return std::nullopt;
}

// --continuous: the sink and the spool before attaching too; the spool's
// thread starts now, delivering what a previous run left.
Stop open_spool(const Options& opts, Outputs& out) {
  bound_allocator();  // before the spool's thread: the node agent's heap stays flat (memory.h)
  auto s = open_sink(opts.sink, {opts.sink_max_bytes, opts.sink_max_age_ns});
  if (!s) return fail(kExitError, "cannot use the sink " + opts.sink + ": " + s.error().message);
  out.sink = std::move(s.value());
  Sink& sink = *out.sink;
  // Not an error: a DaemonSet's --sink can be changed to a store without
  // touching the bounds around it.
  if (!opts.sink_bound_given.empty() && !sink.retention()) {
    say(opts.sink_bound_given + " bounds a directory sink; " + sink.describe() +
        " keeps what it is given (its own retention is the store's or server's): ignored");
  }
  SpoolLimits limits;
  limits.max_bytes = opts.spool_max_bytes;
  Backoff backoff;
  backoff.max_ms = opts.retry_max_ns / 1'000'000;
  backoff.initial_ms = std::min<int64_t>(backoff.initial_ms, backoff.max_ms);
  auto sp = Spool::open(opts.spool, limits, backoff, sink.identity());
  if (!sp) return fail(kExitError, sp.error().message + " (--spool DIR chooses another)");
  out.spool = std::move(sp.value());
  Spool& spool = *out.spool;
  const SpoolStats st = spool.stats();
  if (st.resumed + st.corrupt + st.others > 0) {
    // Another sink's items are never delivered here (a scratch run's must
    // not land in a production store): said, and left for a run with it.
    say("spool " + spool.dir() + ": " + plural(st.resumed, "item", "items") +
        " of a previous run to deliver" +
        (st.corrupt > 0 ? ", " + std::to_string(st.corrupt) + " unreadable set aside in corrupt/"
                        : "") +
        (st.others > 0
             ? "; left there, not for this sink (" + sink.identity() + "): " + spool.others_text()
             : ""));
  }
  spool.start(sink);
  return std::nullopt;
}

// --store's writer thread, which adds what the capture gives it.
void start_store_writer(const Options& opts, Outputs& out) {
  SourceInfo source;
  source.type = "ebpf";
  source.labels = opts.labels;
  if (out.store) out.writer = std::make_unique<StoreWriter>(*out.store, source);
}

// A failed add, said when it is seen: naming the store and the cause.
void say_store_failure(const Options& opts, StoreWriter* writer) {
  if (writer == nullptr) return;
  if (auto error = writer->take_first_failure()) {
    say("adding to the store " + opts.store + " failed: " + *error +
        " (nothing of that profile is in the store)");
  }
}

// The targets: the selection checked once (TargetFinder::create), and each
// --pid that can never load the extension said now, not waited on forever.
Stop find_targets(const Options& opts, std::unique_ptr<TargetFinder>& finder) {
  // Without hostPID the host's processes are invisible: --all would wait on
  // nothing and a --pid would not exist. A --pid that does exist here (a
  // process of the same pod) is fine.
  const std::string pids_hidden = host_pids_hidden();
  if (!pids_hidden.empty() && opts.pids.empty()) return fail(kExitHostPid, pids_hidden);
  auto found = TargetFinder::create(
      TargetSelection{opts.pids, opts.container, opts.cgroup, opts.all, opts.pod},
      host_paths(opts));
  if (!found)
    return fail(pids_hidden.empty() ? kExitNoTarget : kExitHostPid,
                pids_hidden.empty() ? found.error().message : pids_hidden);
  finder = std::move(found.value());
  // A --pid that can never load the extension (not Python, no USDT notes of
  // its own).
  if (!opts.pids.empty()) {
    std::vector<std::string> hopeless;
    for (pid_t pid : opts.pids) {
      std::string line = not_python_line(pid);
      auto notes = has_mlprof_usdt("/proc/" + std::to_string(pid) + "/exe");
      if (!line.empty() && !(notes && notes.value())) hopeless.push_back(std::move(line));
    }
    if (hopeless.size() == opts.pids.size()) return fail(kExitNotPython, hopeless.front());
    for (const std::string& line : hopeless) say(line);
  }
  return std::nullopt;
}

// The exit status of a refused --inject (inject.h).
int inject_status(InjectVerdict v) {
  return v == InjectVerdict::kPrivilege       ? kExitPrivilege
         : v == InjectVerdict::kCannotProfile ? kExitNotPython
                                              : kExitError;
}

// Loads the BPF programs with the finder's kernel filter.
Stop load_programs(const Options& opts, const TargetFinder& finder,
                   std::unique_ptr<BpfLoader>& loader) {
  LoaderOptions lopts;
  lopts.cgroup_id = finder.cgroup_id();
  lopts.cgroup_level = finder.cgroup_level();
  if (opts.ring_bytes != 0) lopts.ring_bytes = opts.ring_bytes;
  lopts.verbose = opts.verbose >= 2;
  lopts.force_per_span = opts.per_span_probes;
  auto loaded = BpfLoader::open(lopts);
  if (!loaded) {
    // The capability check passed, so a refusal comes from elsewhere: in a
    // container, the runtime's default seccomp profile blocks bpf().
    const int e = loaded.error().errnum;
    if (e == EPERM || e == EACCES) {
      return fail(kExitPrivilege,
                  std::string("the kernel refused to load the BPF programs (") + std::strerror(e) +
                      ") although CAP_BPF and CAP_PERFMON are effective: a seccomp filter or a "
                      "security module blocks bpf(); in a container, run it with seccomp "
                      "unconfined (podman/docker: --security-opt seccomp=unconfined; in a pod: "
                      "securityContext.seccompProfile: {type: Unconfined}; docs/ebpf.md)");
    }
    return fail(kExitPrivilege, loaded.error().message);
  }
  loader = std::move(loaded.value());
  if (!loader->session_spans() && !opts.per_span_probes) {
    say("this kernel has no bpf_loop (Linux 5.17+): spans come through the per-span probes, which "
        "cost "
        "the targets a uprobe hit per span (about 3 us) instead of one per session; docs/ebpf.md, "
        "\"Kernels\"");
  }
  return std::nullopt;
}

// The meta every session carries: the agent, the container, the node.
std::map<std::string, std::string> session_meta(const Options& opts, const TargetFinder& finder) {
  std::map<std::string, std::string> meta{{"agent", version_line()}};
  if (const auto& c = finder.container()) {
    meta["container"] = c->name.empty() ? c->id : c->name;
    meta["container_id"] = c->id;
    meta["container_runtime"] = c->runtime;
  }
  if (!opts.container.empty() || !opts.pod.empty() || opts.all) meta["node"] = node_name();
  return meta;
}

// The capture from the first scan to the stop, and what the steps below
// share: the targets, the programs, the agent and the duty cycle's share.
struct Capture {
  Capture(const Options& o, Outputs& outputs, TargetFinder& f) : opts(o), out(outputs), finder(f) {}

  const Options& opts;
  Outputs& out;
  TargetFinder& finder;
  std::unique_ptr<BpfLoader> loader;  // reset at the stop: the targets detach
  std::unique_ptr<Agent> agent;
  std::unique_ptr<Continuous> continuous;  // --continuous
  DutyCycle duty;
  int64_t profiled_ns = 0, on_since = 0;  // the duty cycle's share, said at the end
  int64_t start = 0, deadline = INT64_MAX;
  bool targets_gone = false;
  bool attached_once = false;
  LoaderStats stats;  // at the stop

  // Found while the duty cycle paused capture counts as attached: --pid's
  // 30 s wait is for a process that never loads the extension.
  bool attached_or_paused() const {
    return !agent->attached().empty() || (!agent->capturing() && !finder.current().empty());
  }
};

// The agent over the loaded programs, and --continuous's rotation.
void make_agent(Capture& c) {
  const Options& opts = c.opts;
  c.agent =
      std::make_unique<Agent>(opts, *c.loader, session_meta(opts, c.finder), c.out.writer.get());
  c.duty = DutyCycle{opts.duty_on_ns, opts.duty_period_ns};
  c.on_since = unix_now_ns();
  if (opts.continuous) {
    ContinuousOptions copts;
    copts.rotate_ns = opts.rotate_ns;
    copts.labels = opts.labels;
    copts.duty = c.duty;
    const char* node = std::getenv("NODE_NAME");  // the DaemonSet's downward API
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    copts.node = node != nullptr && *node != '\0' ? node : host;
    c.continuous =
        std::make_unique<Continuous>(copts, *c.out.spool, *c.out.sink, stdout, unix_now_ns());
    c.agent->set_continuous(c.continuous.get());
  }
}

// "watching ...": what is watched, how, what is attached, what it waits for.
void say_watching(const Capture& c) {
  const Agent& agent = *c.agent;
  const TargetFinder& finder = c.finder;
  std::string line = "watching " + finder.describe() + " (" + c.loader->sched_variant() + ", " +
                     (c.loader->session_spans() ? "session_spans" : "per-span probes") + ")";
  if (!agent.attached().empty()) {
    line += ", " + plural(agent.attached().size(), "process", "processes") + " attached";
  } else if (!agent.capturing() && !finder.current().empty()) {
    char when[96];
    std::snprintf(when, sizeof when, " found; attached at the duty cycle's next on time, in %.1f s",
                  static_cast<double>(c.duty.next_change(unix_now_ns()) - unix_now_ns()) / 1e9);
    line += ", " + plural(finder.current().size(), "process", "processes") + when;
  } else if (!finder.current().empty()) {
    line += ": no target could be attached (see above); watching for others";
  } else {
    line += finder.waiting_pids().empty()
                ? ": no process has loaded mlflow_profiler yet, waiting"
                : ": the process has not loaded mlflow_profiler yet, waiting (up to 30 s)";
  }
  char until[64];
  if (c.opts.duration_s > 0)
    std::snprintf(until, sizeof until, "; stops after %g s", c.opts.duration_s);
  else
    std::snprintf(until, sizeof until, "; Ctrl-C stops");
  say(line + until);
}

// The first scan: attach what is there (nothing in the duty cycle's off
// time), say so, and tell the health file the agent is ready.
void start_capture(Capture& c) {
  c.start = now_ns();
  c.deadline =
      c.opts.duration_s > 0 ? c.start + static_cast<int64_t>(c.opts.duration_s * 1e9) : INT64_MAX;
  // Started in the duty cycle's off time: nothing is attached before its on time.
  if (const int64_t unow = unix_now_ns(); c.duty.enabled() && !c.duty.on_at(unow)) {
    c.agent->set_capture(false, {});
    if (c.continuous) c.continuous->capture_changed(false, unow);
  }
  c.agent->apply(c.finder.rescan());
  say_notes(c.finder);
  say_watching(c);
  if (HealthFile* health = c.out.health.get()) {
    Outputs& out = c.out;
    if (out.spool)
      health->set_delivery([&out] { return delivery_progress(*out.spool, *out.sink); });
    health->set_ready(health_clock_ns());  // programs loaded, first scan done
  }
  c.targets_gone = c.finder.pids_all_gone();
  c.attached_once = c.attached_or_paused();
}

// The duty cycle's edges: capture on or off, and the share profiled.
void follow_duty_cycle(Capture& c) {
  const int64_t unow = unix_now_ns();
  if (const bool on = c.duty.on_at(unow); on != c.agent->capturing()) {
    c.agent->set_capture(on, c.finder.current());
    if (c.continuous) c.continuous->capture_changed(on, unow);
    if (on)
      c.on_since = unow;
    else
      c.profiled_ns += unow - c.on_since;
  }
}

// Polls the ring buffer, rescans for targets, collects the sessions that
// ended, until a stop signal, --duration, the last --pid gone, --pid's wait
// for the extension run out, or stdout closed.
void capture_loop(Capture& c) {
  Agent& agent = *c.agent;
  const Options& opts = c.opts;
  int64_t next_rescan = c.start + kRescanNs;
  while (stop_signal() == 0 && !c.targets_gone && !agent.stdout_broken()) {
    const int64_t now = now_ns();
    if (now >= c.deadline) break;
    c.attached_once = c.attached_once || c.attached_or_paused();
    if (!opts.pids.empty() && !c.attached_once && now >= c.start + kTargetWaitNs) break;
    const int timeout =
        static_cast<int>(std::min<int64_t>(kPollMs, (c.deadline - now) / 1'000'000 + 1));
    if (!agent.poll(timeout)) break;
    if (now_ns() >= next_rescan) {
      agent.apply(c.finder.rescan());
      say_notes(c.finder);
      const bool all_attached =
          !opts.pids.empty() && c.finder.waiting_pids().empty() && !agent.attached().empty();
      next_rescan = now_ns() + (all_attached ? kRescanAttachedNs : kRescanNs);
      c.targets_gone = c.finder.pids_all_gone();
    }
    agent.collect(false);
    say_newer_contract(agent.joiner_stats());
    say_store_failure(opts, c.out.writer.get());
    if (c.duty.enabled()) follow_duty_cycle(c);
    if (c.continuous) {
      const LoaderStats ls = c.loader->stats();
      c.continuous->set_capture_counters(ls.lost, ls.shed);
      c.continuous->tick(unix_now_ns());
    }
    if (c.out.health) c.out.health->beat(health_clock_ns());
  }
}

// The stop: the last sessions collected, every target detached, and why
// the capture ended said.
void stop_capture(Capture& c, struct sigaction& sa) {
  Agent& agent = *c.agent;
  if (c.out.health) c.out.health->set_stopping(health_clock_ns());
  // From here on a stop signal interrupts no system call (a write to a pipe
  // cut short would lose the summary): it only hurries what is left.
  restart_stop_signals(sa);
  agent.finish();
  say_newer_contract(agent.joiner_stats());
  if (agent.capturing()) c.profiled_ns += unix_now_ns() - c.on_since;
  c.stats = c.loader->stats();
  c.loader.reset();  // detach everything now: the targets' semaphores go back to 0
  agent.set_lost_events(c.stats.lost);
  agent.set_sessions_shed(c.stats.shed);
  if (c.continuous) c.continuous->set_capture_counters(c.stats.lost, c.stats.shed);

  if (stop_signal() != 0)
    say(std::string("stopping on ") + stop_signal_name());
  else if (c.targets_gone)
    say("every target process has exited");
  else if (agent.stdout_broken())
    say("stdout was closed: stopping");
  if (agent.poll_error() != 0)
    say(std::string("reading the ring buffer failed: ") + std::strerror(agent.poll_error()));
  if (c.duty.enabled()) {
    const int64_t profiled_ns = c.profiled_ns, start = c.start;
    char line[160];
    std::snprintf(line, sizeof line, "profiled %.0f s of %.0f s (%.0f%%, duty cycle %s)",
                  profiled_ns / 1e9, (now_ns() - start) / 1e9,
                  100.0 * profiled_ns / std::max<int64_t>(now_ns() - start, 1),
                  c.duty.text().c_str());
    say(line);
  }
}

// --continuous's end: the partial period into the spool, then a bounded
// attempt to deliver; what is left stays in the spool for the next run.
int finish_continuous(Capture& c) {
  Spool& spool = *c.out.spool;
  Sink& sink = *c.out.sink;
  c.continuous->finish(unix_now_ns());
  // In steps, so that a second stop signal ends the wait (the spool keeps
  // what it holds for the next run).
  constexpr int64_t kFlushMs = 10'000, kFlushStepMs = 1'000;
  bool empty = false;
  for (int64_t waited = 0; !empty && waited < kFlushMs && !hurried(); waited += kFlushStepMs)
    empty = spool.flush(kFlushStepMs);
  if (!empty && hurried()) {
    say(std::string("a second ") + stop_signal_name() + ": not waiting for the sink; " +
        plural(spool.stats().pending, "item stays", "items stay") + " in " + spool.dir() +
        " for the next run");
  }
  spool.stop();
  const SpoolStats st = spool.stats();
  std::string line = "stopped: delivered " + std::to_string(st.delivered) + ", spooled " +
                     std::to_string(st.pending) + ", dropped " + std::to_string(st.dropped()) +
                     "; sink " + sink.describe();
  if (const auto kept = sink.retention()) line += "; " + retention_text(*kept);
  if (!empty) {
    line += "; left in " + spool.dir() + " for the next run";
    if (!st.last_error.empty()) line += " (" + st.last_error + ")";
  }
  if (st.others > 0)
    line += "; left in " + spool.dir() + " for other sinks: " + spool.others_text();
  write_stdout("mlprof-ebpf: " + terminal_text(line, false) + "\n");
  if (c.agent->poll_error() != 0) return kExitError;
  return c.stats.lost > 0 ? kExitLost : kExitOk;
}

// --store: the capture as one source; with --stream, what is still queued.
// kExitError when a session did not make it into the store, else `status`.
int finish_store(const Capture& c, int status) {
  const Options& opts = c.opts;
  StoreWriter& writer = *c.out.writer;
  if (!opts.stream && c.agent->stall_report().sessions() > 0) writer.add(c.agent->combined());
  writer.finish();
  say_store_failure(opts, &writer);
  const StoreWriterStats st = writer.stats();
  if (st.added > 0) {
    std::string line = "added to the store " + opts.store + ": ";
    line += st.added == 1 ? "source " + std::to_string(st.first_source)
                          : "sources " + std::to_string(st.first_source) + " to " +
                                std::to_string(st.last_source);
    const uint64_t sessions = opts.stream ? st.added : c.agent->stall_report().sessions();
    say(line + " (ebpf, " + plural(sessions, "session", "sessions") + ")");
  }
  if (opts.stream && st.failed + st.dropped > 0) {
    std::string line = plural(st.failed + st.dropped, "session was", "sessions were") +
                       " not added to the store " + opts.store + ":";
    if (st.failed > 0)
      line += " " + std::to_string(st.failed) + " failed (the first is said above)";
    if (st.dropped > 0) {
      line += std::string(st.failed > 0 ? "," : "") + " " + std::to_string(st.dropped) +
              " dropped (the store fell " + std::to_string(StoreWriter::kDefaultCapacity) +
              " sessions behind)";
    }
    say(line);
  }
  return st.failed + st.dropped > 0 ? kExitError : status;
}

// The counts at the end: records and sessions with -v, then what was shed
// and lost (a loss makes an otherwise clean exit kExitLost).
int say_counts(const Capture& c, int status) {
  const LoaderStats& stats = c.stats;
  if (c.opts.verbose > 0) {
    const JoinerStats js = c.agent->joiner_stats();
    say("records " + std::to_string(stats.records) + ", lost " + std::to_string(stats.lost) +
        ", shed " + std::to_string(stats.shed) + ", sessions " +
        std::to_string(js.sessions_finished) + " (truncated " +
        std::to_string(js.sessions_truncated) + "), unmatched " + std::to_string(js.unmatched) +
        ", malformed " + std::to_string(js.malformed) +
        (js.lanes_unjoined > 0
             ? ", lanes without a host thread id " + std::to_string(js.lanes_unjoined)
             : ""));
  }
  if (stats.shed > 0) {
    say(plural(stats.shed, "session was", "sessions were") +
        " not captured: the agent fell behind (half its ring buffer unread) and skipped them "
        "whole, "
        "so every session captured is complete; --duty-cycle, or fewer targets per agent, lowers "
        "the load");
  }
  if (const JoinerStats js = c.agent->joiner_stats();
      js.events_over_cap + js.lanes_over_cap + js.off_cpu_dropped + js.bytes_over_cap > 0) {
    // The sessions that lost spans or lanes say so (truncated); this says why.
    say("records not kept, past the agent's memory caps: " + std::to_string(js.events_over_cap) +
        " span and I/O, " + std::to_string(js.lanes_over_cap) + " of new lanes, " +
        std::to_string(js.off_cpu_dropped) + " scheduler (off-CPU, thread), " +
        std::to_string(js.bytes_over_cap) +
        " past the byte cap (names, buffers, partial bodies); the sessions that lost spans "
        "are flagged truncated");
  }
  if (const uint64_t dropped = c.agent->joiner_stats().sessions_dropped; dropped > 0) {
    say(plural(dropped, "session was", "sessions were") +
        " dropped: building it ran out of memory (a target sent more than the agent can "
        "hold); the other sessions are complete");
    if (status == kExitOk) status = kExitLost;
  }
  if (stats.lost > 0) {
    say(plural(stats.lost, "event was", "events were") +
        " lost (the ring buffer was full): the profile misses them and says so; a shallower "
        "capture depth in the target or fewer targets per agent helps");
    if (status == kExitOk) status = kExitLost;
  }
  return status;
}

// A capture's end (not --continuous): the -o file, the store, the summary
// or document on stdout, and the exit status they add up to.
int finish_capture(Capture& c) {
  const Options& opts = c.opts;
  Agent& agent = *c.agent;
  int status = agent.poll_error() != 0 ? kExitError : kExitOk;
  // --pid processes that never loaded the extension, however the capture ended.
  c.attached_once = c.attached_once || c.attached_or_paused();
  const std::vector<pid_t> never_loaded =
      c.attached_once ? std::vector<pid_t>{} : c.finder.waiting_pids();
  if (!never_loaded.empty()) {
    const int64_t waited_s = (now_ns() - c.start) / 1'000'000'000;
    say("pid " + std::to_string(never_loaded.front()) + " did not load mlflow_profiler in " +
        std::to_string(waited_s) +
        " s: the target must import mlflow_profiler (autoprofile() "
        "or a profiling session) before it can be profiled from outside");
    if (status == kExitOk) status = kExitNotPython;
  }
  // Text for a terminal: the targets name its spans and threads.
  const std::string summary =
      terminal_text(agent.pods_line() + agent.stall_report().summary_text(), true);
  // -o FILE: the chosen format, or the text summary; always atomic.
  if (!opts.output.empty()) {
    auto w = opts.format ? save_profile(agent.combined(), opts.output, *opts.format)
                         : write_file_atomic(opts.output, summary);
    if (!w) {
      say("cannot write " + opts.output + ": " + w.error().message);
      status = kExitError;
    } else {
      say("wrote " + opts.output + " (" + format_label(opts.format) + ", " +
          plural(agent.stall_report().sessions(), "session", "sessions") + ")");
    }
  }
  if (c.out.writer) status = finish_store(c, status);
  if (opts.output.empty() && opts.format) {
    // The document goes to stdout; the summary to stderr, out of its way.
    if (!write_stdout(export_profile(agent.combined(), *opts.format))) status = kExitError;
    std::fputs(summary.c_str(), stderr);
  } else if (!write_stdout(summary) || agent.stdout_broken()) {
    say("cannot write to stdout");
    status = kExitError;
  }
  if (agent.stall_report().sessions() == 0 && never_loaded.empty()) {
    if (agent.joiner_stats().bodies_unknown_version ==
        0)  // else the newer contract's line said why
      say("no predict() session was captured: does the target call predict() under autoprofile() "
          "(or a profiling session) while the agent runs?");
    if (status == kExitOk) status = kExitNothing;
  }
  return say_counts(c, status);
}

int run(int argc, char** argv) {
  if (is_health_probe(argc, argv)) return health_main(argc, argv);  // a kubelet's exec probe
  auto parsed = parse_options(argc, argv);
  if (!parsed) return fail(kExitUsage, parsed.error().message);
  const Options& opts = parsed.value();
  if (opts.help) return write_stdout(usage()) ? kExitOk : kExitError;
  if (opts.version) return write_stdout(version_line() + "\n") ? kExitOk : kExitError;

  if (std::string m = missing_privileges(effective_capabilities()); !m.empty())
    return fail(kExitPrivilege, m);
  if (std::string m = missing_btf(); !m.empty()) return fail(kExitPrivilege, m);
  Outputs out;
  if (Stop stop = open_outputs(opts, out)) return *stop;
  if (opts.continuous) {
    if (Stop stop = open_spool(opts, out)) return *stop;
  }
  start_store_writer(opts, out);
  // Signals before anything attaches: a Ctrl-C at any later point ends the
  // capture cleanly.
  struct sigaction sa = install_stop_signals();

  std::unique_ptr<TargetFinder> finder;
  if (Stop stop = find_targets(opts, finder)) return *stop;
  // --inject: each --pid loads mlflow_profiler through PEP 768 (inject.h)
  // while the programs load below; refusals are said now.
  std::unique_ptr<InjectBatch> injections;
  if (opts.inject) {
    InjectOptions iopts;
    iopts.package_dir = opts.inject_path;
    injections = std::make_unique<InjectBatch>(opts.pids, iopts);
    if (auto refused = injections->say_refusals(say)) return inject_status(*refused);
  }
  Capture c(opts, out, *finder);
  if (Stop stop = load_programs(opts, *finder, c.loader)) return *stop;
  if (injections) {
    const auto stopped = [] { return stop_signal() != 0; };  // a Ctrl-C while the target imports
    if (auto refused = injections->finish(say, stopped)) return inject_status(*refused);
  }

  make_agent(c);
  start_capture(c);
  capture_loop(c);
  stop_capture(c, sa);
  return c.continuous ? finish_continuous(c) : finish_capture(c);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlprof-ebpf: internal error: %s\n", e.what());
    return kExitError;
  }
}
