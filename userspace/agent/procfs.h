#pragma once
// Reading /proc and the cgroup v2 hierarchy: small readers of a file or a
// directory, and pure parsers of one file's contents (/proc/PID/maps,
// /proc/PID/cgroup, /proc/self/mountinfo), so tests check the parsers on
// recorded text. Container discovery (containers.h) and TargetFinder
// (targets.h) read the host through these.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlprof::agent {

// ---- small file helpers -----------------------------------------------------

// The whole file (core's read_file: to EOF, since /proc files report size 0),
// at most `limit` bytes; nullopt when it cannot be read.
std::optional<std::string> read_text(const std::string& path, size_t limit = 64u << 20);
// The entries of a directory, sorted, without "." and ".."; none when it
// cannot be opened.
std::vector<std::string> list_dir(const std::string& path);
// The lines of a text, without their '\n'.
std::vector<std::string_view> split_lines(std::string_view text);
// True for a non-empty run of lowercase hex digits (container ids).
bool is_hex(std::string_view s);
// True for a /proc entry that is a process: all decimal digits.
bool is_pid_name(const std::string& s);
// A path from /proc/PID/maps or /proc/PID/exe without the " (deleted)" the
// kernel appends to a file removed since it was mapped.
std::string cut_deleted(std::string path);

// `path` (absolute, as the process sees it) opened in the root of the
// process whose /proc directory is `proc_dir`. Symlinks, absolute ones too,
// resolve inside that root, never in the agent's: a target that points its
// /tmp at /etc gets its own /etc (openat2 RESOLVE_IN_ROOT, Linux 5.6; magic
// links refused). `flags` as open(2)'s, O_CLOEXEC added; O_CREAT is not
// allowed. The descriptor, or -1 with errno set.
int open_in_root(const std::string& proc_dir, const std::string& path, int flags);
// True when `path` (as the process sees it) is a regular file, and the one
// that `proc_dir`/root + `path`, which libbpf and the ELF readers open, also
// reaches: an absolute symlink there resolves in the agent's root, and a
// FIFO would block the agent's open. Checked just before the open; a target
// that swaps the file in between can still win that race (docs/ebpf.md).
// With `same_root` (the agent's mount namespace), `path` itself.
bool regular_file_in_root(const std::string& proc_dir, const std::string& path, bool same_root);

// ---- parsers of one file's contents (pure) ----------------------------------

// The path of the extension in a /proc/PID/maps text (the first line whose
// file is .../mlflow_profiler/_core*.so, " (deleted)" cut), or nullopt.
std::optional<std::string> extension_in_maps(std::string_view maps);
// The cgroup v2 path in a /proc/PID/cgroup text (the "0::" line), or nullopt
// (a v1-only process: no such line).
std::optional<std::string> cgroup_v2_path(std::string_view proc_cgroup);
// The container id (64 hex) a cgroup path names, for the layouts of Docker
// (cgroupfs /docker/<id>, systemd docker-<id>.scope), Podman (libpod-<id>,
// libpod-conmon excluded), containerd/CRI (cri-containerd-<id>.scope, nerdctl-<id>.scope,
// /kubepods/.../<id>), CRI-O (crio-<id>.scope); the outermost when several
// do (a sub-cgroup a container made cannot pass for another); "" if none.
std::string container_id_in_cgroup(std::string_view cgroup_path);
// The v2 mount point in a /proc/self/mountinfo text ("" if none).
std::string cgroup2_mount_in_mountinfo(std::string_view mountinfo);
// The container a /proc/PID/cgroup text names, as {id, v2 path}: the v2
// line, else a v1 line (then the path is ""); {"", ""} if none.
std::pair<std::string, std::string> container_in_proc_cgroup(std::string_view text);

}  // namespace mlprof::agent
