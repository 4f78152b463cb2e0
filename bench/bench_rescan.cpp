// The agent's target rescan (TargetFinder::rescan, every 0.5 s) on a node
// with many processes: N real `sleep` children, one of them in a pod cgroup
// laid out as the kubelet's systemd driver makes it (v2 mount), its names in
// a pod log directory under a temporary host root. Times the rescan for
// --all (every process's maps are read), --pod and --cgroup (the cgroup
// rules the others out first). Root (it creates cgroups). Not a test.
//
//   bench_rescan [N=3000] [ROUNDS=20]
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "agent/targets.h"

using namespace mlprof::agent;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first pass (every process new: each maps read) and the median of
// the later ones.
std::pair<double, double> rescan_ms(TargetFinder& f, int rounds) {
  const auto t0 = std::chrono::steady_clock::now();
  f.rescan();
  const double first =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f.rescan();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {first, ms[ms.size() / 2]};
}

size_t count_pids() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) n += (e->d_name[0] >= '0' && e->d_name[0] <= '9') ? 1 : 0;
    ::closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 3000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string v2 = cgroup2_mount_in_mountinfo(slurp("/proc/self/mountinfo"));
  if (v2.empty() || geteuid() != 0) {
    std::fprintf(stderr, "bench_rescan: needs root and a cgroup v2 mount\n");
    return 2;
  }
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      execlp("sleep", "sleep", "600", static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid > 0) children.push_back(pid);
  }
  // One pod with one of them.
  const std::string uid = "0d5e1c4b-9a7f-4d3e-8b2a-6c1f0e9d8a7b";
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  const std::vector<std::string> dirs = {
      v2 + "/kubepods.slice", v2 + "/kubepods.slice/kubepods-besteffort.slice",
      v2 + "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice",
      v2 + "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u +
          ".slice/cri-containerd-" + std::string(64, 'e') + ".scope"};
  for (const std::string& d : dirs) ::mkdir(d.c_str(), 0755);
  if (!children.empty()) std::ofstream(dirs.back() + "/cgroup.procs") << children.front();
  char tmpl[] = "/tmp/mlprof-bench-rescan-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string logs = root + "/var/log/pods/bench_rescan-0_" + uid + "/main";
  std::system(("mkdir -p " + logs).c_str());
  ::usleep(200'000);  // the children have exec'd

  HostPaths paths;
  paths.host_root = root;
  std::printf("processes on the host: %zu (%d sleep children)\n", count_pids(), n);
  TargetSelection all;
  all.all = true;
  TargetSelection pod;
  pod.pod = "bench/rescan-0";
  TargetSelection cg;
  cg.cgroup = dirs[2].substr(v2.size());
  for (const auto& [name, sel] :
       {std::pair{"--all", all}, std::pair{"--pod", pod}, std::pair{"--cgroup", cg}}) {
    auto f = TargetFinder::create(sel, paths);
    if (!f) {
      std::printf("%-9s %s\n", name, f.error().message.c_str());
      continue;
    }
    const auto [first, median] = rescan_ms(*f.value(), rounds);
    std::printf("%-9s first rescan %.2f ms, then median %.2f ms (%d rounds)\n", name, first, median,
                rounds);
  }

  for (pid_t pid : children) kill(pid, SIGKILL);
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir(it->c_str());
  std::system(("rm -rf " + root).c_str());
  return 0;
}
