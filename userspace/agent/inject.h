#pragma once
// mlprof-ebpf --pid P --inject: loads mlflow_profiler into a live CPython
// 3.14+ process that never imported it, and turns on autoprofile(sample_rate=0)
// there, so that the agent attaches as to any autoprofiled process
// (docs/ebpf.md, "Injecting into a running Python").
//
// One injection, top to bottom:
//   1. the extension already mapped: nothing to do;
//   2. Yama's ptrace_scope 3 forbids writing another process's memory;
//   3. the interpreter (remote_exec.h): its version (older ones get one line
//      saying what to do instead), remote debugging enabled;
//   4. a script and a directory for its result are written into the
//      target's own filesystem (/proc/PID/root: /tmp, /dev/shm or /var/tmp
//      as the target sees them), readable by the target's uid;
//   5. the script's path is sent (PEP 768); the main thread runs it at its
//      next safe point: it imports mlflow_profiler (from --inject-path if
//      given), calls autoprofile(sample_rate=0), and writes what happened
//      (or the exception, caught: nothing is raised into the program) to
//      result.json;
//   6. the agent reads the result, and removes the directory.
// Each refusal is one line naming the cause and the fix, with a verdict
// that main.cpp turns into an exit status.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/remote_exec.h"

namespace mlprof::agent {

struct InjectOptions {
  // --inject-path DIR: the directory holding mlflow_profiler, as the target
  // sees it (its mount namespace); "" = the target's own sys.path.
  std::string package_dir;
  std::string proc = "/proc";
  std::string ptrace_scope = "/proc/sys/kernel/yama/ptrace_scope";
  // How long the main thread may take to run the script (it runs at the
  // next eval-breaker check: a busy or idle-polling loop takes ms; one
  // blocked in a C call never does).
  int64_t timeout_ns = 10'000'000'000;
};

// How an injection ended.
enum class InjectVerdict {
  kLoaded,         // the script imported mlflow_profiler and autoprofile() is on
  kAlreadyLoaded,  // the extension was mapped already: nothing was injected
  kCannotProfile,  // exit 7: too old, remote debugging off, the import or autoprofile() failed,
                   // the main thread did not run the script in time
  kPrivilege,      // exit 3: ptrace_scope 3, the memory writes refused
  kError,          // exit 1: the script could not be written, another debugger's script pending
};

struct InjectOutcome {
  InjectVerdict verdict = InjectVerdict::kError;
  std::string line;  // said on stderr (no "mlprof-ebpf: " prefix)
};

// ---- pure pieces (tests/cpp/test_inject.cpp) --------------------------------

// The Python source the target runs. `result_dir` and `package_dir` as the
// target sees them; they are passed as hex bytes, so any path is safe.
std::string inject_script(const std::string& result_dir, const std::string& package_dir);

// The outcome the script's result.json gives, for pid `pid`.
InjectOutcome outcome_of_result(pid_t pid, std::string_view result_json,
                                const std::string& package_dir);

// Why remote debugging is off, from the target's /proc/PID/environ
// (NUL-separated) and /proc/PID/cmdline: "PYTHON_DISABLE_REMOTE_DEBUG is set
// in its environment", "-X disable-remote-debug is on its command line", or
// the build / start-up option when neither says.
std::string remote_debug_off_reason(std::string_view environ, std::string_view cmdline);

// The refusal for Yama's /proc/sys/kernel/yama/ptrace_scope text ("3\n"),
// or "" when injection is possible (0-2; absent: no Yama).
std::string ptrace_scope_refusal(pid_t pid, std::string_view scope_text);

// The line for an interpreter without PEP 768 (3.13 and older).
std::string too_old_line(pid_t pid, const PyVersion& version);

// ---- injections ------------------------------------------------------------

// One injection into one process. start() runs steps 1-5; wait() step 6.
class Injection {
 public:
  static std::unique_ptr<Injection> start(pid_t pid, const InjectOptions& opts);
  ~Injection();  // takes back a script not yet run, removes the directory
  Injection(const Injection&) = delete;
  Injection& operator=(const Injection&) = delete;

  pid_t pid() const { return pid_; }
  // Set once the injection has ended (refused at start, or waited for).
  const std::optional<InjectOutcome>& outcome() const { return outcome_; }
  // Waits for the script's result (until opts.timeout_ns after start), or
  // until `stop` says so (a Ctrl-C): nullptr then, the script taken back
  // if the interpreter has not taken it yet.
  const InjectOutcome* wait(const std::function<bool()>& stop = {});

 private:
  Injection(pid_t pid, const InjectOptions& opts);
  void refuse(InjectVerdict verdict, std::string line);
  void refuse_send(const RemoteExecError& why);  // the interpreter's refusals
  // start()'s steps 3 and 4 (inject.cpp); false when they refused.
  bool check_interpreter(const std::string& who, RemoteExecError& why);
  bool write_script(const std::string& dir, const std::string& who);
  void remove_files();

  pid_t pid_;
  InjectOptions opts_;
  RemoteProcess process_;
  std::optional<DebugOffsets> offsets_;
  std::optional<InjectOutcome> outcome_;
  int dir_fd_ = -1;              // the script's directory
  int tmp_fd_ = -1;              // the target's /tmp (or /dev/shm ...) that holds it
  std::string dir_name_;         // its name there
  std::string dir_target_;       // and its path, as the target sees it
  uint32_t target_uid_ = 0;      // the target's fsuid: the owner its result file has
  bool may_be_pending_ = false;  // sent, and neither its result read nor taken back
  int64_t started_ns_ = 0;
};

// --inject over every --pid: starts them all, says refusals and outcomes.
// MLPROF_INJECT_TIMEOUT_S (seconds; only the tests set it) overrides
// opts.timeout_ns.
class InjectBatch {
 public:
  using Say = std::function<void(const std::string&)>;
  InjectBatch(const std::vector<pid_t>& pids, const InjectOptions& opts);

  // Says the refusals found at start. Returns the first one's verdict when
  // every pid was refused (the agent exits then), else nullopt.
  std::optional<InjectVerdict> say_refusals(const Say& say);
  // Waits for the rest and says each outcome. Returns the first refusal's
  // verdict when no pid has mlflow_profiler loaded now, else nullopt (also
  // when `stop` ended the wait: the capture then ends as a Ctrl-C ends it).
  std::optional<InjectVerdict> finish(const Say& say, const std::function<bool()>& stop = {});

 private:
  std::vector<std::unique_ptr<Injection>> injections_;
  std::vector<bool> said_;
};

}  // namespace mlprof::agent
