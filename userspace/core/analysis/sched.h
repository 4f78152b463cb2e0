#pragma once
// What only the kernel sees, joined to the span tree. The eBPF agent fills
// it; an in-process profile leaves it empty (Profile::kernel.present false).
//
// Times are CLOCK_MONOTONIC ns, like the spans'. A span's figures are
// inclusive, like its wall time: they cover its descendants and, for a
// thread it started that has no lane of its own, that thread too (see
// ThreadLifetime::started_under).

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlprof {

struct Profile;
struct Lane;

// Who made a sleeping thread runnable (bpf/mlprof_events.h, mlprof_waker_kind):
// a task, or an interrupt that ran on top of whatever task it hit.
enum class WakerKind : uint8_t { kTask = 0, kTimer = 1, kSoftirq = 2, kHardirq = 3 };
// "task", "timer", "softirq", "hardirq"; nullptr for a value out of range.
const char* waker_kind_name(WakerKind kind);
// The kind named so, false for an unknown name.
bool parse_waker_kind(std::string_view name, WakerKind& kind);

// What a thread asleep in futex waited on (bpf/mlprof_events.h,
// mlprof_wait_object): the GIL (the futex is in the interpreter's GIL state,
// whose range the extension gives at session_begin), a CPython lock (the
// futex is the semaphore of the sem_*wait the thread is in: threading.Lock,
// RLock, Condition, Event, Queue ...), another futex; kNone for any other sleep.
enum class WaitObject : uint8_t { kNone = 0, kFutex = 1, kLock = 2, kGil = 3 };
// "", "futex", "lock", "gil" (the document's and the store's names);
// nullptr for a value out of range.
const char* wait_object_name(WaitObject w);
// The object named so ("" is kNone), false for an unknown name.
bool parse_wait_object(std::string_view name, WaitObject& w);

// The name of syscall `nr` on this machine's architecture ("futex"), or
// "syscall N" for one not in the table; "" for -1 (none).
std::string syscall_name(int32_t nr);

// One stretch a followed thread spent off the CPU: switched out at start_ns,
// switched back in at end_ns.
struct OffCpuInterval {
  uint64_t tid = 0;         // kernel thread id (Lane::native_tid joins)
  uint32_t pid = 0;         // its process
  int64_t start_ns = 0;     // switched out
  int64_t wake_ns = 0;      // made runnable again; == start_ns when preempted; 0 unknown
  int64_t end_ns = 0;       // switched back in
  bool blocked = false;     // went to sleep (vs preempted while runnable)
  uint64_t waker_tid = 0;   // the thread that woke it; 0 unknown or preempted
  uint32_t prev_state = 0;  // task state bits at switch-out
  int32_t syscall = -1;     // blocked: the syscall it slept in (kernel number), -1 none/unknown
  WakerKind waker_kind = WakerKind::kTask;  // not kTask: waker_tid is the task the interrupt hit
  std::string waker_name;                   // the waker's comm at the wakeup; "" unknown
  WaitObject wait = WaitObject::kNone;      // blocked in futex: on what

  // 'D' (uninterruptible), 'S' (interruptible) or '-' (preempted, or another state).
  char state_letter() const {
    if (!blocked) return '-';
    if (prev_state & 2) return 'D';
    return prev_state & 1 ? 'S' : '-';
  }

  int64_t off_ns() const { return end_ns - start_ns; }
  // Asleep: from switch-out to the wakeup (0 when preempted or the wakeup was not seen).
  int64_t blocked_ns() const { return blocked && wake_ns >= start_ns ? wake_ns - start_ns : 0; }
  // Runnable but not running: from the wakeup (or the preemption) to switch-in.
  int64_t runq_ns() const {
    if (!blocked) return end_ns - start_ns;
    return wake_ns >= start_ns && wake_ns <= end_ns ? end_ns - wake_ns : 0;
  }
};

// A thread the agent saw start or exit while it was followed.
struct ThreadLifetime {
  uint64_t tid = 0;
  uint32_t pid = 0;
  uint64_t parent_tid = 0;     // the creating thread; 0 unknown
  int64_t start_ns = 0;        // 0: started before the capture
  int64_t end_ns = 0;          // 0: still running when the capture ended
  std::string name;            // comm
  int32_t started_under = -1;  // span open on the creating thread at start_ns (innermost), -1 none
  int32_t exit_code = 0;
};

// Why a span's thread waited: its blocked time in one syscall, state and
// (in futex) object, and who ended most of it.
struct WaitReason {
  int32_t syscall = -1;  // -1: not in a syscall (a page fault ...) or not known
  char state = '-';      // 'D', 'S' (OffCpuInterval::state_letter)
  int64_t blocked_ns = 0;
  uint32_t count = 0;  // blocked intervals (pieces) of it
  WaitObject object = WaitObject::kNone;
  // The waker that ended the most of it: a thread's comm at the wakeup
  // (kernel workers "kworker/u4:2" as "kworker"), "timer", "softirq",
  // "hardirq", or "tid N" for a thread of unknown name; "" unknown.
  std::string waker;
  int64_t waker_ns = 0;
  // "GIL", "lock", "futex S", "read D", "? D" (not in a syscall, or not known)
  std::string text() const;
};

// Per-span figures (inclusive). wall = on_cpu + own_off_cpu; a span that
// started threads (or has lanes on other threads under it) adds their
// off-CPU to off_cpu, never to the own_* figures.
struct SpanKernel {
  int64_t on_cpu_ns = 0;              // wall - off-CPU on the span's own thread
  int64_t off_cpu_ns = 0;             // off the CPU while the span was open
  int64_t blocked_ns = 0;             // of it, asleep (I/O, locks, sleep)
  int64_t runq_ns = 0;                // of it, runnable but waiting for a CPU
  uint32_t voluntary_switches = 0;    // blocked intervals
  uint32_t involuntary_switches = 0;  // preemptions
  uint64_t top_waker_tid = 0;         // the thread whose wakeups ended the most own blocked time
  int64_t top_waker_ns = 0;           // the blocked time those wakeups ended
  // Not kTask: the most blocked time was ended by interrupts of this kind
  // (top_waker_tid then 0).
  WakerKind top_waker_kind = WakerKind::kTask;
  std::string top_waker_name;  // the waker's comm at its latest wakeup in the profile; "" unknown
  // The span's own thread only (in its subtree): never more than its wall.
  int64_t own_off_cpu_ns = 0;
  int64_t own_blocked_ns = 0;
  int64_t own_runq_ns = 0;
  // Of own_blocked_ns, asleep waiting for the GIL, and for a CPython lock.
  int64_t own_gil_ns = 0;
  int64_t own_lock_ns = 0;
  // The own thread's blocked time by reason, largest first.
  std::vector<WaitReason> waits;

  // Off-CPU of the threads it started and of lanes under it on other threads.
  int64_t started_off_cpu_ns() const { return std::max<int64_t>(0, off_cpu_ns - own_off_cpu_ns); }
};

struct KernelData {
  bool present = false;  // the profile came from the agent (columns shown, values written)
  std::vector<OffCpuInterval> off_cpu;  // sorted by (tid, start_ns)
  std::vector<ThreadLifetime> threads;
  std::vector<SpanKernel> spans;  // one per Profile::spans once attribute_kernel ran
  uint64_t lost_events = 0;       // ring-buffer records the kernel dropped during the capture
};

// The process of the profile: meta["pid"] when it is a positive number, else 0.
uint32_t profile_pid(const Profile& profile);
// The process of a lane: Lane::pid, or profile_pid() when that is 0 (an
// in-process profile leaves Lane::pid 0). OffCpuInterval::pid and
// ThreadLifetime::pid of 0 mean the same.
uint32_t lane_pid(const Profile& profile, const Lane& lane);

// A stretch of one off-CPU interval that counts for one span: the intervals
// cut at the boundaries of the spans running on their thread. The pieces of
// an interval are in time order and cover it exactly.
struct OffCpuPiece {
  uint32_t interval = 0;    // index into KernelData::off_cpu
  int32_t span = -1;        // the span it counts for; -1 none (no span open, no started_under)
  bool own_thread = false;  // span runs on the interval's thread (false: started_under)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};
// The pieces attribute_kernel sums (see there), for exporters that draw the
// intervals under the spans they count for. ThreadLifetime::started_under is
// recomputed (as attribute_kernel does), not read.
std::vector<OffCpuPiece> off_cpu_pieces(const Profile& profile);

// Fills profile.kernel.spans from profile.kernel.off_cpu and the span tree:
// each interval (clipped to the span) counts for the innermost span open on
// its thread (the lane whose native_tid is the interval's tid) and, through
// inclusiveness, for that span's ancestors. Intervals of a thread without a
// lane go to ThreadLifetime::started_under (and its ancestors), which is also
// set here from parent_tid and start_ns. Idempotent.
//
// Rules settled here:
// - Threads are (pid, tid): two processes' equal tids never mix.
// - A span runs over [start_ns, end_ns), a generator span over its segments
//   (Profile::segments); where several run on a thread, the innermost is the
//   one that started last (then the deepest). An interval is cut at those
//   boundaries; each piece counts for the innermost span running over it.
// - A piece with no span running on its thread counts for the thread's
//   started_under span (of the lifetime that covers it: the last one started
//   before it, also past its exit, which is the thread's way out) where it lies within
//   that span's [start_ns, end_ns), and for the nearest ancestor whose wall
//   time holds it elsewhere (a worker still asleep after the call that
//   started it returned counts for the caller); outside the root's wall time
//   it counts for nothing.
// - started_under: the innermost span running on (pid, parent_tid) at
//   start_ns; if none, the creating thread's own started_under (a thread
//   started by a started thread). Kept as it is when parent_tid or start_ns
//   is 0 (unknown), if it names a span.
// - blocked: the part of a piece before the interval's wakeup; runq: after
//   it (all of it when preempted). A blocked interval whose wakeup was not
//   seen counts in off_cpu only, as OffCpuInterval::blocked_ns() says.
// - Switches: an interval counts once for each span whose subtree holds a
//   piece of it (voluntary when blocked, involuntary when preempted).
// - on_cpu_ns = wall - off-CPU of the span's own thread within its subtree,
//   where wall is active_ns for a generator span; never negative.
// - top waker: the waker whose wakeups ended the most blocked time of the
//   span's own thread in its subtree (as own_blocked_ns); ties go to the
//   lower tid. A waker is a task (waker_tid, named
//   by the latest waker_name the profile has for that tid) or an interrupt
//   kind (timer, softirq, hardirq: all wakeups of that kind are one waker,
//   whatever task they hit). Task wakeups with waker_tid 0 are not counted.
// - own_*: the part on the span's own thread (Lane::native_tid); children
//   on the same thread add theirs, other lanes' and started threads' never.
// - waits: the own thread's blocked time by (syscall, state), summed like
//   own_blocked_ns.
// O((spans + intervals) log(spans + intervals)).
void attribute_kernel(Profile& profile);

// A span's own off-CPU figures: its inclusive ones less its children's (in
// every lane: the inclusive figures cover them), never negative, so that
// summing them along stacks (pprof, speedscope) gives the inclusive ones back.
struct SelfOffCpu {
  int64_t off_cpu_ns = 0;
  int64_t blocked_ns = 0;
  int64_t runq_ns = 0;
};
// One per span; empty when attribute_kernel has not run (sizes differ).
std::vector<SelfOffCpu> self_off_cpu(const Profile& profile);

// A span whose wall time is most off-CPU or in the run queue.
struct Stall {
  int32_t span = -1;
  int64_t wall_ns = 0;
  int64_t off_cpu_ns = 0;
  int64_t blocked_ns = 0;
  int64_t runq_ns = 0;
  double off_fraction = 0;         // off_cpu / wall
  int64_t threads_off_cpu_ns = 0;  // started threads' and other lanes' off-CPU, self
};
// The n spans with the most off-CPU time (self, not inherited from children,
// so a stall is named where it happens), largest first by off_cpu +
// threads_off_cpu (ties: lower span index); spans under min_wall_ns wall
// time and spans with no self off-CPU time are left out. Stall's times are
// self times: off_cpu, blocked and runq of the span's own thread (its
// children on that thread taken out), threads_off_cpu of the others (threads
// it started, lanes under it on other threads); off_fraction is the own
// off-CPU over the span's wall time, so never above 1. Reads
// profile.kernel.spans: empty when attribute_kernel has not run (their sizes
// differ).
std::vector<Stall> top_stalls(const Profile& profile, size_t n, int64_t min_wall_ns = 0);

// A span's own wait reasons less those of its children on the same thread
// (SpanKernel::waits are inclusive), largest first, none below 0.
std::vector<WaitReason> self_waits(const Profile& profile, int32_t span);

}  // namespace mlprof
