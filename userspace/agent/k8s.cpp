#include "agent/k8s.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rapidjson/document.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "agent/json_parse.h"
#include "util/file_io.h"

namespace mlprof::agent {

namespace {

bool is_hex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A pod uid as the cgroup spells it: a UUID (36) with '-' or, under the
// systemd driver, '_'; a static pod's uid is a 32-hex hash.
std::optional<std::string> pod_uid(std::string_view s) {
  size_t hex = 0;
  std::string out;
  for (char c : s) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
      ++hex;
      out.push_back(c);
    } else if (c == '-' || c == '_') {
      out.push_back('-');
    } else {
      return std::nullopt;
    }
  }
  if (hex != 32 || (out.size() != 32 && out.size() != 36)) return std::nullopt;
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// The container in the component below the pod's: "<runtime prefix>-<id>[.scope]" or a bare id.
void container_of(std::string_view comp, PodCgroup& out) {
  if (comp.ends_with(".scope")) comp.remove_suffix(6);
  if (comp.starts_with("crio-conmon-")) return;  // CRI-O's monitor, beside the container
  static constexpr std::pair<std::string_view, std::string_view> kPrefixes[] = {
      {"cri-containerd-", "containerd"}, {"crio-", "cri-o"}, {"docker-", "docker"}};
  std::string_view runtime;
  for (const auto& [prefix, name] : kPrefixes) {
    if (comp.starts_with(prefix)) {
      comp.remove_prefix(prefix.size());
      runtime = name;
      break;
    }
  }
  if (!is_hex64(comp)) return;
  out.container_id = std::string(comp);
  out.runtime = std::string(runtime);
}

// "kubepods-burstable-pod<uid>.slice" (systemd) -> qos and uid; also with a
// prefix before "kubepods" ("kubelet-kubepods-...": kind's nodes).
bool systemd_pod_slice(std::string_view comp, PodCgroup& out) {
  if (!comp.ends_with(".slice")) return false;
  comp.remove_suffix(6);
  const size_t k = comp.find("kubepods-");
  if (k == std::string_view::npos) return false;
  comp.remove_prefix(k + 9);
  std::string_view qos = "guaranteed";
  for (std::string_view q : {"burstable-", "besteffort-"}) {
    if (comp.starts_with(q)) {
      qos = q.substr(0, q.size() - 1);
      comp.remove_prefix(q.size());
    }
  }
  if (!comp.starts_with("pod")) return false;
  auto uid = pod_uid(comp.substr(3));
  if (!uid) return false;
  out.driver = "systemd";
  out.qos = std::string(qos);
  out.pod_uid = *uid;
  return true;
}

}  // namespace

std::optional<PodCgroup> pod_cgroup_of_path(std::string_view path) {
  const std::vector<std::string_view> comps = split(path, '/');
  for (size_t i = 0; i < comps.size(); ++i) {
    PodCgroup out;
    std::string_view comp = comps[i];
    // containerd's systemd form, left unconverted on v1 hierarchies:
    // "<pod slice>:cri-containerd:<id>".
    if (const auto parts = split(comp, ':'); parts.size() == 3) {
      if (!systemd_pod_slice(parts[0], out)) continue;
      container_of(std::string(parts[1]) + "-" + std::string(parts[2]), out);
      return out;
    }
    if (systemd_pod_slice(comp, out)) {
      if (i + 1 < comps.size()) container_of(comps[i + 1], out);
      return out;
    }
    if (comp != "kubepods") continue;
    // cgroupfs: kubepods[/burstable|/besteffort]/pod<uid>[/<id>]
    size_t j = i + 1;
    out.qos = "guaranteed";
    if (j < comps.size() && (comps[j] == "burstable" || comps[j] == "besteffort")) {
      out.qos = std::string(comps[j]);
      ++j;
    }
    if (j >= comps.size() || !comps[j].starts_with("pod")) continue;
    auto uid = pod_uid(comps[j].substr(3));
    if (!uid) continue;
    out.driver = "cgroupfs";
    out.pod_uid = *uid;
    if (j + 1 < comps.size()) container_of(comps[j + 1], out);
    return out;
  }
  return std::nullopt;
}

std::optional<PodCgroup> pod_cgroup_in_proc(std::string_view proc_cgroup) {
  std::optional<PodCgroup> v2, v1;
  for (std::string_view line : split(proc_cgroup, '\n')) {
    // "hierarchy-id:controllers:path"; the path itself may hold ':'.
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    auto pc = pod_cgroup_of_path(line.substr(b + 1));
    if (!pc) continue;
    std::optional<PodCgroup>& slot = line.substr(0, b + 1) == "0::" ? v2 : v1;
    if (!slot || (slot->container_id.empty() && !pc->container_id.empty())) slot = std::move(pc);
  }
  if (v2 && (!v2->container_id.empty() || !v1 || v1->container_id.empty())) return v2;
  return v1;
}

std::string PodNames::path() const {
  std::string out = namespace_ + "/" + pod;
  if (!container.empty()) out += "/" + container;
  return out;
}

std::optional<PodNames> pod_names_in_oci_config(std::string_view config_json) {
  rapidjson::Document doc;
  if (!parse_json_iterative(doc, config_json) || !doc.IsObject()) return std::nullopt;
  auto it = doc.FindMember("annotations");
  if (it == doc.MemberEnd() || !it->value.IsObject()) return std::nullopt;
  const rapidjson::Value& ann = it->value;
  auto get = [&](const char* key) {
    auto m = ann.FindMember(key);
    return m != ann.MemberEnd() && m->value.IsString()
               ? std::string(m->value.GetString(), m->value.GetStringLength())
               : std::string();
  };
  PodNames n;
  // containerd's CRI plugin (internal/cri/annotations).
  n.namespace_ = get("io.kubernetes.cri.sandbox-namespace");
  n.pod = get("io.kubernetes.cri.sandbox-name");
  if (!n.pod.empty()) {
    n.source = "containerd";
    n.uid = get("io.kubernetes.cri.sandbox-uid");
    n.container = get("io.kubernetes.cri.container-name");
    n.sandbox = get("io.kubernetes.cri.container-type") == "sandbox";
  } else {
    // CRI-O: the kubelet's labels (k8s.io/kubelet/pkg/types/labels.go) as annotations.
    n.namespace_ = get("io.kubernetes.pod.namespace");
    n.pod = get("io.kubernetes.pod.name");
    if (n.pod.empty()) return std::nullopt;
    n.source = "cri-o";
    n.uid = get("io.kubernetes.pod.uid");
    n.container = get("io.kubernetes.container.name");
    n.sandbox = get("io.kubernetes.cri-o.ContainerType") == "sandbox" || n.container == "POD";
  }
  if (n.sandbox) n.container.clear();
  return n;
}

std::optional<PodNames> pod_names_of_log_dir(std::string_view dir_name) {
  const auto parts = split(dir_name, '_');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty())
    return std::nullopt;
  PodNames n;
  n.namespace_ = std::string(parts[0]);
  n.pod = std::string(parts[1]);
  n.uid = std::string(parts[2]);
  n.source = "pod logs";
  return n;
}

std::optional<PodNames> pod_names_of_log_link(std::string_view file_name,
                                              std::string_view container_id) {
  if (!file_name.ends_with(".log") || container_id.empty()) return std::nullopt;
  file_name.remove_suffix(4);
  if (!file_name.ends_with(container_id) || file_name.size() <= container_id.size() + 1)
    return std::nullopt;
  file_name.remove_suffix(container_id.size());
  if (file_name.back() != '-') return std::nullopt;
  file_name.remove_suffix(1);
  const auto parts = split(file_name, '_');  // <pod>_<ns>_<container>
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty())
    return std::nullopt;
  PodNames n;
  n.pod = std::string(parts[0]);
  n.namespace_ = std::string(parts[1]);
  n.container = std::string(parts[2]);
  n.source = "pod logs";
  return n;
}

std::string node_name() {
  if (const char* env = std::getenv("NODE_NAME"); env != nullptr && *env != '\0') return env;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

// ---- PodResolver ------------------------------------------------------------

namespace {

// The file's contents (core's read_file, cut a little past 4 MiB); nullopt
// with errno set when it cannot be read.
std::optional<std::string> read_small(const std::string& path, int* error) {
  auto text = read_file(path, (4u << 20) + 1);
  if (!text) {
    *error = text.error().errnum;
    return std::nullopt;
  }
  return std::move(text.value());
}

// Entries of a directory; errno in *error when it cannot be opened.
std::vector<std::string> entries(const std::string& path, int* error) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    *error = errno;
    return names;
  }
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

constexpr size_t kMaxCached = 16384;  // containers remembered; then the cache starts over

}  // namespace

PodResolver::PodResolver(std::string host_root) : root_(std::move(host_root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  if (root_.empty()) root_ = "/";
}

std::string PodResolver::at(std::string_view path) const {
  return root_ == "/" ? "/" + std::string(path) : root_ + "/" + std::string(path);
}

void PodResolver::note(const std::string& key, const std::string& line) {
  if (noted_.insert(key).second) notes_.push_back(line);
}

std::vector<std::string> PodResolver::take_notes() {
  std::vector<std::string> out;
  out.swap(notes_);
  return out;
}

void PodResolver::next_pass() { missed_.clear(); }

std::optional<PodNames> PodResolver::from_runtime(const std::string& id) {
  const std::string containerd_dir = at("run/containerd/io.containerd.runtime.v2.task/k8s.io");
  const std::string crio_run = at("run/containers/storage/overlay-containers");
  const std::string crio_lib = at("var/lib/containers/storage/overlay-containers");
  const std::string files[] = {containerd_dir + "/" + id + "/config.json",
                               crio_run + "/" + id + "/userdata/config.json",
                               crio_lib + "/" + id + "/userdata/config.json"};
  for (const std::string& file : files) {
    int error = 0;
    auto text = read_small(file, &error);
    if (!text) {
      // Missing is normal (another runtime, or none); anything else is said.
      if (error != ENOENT && error != ENOTDIR) {
        note("denied:" + file.substr(0, file.find(id)),
             "cannot read the container runtime's state (" + file + ": " + std::strerror(error) +
                 "): pod names come from /var/log/pods where it has no answer; run as root and "
                 "mount the runtime's state readable");
      }
      continue;
    }
    if (auto n = pod_names_in_oci_config(*text)) return n;
  }
  if (!runtime_state_checked_) {
    runtime_state_checked_ = true;
    if (!is_dir(containerd_dir) && !is_dir(crio_run) && !is_dir(crio_lib)) {
      note("missing", "no containerd or CRI-O state under " + at("run") +
                          " (io.containerd.runtime.v2.task/k8s.io, containers/storage): pod "
                          "names come from " +
                          at("var/log/pods"));
    }
  }
  return std::nullopt;
}

std::optional<PodNames> PodResolver::from_logs(const PodCgroup& cg) {
  const std::string pods_dir = at("var/log/pods");
  int error = 0;
  std::optional<PodNames> found;
  std::string dir;
  for (const std::string& name : entries(pods_dir, &error)) {
    auto n = pod_names_of_log_dir(name);
    if (n && n->uid == cg.pod_uid) {
      found = n;
      dir = pods_dir + "/" + name;
      break;
    }
  }
  if (error != 0 && error != ENOENT) {
    note("logs", "cannot read " + pods_dir + " (" + std::strerror(error) +
                     "): pods without readable runtime state have no names");
  }
  if (!found || cg.container_id.empty()) return found;
  // Which of the pod's containers: the kubelet's /var/log/containers link
  // names it with the container id.
  int ignored = 0;
  for (const std::string& link : entries(at("var/log/containers"), &ignored)) {
    auto n = pod_names_of_log_link(link, cg.container_id);
    if (n && n->pod == found->pod && n->namespace_ == found->namespace_) {
      found->container = n->container;
      return found;
    }
  }
  std::vector<std::string> containers;
  for (const std::string& c : entries(dir, &ignored)) {
    if (is_dir(dir + "/" + c)) containers.push_back(c);
  }
  if (containers.size() == 1) found->container = containers.front();
  return found;
}

std::optional<PodNames> PodResolver::names(const PodCgroup& cg) {
  const std::string key = cg.container_id.empty() ? "pod:" + cg.pod_uid : cg.container_id;
  if (auto it = by_container_.find(key); it != by_container_.end()) return it->second;
  if (missed_.count(key) != 0) return std::nullopt;
  std::optional<PodNames> n;
  if (!cg.container_id.empty()) n = from_runtime(cg.container_id);
  if (n && n->uid.empty()) n->uid = cg.pod_uid;
  if (!n || n->namespace_.empty()) {
    auto logs = from_logs(cg);
    if (logs && n && n->pod == logs->pod) logs->container = n->container;
    if (logs) n = logs;
  }
  if (!n) {
    missed_.insert(key);
    return std::nullopt;
  }
  if (by_container_.size() >= kMaxCached) by_container_.clear();
  by_container_[key] = *n;
  return n;
}

}  // namespace mlprof::agent
