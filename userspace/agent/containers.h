#pragma once
// Container discovery: the containers the runtimes' state files record
// (Docker, Podman's BoltDB and containers/storage, containerd and its
// Kubernetes CRI annotations) and those only the cgroups of running
// processes name, and resolving the --container argument to one of them.
// HostPaths says where the host keeps those files, so tests point them at
// recorded copies (tests/cpp/data).

#include <sys/types.h>

#include <string>
#include <vector>

#include "util/result.h"

namespace mlprof::agent {

struct Container {
  std::string id;       // full id (a Kubernetes pod: its sandbox id)
  std::string name;     // name if the runtime records one
  std::string runtime;  // "docker", "podman", "containerd", "kubernetes"
  std::string cgroup;   // cgroup v2 path, relative to the v2 mount ("" until a process is seen)
  pid_t pid = 0;        // the init process the runtime recorded; 0 unknown or not running
  bool running = true;  // the runtime's state says running (true when it says nothing)
  // Other names that select it: "pod/container", "namespace/pod/container".
  std::vector<std::string> aliases;
  // Ids whose processes belong to it: its own id; a pod: its containers' ids too.
  std::vector<std::string> member_ids;

  // "serving-1 (podman 3c6dab82bc7d)": how messages name it.
  std::string describe() const;
};

// Where the host keeps what TargetFinder reads. Defaults are the real
// locations; tests point them at recorded copies.
struct HostPaths {
  std::string proc = "/proc";
  std::string cgroup2;  // the cgroup v2 mount; "" = found in /proc/self/mountinfo
  std::string docker = "/var/lib/docker";  // containers/<id>/config.v2.json
  // Podman 4's libpod state (BoltDB) and containers/storage's container list.
  std::string podman_db = "/var/lib/containers/storage/libpod/bolt_state.db";
  std::string podman_storage = "/var/lib/containers/storage";  // overlay-containers/containers.json
  std::string containerd =
      "/run/containerd";  // io.containerd.runtime.v2.task/<ns>/<id>/config.json
  // The node's / for Kubernetes names (k8s.h PodResolver: the CRI runtimes'
  // state, /var/log/pods, /var/log/containers under it). --host-root.
  std::string host_root = "/";
};

// Every container the runtimes' state files under `paths` record, plus
// containers seen only through the cgroup paths of running processes
// (runtime "" and no name). One entry per id; Docker's name wins over the
// same id seen in containerd's "moby" namespace.
std::vector<Container> list_containers(const HostPaths& paths);

// The one container `name_or_id` names: an exact name or alias, an exact id,
// or a unique id prefix (3+ hex digits). Errors (kUnsupported) are one line:
// nothing matched (lists the candidates, or says where it looked) or several
// did (lists them).
Result<Container> resolve_container(const std::string& name_or_id,
                                    const std::vector<Container>& candidates);

}  // namespace mlprof::agent
