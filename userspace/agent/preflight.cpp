// The checks before attaching (preflight.h).

#include "agent/preflight.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "util/file_io.h"

namespace mlprof::agent {

namespace {

// The file's text (core's read_file), or "" when it cannot be read.
std::string read_small(const std::string& path) {
  auto text = read_file(path);
  return text ? std::move(text.value()) : std::string();
}

std::string read_link(const std::string& path) {
  char buf[4096];
  const ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Capability numbers newer than some installed headers.
constexpr int kCapSysPtrace = 19;
constexpr int kCapSysAdmin = 21;
constexpr int kCapPerfmon = 38;
constexpr int kCapBpf = 39;

}  // namespace

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

std::string missing_btf() {
  const char* env = std::getenv("MLPROF_VMLINUX_BTF");
  const std::string path = env != nullptr && *env != '\0' ? env : "/sys/kernel/btf/vmlinux";
  if (access(path.c_str(), R_OK) == 0) return {};
  return "no kernel BTF at " + path +
         ": this kernel was built without CONFIG_DEBUG_INFO_BTF; run a kernel with BTF "
         "(Debian 11+, Ubuntu 20.10+, RHEL 8.2+ kernels have it)";
}

std::string output_unwritable(const std::string& output) {
  const size_t slash = output.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : output.substr(0, slash);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return "cannot write -o " + output + ": its directory " + dir + " does not exist (" +
           std::strerror(errno) + "); create it, or name a file in an existing directory";
  }
  if (!S_ISDIR(st.st_mode)) return "cannot write -o " + output + ": " + dir + " is not a directory";
  // access(W_OK) says nothing of a read-only mount or a full inode table; the
  // atomic write at the end creates a temporary file beside -o, so try one.
  std::string probe = dir + "/.mlprof-ebpf-check-XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) {
    return "cannot write -o " + output + ": cannot create a file in " + dir + " (" +
           std::strerror(errno) +
           "); name a writable directory (in a container: a writable volume, e.g. a hostPath "
           "mount)";
  }
  close(fd);
  unlink(probe.c_str());
  return {};
}

bool sees_only_own_container(uint64_t pid_ns_inode, bool self_is_pid1, std::string_view pid1_comm) {
  if (pid_ns_inode == kInitPidNsInode) return false;
  if (self_is_pid1) return true;
  for (std::string_view init : {"pause", "catatonit", "docker-init", "tini", "dumb-init"}) {
    if (pid1_comm == init) return true;
  }
  return false;
}

std::string host_pids_hidden(const std::string& proc) {
  // "pid:[4026531836]"
  const std::string ns = read_link(proc + "/self/ns/pid");
  const size_t open = ns.find('[');
  if (open == std::string::npos) return {};
  const uint64_t inode = std::strtoull(ns.c_str() + open + 1, nullptr, 10);
  const bool self_is_pid1 = read_link(proc + "/self") == "1";
  const std::string comm = trim(read_small(proc + "/1/comm"));
  if (!sees_only_own_container(inode, self_is_pid1, comm)) return {};
  return "the agent sees only its own container's processes (its pid namespace " + ns +
         " is not the host's, and pid 1 is " + (self_is_pid1 ? "the agent" : comm) +
         "): run the pod with hostPID: true (podman/docker: --pid=host)";
}

bool looks_like_python(std::string_view exe_path, std::string_view maps) {
  const size_t slash = exe_path.rfind('/');
  const std::string_view base =
      slash == std::string_view::npos ? exe_path : exe_path.substr(slash + 1);
  if (base.starts_with("python")) return true;
  return maps.find("/libpython") != std::string_view::npos;
}

std::string not_python_line(pid_t pid, const std::string& proc) {
  const std::string dir = proc + "/" + std::to_string(pid);
  const std::string exe = read_link(dir + "/exe");
  const std::string maps = read_small(dir + "/maps");
  if (exe.empty() && maps.empty()) return {};  // unreadable or gone: not ours to judge
  if (looks_like_python(exe, maps)) return {};
  const std::string comm = trim(read_small(dir + "/comm"));
  return "pid " + std::to_string(pid) + " (" + comm + ", " + (exe.empty() ? "?" : exe) +
         ") is not a Python process and its executable has no mlprof USDT notes: give the pid "
         "of a Python process that imports mlflow_profiler (or of an executable built with "
         "mlprof_usdt.h)";
}

}  // namespace mlprof::agent
