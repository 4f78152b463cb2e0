// Reading /proc and cgroup files (procfs.h): the readers go through core's
// read_file and opendir(3); the parsers only look at the text given.

#include "agent/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "util/file_io.h"

namespace mlprof::agent {

// ---- small file helpers ---------------------------------------------------

std::optional<std::string> read_text(const std::string& path, size_t limit) {
  auto text = read_file(path, limit);
  if (!text) return std::nullopt;
  return std::move(text.value());
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool is_pid_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string cut_deleted(std::string path) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.ends_with(kDeleted)) path.resize(path.size() - kDeleted.size());
  return path;
}

int open_in_root(const std::string& proc_dir, const std::string& path, int flags) {
  if ((flags & O_CREAT) != 0) {
    errno = EINVAL;
    return -1;
  }
  const int root = ::open((proc_dir + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return -1;
  open_how how{};
  how.flags = static_cast<uint64_t>(flags) | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  // glibc 2.36 has no openat2 wrapper.
  const auto fd = static_cast<int>(::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how));
  const int saved = errno;
  ::close(root);
  errno = saved;
  return fd;
}

bool regular_file_in_root(const std::string& proc_dir, const std::string& path, bool same_root) {
  struct stat via {};
  if (::stat((same_root ? path : proc_dir + "/root" + path).c_str(), &via) != 0 ||
      !S_ISREG(via.st_mode))
    return false;
  if (same_root) return true;
  const int fd = open_in_root(proc_dir, path, O_PATH);
  if (fd < 0) return false;
  struct stat in {};
  const bool same = ::fstat(fd, &in) == 0 && in.st_dev == via.st_dev && in.st_ino == via.st_ino;
  ::close(fd);
  return same;
}

// ---- parsers --------------------------------------------------------------

std::optional<std::string> extension_in_maps(std::string_view maps) {
  for (std::string_view line : split_lines(maps)) {
    // address perms offset dev inode, then the path (which may hold spaces).
    size_t pos = 0;
    for (int field = 0; field < 5; ++field) {
      pos = line.find_first_not_of(' ', pos);
      if (pos == std::string_view::npos) break;
      pos = line.find(' ', pos);
      if (pos == std::string_view::npos) break;
    }
    if (pos == std::string_view::npos) continue;
    pos = line.find_first_not_of(' ', pos);
    if (pos == std::string_view::npos || line[pos] != '/') continue;
    std::string path = cut_deleted(std::string(line.substr(pos)));
    const size_t slash = path.rfind('/');
    const std::string_view base = std::string_view(path).substr(slash + 1);
    const std::string_view dir = std::string_view(path).substr(0, slash);
    if (base.starts_with("_core") && (base.ends_with(".so")) && dir.ends_with("/mlflow_profiler"))
      return path;
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_v2_path(std::string_view proc_cgroup) {
  for (std::string_view line : split_lines(proc_cgroup)) {
    if (line.starts_with("0::")) return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::string container_id_in_cgroup(std::string_view cgroup_path) {
  // The outermost component that names a container: runtimes nest helpers
  // below it ("libpod-<id>.scope/container"), and a container given
  // delegated cgroups can name a sub-cgroup after another container; what
  // is above it, which the runtime made, decides.
  std::string_view rest = cgroup_path;
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    std::string_view comp = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (comp.starts_with("libpod-conmon-") || comp.starts_with("crio-conmon-")) continue;
    if (comp.ends_with(".scope")) comp.remove_suffix(6);
    for (std::string_view prefix :
         {"docker-", "libpod-", "cri-containerd-", "crio-", "containerd-", "nerdctl-"}) {
      if (comp.starts_with(prefix)) {
        comp.remove_prefix(prefix.size());
        break;
      }
    }
    if (comp.size() == 64 && is_hex(comp)) return std::string(comp);
  }
  return {};
}

std::string cgroup2_mount_in_mountinfo(std::string_view mountinfo) {
  for (std::string_view line : split_lines(mountinfo)) {
    const size_t sep = line.find(" - ");
    if (sep == std::string_view::npos || !line.substr(sep + 3).starts_with("cgroup2 ")) continue;
    // Fields: id parent major:minor root mountpoint ...
    size_t pos = 0;
    std::string_view field;
    for (int i = 0; i < 5; ++i) {
      const size_t end = line.find(' ', pos);
      field = line.substr(pos, end - pos);
      pos = end + 1;
    }
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    std::string out;
    for (size_t i = 0; i < field.size(); ++i) {
      if (field[i] == '\\' && i + 3 < field.size()) {
        const std::string oct(field.substr(i + 1, 3));
        out.push_back(static_cast<char>(std::strtol(oct.c_str(), nullptr, 8)));
        i += 3;
      } else {
        out.push_back(field[i]);
      }
    }
    return out;
  }
  return {};
}

// Any cgroup path of a /proc/PID/cgroup text that names a container: the v2
// line, else a v1 line (Docker on a hybrid host may create v1 cgroups only).
std::pair<std::string, std::string> container_in_proc_cgroup(std::string_view text) {
  if (auto v2 = cgroup_v2_path(text)) {
    std::string id = container_id_in_cgroup(*v2);
    if (!id.empty()) return {id, *v2};
  }
  for (std::string_view line : split_lines(text)) {
    const size_t colon = line.find(':', line.find(':') + 1);
    if (colon == std::string_view::npos) continue;
    std::string id = container_id_in_cgroup(line.substr(colon + 1));
    if (!id.empty()) return {id, ""};
  }
  return {};
}

}  // namespace mlprof::agent
