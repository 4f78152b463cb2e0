#pragma once
// Loads the CO-RE programs of bpf/mlprof.bpf.c, attaches their USDT handlers
// to one process at a time, and reads the ring buffer (records:
// bpf/mlprof_events.h). Lifecycle, top to bottom: open, configure (rodata),
// load (tp_btf or raw_tp, probed), attach the scheduler programs, attach
// pids as they are found, poll until a signal, destroy (RAII). One thread
// uses a loader (libbpf's USDT bookkeeping is not thread-safe). Detaching
// costs ~30 ms of kernel RCU grace period per probe (~0.3 s per pid; the
// destructor detaches every pid): write outputs before destroying it.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "util/result.h"

namespace mlprof::agent {

struct LoaderOptions {
  // Kernel-side filter: only processes in this cgroup v2 (or below it) fire
  // USDT records. 0: no cgroup filter (the attached pids are the filter).
  uint64_t cgroup_id = 0;
  // That cgroup's level under the v2 root (the root is 0, /a/b is 2): the
  // kernel compares one ancestor id. -1: unknown, the kernel tries levels
  // 0..15 on every probe hit.
  int cgroup_level = -1;
  size_t ring_bytes = 32u << 20;  // ring buffer size, a power of two
  bool force_raw_tp = false;      // testing: skip tp_btf even where it loads
  // Testing: deliver spans through the per-span probes, as on a kernel
  // without bpf_loop (session_spans is not loaded).
  bool force_per_span = false;
  bool verbose = false;  // libbpf's own messages to stderr
  // Sessions are shed whole, at their begin, while this share of the ring
  // waits unread (the reader is behind): fewer sessions, none torn by lost
  // records. 0: never shed.
  double shed_at = 0.5;
};

struct LoaderStats {
  uint64_t lost = 0;     // records dropped in the kernel: the ring buffer was full
  uint64_t records = 0;  // records handed to the callback
  uint64_t shed = 0;  // sessions not captured: begun while the ring was past LoaderOptions::shed_at
};

class BpfLoader {
 public:
  // Opens, configures and loads the programs and attaches the scheduler and
  // thread tracepoints. Errors name the cause and the fix (no BTF, missing
  // capability, kernel too old).
  static Result<std::unique_ptr<BpfLoader>> open(const LoaderOptions& opts);
  ~BpfLoader();
  BpfLoader(const BpfLoader&) = delete;
  BpfLoader& operator=(const BpfLoader&) = delete;

  // Attaches every mlprof USDT probe of `binary` (the ELF file holding them,
  // as this process can open it: /proc/PID/root/... for a containerized
  // target) in process `pid` only. Attaching a pid twice is a no-op.
  Result<Ok> attach(pid_t pid, const std::string& binary);
  // Detaches `pid`'s probes (it exited or left the target set); the semaphores
  // go back to 0 if it still runs. Unknown pid: no-op.
  void detach(pid_t pid);
  bool attached(pid_t pid) const;
  // The USDT contract (mlprof_usdt.h) `pid` was attached with: 2, session
  // delivery (session_spans); 1, a probe per span (an older extension, or
  // any extension where session_spans() is false); 0 not attached.
  int contract(pid_t pid) const;
  // Whether the session_spans program loaded: it reads the body with
  // bpf_loop (kernel 5.17+). Without it every target gets the per-span probes.
  bool session_spans() const;

  // Waits up to timeout_ms for records and hands each to on_record. Returns
  // the number consumed, or a negative errno (-EINTR on a signal). An
  // exception from on_record stops the poll and is rethrown here.
  int poll(int timeout_ms, const std::function<void(const void* data, size_t size)>& on_record);

  LoaderStats stats() const;
  // "tp_btf" or "raw_tp": the scheduler program variant that was loaded.
  const char* sched_variant() const;

 private:
  BpfLoader();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlprof::agent
