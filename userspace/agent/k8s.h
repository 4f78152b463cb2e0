#pragma once
// Kubernetes pods and containers by name, on the node alone (no API server):
// the kubelet's cgroup layouts give a process's pod uid, QoS class and
// container id; the CRI runtime's state (containerd's task bundles, CRI-O's
// container state) and the kubelet's log directories give the names.
//
// The parsers are pure functions of a path or a file's contents. PodResolver
// reads the node's files under a root directory (`host_root`, "/" on a real
// node) so that tests lay the same state out under a temporary directory.

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace mlprof::agent {

// What a kubelet-made cgroup path says.
struct PodCgroup {
  std::string driver;        // "systemd" (kubepods.slice/...) or "cgroupfs" (/kubepods/...)
  std::string qos;           // "guaranteed", "burstable" or "besteffort"
  std::string pod_uid;       // as the API server spells it: '_' of systemd names back to '-'
  std::string runtime;       // "containerd", "cri-o", "docker"; "" when the layout does not say
  std::string container_id;  // 64 hex; "" for a process in the pod's own cgroup
};

// The pod cgroup in one cgroup path (a v2 path, or the path of a v1 line),
// or nullopt when the path is not under a kubepods cgroup. Layouts:
//   systemd:  .../kubepods.slice/kubepods-burstable.slice/
//               kubepods-burstable-pod<uid with '_'>.slice/cri-containerd-<id>.scope
//             (also crio-<id>.scope, docker-<id>.scope; guaranteed pods:
//             kubepods.slice/kubepods-pod<uid>.slice), and containerd's
//             unconverted "<slice>:cri-containerd:<id>" form on v1;
//   cgroupfs: .../kubepods/burstable/pod<uid>/<id> (also besteffort, or no
//             QoS level for guaranteed pods; CRI-O: crio-<id>).
// Runtime helpers (crio-conmon-<id>) are not the container.
std::optional<PodCgroup> pod_cgroup_of_path(std::string_view path);
// The same for a /proc/PID/cgroup text: the v2 ("0::") line first, then the
// v1 lines (a hybrid host lists both); a line that names a container wins
// over one that names only the pod.
std::optional<PodCgroup> pod_cgroup_in_proc(std::string_view proc_cgroup);

// Names of a pod and one of its containers.
struct PodNames {
  std::string namespace_;  // the pod's namespace
  std::string pod;
  std::string uid;        // the pod's uid
  std::string container;  // "" when not known
  std::string source;     // where the names came from: "containerd", "cri-o", "pod logs"
  bool sandbox = false;   // the runtime's state says: the pod's sandbox (pause) container

  // "ml/scorer-6c5d8/model", or "ml/scorer-6c5d8" without a container.
  std::string path() const;
};

// The names in an OCI runtime spec (config.json) written by a CRI runtime:
// containerd's CRI annotations (io.kubernetes.cri.sandbox-namespace,
// -name, -uid, container-name, container-type) or the kubelet's labels that
// CRI-O copies into annotations (io.kubernetes.pod.namespace, .name, .uid,
// io.kubernetes.container.name; "POD" for the sandbox). nullopt: not JSON,
// or no pod names in it.
std::optional<PodNames> pod_names_in_oci_config(std::string_view config_json);
// The names in a directory name under /var/log/pods: "<ns>_<pod>_<uid>"
// (namespace and pod names cannot hold '_', so the split is exact).
std::optional<PodNames> pod_names_of_log_dir(std::string_view dir_name);
// The names in a /var/log/containers link name
// "<pod>_<ns>_<container>-<container id>.log", when it ends with `container_id`.
std::optional<PodNames> pod_names_of_log_link(std::string_view file_name,
                                              std::string_view container_id);

// The kubelet's node name: $NODE_NAME (the DaemonSet's downward API), else
// the host name.
std::string node_name();

class PodResolver {
 public:
  // `host_root`: where the node's / is ("/" on the node; a DaemonSet that
  // mounts the host's / at /host passes "/host"). Read under it:
  //   run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json
  //   run/containers/storage/overlay-containers/<id>/userdata/config.json
  //   var/lib/containers/storage/overlay-containers/<id>/userdata/config.json
  //   var/log/pods/<ns>_<pod>_<uid>/<container>/
  //   var/log/containers/<pod>_<ns>_<container>-<id>.log
  explicit PodResolver(std::string host_root = "/");

  // The names of the pod and container `cg` names: the runtime's state by
  // container id (containerd, then CRI-O), else the pod's log directory by
  // uid (the container from /var/log/containers, or the pod's only
  // container directory). Results are kept by container id; a miss is
  // looked up again after next_pass().
  std::optional<PodNames> names(const PodCgroup& cg);
  // A new rescan: misses may resolve now (a container that just started).
  void next_pass();
  // One-line notes on state that could not be read (said once each), e.g.
  // "no containerd or CRI-O state under /run: ...; names come from /var/log/pods".
  std::vector<std::string> take_notes();

  const std::string& host_root() const { return root_; }

 private:
  std::optional<PodNames> from_runtime(const std::string& id);
  std::optional<PodNames> from_logs(const PodCgroup& cg);
  std::string at(std::string_view path) const;  // path under the root
  void note(const std::string& key, const std::string& line);

  std::string root_;
  std::map<std::string, PodNames> by_container_;  // resolved, by container id (or "pod:<uid>")
  std::set<std::string> missed_;                  // misses of this pass
  std::vector<std::string> notes_;
  std::set<std::string> noted_;
  bool runtime_state_checked_ = false;
};

}  // namespace mlprof::agent
