// Container discovery (containers.h): one reader per runtime's state files,
// merged by id, then the cgroups of running processes.

#include "agent/containers.h"

#include <rapidjson/document.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "agent/boltdb.h"
#include "agent/json_parse.h"
#include "agent/procfs.h"
#include "formats/json_member.h"

namespace mlprof::agent {

namespace {

std::string short_id(const std::string& id) { return id.substr(0, 12); }

// rapidjson accessors that tolerate missing or mistyped fields.
std::string string_member(const rapidjson::Value& v, const char* name) {
  const rapidjson::Value* m = member(v, name);
  return m != nullptr && m->IsString() ? std::string(m->GetString(), m->GetStringLength())
                                       : std::string();
}
int64_t int_member(const rapidjson::Value& v, const char* name) {
  const rapidjson::Value* m = member(v, name);
  return m != nullptr && m->IsInt64() ? m->GetInt64() : 0;
}

}  // namespace

std::string Container::describe() const {
  std::string who = runtime.empty() ? std::string("container") : runtime;
  if (name.empty()) return who + " " + short_id(id);
  return name + " (" + who + " " + short_id(id) + ")";
}

namespace {

void add_container(std::vector<Container>& list, Container c) {
  if (c.member_ids.empty()) c.member_ids.push_back(c.id);
  for (Container& have : list) {
    if (have.id != c.id) continue;
    // Same id seen twice (Docker's containers in containerd's "moby"
    // namespace; a Podman container in both its DB and containers/storage):
    // keep the named, richer record.
    if (have.name.empty() && !c.name.empty()) {
      c.cgroup = c.cgroup.empty() ? have.cgroup : c.cgroup;
      have = std::move(c);
    } else if (have.pid == 0) {
      have.pid = c.pid;
    }
    return;
  }
  list.push_back(std::move(c));
}

// Docker: /var/lib/docker/containers/<id>/config.v2.json (moby's container.Container).
void docker_containers(const HostPaths& paths, std::vector<Container>& list) {
  const std::string dir = paths.docker + "/containers";
  for (const std::string& id : list_dir(dir)) {
    auto text = read_text(dir + "/" + id + "/config.v2.json");
    rapidjson::Document doc;
    if (!text || !parse_json_iterative(doc, *text) || !doc.IsObject()) continue;
    Container c;
    c.runtime = "docker";
    c.id = string_member(doc, "ID");
    if (c.id.empty()) c.id = id;
    c.name = string_member(doc, "Name");
    if (!c.name.empty() && c.name[0] == '/') c.name.erase(0, 1);
    if (const rapidjson::Value* state = member(doc, "State")) {
      const rapidjson::Value* running = member(*state, "Running");
      c.running = running != nullptr && running->IsBool() && running->GetBool();
      c.pid = static_cast<pid_t>(int_member(*state, "Pid"));
    }
    // Kubernetes through dockershim labels its containers.
    if (const rapidjson::Value* config = member(doc, "Config")) {
      if (const rapidjson::Value* labels = member(*config, "Labels")) {
        const std::string pod = string_member(*labels, "io.kubernetes.pod.name");
        const std::string ns = string_member(*labels, "io.kubernetes.pod.namespace");
        const std::string ctr = string_member(*labels, "io.kubernetes.container.name");
        if (!pod.empty() && !ctr.empty()) {
          c.aliases.push_back(pod + "/" + ctr);
          if (!ns.empty()) c.aliases.push_back(ns + "/" + pod + "/" + ctr);
        }
      }
    }
    add_container(list, std::move(c));
  }
}

// Podman 4: libpod's BoltDB (all-ctrs: id -> name; ctr/<id>/{config,state}:
// JSON with the pod id, the state number and the pid), then the pods.
void podman_bolt_containers(const HostPaths& paths, std::vector<Container>& list) {
  auto db = read_text(paths.podman_db);
  if (!db) return;
  auto all = read_bolt_bucket(*db, {"all-ctrs"});
  if (!all) return;
  std::map<std::string, std::vector<std::string>> pod_members;
  for (const BoltEntry& e : all.value()) {
    Container c;
    c.runtime = "podman";
    c.id = e.key;
    c.name = e.value;
    if (auto ctr = read_bolt_bucket(*db, {"ctr", e.key}); ctr) {
      for (const BoltEntry& f : ctr.value()) {
        rapidjson::Document doc;
        if (f.is_bucket || !parse_json_iterative(doc, f.value)) continue;
        if (f.key == "state") {
          // libpod's ContainerStatus: 3 running, 5 paused (define/containerstate.go).
          const int64_t state = int_member(doc, "state");
          c.running = state == 3 || state == 5;
          c.pid = c.running ? static_cast<pid_t>(int_member(doc, "pid")) : 0;
        } else if (f.key == "config") {
          const std::string pod = string_member(doc, "pod");
          if (!pod.empty()) pod_members[pod].push_back(c.id);
        }
      }
    }
    add_container(list, std::move(c));
  }
  if (auto pods = read_bolt_bucket(*db, {"allPods"}); pods) {
    for (const BoltEntry& e : pods.value()) {
      Container pod;
      pod.runtime = "podman pod";
      pod.id = e.key;
      pod.name = e.value;
      pod.member_ids = pod_members[e.key];
      pod.member_ids.push_back(e.key);
      add_container(list, std::move(pod));
    }
  }
}

// containers/storage's list (Podman, Buildah, CRI-O): id and names, kept in
// every Podman version (Podman 5 moved libpod's own state to SQLite).
void podman_storage_containers(const HostPaths& paths, std::vector<Container>& list) {
  auto text = read_text(paths.podman_storage + "/overlay-containers/containers.json");
  rapidjson::Document doc;
  if (!text || !parse_json_iterative(doc, *text) || !doc.IsArray()) return;
  for (const rapidjson::Value& v : doc.GetArray()) {
    Container c;
    c.runtime = "podman";
    c.id = string_member(v, "id");
    if (c.id.empty()) continue;
    if (const rapidjson::Value* names = member(v, "names"); names != nullptr && names->IsArray()) {
      for (const rapidjson::Value& n : names->GetArray()) {
        if (!n.IsString()) continue;
        if (c.name.empty())
          c.name = n.GetString();
        else
          c.aliases.emplace_back(n.GetString());
      }
    }
    add_container(list, std::move(c));
  }
}

// containerd: one bundle per task, <root>/io.containerd.runtime.v2.task/<namespace>/<id>/
// with the OCI config.json (Kubernetes' CRI and nerdctl annotate names there) and init.pid.
void containerd_containers(const HostPaths& paths, std::vector<Container>& list) {
  const std::string root = paths.containerd + "/io.containerd.runtime.v2.task";
  std::map<std::string, std::vector<std::string>> pod_members;
  std::vector<Container> pods;
  for (const std::string& ns : list_dir(root)) {
    for (const std::string& id : list_dir(root + "/" + ns)) {
      const std::string bundle = root + "/" + ns + "/" + id;
      auto text = read_text(bundle + "/config.json");
      rapidjson::Document doc;
      if (!text || !parse_json_iterative(doc, *text)) continue;
      Container c;
      c.id = id;
      c.runtime = ns == "moby" ? "docker" : "containerd";
      if (auto pid = read_text(bundle + "/init.pid"))
        c.pid = static_cast<pid_t>(std::atoi(pid->c_str()));
      const rapidjson::Value* ann = member(doc, "annotations");
      if (ann != nullptr) {
        const std::string type = string_member(*ann, "io.kubernetes.cri.container-type");
        const std::string pod = string_member(*ann, "io.kubernetes.cri.sandbox-name");
        const std::string pod_ns = string_member(*ann, "io.kubernetes.cri.sandbox-namespace");
        const std::string sandbox = string_member(*ann, "io.kubernetes.cri.sandbox-id");
        if (type == "sandbox") {
          c.runtime = "kubernetes pod";
          c.name = pod;
          if (!pod_ns.empty()) c.aliases.push_back(pod_ns + "/" + pod);
          pods.push_back(std::move(c));
          continue;
        }
        if (type == "container") {
          c.runtime = "kubernetes";
          c.name = string_member(*ann, "io.kubernetes.cri.container-name");
          if (!pod.empty()) c.aliases.push_back(pod + "/" + c.name);
          if (!pod_ns.empty()) c.aliases.push_back(pod_ns + "/" + pod + "/" + c.name);
          if (!sandbox.empty()) pod_members[sandbox].push_back(id);
        }
        if (c.name.empty()) c.name = string_member(*ann, "nerdctl/name");
      }
      add_container(list, std::move(c));
    }
  }
  for (Container& pod : pods) {
    pod.member_ids = pod_members[pod.id];
    pod.member_ids.push_back(pod.id);
    add_container(list, std::move(pod));
  }
}

// The runtime a cgroup path's layout suggests ("" if it does not say).
std::string runtime_of_cgroup(std::string_view path) {
  if (path.find("libpod") != std::string_view::npos) return "podman";
  if (path.find("docker") != std::string_view::npos) return "docker";
  if (path.find("kubepods") != std::string_view::npos) return "kubernetes";
  if (path.find("containerd") != std::string_view::npos) return "containerd";
  if (path.find("crio") != std::string_view::npos) return "cri-o";
  return "";
}

// The cgroup path up to and including the component that names `id`.
std::string cgroup_of_id(const std::string& path, const std::string& id) {
  const size_t at = path.find(id);
  if (at == std::string::npos) return {};
  const size_t end = path.find('/', at);
  return end == std::string::npos ? path : path.substr(0, end);
}

}  // namespace

std::vector<Container> list_containers(const HostPaths& paths) {
  std::vector<Container> list;
  docker_containers(paths, list);
  podman_bolt_containers(paths, list);
  podman_storage_containers(paths, list);
  containerd_containers(paths, list);
  // Running processes: their cgroup paths name containers the state files
  // may not (a runtime whose files are elsewhere), and give the v2 cgroups.
  for (const std::string& pid : list_dir(paths.proc)) {
    if (!is_pid_name(pid)) continue;
    auto text = read_text(paths.proc + "/" + pid + "/cgroup");
    if (!text) continue;
    auto [id, v2] = container_in_proc_cgroup(*text);
    if (id.empty()) continue;
    bool known = false;
    for (Container& c : list) {
      if (c.id != id) continue;
      known = true;
      // The runtime's own pid, when it recorded one, gives the cgroup.
      const bool its_pid = c.pid <= 0 || std::to_string(c.pid) == pid;
      if (c.cgroup.empty() && !v2.empty() && its_pid) c.cgroup = cgroup_of_id(v2, id);
    }
    if (!known) {
      Container c;
      c.id = id;
      c.runtime = runtime_of_cgroup(v2);
      c.cgroup = v2.empty() ? std::string() : cgroup_of_id(v2, id);
      add_container(list, std::move(c));
    }
  }
  return list;
}

Result<Container> resolve_container(const std::string& name_or_id,
                                    const std::vector<Container>& candidates) {
  std::vector<const Container*> matches;
  for (const Container& c : candidates) {
    if (c.name == name_or_id ||
        std::find(c.aliases.begin(), c.aliases.end(), name_or_id) != c.aliases.end()) {
      matches.push_back(&c);
    }
  }
  if (matches.empty()) {
    for (const Container& c : candidates) {
      if (c.id == name_or_id) matches.push_back(&c);
    }
  }
  if (matches.empty() && name_or_id.size() >= 3 && is_hex(name_or_id)) {
    for (const Container& c : candidates) {
      if (c.id.starts_with(name_or_id)) matches.push_back(&c);
    }
  }
  if (matches.size() == 1) return *matches.front();

  auto join = [](const std::vector<const Container*>& list) {
    std::string out;
    for (const Container* c : list) out += (out.empty() ? "" : ", ") + c->describe();
    return out;
  };
  if (matches.size() > 1) {
    return Error{Error::Kind::kUnsupported, 0,
                 "container '" + name_or_id + "' matches " + std::to_string(matches.size()) + ": " +
                     join(matches) + "; give a full name or a longer id"};
  }
  std::vector<const Container*> all;
  all.reserve(candidates.size());
  for (const Container& c : candidates) all.push_back(&c);
  if (all.empty()) {
    return Error{
        Error::Kind::kUnsupported, 0,
        "container '" + name_or_id +
            "' not found, and no container at all was found (Docker, Podman, containerd state "
            "files, cgroups of running processes): check the name with docker ps / podman ps, "
            "and run as root"};
  }
  const bool unnamed = std::any_of(candidates.begin(), candidates.end(),
                                   [](const Container& c) { return c.name.empty(); });
  return Error{
      Error::Kind::kUnsupported, 0,
      "container '" + name_or_id + "' not found; candidates: " + join(all) +
          (unnamed ? " (a container without a name: its runtime's state files were not readable; "
                     "run as root or add CAP_DAC_READ_SEARCH, or give its id)"
                   : "")};
}

}  // namespace mlprof::agent
