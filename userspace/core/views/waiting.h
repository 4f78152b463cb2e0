#pragma once
// Running vs waiting: each span's wall time splits into the time its code
// ran and the time it waited, suspended at an await or yield, or blocked
// (asleep, or runnable but off the CPU) in whatever it called, at any depth.
//
// In process, the hook cannot see a wait below the depth ceiling (a
// time.sleep or a lock deep in a library), so it reads the thread's CPU
// clock at a recorded event at most once per kOffCpuQuantumNs of wall time
// per lane, and records the off-CPU time since the lane's previous reading
// (OffCpuReading). No event is written in a stretch where nothing recorded
// runs, so a wait of any length ends at an event that reads: each reading's
// off-CPU time is placed just before its event, in that gap, and is off by
// at most one quantum. With the eBPF agent's figures the kernel's off-CPU
// time of the span's own thread replaces it (docs/capture.md, "Waiting").

#include <cstdint>

namespace mlprof {

struct Profile;

// Wall time between two readings of a lane's CPU clock, at least: one
// system call (~0.2-0.5 us) per 50 us of a busy lane is under 1% of it, and
// a wait is placed within 50 us of where it happened.
inline constexpr int64_t kOffCpuQuantumNs = 50'000;
// The long-form name of Span::waiting_ns (document span_values aside: it is
// a span column there): the store's sample_values type, unit ns.
inline constexpr const char* kWaitingType = "waiting";

// Off-CPU time below this between two readings is the clocks' jitter, not a wait.
inline constexpr int64_t kOffCpuMinNs = 1'000;

// The lane's thread was off the CPU for off_ns of the wall time since the
// lane's previous reading; the reading was taken at end_ns (an event's time).
struct OffCpuReading {
  int64_t end_ns = 0;
  int64_t off_ns = 0;

  bool operator==(const OffCpuReading&) const = default;
};

// Sets Span::waiting_ns for every span: its suspended time (wall less
// active_ns) plus the off-CPU time of its own thread while it ran. The
// off-CPU time is the kernel's (KernelData::spans[i].own_off_cpu_ns) when
// the agent's figures are attributed, else the lanes' OffCpuReadings, each
// placed as [end_ns - off_ns, end_ns] and counted for the spans of its lane
// running then (a generator over its segments). A group node (kSpanGroup)
// waits what its members wait, at most the wall they did not run. Never
// more than the wall. Idempotent.
void compute_waiting(Profile& profile);

// A group node's waiting from its members': members that overlap in time
// (generators consumed in turn, or a hostile document's) would count a wait
// twice, so a group waits at most the wall its members did not run.
inline int64_t group_waiting_ns(int64_t wall_ns, int64_t members_waiting_ns,
                                int64_t members_running_ns) {
  const int64_t idle = wall_ns - members_running_ns;
  if (members_waiting_ns < 0 || idle <= 0) return 0;
  return members_waiting_ns < idle ? members_waiting_ns : idle;
}

}  // namespace mlprof
