#pragma once
// What to attach to: processes that map the extension (mlflow_profiler/_core*.so)
// or that carry mlprof USDT notes themselves, selected by pid, container,
// cgroup or all; resolved through /proc and the container runtimes' state.
//
// This file is target resolution: TargetFinder follows the selection over
// /proc rescans. Its parts live beside it: the /proc readers and parsers
// (procfs.h), the ELF note check (stapsdt.h), container discovery
// (containers.h, with Podman's BoltDB in boltdb.h). Nothing here needs BPF:
// TargetFinder reads /proc and the runtimes' files under HostPaths, so tests
// point it at recorded state (tests/cpp/data) or at real processes.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/containers.h"
#include "agent/k8s.h"
#include "agent/procfs.h"
#include "util/result.h"

namespace mlprof::agent {

struct Target {
  pid_t pid = 0;
  std::string binary;      // the ELF with the probes, openable from here (/proc/PID/root/<path>)
  std::string container;   // container id if in one, else ""
  uint64_t cgroup_id = 0;  // cgroup v2 id of the process
  std::string comm;        // the process's name (/proc/PID/comm), for messages
  bool extension = false;  // true: binary is the extension; false: the executable's own notes
  // Where it runs, for the session's meta (docs/ebpf.md "Choosing targets"):
  // namespace, pod, container, pod_uid, container_id, each where known.
  std::map<std::string, std::string> labels;
};

// How to choose targets (Options' target part).
struct TargetSelection {
  std::vector<pid_t> pids;
  std::string container;  // name, id or unique id prefix
  std::string cgroup;     // v2 path: absolute under the mount, or relative to it
  bool all = false;
  std::string pod;  // NAMESPACE/NAME[/CONTAINER]: a Kubernetes pod's processes
};

// ---- finding and following targets ----------------------------------------

class TargetFinder {
 public:
  // Checks the selection once: --pid: each process exists; --container: the
  // name resolves and the container runs; --cgroup: the directory exists.
  // Errors are one line with the cause and the fix.
  static Result<std::unique_ptr<TargetFinder>> create(const TargetSelection& selection,
                                                      const HostPaths& paths = {});

  struct Changes {
    std::vector<Target> started;  // new targets (attach them)
    std::vector<pid_t> exited;    // targets gone (process exited or left the selection)
  };
  // One pass over /proc: what changed since the last call. The first call
  // reports every current target as started.
  Changes rescan();

  const std::map<pid_t, Target>& current() const { return current_; }
  // The cgroup id for the kernel filter (LoaderOptions::cgroup_id): the
  // --cgroup directory or the container's cgroup; 0: none (the pids filter).
  uint64_t cgroup_id() const { return cgroup_id_; }
  // That cgroup's level under the v2 root (LoaderOptions::cgroup_level): the
  // root is 0, /a/b is 2; -1 when there is no cgroup filter.
  int cgroup_level() const { return cgroup_id_ == 0 ? -1 : cgroup_level_; }
  // For --pid: every given process has exited, nothing more can come.
  bool pids_all_gone() const;
  // --pid processes that exist but have not loaded the extension (yet).
  std::vector<pid_t> waiting_pids() const;
  // "pid 4242", "container serving-1 (podman 3c6dab82bc7d)", "cgroup /x", "all processes".
  std::string describe() const;
  const std::optional<Container>& container() const { return container_; }
  // One-line notes since the last call (a runtime's state unreadable, so
  // names come from /var/log/pods), each said once.
  std::vector<std::string> take_notes() { return pods_.take_notes(); }

 private:
  TargetFinder(TargetSelection selection, HostPaths paths);
  // nullopt: not a target; *settled then says the answer holds until the
  // process's mappings change (false: something could not be read).
  std::optional<Target> probe(pid_t pid, const std::string& cgroup_text, bool* settled);
  bool selected(pid_t pid, const std::string& cgroup_text);
  Result<Ok> check_pod();  // create()'s check of --pod
  // rescan()'s look at one pid: into changes.started and seen if it became a
  // target, into next_not_targets if it was found not to be one.
  void rescan_pid(pid_t pid, Changes& changes, std::set<pid_t>& seen,
                  std::map<pid_t, std::pair<uint64_t, uint64_t>>& next_not_targets);
  void pid_gone(pid_t pid);  // a --pid process exited
  std::map<std::string, std::string> labels_of(const std::string& cgroup_text);
  bool same_mount_ns(pid_t pid) const;

  TargetSelection selection_;
  HostPaths paths_;
  std::optional<Container> container_;
  std::string cgroup_rel_;  // --cgroup / the container's, relative to the v2 mount
  uint64_t cgroup_id_ = 0;
  int cgroup_level_ = 0;
  std::map<pid_t, Target> current_;
  std::map<pid_t, uint64_t>
      start_times_;  // /proc/PID/stat starttime: a reused pid is a new process
  // Processes found not to be targets, by (starttime, vsize) then: skipped
  // by later rescans until either changes.
  std::map<pid_t, std::pair<uint64_t, uint64_t>> not_targets_;
  std::set<pid_t> gone_pids_;     // --pid processes that exited
  std::set<pid_t> waiting_pids_;  // --pid processes without the extension
  // Executables already checked for USDT notes, by (device, inode).
  std::map<std::pair<uint64_t, uint64_t>, bool> exe_notes_;
  uint64_t self_mnt_ns_ = 0;
  PodResolver pods_;
  std::vector<std::string> pod_sel_;  // --pod split: namespace, name[, container]
  // Container names by id for labels (non-Kubernetes runtimes), listed when
  // an id not seen before shows up, at most once per rescan.
  std::map<std::string, std::string> container_names_;
  bool containers_listed_ = false;
};

}  // namespace mlprof::agent
