#pragma once
// Checks made before anything attaches, each answering "" (fine) or one line
// that names the cause and the fix (docs/ebpf.md, "Exit status"): -o can be
// written, the agent sees the host's processes (hostPID), a --pid target can
// ever be profiled. The deciding logic is pure, so tests/cpp checks it on
// plain values; the wrappers read /proc.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace mlprof::agent {

// -o FILE: its directory exists, is a directory, and a file can be created
// there (a temporary one is created and removed). "" or one line.
std::string output_unwritable(const std::string& output);

// The inode of the initial pid namespace (the kernel's PROC_PID_INIT_INO):
// /proc/self/ns/pid of a process on the host, or in a hostPID pod, names it.
constexpr uint64_t kInitPidNsInode = 0xEFFFFFFCu;

// True when the agent sees only its own container's processes: its pid
// namespace is not the initial one, and pid 1 there is the agent itself or
// a pod's or runtime's init (pause, catatonit, docker-init, tini). A node
// that is itself a container (kind) has the node's init as pid 1, so a
// hostPID pod there is not taken for one without it.
bool sees_only_own_container(uint64_t pid_ns_inode, bool self_is_pid1, std::string_view pid1_comm);

// The same, read from `proc`: "" or the line naming the fix (hostPID: true,
// --pid=host). "" also when the namespace cannot be read.
std::string host_pids_hidden(const std::string& proc = "/proc");

// True for a Python process: its executable's name starts with "python",
// or it maps a libpython (an embedding server: uwsgi, mod_wsgi).
bool looks_like_python(std::string_view exe_path, std::string_view maps);

// --pid: one line for a process that is not Python (looks_like_python on its
// /proc files), or "". The caller asks only about a process without the
// extension and without mlprof USDT notes (TargetFinder's waiting pids).
std::string not_python_line(pid_t pid, const std::string& proc = "/proc");

}  // namespace mlprof::agent
