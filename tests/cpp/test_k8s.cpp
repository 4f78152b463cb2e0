// k8s.cpp and session_labels.cpp: the kubelet's cgroup layouts, the CRI
// runtimes' state and the pod log directories on recorded state
// (tests/fixtures/k8s, README there for where each format comes from), laid
// out under a temporary host root; TargetFinder's --pod on a /proc made of
// recorded files; the labels a session gets.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/k8s.h"
#include "agent/session_labels.h"
#include "agent/targets.h"

namespace fs = std::filesystem;
using namespace mlprof;
using namespace mlprof::agent;

namespace {

const std::string kFixtures = MLPROF_K8S_FIXTURES;
const std::string kData = MLPROF_TEST_DATA;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

struct TempRoot {
  fs::path path;
  TempRoot() {
    char tmpl[] = "/tmp/mlprof-k8s-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const std::string kContainerdId =
    "b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc";
const std::string kContainerdPod = "f6f2d169-f2ae-4afa-95ed-06ff2ed6b288";
const std::string kCrioId = "a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3";
const std::string kCrioPod = "897277d4-5e6f-4999-a976-b8340e8d075e";

}  // namespace

// ---- cgroup paths ----------------------------------------------------------

struct CgroupCase {
  const char* line;
  const char* container_id;  // "" none; nullptr: not a pod at all
  const char* pod_uid;
  const char* qos;
  const char* driver;
  const char* runtime;
};

// The OpenTelemetry eBPF profiler's TestExtractContainerID lines
// (process/process_test.go), with what each says about the pod.
const CgroupCase kOtelCases[] = {
    // cgroup v2. The first line's uid mixes '_' and '-' as the table has it.
    {"0::/kubepods.slice/kubepods-burstable.slice/"
     "kubepods-burstable-podf6f2d169_f2ae_4afa-95ed_06ff2ed6b288.slice/"
     "cri-containerd-b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc.scope",
     "b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc",
     "f6f2d169-f2ae-4afa-95ed-06ff2ed6b288", "burstable", "systemd", "containerd"},
    {"0::/kubepods/besteffort/pod05e102bf-8744-4942-a241-9b6f07983a53/"
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "05e102bf-8744-4942-a241-9b6f07983a53", "besteffort", "cgroupfs", ""},
    {"0::/kubepods/besteffort/pod897277d4-5e6f-4999-a976-b8340e8d075e/"
     "crio-a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3",
     "a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3",
     "897277d4-5e6f-4999-a976-b8340e8d075e", "besteffort", "cgroupfs", "cri-o"},
    {"0::/kubepods.slice/kubepods-besteffort.slice/"
     "kubepods-besteffort-pod4c9f1974_5c46_44c2_b42f_3bbf0e98eef9.slice/"
     "cri-containerd-bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba.scope",
     "bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba",
     "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9", "besteffort", "systemd", "containerd"},
    {"0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/"
     "vte-spawn-868f9513-eee8-457d-8e36-1b37ae8ae622.scope",
     nullptr, "", "", "", ""},
    {"0::/../../user.slice/user-501.slice/session-3.scope", nullptr, "", "", "", ""},
    // Docker outside Kubernetes: a container, not a pod.
    {"0::/system.slice/"
     "docker-b1eba9dfaeba29d8b80532a574a03ea3cac29384327f339c26da13649e2120df.scope/init",
     nullptr, "", "", "", ""},
    // cgroup v1
    {"11:memory:/kubepods/besteffort/poda9c80282-3f6b-4d5b-84d5-a137a6668011/"
     "ed89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997",
     "ed89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997",
     "a9c80282-3f6b-4d5b-84d5-a137a6668011", "besteffort", "cgroupfs", ""},
    {"11:cpucpuacct:/system.slice/containerd.service/"
     "kubepods-besteffort-pod86811ae3_b633_4eb8_a508_e3eae190f6ce.slice:cri-containerd:"
     "da1bdd84c8b25938081afe48da7075e2a211d2b1a62e01c894b4e5f3ffab670a",
     "da1bdd84c8b25938081afe48da7075e2a211d2b1a62e01c894b4e5f3ffab670a",
     "86811ae3-b633-4eb8-a508-e3eae190f6ce", "besteffort", "systemd", "containerd"},
    {"1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
     "kubepods-burstable-podf6f2d169_f2ae_4afa_95ed_06ff2ed6b288.slice/"
     "cri-containerd-b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc.scope",
     "b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc",
     "f6f2d169-f2ae-4afa-95ed-06ff2ed6b288", "burstable", "systemd", "containerd"},
};

// The other layouts the kubelet and the runtimes make (kubelet
// pkg/kubelet/cm: guaranteed pods sit right under kubepods; CRI-O and
// Docker name their scopes crio-<id>, docker-<id>).
const CgroupCase kMoreCases[] = {
    {"0::/kubepods.slice/kubepods-pod0d5e1c4b_9a7f_4d3e_8b2a_6c1f0e9d8a7b.slice/"
     "crio-a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3.scope",
     "a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3",
     "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "guaranteed", "systemd", "cri-o"},
    {"0::/kubepods/pod0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b/"
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "guaranteed", "cgroupfs", ""},
    {"0::/kubepods/burstable/pod0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b/"
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "burstable", "cgroupfs", ""},
    {"0::/kubepods.slice/kubepods-burstable.slice/"
     "kubepods-burstable-pod0d5e1c4b_9a7f_4d3e_8b2a_6c1f0e9d8a7b.slice/"
     "docker-b1eba9dfaeba29d8b80532a574a03ea3cac29384327f339c26da13649e2120df.scope",
     "b1eba9dfaeba29d8b80532a574a03ea3cac29384327f339c26da13649e2120df",
     "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "burstable", "systemd", "docker"},
    // kind's nodes: the kubelet's cgroup root is kubelet.slice.
    {"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     "kubelet-kubepods-besteffort-pod0d5e1c4b_9a7f_4d3e_8b2a_6c1f0e9d8a7b.slice/"
     "cri-containerd-bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba.scope",
     "bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba",
     "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "besteffort", "systemd", "containerd"},
    // A static pod: its uid is a 32-hex hash of the manifest.
    {"0::/kubepods/burstable/pod5b6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f/"
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     "5b6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f", "burstable", "cgroupfs", ""},
    // The pod's own cgroup, and CRI-O's conmon beside the container: in the pod, no container.
    {"0::/kubepods.slice/kubepods-burstable.slice/"
     "kubepods-burstable-pod0d5e1c4b_9a7f_4d3e_8b2a_6c1f0e9d8a7b.slice",
     "", "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "burstable", "systemd", ""},
    {"0::/kubepods.slice/kubepods-burstable.slice/"
     "kubepods-burstable-pod0d5e1c4b_9a7f_4d3e_8b2a_6c1f0e9d8a7b.slice/"
     "crio-conmon-a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3.scope",
     "", "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b", "burstable", "systemd", ""},
    // Not pods: no uid, a uid that is not one, a "pod" outside kubepods.
    {"0::/kubepods.slice/kubepods-burstable.slice", nullptr, "", "", "", ""},
    {"0::/kubepods/burstable/podnot-a-uid/"
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     nullptr, "", "", "", ""},
    {"0::/machine.slice/pod0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b/"
     "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8",
     nullptr, "", "", "", ""},
};

void check_cases(const CgroupCase* begin, const CgroupCase* end) {
  for (const CgroupCase* c = begin; c != end; ++c) {
    SCOPED_TRACE(c->line);
    auto pc = pod_cgroup_in_proc(c->line);
    if (c->container_id == nullptr) {
      EXPECT_FALSE(pc.has_value());
      continue;
    }
    ASSERT_TRUE(pc.has_value());
    EXPECT_EQ(pc->container_id, c->container_id);
    EXPECT_EQ(pc->pod_uid, c->pod_uid);
    EXPECT_EQ(pc->qos, c->qos);
    EXPECT_EQ(pc->driver, c->driver);
    EXPECT_EQ(pc->runtime, c->runtime);
  }
}

TEST(K8sCgroup, OpenTelemetryProfilerTable) {
  check_cases(std::begin(kOtelCases), std::end(kOtelCases));
}

TEST(K8sCgroup, KubeletLayoutsBothDriversAllQosClasses) {
  check_cases(std::begin(kMoreCases), std::end(kMoreCases));
}

TEST(K8sCgroup, HybridHostReadsTheV1LinesWhenV2SaysNothing) {
  // A hybrid host whose kubelet drives the v1 hierarchies: the v2 line is
  // the root, the pod is on the v1 lines (one of them only the pod's).
  const std::string hybrid =
      "12:pids:/kubepods/burstable/pod0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b\n"
      "11:memory:/kubepods/burstable/pod0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b/"
      "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8\n"
      "1:name=systemd:/user.slice\n"
      "0::/\n";
  auto pc = pod_cgroup_in_proc(hybrid);
  ASSERT_TRUE(pc.has_value());
  EXPECT_EQ(pc->container_id, "f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8");
  EXPECT_EQ(pc->pod_uid, "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b");

  // v2 naming the container wins over v1.
  const std::string both =
      "4:memory:/kubepods/besteffort/poda9c80282-3f6b-4d5b-84d5-a137a6668011/"
      "ed89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997\n"
      "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podf6f2d169_f2ae_4afa_95ed_"
      "06ff2ed6b288.slice/cri-containerd-" +
      kContainerdId + ".scope\n";
  pc = pod_cgroup_in_proc(both);
  ASSERT_TRUE(pc.has_value());
  EXPECT_EQ(pc->container_id, kContainerdId);
  EXPECT_EQ(pc->driver, "systemd");

  // A process of this VM (recorded): no pod anywhere.
  EXPECT_FALSE(pod_cgroup_in_proc(slurp(kData + "/proc/12636/cgroup")).has_value());
  EXPECT_FALSE(pod_cgroup_in_proc("").has_value());
}

// ---- names -----------------------------------------------------------------

TEST(K8sNames, ContainerdAnnotations) {
  auto n = pod_names_in_oci_config(slurp(kFixtures + "/containerd/container-config.json"));
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->namespace_, "ml");
  EXPECT_EQ(n->pod, "scorer-6c5d8");
  EXPECT_EQ(n->uid, kContainerdPod);
  EXPECT_EQ(n->container, "model");
  EXPECT_EQ(n->source, "containerd");
  EXPECT_FALSE(n->sandbox);
  EXPECT_EQ(n->path(), "ml/scorer-6c5d8/model");

  auto s = pod_names_in_oci_config(slurp(kFixtures + "/containerd/sandbox-config.json"));
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->sandbox);
  EXPECT_EQ(s->container, "");
  EXPECT_EQ(s->path(), "ml/scorer-6c5d8");
}

TEST(K8sNames, CrioAnnotations) {
  auto n = pod_names_in_oci_config(slurp(kFixtures + "/crio/container-config.json"));
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->path(), "search/ranker-7f9b4/ranker");
  EXPECT_EQ(n->uid, kCrioPod);
  EXPECT_EQ(n->source, "cri-o");
  auto s = pod_names_in_oci_config(slurp(kFixtures + "/crio/sandbox-config.json"));
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->sandbox);  // "POD": the infra container
  EXPECT_EQ(s->container, "");
}

TEST(K8sNames, NotAPodsSpec) {
  EXPECT_FALSE(pod_names_in_oci_config("").has_value());
  EXPECT_FALSE(
      pod_names_in_oci_config("{\"annotations\": {\"io.kubernetes.cri.sandbox-na").has_value());
  EXPECT_FALSE(pod_names_in_oci_config("{\"ociVersion\": \"1.1.0\"}").has_value());
  // nerdctl's containers carry no pod.
  EXPECT_FALSE(
      pod_names_in_oci_config("{\"annotations\": {\"nerdctl/name\": \"nerd-1\"}}").has_value());
}

TEST(K8sNames, KubeletLogLayout) {
  auto d = pod_names_of_log_dir("ml_scorer-6c5d8_" + kContainerdPod);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->namespace_, "ml");
  EXPECT_EQ(d->pod, "scorer-6c5d8");
  EXPECT_EQ(d->uid, kContainerdPod);
  EXPECT_FALSE(pod_names_of_log_dir("ml_scorer").has_value());
  EXPECT_FALSE(pod_names_of_log_dir("a_b_c_d").has_value());
  EXPECT_FALSE(pod_names_of_log_dir("ml__uid").has_value());

  auto l = pod_names_of_log_link("scorer-6c5d8_ml_model-" + kContainerdId + ".log", kContainerdId);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->path(), "ml/scorer-6c5d8/model");
  EXPECT_FALSE(pod_names_of_log_link("scorer-6c5d8_ml_model-" + kContainerdId + ".log", kCrioId));
  EXPECT_FALSE(
      pod_names_of_log_link("scorer-6c5d8_model-" + kContainerdId + ".log", kContainerdId));
}

TEST(K8sNames, NodeNameFromTheDownwardApi) {
  const char* before = std::getenv("NODE_NAME");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("NODE_NAME", "gpu-node-7", 1);
  EXPECT_EQ(node_name(), "gpu-node-7");
  ::unsetenv("NODE_NAME");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(node_name(), host);
  if (before != nullptr) ::setenv("NODE_NAME", saved.c_str(), 1);
}

// ---- PodResolver under a host root -------------------------------------------

namespace {

PodCgroup containerd_cg() {
  return *pod_cgroup_of_path(
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podf6f2d169_f2ae_4afa_95ed_"
      "06ff2ed6b288.slice/cri-containerd-" +
      kContainerdId + ".scope");
}
PodCgroup crio_cg() {
  return *pod_cgroup_of_path("/kubepods/besteffort/pod" + kCrioPod + "/crio-" + kCrioId);
}

void lay_out_logs(const fs::path& root, const std::string& dir,
                  const std::vector<std::string>& containers) {
  for (const std::string& c : containers) put(root / "var/log/pods" / dir / c / "0.log", "");
}

}  // namespace

TEST(K8sResolver, ContainerdStateFirst) {
  TempRoot root;
  put(root.path / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / kContainerdId /
          "config.json",
      slurp(kFixtures + "/containerd/container-config.json"));
  PodResolver r(root.path.string());
  auto n = r.names(containerd_cg());
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->path(), "ml/scorer-6c5d8/model");
  EXPECT_EQ(n->source, "containerd");
  EXPECT_TRUE(r.take_notes().empty());
}

TEST(K8sResolver, CrioStateUnderRunOrVarLib) {
  for (const char* dir : {"run/containers/storage/overlay-containers",
                          "var/lib/containers/storage/overlay-containers"}) {
    SCOPED_TRACE(dir);
    TempRoot root;
    put(root.path / dir / kCrioId / "userdata/config.json",
        slurp(kFixtures + "/crio/container-config.json"));
    PodResolver r(root.path.string());
    auto n = r.names(crio_cg());
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->path(), "search/ranker-7f9b4/ranker");
    EXPECT_EQ(n->source, "cri-o");
  }
}

TEST(K8sResolver, NoRuntimeStateNamesFromPodLogsWithANote) {
  TempRoot root;
  lay_out_logs(root.path, "ml_scorer-6c5d8_" + kContainerdPod, {"model"});
  PodResolver r(root.path.string());
  auto n = r.names(containerd_cg());
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->path(), "ml/scorer-6c5d8/model");  // the pod's only container
  EXPECT_EQ(n->uid, kContainerdPod);
  EXPECT_EQ(n->source, "pod logs");
  auto notes = r.take_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no containerd or CRI-O state"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("var/log/pods"), std::string::npos) << notes[0];
  EXPECT_TRUE(r.take_notes().empty());  // said once
}

TEST(K8sResolver, SeveralContainersTheLogLinkSaysWhich) {
  TempRoot root;
  const std::string dir = "ml_scorer-6c5d8_" + kContainerdPod;
  lay_out_logs(root.path, dir, {"model", "sidecar"});
  {
    PodResolver r(root.path.string());
    auto n = r.names(containerd_cg());
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->path(), "ml/scorer-6c5d8");  // which of the two is not known
  }
  fs::create_directories(root.path / "var/log/containers");
  fs::create_symlink(
      "/var/log/pods/" + dir + "/model/0.log",
      root.path / "var/log/containers" / ("scorer-6c5d8_ml_model-" + kContainerdId + ".log"));
  PodResolver r(root.path.string());
  auto n = r.names(containerd_cg());
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->path(), "ml/scorer-6c5d8/model");
}

TEST(K8sResolver, UnreadableStateFallsBackToLogs) {
  // Root reads through any mode bits, so the state is made unreadable as a
  // directory where the file should be (read() fails with EISDIR) and as a
  // config.json cut off mid-write.
  TempRoot root;
  fs::create_directories(root.path / "run/containerd/io.containerd.runtime.v2.task/k8s.io" /
                         kContainerdId / "config.json");
  const std::string cut = slurp(kFixtures + "/crio/container-config.json").substr(0, 300);
  put(root.path / "run/containers/storage/overlay-containers" / kCrioId / "userdata/config.json",
      cut);
  lay_out_logs(root.path, "ml_scorer-6c5d8_" + kContainerdPod, {"model"});
  lay_out_logs(root.path, "search_ranker-7f9b4_" + kCrioPod, {"ranker"});
  PodResolver r(root.path.string());
  auto a = r.names(containerd_cg());
  auto b = r.names(crio_cg());
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->path(), "ml/scorer-6c5d8/model");
  EXPECT_EQ(b->path(), "search/ranker-7f9b4/ranker");
  EXPECT_EQ(a->source, "pod logs");
  auto notes = r.take_notes();
  ASSERT_EQ(notes.size(), 1u);  // the directory in config.json's place; a cut file is not news
  EXPECT_NE(notes[0].find("cannot read the container runtime's state"), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find("Is a directory"), std::string::npos) << notes[0];
}

TEST(K8sResolver, MissesAreLookedUpAgainNextPass) {
  TempRoot root;
  PodResolver r(root.path.string());
  EXPECT_FALSE(r.names(containerd_cg()).has_value());
  // The kubelet makes the pod's log directory: seen after next_pass().
  lay_out_logs(root.path, "ml_scorer-6c5d8_" + kContainerdPod, {"model"});
  EXPECT_FALSE(r.names(containerd_cg()).has_value());
  r.next_pass();
  auto n = r.names(containerd_cg());
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->path(), "ml/scorer-6c5d8/model");
}

// ---- TargetFinder --pod on a recorded /proc -----------------------------------

namespace {

// A /proc entry from the recorded Python process with the extension loaded
// (tests/cpp/data/proc/12636), in another cgroup.
void fake_process(const fs::path& proc, int pid, const std::string& cgroup) {
  const fs::path dir = proc / std::to_string(pid);
  for (const char* f : {"maps", "stat", "comm"}) put(dir / f, slurp(kData + "/proc/12636/" + f));
  put(dir / "cgroup", cgroup);
  // The extension its maps name, as its root holds it (the agent attaches
  // only to a regular file there).
  put(dir / ("root" + *extension_in_maps(slurp(kData + "/proc/12636/maps"))), "");
}

std::string systemd_line(const std::string& uid, const std::string& id) {
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  return "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u +
         ".slice/cri-containerd-" + id + ".scope\n";
}

const std::string kIdB = std::string(64, 'b');
const std::string kIdC = std::string(64, 'c');
const std::string kOtherPod = "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b";

struct FakeNode {
  TempRoot root;
  HostPaths paths;
  FakeNode() {
    paths.proc = (root.path / "proc").string();
    paths.cgroup2 = "/nonexistent-cgroup2";
    paths.docker = paths.podman_db = paths.podman_storage = paths.containerd = "/nonexistent";
    paths.host_root = (root.path / "host").string();
    put(root.path / "host/run/containerd/io.containerd.runtime.v2.task/k8s.io" / kContainerdId /
            "config.json",
        slurp(kFixtures + "/containerd/container-config.json"));
    // The sidecar of the same pod, and a pod known only from its log directory.
    std::string sidecar = slurp(kFixtures + "/containerd/container-config.json");
    sidecar.replace(sidecar.find("\"model\""), 7, "\"sidecar\"");
    put(root.path / "host/run/containerd/io.containerd.runtime.v2.task/k8s.io" / kIdB /
            "config.json",
        sidecar);
    lay_out_logs(root.path / "host", "batch_trainer-0_" + kOtherPod, {"train"});
    fake_process(root.path / "proc", 4101, systemd_line(kContainerdPod, kContainerdId));
    fake_process(root.path / "proc", 4102, systemd_line(kContainerdPod, kIdB));
    fake_process(root.path / "proc", 4201,
                 "0::/kubepods/besteffort/pod" + kOtherPod + "/" + kIdC + "\n");
    fake_process(root.path / "proc", 4301, "0::/user.slice/session-3.scope\n");
  }
};

std::vector<pid_t> started(TargetFinder& f) {
  std::vector<pid_t> out;
  for (const Target& t : f.rescan().started) out.push_back(t.pid);
  std::sort(out.begin(), out.end());
  return out;
}

std::string create_error(const TargetSelection& sel, const HostPaths& paths) {
  auto f = TargetFinder::create(sel, paths);
  EXPECT_FALSE(f.ok());
  if (f.ok()) return {};
  EXPECT_EQ(f.error().message.find('\n'), std::string::npos) << "one line";
  return f.error().message;
}

}  // namespace

TEST(K8sTargets, PodSelectsItsProcessesAndLabelsThem) {
  FakeNode node;
  TargetSelection sel;
  sel.pod = "ml/scorer-6c5d8";
  auto f = TargetFinder::create(sel, node.paths);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f.value()->describe(), "pod ml/scorer-6c5d8");
  auto changes = f.value()->rescan();
  std::map<pid_t, Target> got;
  for (const Target& t : changes.started) got[t.pid] = t;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[4101].labels.at("namespace"), "ml");
  EXPECT_EQ(got[4101].labels.at("pod"), "scorer-6c5d8");
  EXPECT_EQ(got[4101].labels.at("container"), "model");
  EXPECT_EQ(got[4101].labels.at("pod_uid"), kContainerdPod);
  EXPECT_EQ(got[4101].labels.at("container_id"), kContainerdId);
  EXPECT_EQ(got[4102].labels.at("container"), "sidecar");

  sel.pod = "ml/scorer-6c5d8/sidecar";
  auto one = TargetFinder::create(sel, node.paths);
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(started(*one.value()), std::vector<pid_t>{4102});

  // Names from the pod's log directory only.
  sel.pod = "batch/trainer-0";
  auto logs = TargetFinder::create(sel, node.paths);
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  EXPECT_EQ(started(*logs.value()), std::vector<pid_t>{4201});

  // --all labels each process with its own pod; a host process gets none.
  TargetSelection all;
  all.all = true;
  auto a = TargetFinder::create(all, node.paths);
  ASSERT_TRUE(a.ok());
  std::map<pid_t, Target> every;
  for (const Target& t : a.value()->rescan().started) every[t.pid] = t;
  ASSERT_EQ(every.size(), 4u);
  EXPECT_EQ(every[4201].labels.at("pod"), "trainer-0");
  EXPECT_EQ(every[4201].labels.at("container"), "train");
  EXPECT_EQ(every[4101].labels.at("pod"), "scorer-6c5d8");
  EXPECT_TRUE(every[4301].labels.empty());
}

TEST(K8sTargets, NoMatchOrSeveralListTheCandidates) {
  FakeNode node;
  TargetSelection sel;
  sel.pod = "ml/nope";
  std::string e = create_error(sel, node.paths);
  EXPECT_NE(e.find("pod 'ml/nope' not found on this node"), std::string::npos) << e;
  EXPECT_NE(e.find("ml/scorer-6c5d8 (model, sidecar)"), std::string::npos) << e;
  EXPECT_NE(e.find("batch/trainer-0 (train)"), std::string::npos) << e;

  sel.pod = "ml/scorer-6c5d8/nope";
  e = create_error(sel, node.paths);
  EXPECT_NE(e.find("has no container 'nope'"), std::string::npos) << e;
  EXPECT_NE(e.find("its containers: model, sidecar"), std::string::npos) << e;

  // The pod recreated (same name, a new uid) while the old one still runs.
  const std::string newer = "11111111-2222-3333-4444-555555555555";
  lay_out_logs(node.root.path / "host", "batch_trainer-0_" + newer, {"train"});
  fake_process(node.root.path / "proc", 4202,
               "0::/kubepods/besteffort/pod" + newer + "/" + std::string(64, 'd') + "\n");
  sel.pod = "batch/trainer-0";
  e = create_error(sel, node.paths);
  EXPECT_NE(e.find("matches 2 pods"), std::string::npos) << e;
  EXPECT_NE(e.find("uid " + kOtherPod + " (cgroup /kubepods/besteffort/pod" + kOtherPod + ")"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("uid " + newer), std::string::npos) << e;
}

TEST(K8sTargets, NoPodOnTheNode) {
  TempRoot root;
  HostPaths paths;
  paths.proc = (root.path / "proc").string();
  paths.host_root = root.path.string();
  fake_process(root.path / "proc", 4301, "0::/user.slice/session-3.scope\n");
  TargetSelection sel;
  sel.pod = "ml/scorer";
  const std::string e = create_error(sel, paths);
  EXPECT_NE(e.find("no process on this node runs in a Kubernetes pod"), std::string::npos) << e;
  EXPECT_NE(e.find("hostPID"), std::string::npos) << e;
}

// ---- session labels ----------------------------------------------------------

TEST(SessionLabels, EachSessionGetsItsProcesssLabels) {
  SessionLabels labels(std::map<std::string, std::string>{{"node", "n1"}});
  labels.started(10, {{"namespace", "ml"}, {"pod", "a"}, {"container", "model"}});
  labels.started(20, {{"namespace", "ml"}, {"pod", "b"}, {"container", "model"}});
  Profile p10, p20, host;
  p10.meta = {{"pid", "10"}, {"node", "kept"}};
  p20.meta = {{"pid", "20"}};
  host.meta = {{"pid", "30"}};
  labels.label(p10, 0);
  labels.label(p20, 0);
  labels.label(host, 0);
  EXPECT_EQ(p10.meta.at("pod"), "a");
  EXPECT_EQ(p10.meta.at("node"), "kept");  // the meta's own key stays
  EXPECT_EQ(p20.meta.at("pod"), "b");
  EXPECT_EQ(p20.meta.at("node"), "n1");
  EXPECT_EQ(host.meta.count("pod"), 0u);
  EXPECT_EQ(labels.summary_line(), "pods ml/a/model (pid 10), ml/b/model (pid 20), node n1\n");
  Profile combined;
  labels.annotate_combined(combined);
  EXPECT_EQ(combined.meta.at("pods"), "ml/a/model=10 ml/b/model=20");

  // An exited process's sessions still get its labels for a while.
  labels.exited(10, 1'000);
  Profile late;
  late.meta = {{"pid", "10"}};
  labels.label(late, 500'000'000);
  EXPECT_EQ(late.meta.at("pod"), "a");
  Profile later;
  later.meta = {{"pid", "10"}};
  labels.label(later, 3'000'000'000);  // forgotten after this pass
  Profile last;
  last.meta = {{"pid", "10"}};
  labels.label(last, 3'000'000'001);
  EXPECT_EQ(last.meta.count("pod"), 0u);
}
