#pragma once
// Checks made before anything attaches, each answering "" (fine) or one line
// that names the cause and the fix (docs/ebpf.md, "Exit status"): the agent
// has the capabilities it needs and the kernel has BTF, -o can be written,
// the agent sees the host's processes (hostPID), a --pid target can ever be
// profiled. The deciding logic is pure, so tests/cpp checks it on plain
// values; the wrappers read /proc.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace mlprof::agent {

// The effective capability set (capget(2)).
struct Capabilities {
  uint64_t effective = 0;
  bool has(int cap) const { return (effective >> cap) & 1u; }
};
// The agent's own effective set through capget(2) (libcap only for this
// would be one more library to ship in the image).
Capabilities effective_capabilities();

// One line naming what is missing and how to grant it, or "" when all is there.
// CAP_BPF + CAP_PERFMON load and attach the programs (CAP_SYS_ADMIN stands
// for both before 5.8); CAP_SYS_PTRACE reads another process's maps and
// opens its binary through /proc/PID/root, which a container's process
// (with capabilities the agent's set lacks) refuses even to the same uid.
std::string missing_privileges(const Capabilities& caps);

// The kernel's BTF, which the CO-RE programs are relocated against: "" or
// the line saying it is missing. MLPROF_VMLINUX_BTF names another file: only
// the tests use it, to see this message on a kernel that does have BTF.
std::string missing_btf();

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
