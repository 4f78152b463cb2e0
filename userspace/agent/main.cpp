// mlprof-ebpf: profiles predict() calls of Python processes from outside.
// Top to bottom: parse the command line; check privileges and BTF; open
// --store (a typo or a store of another version fails here, before anything
// attaches); resolve the targets; load the BPF programs; attach; poll the
// ring buffer, feeding the joiner, rescanning for targets that start or
// exit; on SIGINT/SIGTERM, --duration or the last --pid gone: finish, write
// -o atomically, add to the store, print the summary. Exit codes: see kExit*
// below and docs/ebpf.md.

#include <linux/capability.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
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
#include <set>
#include <string>
#include <vector>

#include "agent/bpf_loader.h"
#include "agent/continuous.h"
#include "agent/health.h"
#include "agent/inject.h"
#include "agent/joiner.h"
#include "agent/memory.h"
#include "agent/options.h"
#include "agent/preflight.h"
#include "agent/report.h"
#include "agent/session_labels.h"
#include "agent/sink.h"
#include "agent/spool.h"
#include "agent/store_sqlite.h"
#include "agent/store_writer.h"
#include "agent/targets.h"
#include "formats/export.h"
#include "mlprof_usdt.h"
#include "util/file_io.h"
#include "views/merge.h"

namespace {

using namespace mlprof;
using namespace mlprof::agent;

// Exit statuses (docs/ebpf.md, usage()).
constexpr int kExitOk = 0;
constexpr int kExitError = 1;      // runtime error: writing the output or the store, reading the ring buffer
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
constexpr int64_t kSettleNs = 50'000'000;   // late scheduler records of a session still land
// How long a --pid Python process may take to load mlflow_profiler before
// the agent gives up on it (exit 7): a server imports it at startup.
constexpr int64_t kTargetWaitNs = 30'000'000'000;

// The first SIGINT/SIGTERM stops the capture; a second skips what is left
// to wait for (the late records in the ring, the spool's delivery) but
// still writes what was captured; a third leaves at once, saying so. Two
// Ctrl-C in a row used to lose the whole capture without a word.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_stop_signals = 0;

void on_stop_signal(int signo) {
  if (++g_stop_signals >= 3) {
    static const char kLine[] =
        "mlprof-ebpf: a third stop signal: exiting now; what was not written yet is discarded "
        "(-o is never partial; the spool keeps what it acknowledged)\n";
    ssize_t ignored = write(STDERR_FILENO, kLine, sizeof kLine - 1);
    (void)ignored;
    _exit(128 + signo);
  }
  if (g_stop_signal == 0) g_stop_signal = signo;
}

// A second stop signal came: nothing more is waited for.
bool hurried() { return g_stop_signals >= 2; }

// The stop signal's name for a line ("SIGINT").
const char* stop_signal_name() { return g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"; }

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void say(const std::string& line) { std::fprintf(stderr, "mlprof-ebpf: %s\n", line.c_str()); }

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

// ---- privileges -----------------------------------------------------------

// Capability numbers newer than some installed headers.
constexpr int kCapSysPtrace = 19;
constexpr int kCapSysAdmin = 21;
constexpr int kCapPerfmon = 38;
constexpr int kCapBpf = 39;

struct Capabilities {
  uint64_t effective = 0;
  bool has(int cap) const { return (effective >> cap) & 1u; }
};

// The effective set through capget(2) (libcap only for this would be one
// more library to ship in the image).
Capabilities effective_capabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  Capabilities caps;
  if (syscall(SYS_capget, &header, data) == 0) {
    caps.effective =
        static_cast<uint64_t>(data[0].effective) | (static_cast<uint64_t>(data[1].effective) << 32);
  }
  return caps;
}

// One line naming what is missing and how to grant it, or "" when all is there.
// CAP_BPF + CAP_PERFMON load and attach the programs (CAP_SYS_ADMIN stands
// for both before 5.8); CAP_SYS_PTRACE reads another process's maps and
// opens its binary through /proc/PID/root, which a container's process
// (with capabilities the agent's set lacks) refuses even to the same uid.
std::string missing_privileges(const Capabilities& caps) {
  std::vector<std::string> missing;
  const bool admin = caps.has(kCapSysAdmin);
  if (!caps.has(kCapBpf) && !admin) missing.emplace_back("CAP_BPF");
  if (!caps.has(kCapPerfmon) && !admin) missing.emplace_back("CAP_PERFMON");
  if (!caps.has(kCapSysPtrace)) missing.emplace_back("CAP_SYS_PTRACE");
  if (missing.empty()) return {};
  std::string names;
  for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
  return "not privileged (missing " + names +
         "): run it as root (sudo mlprof-ebpf ...) or grant CAP_BPF, CAP_PERFMON and "
         "CAP_SYS_PTRACE "
         "(sudo setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep mlprof-ebpf; in a pod: "
         "securityContext.capabilities.add: [BPF, PERFMON, SYS_PTRACE]; docs/ebpf.md)";
}

// The kernel's BTF, which the CO-RE programs are relocated against.
// MLPROF_VMLINUX_BTF names another file: only the tests use it, to see this
// message on a kernel that does have BTF.
std::string missing_btf() {
  const char* env = std::getenv("MLPROF_VMLINUX_BTF");
  const std::string path = env != nullptr && *env != '\0' ? env : "/sys/kernel/btf/vmlinux";
  if (access(path.c_str(), R_OK) == 0) return {};
  return "no kernel BTF at " + path +
         ": this kernel was built without CONFIG_DEBUG_INFO_BTF; run a kernel with BTF "
         "(Debian 11+, Ubuntu 20.10+, RHEL 8.2+ kernels have it)";
}

// ---- output ---------------------------------------------------------------

bool write_stdout(const std::string& text) {
  if (text.empty()) return true;
  const bool ok = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
  return std::fflush(stdout) == 0 && ok;
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// ---- the capture ----------------------------------------------------------

class Agent {
 public:
  // `store`: --store's writer, or null.
  Agent(const Options& opts, BpfLoader& loader, std::map<std::string, std::string> meta,
        StoreWriter* store)
      : opts_(opts),
        loader_(loader),
        joiner_(meta),
        labels_(std::move(meta)),
        report_(ReportOptions{opts.depth}),
        store_(store) {}

  // --continuous: finished sessions go to the rotation, nothing else holds them.
  void set_continuous(Continuous* c) { continuous_ = c; }

  // The duty cycle: off detaches every target (their semaphores drop to 0,
  // so they pay nothing) and ends the sessions the pause cuts; on attaches
  // the current targets again, quietly.
  void set_capture(bool on, const std::map<pid_t, Target>& targets) {
    if (on == capturing_) return;
    capturing_ = on;
    if (!on) {
      for (pid_t pid : attached_) loader_.detach(pid);
      attached_.clear();
      finish();
      return;
    }
    TargetFinder::Changes again;
    for (const auto& [pid, t] : targets) again.started.push_back(t);
    apply(again, true);
  }
  bool capturing() const { return capturing_; }

  // Attaches the targets that started and lets go of those that exited.
  void apply(const TargetFinder::Changes& changes, bool quiet = false) {
    // An exited process's last records may still wait in the ring (a busy
    // agent is behind): read them first, or its last sessions would be cut
    // short and the records after the cut count as unmatched.
    if (!changes.exited.empty()) drain_ring();
    const int64_t now = now_ns();
    for (pid_t pid : changes.exited) {
      joiner_.on_process_exit(static_cast<uint32_t>(pid), now);
      loader_.detach(pid);
      if (attached_.erase(pid) != 0) say("pid " + std::to_string(pid) + " exited");
      failed_.erase(pid);
      labels_.exited(pid, now);
    }
    for (const Target& t : changes.started) {
      if (failed_.count(t.pid) != 0 || !capturing_) continue;  // paused: attached when capture is on
      auto r = loader_.attach(t.pid, t.binary);
      if (!r) {
        failed_.insert(t.pid);
        // A process that exited meanwhile is no news.
        if (kill(t.pid, 0) == 0 || errno != ESRCH) {
          say("cannot attach to pid " + std::to_string(t.pid) + " (" + t.comm +
              "): " + r.error().message);
        }
        continue;
      }
      attached_.insert(t.pid);
      labels_.started(t.pid, t.labels);
      if (quiet) continue;
      std::string line = "attached to pid " + std::to_string(t.pid) + " (" + t.comm + ")";
      if (opts_.verbose > 0) line += ": " + t.binary;
      say(line);
      if (loader_.contract(t.pid) == 1 && loader_.session_spans()) {
        say("pid " + std::to_string(t.pid) +
            ": its mlflow_profiler is older (USDT contract v1, a probe per span, no session_spans): "
            "capturing through the per-span probes, which cost the target a uprobe hit per span; "
            "upgrade mlflow_profiler for session-level delivery (v" +
            std::to_string(MLPROF_USDT_VERSION) + ")");
      }
    }
  }

  // One poll of the ring buffer; false on an error other than a signal.
  bool poll(int timeout_ms) {
    const int n = read_ring(timeout_ms);
    if (n < 0 && n != -EINTR) {
      poll_error_ = -n;
      return false;
    }
    return true;
  }

  // Sessions that ended (at least kSettleNs ago unless `all`).
  // One at a time, as each is built: a Profile this does not keep lends its
  // memory to the next (Joiner::drain_finished).
  void collect(bool all) {
    joiner_.drain_finished(all ? std::numeric_limits<int64_t>::max() : now_ns() - kSettleNs,
                           [this](Profile& p) { collect_one(p); });
  }

  void collect_one(Profile& p) {
    labels_.label(p, now_ns());  // namespace, pod, container, node: where it ran
    // The duty cycle's off time starts at its edge, not when the targets
    // are detached (a few hundred ms later, more on a loaded node): a
    // session that began after the edge is not part of the capture.
    if (const DutyCycle duty{opts_.duty_on_ns, opts_.duty_period_ns}; duty.enabled()) {
      const auto it = p.meta.find("start_unix_ns");
      if (it != p.meta.end() && !duty.on_at(std::strtoll(it->second.c_str(), nullptr, 10))) return;
    }
    if (continuous_ != nullptr) {
      continuous_->add(std::move(p));
      return;
    }
    report_.add(p);
    if (opts_.stream && !write_stdout(session_text(p, ReportOptions{opts_.depth}) + "\n"))
      stdout_broken_ = true;
    const bool keep = !opts_.output.empty() || opts_.format || (store_ != nullptr && !opts_.stream);
    // --stream --store: each session is a source as it finishes (on the
    // writer's thread), so a long-running agent accumulates; else the
    // capture is one, at the end.
    if (opts_.stream && store_ != nullptr) {
      auto shared = std::make_shared<const Profile>(std::move(p));
      store_->submit(shared);
      if (keep) sessions_.push_back(std::move(shared));
    } else if (keep) {
      sessions_.push_back(std::make_shared<const Profile>(std::move(p)));
    }
  }

  void finish() {
    // What is still in the ring buffer (not after a second stop signal),
    // then every open session, truncated.
    if (!hurried()) {
      drain_ring();
    } else if (!said_hurried_) {
      said_hurried_ = true;
      say(std::string("a second ") + stop_signal_name() +
          ": the records still in the ring buffer are not read; what was captured is written "
          "(sessions still open end now, flagged truncated)");
    }
    joiner_.finish(now_ns());
    collect(true);
  }

  // The capture's lost records, also those outside any session, in the written profile.
  void set_lost_events(uint64_t lost) { lost_ = std::max(lost_, lost); }
  // Sessions the kernel side shed (LoaderStats::shed): in the report and the written profile's meta.
  void set_sessions_shed(uint64_t shed) {
    shed_ = shed;
    report_.set_sessions_shed(shed);
  }

  const std::set<pid_t>& attached() const { return attached_; }
  int poll_error() const { return poll_error_; }
  bool stdout_broken() const { return stdout_broken_; }
  const CaptureReport& report() const { return report_; }
  // Every session in one Profile, combined once at the end: appending each
  // session as it ended redid the whole-profile steps every time, and the
  // agent's CPU per predict grew with the sessions captured.
  const Profile& combined() {
    if (!combined_) {
      std::vector<const Profile*> parts;
      parts.reserve(sessions_.size());
      for (const auto& s : sessions_) parts.push_back(s.get());
      combined_ = std::make_unique<Profile>();
      append_profiles(*combined_, parts);  // as combine_sessions: linear in the sessions
      labels_.annotate_combined(*combined_);
      combined_->kernel.present = true;
      combined_->kernel.lost_events = std::max(combined_->kernel.lost_events, lost_);
      if (shed_ > 0) combined_->meta["sessions_shed"] = std::to_string(shed_);
    }
    return *combined_;
  }
  JoinerStats joiner_stats() const { return joiner_.stats(); }
  // "pod ml/scorer-6c5d8/model (pid 4242), node n1\n" above the summary, or "".
  std::string pods_line() const { return labels_.summary_line(); }

 private:
  // Feeds what the ring buffer holds to the joiner, with the lost count so
  // far; returns the loader's poll result.
  int read_ring(int timeout_ms) {
    const int n = loader_.poll(
        timeout_ms, [this](const void* data, size_t size) { joiner_.on_record(data, size); });
    joiner_.set_lost_events(loader_.stats().lost);
    return n;
  }
  // What the ring holds now; bounded, since a busy target keeps filling it.
  void drain_ring() {
    for (int i = 0; i < 64 && read_ring(0) > 0; ++i) {
    }
  }

  const Options& opts_;
  BpfLoader& loader_;
  Joiner joiner_;
  SessionLabels labels_;
  CaptureReport report_;
  std::vector<std::shared_ptr<const Profile>> sessions_;  // for -o / --format / --store
  std::unique_ptr<Profile> combined_;  // built by combined()
  uint64_t lost_ = 0;
  uint64_t shed_ = 0;
  StoreWriter* store_;
  std::set<pid_t> attached_;
  std::set<pid_t> failed_;  // attach refused: not retried while the process lives
  Continuous* continuous_ = nullptr;
  bool capturing_ = true;  // false: the duty cycle's off time
  int poll_error_ = 0;
  bool stdout_broken_ = false;
  bool said_hurried_ = false;
};

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

  // The store first: a typo or a store of another version is a clear line
  // now, not a lost capture at the end.
  std::unique_ptr<SqliteStore> store;
  if (!opts.store.empty()) {
    auto opened = SqliteStore::open(opts.store);
    if (!opened) {
      return fail(kExitError, "cannot use the store " + opts.store + ": " + opened.error().message);
    }
    store = std::move(opened.value());
  }
  // -o too: a directory that is missing or read-only is said now, not after the capture.
  if (!opts.output.empty()) {
    if (std::string m = output_unwritable(opts.output); !m.empty()) return fail(kExitError, m);
  }
  // --health-file: written now, so a missing or read-only mount is said at start.
  std::unique_ptr<HealthFile> health;
  if (!opts.health_file.empty()) {
    health = std::make_unique<HealthFile>(opts.health_file);
    if (auto w = health->start(health_clock_ns()); !w) {
      return fail(kExitError,
                  "--health-file: " + w.error().message + " (mount a writable emptyDir there)");
    }
  }
  // --continuous: the sink and the spool before attaching too; the spool's
  // thread starts now, delivering what a previous run left.
  std::unique_ptr<Sink> sink;
  std::unique_ptr<Spool> spool;
  if (opts.continuous) {
    bound_allocator();  // before the spool's thread: the node agent's heap stays flat (memory.h)
    auto s = open_sink(opts.sink, {opts.sink_max_bytes, opts.sink_max_age_ns});
    if (!s) return fail(kExitError, "cannot use the sink " + opts.sink + ": " + s.error().message);
    sink = std::move(s.value());
    // Not an error: a DaemonSet's --sink can be changed to a store without
    // touching the bounds around it.
    if (!opts.sink_bound_given.empty() && !sink->retention()) {
      say(opts.sink_bound_given + " bounds a directory sink; " + sink->describe() +
          " keeps what it is given (its own retention is the store's or server's): ignored");
    }
    SpoolLimits limits;
    limits.max_bytes = opts.spool_max_bytes;
    Backoff backoff;
    backoff.max_ms = opts.retry_max_ns / 1'000'000;
    backoff.initial_ms = std::min<int64_t>(backoff.initial_ms, backoff.max_ms);
    auto sp = Spool::open(opts.spool, limits, backoff, sink->identity());
    if (!sp) return fail(kExitError, sp.error().message + " (--spool DIR chooses another)");
    spool = std::move(sp.value());
    const SpoolStats st = spool->stats();
    if (st.resumed + st.corrupt + st.others > 0) {
      // Another sink's items are never delivered here (a scratch run's must
      // not land in a production store): said, and left for a run with it.
      say("spool " + spool->dir() + ": " + plural(st.resumed, "item", "items") +
          " of a previous run to deliver" +
          (st.corrupt > 0 ? ", " + std::to_string(st.corrupt) + " unreadable set aside in corrupt/" : "") +
          (st.others > 0 ? "; left there, not for this sink (" + sink->identity() + "): " + spool->others_text()
                         : ""));
    }
    spool->start(*sink);
  }
  SourceInfo source;
  source.type = "ebpf";
  source.labels = opts.labels;
  std::unique_ptr<StoreWriter> writer;
  if (store) writer = std::make_unique<StoreWriter>(*store, source);
  // A failed add, said when it is seen: naming the store and the cause.
  auto say_store_failure = [&] {
    if (!writer) return;
    if (auto error = writer->take_first_failure()) {
      say("adding to the store " + opts.store + " failed: " + *error +
          " (nothing of that profile is in the store)");
    }
  };

  // Signals before anything attaches: a Ctrl-C at any later point ends the
  // capture cleanly. No SA_RESTART, so the poll returns at once.
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout is an EPIPE, not a death without the -o file

  // Without hostPID the host's processes are invisible: --all would wait on
  // nothing and a --pid would not exist. A --pid that does exist here (a
  // process of the same pod) is fine.
  const std::string pids_hidden = host_pids_hidden();
  if (!pids_hidden.empty() && opts.pids.empty()) return fail(kExitHostPid, pids_hidden);
  auto found =
      TargetFinder::create(TargetSelection{opts.pids, opts.container, opts.cgroup, opts.all, opts.pod},
                           host_paths(opts));
  if (!found) return fail(pids_hidden.empty() ? kExitNoTarget : kExitHostPid,
                          pids_hidden.empty() ? found.error().message : pids_hidden);
  TargetFinder& finder = *found.value();
  // A --pid that can never load the extension (not Python, no USDT notes of
  // its own): said now, not waited on forever.
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
  // --inject: each --pid loads mlflow_profiler through PEP 768 (inject.h)
  // while the programs load below; refusals are said now.
  auto inject_status = [](InjectVerdict v) {
    return v == InjectVerdict::kPrivilege       ? kExitPrivilege
           : v == InjectVerdict::kCannotProfile ? kExitNotPython
                                                : kExitError;
  };
  std::unique_ptr<InjectBatch> injections;
  if (opts.inject) {
    InjectOptions iopts;
    iopts.package_dir = opts.inject_path;
    injections = std::make_unique<InjectBatch>(opts.pids, iopts);
    if (auto refused = injections->say_refusals(say)) return inject_status(*refused);
  }

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
  BpfLoader& loader = *loaded.value();
  if (!loader.session_spans() && !opts.per_span_probes) {
    say("this kernel has no bpf_loop (Linux 5.17+): spans come through the per-span probes, which cost "
        "the targets a uprobe hit per span (about 3 us) instead of one per session; docs/ebpf.md, \"Kernels\"");
  }
  if (injections) {
    const auto stopped = [] { return g_stop_signal != 0; };  // a Ctrl-C while the target imports
    if (auto refused = injections->finish(say, stopped)) return inject_status(*refused);
  }

  std::map<std::string, std::string> meta{{"agent", version_line()}};
  if (const auto& c = finder.container()) {
    meta["container"] = c->name.empty() ? c->id : c->name;
    meta["container_id"] = c->id;
    meta["container_runtime"] = c->runtime;
  }
  if (!opts.container.empty() || !opts.pod.empty() || opts.all) meta["node"] = node_name();
  Agent agent(opts, loader, std::move(meta), writer.get());
  const DutyCycle duty{opts.duty_on_ns, opts.duty_period_ns};
  int64_t profiled_ns = 0, on_since = unix_now_ns();  // the duty cycle's share, said at the end
  std::unique_ptr<Continuous> continuous;
  if (opts.continuous) {
    ContinuousOptions copts;
    copts.rotate_ns = opts.rotate_ns;
    copts.labels = opts.labels;
    copts.duty = duty;
    const char* node = std::getenv("NODE_NAME");  // the DaemonSet's downward API
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    copts.node = node != nullptr && *node != '\0' ? node : host;
    continuous = std::make_unique<Continuous>(copts, *spool, *sink, stdout, unix_now_ns());
    agent.set_continuous(continuous.get());
  }

  const int64_t start = now_ns();
  const int64_t deadline =
      opts.duration_s > 0 ? start + static_cast<int64_t>(opts.duration_s * 1e9) : INT64_MAX;
  // Started in the duty cycle's off time: nothing is attached before its on time.
  if (const int64_t unow = unix_now_ns(); duty.enabled() && !duty.on_at(unow)) {
    agent.set_capture(false, {});
    if (continuous) continuous->capture_changed(false, unow);
  }
  agent.apply(finder.rescan());
  say_notes(finder);
  {
    std::string line = "watching " + finder.describe() + " (" + loader.sched_variant() + ", " +
                       (loader.session_spans() ? "session_spans" : "per-span probes") + ")";
    if (!agent.attached().empty()) {
      line += ", " + plural(agent.attached().size(), "process", "processes") + " attached";
    } else if (!agent.capturing() && !finder.current().empty()) {
      char when[96];
      std::snprintf(when, sizeof when, " found; attached at the duty cycle's next on time, in %.1f s",
                    static_cast<double>(duty.next_change(unix_now_ns()) - unix_now_ns()) / 1e9);
      line += ", " + plural(finder.current().size(), "process", "processes") + when;
    } else if (!finder.current().empty()) {
      line += ": no target could be attached (see above); watching for others";
    } else {
      line += finder.waiting_pids().empty()
                  ? ": no process has loaded mlflow_profiler yet, waiting"
                  : ": the process has not loaded mlflow_profiler yet, waiting (up to 30 s)";
    }
    char until[64];
    if (opts.duration_s > 0)
      std::snprintf(until, sizeof until, "; stops after %g s", opts.duration_s);
    else
      std::snprintf(until, sizeof until, "; Ctrl-C stops");
    say(line + until);
  }
  if (health) {
    if (spool) health->set_delivery([&] { return delivery_progress(*spool, *sink); });
    health->set_ready(health_clock_ns());  // programs loaded, first scan done
  }

  int64_t next_rescan = start + kRescanNs;
  bool targets_gone = finder.pids_all_gone();
  // Found while the duty cycle paused capture counts as attached: --pid's
  // 30 s wait is for a process that never loads the extension.
  auto attached_or_paused = [&] {
    return !agent.attached().empty() || (!agent.capturing() && !finder.current().empty());
  };
  bool attached_once = attached_or_paused();
  while (g_stop_signal == 0 && !targets_gone && !agent.stdout_broken()) {
    const int64_t now = now_ns();
    if (now >= deadline) break;
    attached_once = attached_once || attached_or_paused();
    if (!opts.pids.empty() && !attached_once && now >= start + kTargetWaitNs) break;
    const int timeout =
        static_cast<int>(std::min<int64_t>(kPollMs, (deadline - now) / 1'000'000 + 1));
    if (!agent.poll(timeout)) break;
    if (now_ns() >= next_rescan) {
      agent.apply(finder.rescan());
      say_notes(finder);
      const bool all_attached = !opts.pids.empty() && finder.waiting_pids().empty() && !agent.attached().empty();
      next_rescan = now_ns() + (all_attached ? kRescanAttachedNs : kRescanNs);
      targets_gone = finder.pids_all_gone();
    }
    agent.collect(false);
    say_newer_contract(agent.joiner_stats());
    say_store_failure();
    if (duty.enabled()) {
      const int64_t unow = unix_now_ns();
      if (const bool on = duty.on_at(unow); on != agent.capturing()) {
        agent.set_capture(on, finder.current());
        if (continuous) continuous->capture_changed(on, unow);
        if (on) on_since = unow;
        else profiled_ns += unow - on_since;
      }
    }
    if (continuous) {
      const LoaderStats ls = loader.stats();
      continuous->set_capture_counters(ls.lost, ls.shed);
      continuous->tick(unix_now_ns());
    }
    if (health) health->beat(health_clock_ns());
  }
  if (health) health->set_stopping(health_clock_ns());
  // From here on a stop signal interrupts no system call (a write to a pipe
  // cut short would lose the summary): it only hurries what is left.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  agent.finish();
  say_newer_contract(agent.joiner_stats());
  if (agent.capturing()) profiled_ns += unix_now_ns() - on_since;
  const LoaderStats stats = loader.stats();
  loaded.value().reset();  // detach everything now: the targets' semaphores go back to 0
  agent.set_lost_events(stats.lost);
  agent.set_sessions_shed(stats.shed);
  if (continuous) continuous->set_capture_counters(stats.lost, stats.shed);

  if (g_stop_signal != 0) say(std::string("stopping on ") + stop_signal_name());
  else if (targets_gone)
    say("every target process has exited");
  else if (agent.stdout_broken())
    say("stdout was closed: stopping");
  if (agent.poll_error() != 0)
    say(std::string("reading the ring buffer failed: ") + std::strerror(agent.poll_error()));
  if (duty.enabled()) {
    char line[160];
    std::snprintf(line, sizeof line, "profiled %.0f s of %.0f s (%.0f%%, duty cycle %s)", profiled_ns / 1e9,
                  (now_ns() - start) / 1e9, 100.0 * profiled_ns / std::max<int64_t>(now_ns() - start, 1),
                  duty.text().c_str());
    say(line);
  }
  if (continuous) {
    // The partial period into the spool, then a bounded attempt to deliver;
    // what is left stays in the spool for the next run.
    continuous->finish(unix_now_ns());
    // In steps, so that a second stop signal ends the wait (the spool keeps
    // what it holds for the next run).
    constexpr int64_t kFlushMs = 10'000, kFlushStepMs = 1'000;
    bool empty = false;
    for (int64_t waited = 0; !empty && waited < kFlushMs && !hurried(); waited += kFlushStepMs)
      empty = spool->flush(kFlushStepMs);
    if (!empty && hurried()) {
      say(std::string("a second ") + stop_signal_name() + ": not waiting for the sink; " +
          plural(spool->stats().pending, "item stays", "items stay") + " in " + spool->dir() +
          " for the next run");
    }
    spool->stop();
    const SpoolStats st = spool->stats();
    std::string line = "stopped: delivered " + std::to_string(st.delivered) + ", spooled " +
                       std::to_string(st.pending) + ", dropped " + std::to_string(st.dropped()) + "; sink " +
                       sink->describe();
    if (const auto kept = sink->retention()) line += "; " + retention_text(*kept);
    if (!empty) {
      line += "; left in " + spool->dir() + " for the next run";
      if (!st.last_error.empty()) line += " (" + st.last_error + ")";
    }
    if (st.others > 0) line += "; left in " + spool->dir() + " for other sinks: " + spool->others_text();
    write_stdout("mlprof-ebpf: " + line + "\n");
    if (agent.poll_error() != 0) return kExitError;
    return stats.lost > 0 ? kExitLost : kExitOk;
  }

  int status = agent.poll_error() != 0 ? kExitError : kExitOk;
  // --pid processes that never loaded the extension, however the capture ended.
  attached_once = attached_once || attached_or_paused();
  const std::vector<pid_t> never_loaded = attached_once ? std::vector<pid_t>{} : finder.waiting_pids();
  if (!never_loaded.empty()) {
    const int64_t waited_s = (now_ns() - start) / 1'000'000'000;
    say("pid " + std::to_string(never_loaded.front()) + " did not load mlflow_profiler in " +
        std::to_string(waited_s) + " s: the target must import mlflow_profiler (autoprofile() "
        "or a profiling session) before it can be profiled from outside");
    if (status == kExitOk) status = kExitNotPython;
  }
  const std::string summary = agent.pods_line() + agent.report().summary_text();
  // -o FILE: the chosen format, or the text summary; always atomic.
  if (!opts.output.empty()) {
    auto w = opts.format ? save_profile(agent.combined(), opts.output, *opts.format)
                         : write_file_atomic(opts.output, summary);
    if (!w) {
      say("cannot write " + opts.output + ": " + w.error().message);
      status = kExitError;
    } else {
      say("wrote " + opts.output + " (" + format_label(opts.format) + ", " +
          plural(agent.report().sessions(), "session", "sessions") + ")");
    }
  }
  // --store: the capture as one source; with --stream, what is still queued.
  if (writer) {
    if (!opts.stream && agent.report().sessions() > 0) writer->add(agent.combined());
    writer->finish();
    say_store_failure();
    const StoreWriterStats st = writer->stats();
    if (st.added > 0) {
      std::string line = "added to the store " + opts.store + ": ";
      line += st.added == 1 ? "source " + std::to_string(st.first_source)
                            : "sources " + std::to_string(st.first_source) + " to " +
                                  std::to_string(st.last_source);
      const uint64_t sessions = opts.stream ? st.added : agent.report().sessions();
      say(line + " (ebpf, " + plural(sessions, "session", "sessions") + ")");
    }
    if (opts.stream && st.failed + st.dropped > 0) {
      std::string line = plural(st.failed + st.dropped, "session was", "sessions were") +
                         " not added to the store " + opts.store + ":";
      if (st.failed > 0) line += " " + std::to_string(st.failed) + " failed (the first is said above)";
      if (st.dropped > 0) {
        line += std::string(st.failed > 0 ? "," : "") + " " + std::to_string(st.dropped) +
                " dropped (the store fell " + std::to_string(StoreWriter::kDefaultCapacity) +
                " sessions behind)";
      }
      say(line);
    }
    if (st.failed + st.dropped > 0) status = kExitError;
  }
  if (opts.output.empty() && opts.format) {
    // The document goes to stdout; the summary to stderr, out of its way.
    if (!write_stdout(export_profile(agent.combined(), *opts.format))) status = kExitError;
    std::fputs(summary.c_str(), stderr);
  } else if (!write_stdout(summary) || agent.stdout_broken()) {
    say("cannot write to stdout");
    status = kExitError;
  }
  if (agent.report().sessions() == 0 && never_loaded.empty()) {
    if (agent.joiner_stats().bodies_unknown_version == 0)  // else the newer contract's line said why
      say("no predict() session was captured: does the target call predict() under autoprofile() "
          "(or a profiling session) while the agent runs?");
    if (status == kExitOk) status = kExitNothing;
  }
  if (opts.verbose > 0) {
    const JoinerStats js = agent.joiner_stats();
    say("records " + std::to_string(stats.records) + ", lost " + std::to_string(stats.lost) +
        ", shed " + std::to_string(stats.shed) +
        ", sessions " + std::to_string(js.sessions_finished) + " (truncated " +
        std::to_string(js.sessions_truncated) + "), unmatched " + std::to_string(js.unmatched) +
        ", malformed " + std::to_string(js.malformed) +
        (js.lanes_unjoined > 0
             ? ", lanes without a host thread id " + std::to_string(js.lanes_unjoined)
             : ""));
  }
  if (stats.shed > 0) {
    say(plural(stats.shed, "session was", "sessions were") +
        " not captured: the agent fell behind (half its ring buffer unread) and skipped them whole, "
        "so every session captured is complete; --duty-cycle, or fewer targets per agent, lowers the load");
  }
  if (stats.lost > 0) {
    say(plural(stats.lost, "event was", "events were") +
        " lost (the ring buffer was full): the profile misses them and says so; a shallower "
        "capture depth in the target or fewer targets per agent helps");
    if (status == kExitOk) status = kExitLost;
  }
  return status;
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
