// Fuzz targets of the agent's parsers of what a host or a target writes
// (audit §4): fuzz/CMakeLists.txt builds this file once a parser, with
// MLPROF_FUZZ_PARSER naming one of the functions below. Each takes the
// input as the file's text (or bytes) and runs every parser of that file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/boltdb.h"
#include "agent/inject.h"
#include "agent/k8s.h"
#include "agent/procfs.h"
#include "agent/remote_exec.h"
#include "agent/stapsdt.h"
#include "fuzz_common.h"
#include "model/summary.h"

using namespace mlprof;
using namespace mlprof::agent;

namespace {

// Each line of `text`, as one value.
template <typename F>
void each_line(std::string_view text, F f) {
  for (std::string_view line : split_lines(text)) f(line);
}

// /proc/PID/maps: the extension, the interpreter's files, its version.
void maps(std::string_view t) {
  (void)extension_in_maps(t);
  (void)runtime_candidates(t);
  (void)python_version_in_maps(t);
}

// /proc/PID/cgroup, and each line as a cgroup path (a target with
// delegated cgroups names its own sub-cgroups).
void cgroup(std::string_view t) {
  (void)cgroup_v2_path(t);
  (void)container_in_proc_cgroup(t);
  (void)pod_cgroup_in_proc(t);
  each_line(t, [](std::string_view line) {
    (void)container_id_in_cgroup(line);
    (void)pod_cgroup_of_path(line);
  });
}

void mountinfo(std::string_view t) { (void)cgroup2_mount_in_mountinfo(t); }

// A container's OCI config.json; each line as a /var/log/pods directory
// name and a /var/log/containers link name.
void k8s(std::string_view t) {
  (void)pod_names_in_oci_config(t);
  each_line(t, [](std::string_view line) {
    (void)pod_names_of_log_dir(line);
    (void)pod_names_of_log_link(line, line.substr(line.size() / 2));
  });
}

// The bytes at a target's _PyRuntime (--inject reads them from its memory).
void debug_offsets(std::string_view t) {
  RemoteExecError why;
  (void)parse_debug_offsets(t, &why);
}

// An ELF file a target maps: .PyRuntime's address and the USDT notes
// (read from a memfd, as has_mlprof_usdt reads a path).
void elf(std::string_view t) {
  (void)pyruntime_address(t, 0x555555554000);
  static const int fd = memfd_create("fuzz-elf", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, t.data(), t.size(), 0) < 0) return;
  (void)has_mlprof_usdt("/proc/self/fd/" + std::to_string(fd));
}

// The result.json the injected script writes in the target, and the
// target's environ and cmdline (split at the first '\n').
void inject_result(std::string_view t) {
  (void)outcome_of_result(4242, t, "/opt/mlflow_profiler");
  const size_t cut = t.find('\n');
  (void)remote_debug_off_reason(t.substr(0, cut),
                                cut == std::string_view::npos ? "" : t.substr(cut + 1));
  (void)ptrace_scope_refusal(4242, t);
}

// Podman's BoltDB state, as containers.cpp reads it.
void boltdb(std::string_view t) {
  auto all = read_bolt_bucket(t, {"all-ctrs"});
  if (all.ok() && !all.value().empty()) (void)read_bolt_bucket(t, {"ctr", all.value()[0].key});
  (void)read_bolt_bucket(t, {"allPods"});
}

// An I/O summary's text (a probe argument), read and formatted. (Not a
// round trip: its repr part is free text, which may read as fields.)
void io_text(std::string_view t) { (void)format_io(parse_io_text(std::string(t))); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MLPROF_FUZZ_PARSER(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
