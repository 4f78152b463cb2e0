// Target resolution (targets.h): TargetFinder's checks of the selection, its
// rescans of /proc, and the labels it gives each target.

#include "agent/targets.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "agent/stapsdt.h"

namespace mlprof::agent {

namespace {

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// From /proc/PID/stat: the state (field 3: 'Z' a zombie, dead but not yet
// reaped, which is gone for us) and the start time (field 22, clock ticks),
// which tells a reused pid from the process that had it.
struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
  uint64_t vsize = 0;  // field 23: changes when the process maps a library
};
std::optional<ProcStat> proc_stat(const std::string& proc, pid_t pid) {
  auto stat = read_text(proc + "/" + std::to_string(pid) + "/stat", 4096);
  if (!stat) return std::nullopt;
  const size_t close = stat->rfind(')');  // comm may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= stat->size()) return std::nullopt;
  ProcStat out;
  out.state = (*stat)[close + 2];
  size_t pos = close + 2;
  for (int field = 3; field < 22 && pos < stat->size(); ++field) {
    pos = stat->find(' ', pos);
    if (pos == std::string::npos) return out;
    ++pos;
  }
  char* end = nullptr;
  out.start_time = std::strtoull(stat->c_str() + pos, &end, 10);
  if (end != nullptr && *end == ' ') out.vsize = std::strtoull(end + 1, nullptr, 10);
  return out;
}

// "/" is level 0, "/a" 1, "/a/b" 2.
int level_of(const std::string& cgroup) {
  return static_cast<int>(
             std::count_if(cgroup.begin(), cgroup.end(), [](char c) { return c == '/'; })) -
         (cgroup == "/" ? 1 : 0);
}

std::string trim_newline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

TargetFinder::TargetFinder(TargetSelection selection, HostPaths paths)
    : selection_(std::move(selection)), paths_(std::move(paths)), pods_(paths_.host_root) {}

Result<std::unique_ptr<TargetFinder>> TargetFinder::create(const TargetSelection& selection,
                                                           const HostPaths& paths) {
  std::unique_ptr<TargetFinder> f(new TargetFinder(selection, paths));
  if (f->paths_.cgroup2.empty()) {
    if (auto mi = read_text(f->paths_.proc + "/self/mountinfo"))
      f->paths_.cgroup2 = cgroup2_mount_in_mountinfo(*mi);
  }
  f->self_mnt_ns_ = inode_of(f->paths_.proc + "/self/ns/mnt");

  auto fail = [](std::string message) {
    return Error{Error::Kind::kUnsupported, 0, std::move(message)};
  };
  for (pid_t pid : selection.pids) {
    struct stat st {};
    if (::stat((f->paths_.proc + "/" + std::to_string(pid)).c_str(), &st) != 0) {
      return fail("no process " + std::to_string(pid) + ": check the pid (ps -p " +
                  std::to_string(pid) + ")");
    }
  }
  if (!selection.cgroup.empty()) {
    if (f->paths_.cgroup2.empty()) {
      return fail(
          "--cgroup needs cgroup v2, and no cgroup2 mount was found: mount it (mount -t cgroup2 "
          "none /sys/fs/cgroup/unified)");
    }
    std::string rel = selection.cgroup;
    if (rel.starts_with(f->paths_.cgroup2 + "/"))
      rel.erase(0, f->paths_.cgroup2.size());
    else if (rel == f->paths_.cgroup2)
      rel = "/";
    if (rel.empty() || rel[0] != '/') rel.insert(0, "/");
    while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
    struct stat st {};
    const std::string dir = f->paths_.cgroup2 + (rel == "/" ? "" : rel);
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail("cgroup '" + selection.cgroup + "' does not exist under the cgroup v2 mount " +
                  f->paths_.cgroup2 +
                  ": give a v2 path as /proc/PID/cgroup shows it on its 0:: line (e.g. "
                  "/libpod_parent/libpod-<id>)");
    }
    f->cgroup_rel_ = rel;
    f->cgroup_id_ = static_cast<uint64_t>(st.st_ino);
    f->cgroup_level_ = level_of(rel);
  }
  if (!selection.container.empty()) {
    auto c = resolve_container(selection.container, list_containers(f->paths_));
    if (!c) return c.error();
    if (!c.value().running) {
      return fail("container " + c.value().describe() + " is not running: start it first");
    }
    f->container_ = c.value();
    if (!c.value().cgroup.empty() && !f->paths_.cgroup2.empty()) {
      f->cgroup_id_ = inode_of(f->paths_.cgroup2 + c.value().cgroup);
      f->cgroup_level_ = level_of(c.value().cgroup);
    }
  }
  if (!selection.pod.empty()) {
    if (auto r = f->check_pod(); !r) return r.error();
  }
  return f;
}

namespace {

// The pod's own cgroup in a /proc/PID/cgroup text (the path down to the
// pod<uid> component, v2 line first), for messages.
std::string pod_cgroup_dir(std::string_view text) {
  std::vector<std::string_view> lines = split_lines(text);
  std::stable_partition(lines.begin(), lines.end(),
                        [](std::string_view l) { return l.starts_with("0::"); });
  for (std::string_view line : lines) {
    const size_t colon = line.find(':', line.find(':') + 1);
    if (colon == std::string_view::npos) continue;
    const std::string_view path = line.substr(colon + 1);
    for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
      const std::string_view prefix = path.substr(0, end);
      auto pc = pod_cgroup_of_path(prefix);
      if (pc && pc->container_id.empty()) return std::string(prefix);
      if (end == std::string_view::npos) break;
    }
  }
  return {};
}

// A pod with processes on this node: its names, containers and cgroup.
struct PodSeen {
  std::optional<PodNames> names;
  std::set<std::string> containers;
  std::string cgroup;  // the pod's cgroup (v2 path, or a v1 line's)
};

// The pods with processes on this node, by uid, from each process's cgroup.
std::map<std::string, PodSeen> pods_on_node(const std::string& proc, PodResolver& resolver) {
  std::map<std::string, PodSeen> pods;
  for (const std::string& name : list_dir(proc)) {
    if (!is_pid_name(name)) continue;
    auto text = read_text(proc + "/" + name + "/cgroup", 1 << 16);
    if (!text) continue;
    auto pc = pod_cgroup_in_proc(*text);
    if (!pc) continue;
    PodSeen& seen = pods[pc->pod_uid];
    auto names = resolver.names(*pc);
    if (names && !names->container.empty()) seen.containers.insert(names->container);
    if (names && !seen.names) seen.names = names;
    if (seen.cgroup.empty()) seen.cgroup = pod_cgroup_dir(*text);
  }
  return pods;
}

Error pod_error(std::string message) {
  return Error{Error::Kind::kUnsupported, 0, std::move(message)};
}

// "ns/name (containers)", or the uid when the pod's names were not found.
std::string describe_pod(const std::string& uid, const PodSeen& s) {
  std::string out = s.names ? s.names->namespace_ + "/" + s.names->pod
                            : "pod uid " + uid +
                                  " (no names: its runtime state and pod log "
                                  "directory were not found)";
  if (!s.containers.empty()) {
    out += " (";
    bool first = true;
    for (const std::string& c : s.containers) out += (std::exchange(first, false) ? "" : ", ") + c;
    out += ")";
  }
  return out;
}

// --pod matched no pod: the pods there are, or why there are none.
Error pod_not_found(const std::string& given, const std::string& ns_name,
                    const std::map<std::string, PodSeen>& pods, const std::string& proc) {
  if (pods.empty()) {
    return pod_error("pod '" + given +
                     "' not found: no process on this node runs in a Kubernetes pod (no kubepods "
                     "cgroup in " +
                     proc + "/*/cgroup); on Kubernetes the agent needs hostPID: true");
  }
  std::string list;
  size_t shown = 0;
  for (const auto& [uid, s] : pods) {
    if (shown++ == 20) {
      list += ", ... (" + std::to_string(pods.size()) + " pods)";
      break;
    }
    list += (list.empty() ? "" : ", ") + describe_pod(uid, s);
  }
  return pod_error("pod '" + ns_name +
                   "' not found on this node; pods with processes here: " + list);
}

}  // namespace

Result<Ok> TargetFinder::check_pod() {
  for (std::string_view rest = selection_.pod;;) {
    const size_t slash = rest.find('/');
    pod_sel_.emplace_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  const std::map<std::string, PodSeen> pods = pods_on_node(paths_.proc, pods_);
  std::vector<const std::pair<const std::string, PodSeen>*> matches;
  for (const auto& entry : pods) {
    const PodSeen& s = entry.second;
    if (s.names && s.names->namespace_ == pod_sel_[0] && s.names->pod == pod_sel_[1])
      matches.push_back(&entry);
  }
  const std::string ns_name = pod_sel_[0] + "/" + pod_sel_[1];
  if (matches.empty()) return pod_not_found(selection_.pod, ns_name, pods, paths_.proc);
  if (matches.size() > 1) {
    std::string list;
    for (const auto* m : matches) {
      list += (list.empty() ? "" : ", ") + std::string("uid ") + m->first +
              (m->second.cgroup.empty() ? "" : " (cgroup " + m->second.cgroup + ")");
    }
    return pod_error("pod '" + ns_name + "' matches " + std::to_string(matches.size()) +
                     " pods on this node (a pod recreated while the old one still runs): " + list +
                     "; wait for the old one to end, or give one with --cgroup");
  }
  if (pod_sel_.size() > 2) {
    const PodSeen& s = matches.front()->second;
    if (s.containers.count(pod_sel_[2]) == 0) {
      std::string list;
      for (const std::string& c : s.containers) list += (list.empty() ? "" : ", ") + c;
      return pod_error(
          "pod " + ns_name + " has no container '" + pod_sel_[2] +
          "' with processes on this node; its containers: " +
          (list.empty() ? std::string("none named (no runtime state or log links)") : list));
    }
  }
  return Ok{};
}

bool TargetFinder::same_mount_ns(pid_t pid) const {
  const uint64_t ns = inode_of(paths_.proc + "/" + std::to_string(pid) + "/ns/mnt");
  return ns != 0 && ns == self_mnt_ns_;
}

bool TargetFinder::selected(pid_t pid, const std::string& cgroup_text) {
  if (!selection_.pids.empty()) {
    return std::find(selection_.pids.begin(), selection_.pids.end(), pid) != selection_.pids.end();
  }
  if (selection_.all) return true;
  if (!pod_sel_.empty()) {
    // The cgroup rules most processes out before any names are looked up.
    auto pc = pod_cgroup_in_proc(cgroup_text);
    if (!pc) return false;
    auto n = pods_.names(*pc);
    return n && n->namespace_ == pod_sel_[0] && n->pod == pod_sel_[1] &&
           (pod_sel_.size() < 3 || n->container == pod_sel_[2]);
  }
  if (!cgroup_rel_.empty()) {
    auto v2 = cgroup_v2_path(cgroup_text);
    if (!v2) return false;
    return cgroup_rel_ == "/" || *v2 == cgroup_rel_ || v2->starts_with(cgroup_rel_ + "/");
  }
  if (container_) {
    const std::string id = container_in_proc_cgroup(cgroup_text).first;
    return !id.empty() && std::find(container_->member_ids.begin(), container_->member_ids.end(),
                                    id) != container_->member_ids.end();
  }
  return false;
}

std::optional<Target> TargetFinder::probe(pid_t pid, const std::string& cgroup_text,
                                          bool* settled) {
  *settled = false;
  const std::string dir = paths_.proc + "/" + std::to_string(pid);
  const bool same_root = same_mount_ns(pid);
  std::string in_target;  // the probes' file, as the target sees it
  Target t;
  t.pid = pid;
  auto maps = read_text(dir + "/maps");
  if (maps) {
    if (auto ext = extension_in_maps(*maps)) {
      in_target = *ext;
      t.extension = true;
    }
  }
  if (in_target.empty()) {
    // The storm and test programs carry the probes in the executable itself.
    struct stat st {};
    if (::stat((dir + "/exe").c_str(), &st) != 0)
      return std::nullopt;  // kernel thread, gone, or no access
    const auto key =
        std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
    auto it = exe_notes_.find(key);
    if (it == exe_notes_.end()) {
      auto notes = has_mlprof_usdt(dir + "/exe");
      if (!notes) return std::nullopt;  // unreadable now: looked at again at the next scan
      it = exe_notes_.emplace(key, notes.value()).first;
    }
    if (!it->second) {
      *settled = maps.has_value();  // no extension mapped, no notes: sure until its mappings change
      return std::nullopt;
    }
    char link[4096];
    const ssize_t n = ::readlink((dir + "/exe").c_str(), link, sizeof link - 1);
    if (n <= 0) return std::nullopt;
    in_target = cut_deleted(std::string(link, static_cast<size_t>(n)));
  }
  // Not a FIFO, nor a symlink out of the target's root (procfs.h): passed
  // over now, looked at again at the next scan.
  if (!regular_file_in_root(dir, in_target, same_root)) return std::nullopt;
  t.binary = same_root ? in_target : dir + "/root" + in_target;
  if (auto comm = read_text(dir + "/comm", 256)) t.comm = trim_newline(*comm);
  if (auto v2 = cgroup_v2_path(cgroup_text); v2 && !paths_.cgroup2.empty()) {
    t.cgroup_id = inode_of(paths_.cgroup2 + (*v2 == "/" ? "" : *v2));
  }
  t.container = container_in_proc_cgroup(cgroup_text).first;
  t.labels = labels_of(cgroup_text);
  return t;
}

std::map<std::string, std::string> TargetFinder::labels_of(const std::string& cgroup_text) {
  std::map<std::string, std::string> labels;
  if (auto pc = pod_cgroup_in_proc(cgroup_text)) {
    labels["pod_uid"] = pc->pod_uid;
    if (!pc->container_id.empty()) labels["container_id"] = pc->container_id;
    if (auto n = pods_.names(*pc)) {
      labels["namespace"] = n->namespace_;
      labels["pod"] = n->pod;
      if (!n->container.empty()) labels["container"] = n->container;
    }
    return labels;
  }
  const std::string id = container_in_proc_cgroup(cgroup_text).first;
  if (id.empty()) return labels;
  labels["container_id"] = id;
  auto it = container_names_.find(id);
  if (it == container_names_.end() && !containers_listed_) {
    containers_listed_ = true;
    for (const Container& c : list_containers(paths_)) container_names_.emplace(c.id, c.name);
    if (container_names_.size() > 16384) container_names_.clear();
    it = container_names_.find(id);
  }
  if (it != container_names_.end() && !it->second.empty()) labels["container"] = it->second;
  return labels;
}

void TargetFinder::pid_gone(pid_t pid) {
  if (selection_.pids.empty()) return;
  gone_pids_.insert(pid);
  waiting_pids_.erase(pid);
}

void TargetFinder::rescan_pid(pid_t pid, Changes& changes, std::set<pid_t>& seen,
                              std::map<pid_t, std::pair<uint64_t, uint64_t>>& next_not_targets) {
  const std::string dir = paths_.proc + "/" + std::to_string(pid);
  // --pid and --all select without the cgroup: it is read only for a
  // process probed. The others: the cgroup rules a process out before
  // its stat (and maps) are read.
  const bool by_cgroup = selection_.pids.empty() && !selection_.all;
  std::optional<std::string> cgroup_text;
  if (by_cgroup) {
    cgroup_text = read_text(dir + "/cgroup");
    if (cgroup_text && !selected(pid, *cgroup_text)) return;
  }
  const auto stat = cgroup_text || !by_cgroup ? proc_stat(paths_.proc, pid) : std::nullopt;
  if ((by_cgroup && !cgroup_text) || !stat || stat->state == 'Z' || stat->state == 'X') {
    pid_gone(pid);
    return;
  }
  const uint64_t started = stat->start_time;
  auto have = current_.find(pid);
  if (have != current_.end()) {
    if (start_times_[pid] == started) {
      seen.insert(pid);
      return;
    }
    // The pid was reused: the old target is gone, the new process is looked at afresh.
    changes.exited.push_back(pid);
    current_.erase(have);
  }
  // A process found not to be a target, whose mappings have not changed
  // since (same start time, same vsize: loading the extension grows it),
  // is not read again: on a node of thousands of processes, --all would
  // otherwise read every maps file every rescan.
  const std::pair<uint64_t, uint64_t> mark{started, stat->vsize};
  if (auto nt = not_targets_.find(pid); nt != not_targets_.end() && nt->second == mark) {
    next_not_targets[pid] = mark;
    return;
  }
  if (!cgroup_text) cgroup_text = read_text(dir + "/cgroup");
  if (!cgroup_text) {  // gone meanwhile
    pid_gone(pid);
    return;
  }
  bool settled = false;
  auto target = probe(pid, *cgroup_text, &settled);
  if (!target) {
    if (!selection_.pids.empty()) waiting_pids_.insert(pid);
    if (settled) next_not_targets[pid] = mark;
    return;
  }
  waiting_pids_.erase(pid);
  seen.insert(pid);
  start_times_[pid] = started;
  current_[pid] = *target;
  changes.started.push_back(*target);
}

TargetFinder::Changes TargetFinder::rescan() {
  Changes changes;
  pods_.next_pass();
  containers_listed_ = false;
  std::vector<pid_t> candidates;
  if (!selection_.pids.empty()) {
    candidates = selection_.pids;
  } else {
    for (const std::string& name : list_dir(paths_.proc)) {
      if (is_pid_name(name)) candidates.push_back(static_cast<pid_t>(std::atol(name.c_str())));
    }
  }
  std::set<pid_t> seen;
  std::map<pid_t, std::pair<uint64_t, uint64_t>> next_not_targets;
  for (pid_t pid : candidates) rescan_pid(pid, changes, seen, next_not_targets);
  for (auto it = current_.begin(); it != current_.end();) {
    if (seen.count(it->first) != 0) {
      ++it;
      continue;
    }
    changes.exited.push_back(it->first);
    start_times_.erase(it->first);
    it = current_.erase(it);
  }
  not_targets_.swap(next_not_targets);  // only processes that still exist
  return changes;
}

bool TargetFinder::pids_all_gone() const {
  if (selection_.pids.empty()) return false;
  return std::all_of(selection_.pids.begin(), selection_.pids.end(),
                     [&](pid_t p) { return gone_pids_.count(p) != 0; });
}

std::vector<pid_t> TargetFinder::waiting_pids() const {
  return std::vector<pid_t>(waiting_pids_.begin(), waiting_pids_.end());
}

std::string TargetFinder::describe() const {
  if (!selection_.pids.empty()) {
    std::string out = selection_.pids.size() == 1 ? "pid" : "pids";
    for (size_t i = 0; i < selection_.pids.size(); ++i)
      out += (i == 0 ? " " : ", ") + std::to_string(selection_.pids[i]);
    return out;
  }
  if (container_) return "container " + container_->describe();
  if (!pod_sel_.empty()) return "pod " + selection_.pod;
  if (!cgroup_rel_.empty()) return "cgroup " + cgroup_rel_;
  return "all processes with mlflow_profiler loaded";
}

}  // namespace mlprof::agent
