#pragma once
// What to attach to: processes that map the extension (mlflow_profiler/_core*.so)
// or that carry mlprof USDT notes themselves, selected by pid, container,
// cgroup or all; resolved through /proc and the container runtimes' state.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace mlprof::agent {

struct Target {
  pid_t pid = 0;
  std::string binary;     // the ELF with the probes, openable from here (/proc/PID/root/<path>)
  std::string container;  // container id if in one, else ""
  uint64_t cgroup_id = 0; // cgroup v2 id of the process
};

struct Container {
  std::string id;       // full id
  std::string name;     // name if the runtime records one
  std::string runtime;  // "docker", "podman", "containerd", "kubernetes"
  std::string cgroup;   // cgroup v2 path, relative to the v2 mount
};

}  // namespace mlprof::agent
