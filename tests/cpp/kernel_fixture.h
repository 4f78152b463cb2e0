#pragma once
// The exporter fixture (export_fixture.h) as the eBPF agent would hand it
// over: off-CPU intervals on the main and worker threads, a thread without a
// lane started under a span, lost events, and the attributed figures.

#include <utility>

#include "analysis/sched.h"
#include "export_fixture.h"
#include "model/tree.h"

namespace mlprof::test {

// Added to export_profile_fixture() (pid 777; spans: 0 predict, 1 preprocess,
// 2 produce, 3 consume, 4 "my label", 5 fetch (task lane, tid 4242),
// 6 work (tid 5000)):
// - tid 4242: asleep 3'200..3'900, woken by 5000, on the CPU at 4'000
//   (preprocess: off 800 = blocked 700 + runq 100); preempted 16'500..17'000
//   (predict itself: runq 500).
// - tid 5000 (Worker, started by 4242 at 12'400, under fetch: the asyncio
//   task running on 4242 then; exits 16'100):
//   asleep 13'000..14'500, woken by 4242, on at 14'600 (work: off 1'600).
// - tid 6000 ("helper", no lane), started by 4242 at 11'200 under "my label":
//   asleep 11'250..11'300, woken by 4242, on at 11'350 (my label: off 100).
// predict: off 3'000 = blocked 2'250 + runq 750; 3 voluntary switches and 1
// involuntary; of its own thread (4242): off 1'300 = blocked 700 + runq 600,
// top waker 5000 (700 ns); on-CPU 17'999 - 1'300 = 16'699.
inline OffCpuInterval fixture_interval(uint64_t tid, int64_t start, int64_t wake, int64_t end,
                                       bool blocked, uint64_t waker) {
  OffCpuInterval iv;
  iv.tid = tid;
  iv.pid = 777;
  iv.start_ns = start;
  iv.wake_ns = wake;
  iv.end_ns = end;
  iv.blocked = blocked;
  iv.waker_tid = waker;
  iv.prev_state = blocked ? 1 : 0;
  return iv;
}

inline Profile kernel_profile_fixture() {
  Profile p = export_profile_fixture();
  KernelData& k = p.kernel;
  k.present = true;
  k.lost_events = 3;
  k.off_cpu = {
      fixture_interval(4242, 3'200, 3'900, 4'000, true, 5000),
      fixture_interval(4242, 16'500, 16'500, 17'000, false, 0),
      fixture_interval(5000, 13'000, 14'500, 14'600, true, 4242),
      fixture_interval(6000, 11'250, 11'300, 11'350, true, 4242),
  };
  ThreadLifetime worker;
  worker.tid = 5000;
  worker.pid = 777;
  worker.parent_tid = 4242;
  worker.start_ns = 12'400;
  worker.end_ns = 16'100;
  worker.name = "Worker";
  ThreadLifetime helper;
  helper.tid = 6000;
  helper.pid = 777;
  helper.parent_tid = 4242;
  helper.start_ns = 11'200;
  helper.end_ns = 11'400;
  helper.name = "helper";
  helper.exit_code = 3;
  k.threads = {worker, helper};
  attribute_kernel(p);
  return p;
}

}  // namespace mlprof::test
