#pragma once
// One agent session as the joiner builds it (spans from a lane, off-CPU
// intervals attributed by core attribute_kernel), for the store tests.

#include <string>

#include "analysis/sched.h"
#include "profile_builder.h"

namespace mlprof::test {

inline constexpr int64_t kMs = 1'000'000;

// One agent session of process `pid`, as the joiner builds it:
//   predict [0, 100ms] { load [10, 60] { read [20, 50] }  compute [60, 90] }
// read() sleeps 25 ms (woken by thread 4250), compute() is preempted 4 ms.
inline Profile agent_session(uint32_t pid, int64_t t0) {
  Profile p;
  const uint32_t predict = user_fn(p, "predict");
  const uint32_t load = user_fn(p, "load");
  const uint32_t read = user_fn(p, "read", "app.io");
  const uint32_t compute = user_fn(p, "compute");
  p.lanes.push_back(make_lane(
      {call(t0, predict), call(t0 + 10 * kMs, load), call(t0 + 20 * kMs, read), ret(t0 + 50 * kMs),
       ret(t0 + 60 * kMs), call(t0 + 60 * kMs, compute), ret(t0 + 90 * kMs), ret(t0 + 100 * kMs)}));
  p.lanes[0].native_tid = pid;
  p.lanes[0].pid = pid;
  p.lanes[0].session = 1;
  p.captured_depth = 3;
  p.start_ns = t0;
  p.end_ns = t0 + 100 * kMs;
  p.meta = {{"pid", std::to_string(pid)}, {"source", "ebpf"}, {"agent", "mlprof-ebpf test"}};
  build_tree(p);
  KernelData& k = p.kernel;
  k.present = true;
  k.lost_events = 2;
  OffCpuInterval sleep;
  sleep.tid = pid;
  sleep.pid = pid;
  sleep.start_ns = t0 + 21 * kMs;
  sleep.wake_ns = sleep.start_ns + 25 * kMs;
  sleep.end_ns = sleep.wake_ns + kMs;
  sleep.blocked = true;
  sleep.waker_tid = 4250;
  k.off_cpu.push_back(sleep);
  OffCpuInterval preempt;
  preempt.tid = pid;
  preempt.pid = pid;
  preempt.start_ns = t0 + 70 * kMs;
  preempt.wake_ns = preempt.start_ns;
  preempt.end_ns = preempt.start_ns + 4 * kMs;
  k.off_cpu.push_back(preempt);
  ThreadLifetime io;
  io.tid = 4250;
  io.pid = pid;
  io.name = "io-worker";
  io.start_ns = t0 + 5 * kMs;
  k.threads.push_back(io);
  attribute_kernel(p);
  return p;
}

}  // namespace mlprof::test
