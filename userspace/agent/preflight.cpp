#include "agent/preflight.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/file_io.h"

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

}  // namespace

std::string output_unwritable(const std::string& output) {
  const size_t slash = output.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : output.substr(0, slash);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return "cannot write -o " + output + ": its directory " + dir + " does not exist (" +
           std::strerror(errno) + "); create it, or name a file in an existing directory";
  }
  if (!S_ISDIR(st.st_mode))
    return "cannot write -o " + output + ": " + dir + " is not a directory";
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
  const std::string_view base = slash == std::string_view::npos ? exe_path : exe_path.substr(slash + 1);
  if (base.substr(0, 6) == "python") return true;
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
