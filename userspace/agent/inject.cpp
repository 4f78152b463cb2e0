#include "agent/inject.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rapidjson/document.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "agent/clock.h"
#include "agent/json_parse.h"
#include "agent/procfs.h"

namespace mlprof::agent {

namespace {

// What is read of a small /proc file (environ, cmdline, status, Yama's
// ptrace_scope) through procfs.h's read_text; maps is read whole.
constexpr size_t kSmallProcBytes = 1u << 20;

std::string hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string pid_text(pid_t pid) { return "pid " + std::to_string(pid); }

// The fix every "cannot inject" line ends with: the restart that needs no injection.
constexpr const char* kRestartFix =
    "restart it with mlflow_profiler installed and MLFLOW_PROFILER_AUTOPROFILE=1 "
    "MLFLOW_PROFILER_SAMPLE_RATE=0 (or import mlflow_profiler and call "
    "autoprofile(sample_rate=0) in it), then run mlprof-ebpf --pid without --inject";

std::string string_member(const rapidjson::Value& v, const char* name) {
  auto it = v.FindMember(name);
  return it != v.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

// The first line of the target's uid list ("Uid:\t0\t0\t0\t0"): the fsuid (4th).
std::optional<uint32_t> fs_uid(const std::string& status) {
  const size_t at = status.find("\nUid:");
  if (at == std::string::npos) return std::nullopt;
  unsigned r = 0, e = 0, s = 0, f = 0;
  if (std::sscanf(status.c_str() + at + 5, "%u %u %u %u", &r, &e, &s, &f) != 4) return std::nullopt;
  return f;
}

}  // namespace

// ---- pure pieces -------------------------------------------------------------

std::string inject_script(const std::string& result_dir, const std::string& package_dir) {
  // Runs in a fresh namespace (PyRun_String) at a safe point of the main
  // thread. Every exception is caught and written to the result: a failing
  // injection must leave the program as it was, and CPython would print an
  // uncaught one on the program's stderr.
  static const char* kBody = R"PY(# mlprof-ebpf --inject (PEP 768): loads mlflow_profiler
# and turns on autoprofile(sample_rate=0): predict() is recorded only while
# an agent is attached.
def _mlprof_inject(result_dir, package_dir):
    import sys, time
    t0 = time.monotonic()
    out = {"ok": False, "python": sys.version.split()[0],
           "executable": sys.executable or "", "stage": "start"}
    ours = lambda m: m == "mlflow_profiler" or m.startswith("mlflow_profiler.")
    before = set(m for m in list(sys.modules) if ours(m))
    try:
        import os
        try:
            os.unlink(os.path.join(result_dir, "inject.py"))
        except OSError:
            pass
        out["tried"] = [package_dir] if package_dir else [p for p in sys.path if isinstance(p, str)]
        out["stage"] = "import"
        added = bool(package_dir) and package_dir not in sys.path
        if added:
            sys.path.insert(0, package_dir)
        try:
            import mlflow_profiler
        finally:
            if added:
                try:
                    sys.path.remove(package_dir)
                except ValueError:
                    pass
        out["file"] = str(getattr(mlflow_profiler, "__file__", "") or "")
        out["version"] = str(getattr(mlflow_profiler, "__version__", ""))
        if package_dir:
            # The package directory's parent: its files may be symlinks elsewhere.
            found = os.path.dirname(os.path.abspath(list(mlflow_profiler.__path__)[0]))
            if os.path.realpath(found) != os.path.realpath(package_dir):
                raise ImportError("mlflow_profiler came from %s, not from %s"
                                  % (out["file"], package_dir))
        out["stage"] = "autoprofile"
        from mlflow_profiler import _autoprofile
        if _autoprofile.is_enabled():
            out["already"] = True  # the program's own settings stay
        else:
            mlflow_profiler.autoprofile(sample_rate=0)
        out["ok"] = True
    except BaseException as exc:
        out["error"] = ("%s: %s" % (type(exc).__name__, exc)).replace("\n", " ")
        if out["stage"] == "import":
            for m in [m for m in list(sys.modules) if ours(m) and m not in before]:
                sys.modules.pop(m, None)
    out["seconds"] = time.monotonic() - t0
    try:
        import json, os
        tmp = os.path.join(result_dir, "result.tmp")
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.rename(tmp, os.path.join(result_dir, "result.json"))
    except BaseException:
        pass
)PY";
  return std::string(kBody) +
         "\n\ndef _mlprof_path(h):\n    import os\n    return os.fsdecode(bytes.fromhex(h))\n\n"
         "_mlprof_inject(_mlprof_path(\"" +
         hex(result_dir) + "\"), _mlprof_path(\"" + hex(package_dir) + "\"))\n";
}

InjectOutcome outcome_of_result(pid_t pid, std::string_view result_json,
                                const std::string& package_dir) {
  rapidjson::Document doc;
  if (!parse_json_iterative(doc, result_json) || !doc.IsObject()) {
    return {InjectVerdict::kError, pid_text(pid) +
                                       ": the injected script's result is unreadable: " +
                                       std::string(result_json.substr(0, 200))};
  }
  const std::string python = string_member(doc, "python");
  const std::string exe = string_member(doc, "executable");
  const std::string who =
      pid_text(pid) + " (Python " + python + (exe.empty() ? "" : ", " + exe) + ")";
  const auto ok = doc.FindMember("ok");
  if (ok != doc.MemberEnd() && ok->value.IsBool() && ok->value.GetBool()) {
    std::string line = who + ": loaded mlflow_profiler " + string_member(doc, "version") +
                       " from " + string_member(doc, "file");
    const auto already = doc.FindMember("already");
    if (already != doc.MemberEnd() && already->value.IsBool() && already->value.GetBool()) {
      line += " (PEP 768); its own autoprofile() settings stay";
    } else {
      line +=
          " (PEP 768) and turned on autoprofile(sample_rate=0): its predict() calls are "
          "recorded only while an agent is attached";
    }
    const auto secs = doc.FindMember("seconds");
    if (secs != doc.MemberEnd() && secs->value.IsNumber()) {
      char took[96];
      std::snprintf(took, sizeof took, "; the import took its main thread %.0f ms",
                    secs->value.GetDouble() * 1e3);
      line += took;
    }
    return {InjectVerdict::kLoaded, line};
  }
  const std::string stage = string_member(doc, "stage");
  const std::string error = string_member(doc, "error");
  if (stage == "autoprofile") {
    return {InjectVerdict::kCannotProfile,
            who + ": mlflow_profiler loaded from " + string_member(doc, "file") +
                ", but autoprofile() failed: " + error +
                " (autoprofile() patches MLflow's PyFuncModel: the target must import MLflow)"};
  }
  std::string tried;
  const auto t = doc.FindMember("tried");
  if (t != doc.MemberEnd() && t->value.IsArray()) {
    for (const auto& p : t->value.GetArray()) {
      if (!p.IsString()) continue;
      tried += (tried.empty() ? "" : ", ") + std::string(p.GetString()[0] ? p.GetString() : "''");
    }
  }
  std::string line = who + ": cannot import mlflow_profiler: " + error;
  if (!package_dir.empty()) {
    line += "; tried --inject-path " + package_dir +
            " (as the target sees it): give a directory holding a mlflow_profiler built for "
            "Python " +
            python;
  } else {
    line += "; tried its sys.path (" + tried +
            "): install mlflow-profiler into its environment, or give --inject-path DIR (a "
            "directory, as the target sees it, holding a mlflow_profiler built for Python " +
            python + ")";
  }
  return {InjectVerdict::kCannotProfile, line};
}

std::string remote_debug_off_reason(std::string_view environ, std::string_view cmdline) {
  // CPython checks the variable's presence (getenv), not its value; -E
  // ignores it, but then remote debugging would be on.
  size_t at = 0;
  while (at < environ.size()) {
    size_t end = environ.find('\0', at);
    if (end == std::string_view::npos) end = environ.size();
    if (environ.substr(at, end - at).starts_with("PYTHON_DISABLE_REMOTE_DEBUG="))
      return "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment";
    at = end + 1;
  }
  std::string_view prev;
  at = 0;
  while (at < cmdline.size()) {
    size_t end = cmdline.find('\0', at);
    if (end == std::string_view::npos) end = cmdline.size();
    const std::string_view arg = cmdline.substr(at, end - at);
    if (arg == "-Xdisable-remote-debug" || (prev == "-X" && arg == "disable-remote-debug"))
      return "-X disable-remote-debug is on its command line";
    prev = arg;
    at = end + 1;
  }
  return "its interpreter was built --without-remote-debug, or started with remote debugging "
         "off (PYTHON_DISABLE_REMOTE_DEBUG, -X disable-remote-debug)";
}

std::string ptrace_scope_refusal(pid_t pid, std::string_view scope_text) {
  if (scope_text.empty() || scope_text[0] != '3') return {};
  return "kernel.yama.ptrace_scope is 3: no process may write another's memory, which --inject "
         "needs (PEP 768), and it stays 3 until the next boot; instead " +
         std::string("restart ") + pid_text(pid) +
         " with mlflow_profiler installed and MLFLOW_PROFILER_AUTOPROFILE=1 "
         "MLFLOW_PROFILER_SAMPLE_RATE=0, and run mlprof-ebpf --pid without --inject";
}

std::string too_old_line(pid_t pid, const PyVersion& version) {
  return pid_text(pid) + " runs Python " + version.text() +
         ", which cannot run code sent from outside (PEP 768 came in Python 3.14): " + kRestartFix;
}

// ---- one injection -----------------------------------------------------------

Injection::Injection(pid_t pid, const InjectOptions& opts)
    : pid_(pid), opts_(opts), process_(pid, opts.proc), started_ns_(now_ns()) {}

void Injection::refuse(InjectVerdict verdict, std::string line) {
  outcome_ = InjectOutcome{verdict, std::move(line)};
}

void Injection::refuse_send(const RemoteExecError& why) {
  const std::string dir = opts_.proc + "/" + std::to_string(pid_);
  const std::string who = pid_text(pid_) + " (Python " + offsets_->version.text() + ")";
  switch (why.reason) {
    case RemoteExecRefusal::kDisabled: {
      const std::string reason =
          remote_debug_off_reason(read_text(dir + "/environ", kSmallProcBytes).value_or(""),
                                  read_text(dir + "/cmdline", kSmallProcBytes).value_or(""));
      refuse(InjectVerdict::kCannotProfile, who + " does not allow code sent from outside " +
                                                "(PEP 768): " + reason + "; " + kRestartFix);
      break;
    }
    case RemoteExecRefusal::kPermission:
      refuse(InjectVerdict::kPrivilege, pid_text(pid_) + ": " + why.message);
      break;
    case RemoteExecRefusal::kNoMainThread:
      refuse(InjectVerdict::kCannotProfile, who + ": " + why.message);
      break;
    default:
      refuse(InjectVerdict::kError, who + ": " + why.message);
  }
}

// start()'s step 3: the interpreter's debug offsets and state, read
// before anything is written; false when it refused (why: the reason).
bool Injection::check_interpreter(const std::string& who, RemoteExecError& why) {
  auto offsets = process_.debug_offsets(&why);
  if (!offsets) {
    switch (why.reason) {
      case RemoteExecRefusal::kTooOld:
        refuse(InjectVerdict::kCannotProfile, too_old_line(pid_, why.version));
        break;
      case RemoteExecRefusal::kPermission:
        refuse(InjectVerdict::kPrivilege, who + ": " + why.message);
        break;
      case RemoteExecRefusal::kIo:
        refuse(InjectVerdict::kError, who + ": " + why.message);
        break;
      default:
        refuse(InjectVerdict::kCannotProfile,
               who + ": cannot inject: " + why.message + "; " + kRestartFix);
    }
    return false;
  }
  offsets_ = offsets.value();
  // The interpreter's state, checked before anything is written.
  if (!process_.locate(offsets_.value(), &why)) {
    refuse_send(why);
    return false;
  }
  return true;
}

// start()'s step 4: the script, in the target's filesystem. The directory
// is the agent's (it reads and removes it); 0700 when the target runs as the
// agent's uid, else 0733: the target may create its result there but
// nobody may list it, and the result is trusted only if its owner is
// the target's uid. False when it refused.
bool Injection::write_script(const std::string& dir, const std::string& who) {
  auto status = read_text(dir + "/status", kSmallProcBytes);
  const auto uid = status ? fs_uid(*status) : std::nullopt;
  if (!uid) {
    refuse(InjectVerdict::kError, who + ": cannot read its uid from " + dir + "/status");
    return false;
  }
  target_uid_ = *uid;
  std::string tried;
  int last_errno = 0;
  std::random_device rng;
  for (const char* tmp : {"/tmp", "/dev/shm", "/var/tmp"}) {
    // Opened in the target's root: its /tmp may be a symlink to anywhere,
    // and the agent (root) must not create a directory in the host's /etc.
    const int tmp_fd = open_in_root(dir, tmp, O_PATH | O_DIRECTORY);
    std::string name;
    int fd = -1;
    for (int attempt = 0; tmp_fd >= 0 && attempt < 8; ++attempt) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "mlprof-inject-%08x", rng());
      name = buf;
      if (::mkdirat(tmp_fd, name.c_str(), 0700) == 0) {
        fd = ::openat(tmp_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        break;
      }
      if (errno != EEXIST) break;
    }
    if (fd < 0 || ::fchmod(fd, *uid == ::geteuid() ? 0700 : 0733) != 0) {
      last_errno = errno;
      if (fd >= 0) {
        ::close(fd);
        ::unlinkat(tmp_fd, name.c_str(), AT_REMOVEDIR);
      }
      if (tmp_fd >= 0) ::close(tmp_fd);
      tried += std::string(tried.empty() ? "" : ", ") + tmp;
      continue;
    }
    dir_fd_ = fd;
    tmp_fd_ = tmp_fd;
    dir_name_ = name;
    dir_target_ = std::string(tmp) + "/" + name;
    break;
  }
  if (dir_fd_ < 0) {
    refuse(InjectVerdict::kError,
           who + ": cannot write the injected script into its filesystem (tried " + tried +
               " as it sees them: " + std::strerror(last_errno) +
               "): give it a writable /tmp (in a pod: an emptyDir volume at /tmp)");
    return false;
  }
  const std::string script = inject_script(dir_target_, opts_.package_dir);
  const int sfd =
      ::openat(dir_fd_, "inject.py", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const bool written =
      sfd >= 0 && ::fchmod(sfd, 0644) == 0 &&
      ::write(sfd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
  const int write_errno = errno;
  if (sfd >= 0) ::close(sfd);
  if (!written) {
    refuse(InjectVerdict::kError, who + ": cannot write the injected script " + dir_target_ +
                                      "/inject.py: " + std::strerror(write_errno));
    return false;
  }
  return true;
}

std::unique_ptr<Injection> Injection::start(pid_t pid, const InjectOptions& opts) {
  std::unique_ptr<Injection> in(new Injection(pid, opts));
  const std::string dir = opts.proc + "/" + std::to_string(pid);
  const std::string who = pid_text(pid);

  // 1. Loaded already: the agent attaches as usual.
  if (auto maps = read_text(dir + "/maps", 64u << 20); maps && extension_in_maps(*maps)) {
    in->refuse(InjectVerdict::kAlreadyLoaded,
               who + " has loaded mlflow_profiler already: nothing to inject");
    return in;
  }
  // 2. Yama.
  if (auto scope = read_text(opts.ptrace_scope, kSmallProcBytes)) {
    if (std::string line = ptrace_scope_refusal(pid, *scope); !line.empty()) {
      in->refuse(InjectVerdict::kPrivilege, line);
      return in;
    }
  }
  // 3. The interpreter.
  RemoteExecError why;
  if (!in->check_interpreter(who, why)) return in;
  // 4. The script, in the target's filesystem.
  if (!in->write_script(dir, who)) return in;

  // 5. PEP 768. From here until its result is read, the script may be
  // pending: the destructor takes it back.
  in->may_be_pending_ = true;
  if (!in->process_.send(in->offsets_.value(), in->dir_target_ + "/inject.py", &why))
    in->refuse_send(why);
  return in;
}

const InjectOutcome* Injection::wait(const std::function<bool()>& stop) {
  if (outcome_) return &*outcome_;
  const std::string who = pid_text(pid_);
  const int64_t deadline = started_ns_ + opts_.timeout_ns;
  bool taken_back_tried = false;
  int64_t until = deadline;
  for (;;) {
    // O_NONBLOCK: the target may have made result.json a FIFO.
    const int fd = ::openat(dir_fd_, "result.json", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      std::string text;
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == target_uid_ &&
          st.st_size < (1 << 20)) {
        text.resize(static_cast<size_t>(st.st_size));
        if (::pread(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
          text.clear();
      }
      ::close(fd);
      may_be_pending_ = false;
      if (text.empty()) {
        refuse(InjectVerdict::kError, who +
                                          ": the injected script's result could not be read "
                                          "(not a file of the target's uid)");
      } else {
        outcome_ = outcome_of_result(pid_, text, opts_.package_dir);
      }
      break;
    }
    if (::kill(pid_, 0) != 0 && errno == ESRCH) {
      refuse(InjectVerdict::kCannotProfile, who + " exited before the injected script ran");
      break;
    }
    if (stop && stop()) {
      process_.cancel(*offsets_);
      may_be_pending_ = false;
      remove_files();
      return nullptr;
    }
    const int64_t now = now_ns();
    if (now >= until) {
      if (!taken_back_tried) {
        taken_back_tried = true;
        // Not taken yet: take it back, so that it never runs later. Taken
        // (it is running now): give it a few more seconds to finish.
        const bool taken_back = process_.cancel(*offsets_);
        may_be_pending_ = false;
        if (taken_back) {
          char line[320];
          std::snprintf(line, sizeof line,
                        "%s: its main thread ran no Python code in %g s, so the injected "
                        "script did not run (it was taken back: nothing changed in the "
                        "process); a main thread blocked in a C call (a join(), a long native "
                        "call) never runs it; ",
                        who.c_str(), static_cast<double>(opts_.timeout_ns) / 1e9);
          refuse(InjectVerdict::kCannotProfile, std::string(line) + kRestartFix);
          break;
        }
        until = now + 5'000'000'000;
        continue;
      }
      refuse(InjectVerdict::kCannotProfile,
             who + ": the injected script started but wrote no result in " +
                 std::to_string((now - started_ns_) / 1'000'000'000) +
                 " s (a slow import of mlflow_profiler, or it was interrupted)");
      break;
    }
    ::usleep(5000);
  }
  remove_files();
  return &*outcome_;
}

void Injection::remove_files() {
  if (dir_fd_ < 0) return;
  for (const char* name : {"inject.py", "result.json", "result.tmp"}) ::unlinkat(dir_fd_, name, 0);
  ::close(dir_fd_);
  dir_fd_ = -1;
  ::unlinkat(tmp_fd_, dir_name_.c_str(), AT_REMOVEDIR);
  ::close(tmp_fd_);
  tmp_fd_ = -1;
}

Injection::~Injection() {
  if (may_be_pending_) process_.cancel(*offsets_);
  remove_files();
}

// ---- every --pid -----------------------------------------------------------

InjectBatch::InjectBatch(const std::vector<pid_t>& pids, const InjectOptions& given) {
  InjectOptions opts = given;
  // Only the tests set it, to see the timeout's line in a second.
  if (const char* t = std::getenv("MLPROF_INJECT_TIMEOUT_S"); t != nullptr && *t != '\0')
    opts.timeout_ns =
        std::max<int64_t>(100'000'000, static_cast<int64_t>(std::strtod(t, nullptr) * 1e9));
  for (pid_t pid : pids) {
    injections_.push_back(Injection::start(pid, opts));
    said_.push_back(false);
  }
}

std::optional<InjectVerdict> InjectBatch::say_refusals(const Say& say) {
  std::optional<InjectVerdict> first;
  size_t refused = 0;
  for (size_t i = 0; i < injections_.size(); ++i) {
    const auto& o = injections_[i]->outcome();
    if (!o || o->verdict == InjectVerdict::kAlreadyLoaded) continue;
    say(o->line);
    said_[i] = true;
    ++refused;
    if (!first) first = o->verdict;
  }
  return refused == injections_.size() ? first : std::nullopt;
}

std::optional<InjectVerdict> InjectBatch::finish(const Say& say,
                                                 const std::function<bool()>& stop) {
  std::optional<InjectVerdict> first;
  bool any_loaded = false;
  for (size_t i = 0; i < injections_.size(); ++i) {
    const InjectOutcome* waited = injections_[i]->wait(stop);
    if (waited == nullptr) return std::nullopt;
    const InjectOutcome& o = *waited;
    if (!said_[i]) say(o.line);
    said_[i] = true;
    if (o.verdict == InjectVerdict::kLoaded || o.verdict == InjectVerdict::kAlreadyLoaded) {
      any_loaded = true;
    } else if (!first) {
      first = o.verdict;
    }
  }
  return any_loaded ? std::nullopt : first;
}

}  // namespace mlprof::agent
