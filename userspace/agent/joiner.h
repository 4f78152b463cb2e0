#pragma once
// Joins the agent's ring-buffer records (bpf/mlprof_events.h) into core
// Profiles: per process and session, the lanes' events are rebuilt exactly as
// the extension recorded them (kCall/kReturn/kSuspend/kResume/kLabel), so
// core's build_tree gives the same span tree as in-process; then each
// off-CPU interval of a followed thread is attributed to the innermost span
// open on that thread (analysis/sched.h).
//
// Ordering: records of one thread arrive in the order the thread produced
// them (one ring buffer, reserved in program order), but records of threads
// on different CPUs may interleave with timestamps slightly out of order. The
// replay of a lane depends only on its own records' order; timestamps are
// never used to order records.

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/tree.h"

namespace mlprof::agent {

struct JoinerStats {
  uint64_t records = 0;
  // Too short or of an unknown kind.
  uint64_t malformed = 0;
  // Sessions that could not be built (an exception, such as an allocation
  // failing on a target's session too large for memory): dropped, the
  // capture goes on.
  uint64_t sessions_dropped = 0;
  // Records of a session never begun (the agent attached mid-session) or
  // already ended.
  uint64_t unmatched = 0;
  uint64_t sessions_finished = 0;
  // Closed because the process exited or the capture ended.
  uint64_t sessions_truncated = 0;
  // A span record's index disagreed with the rebuilt lane (records were
  // lost): the lane stops there, flagged truncated.
  uint64_t index_mismatches = 0;
  // Spans named "<function N>" / "<label N>": their NAME record was lost.
  uint64_t names_lost = 0;
  // Lanes whose lane_begin record was lost (rebuilt from their spans).
  uint64_t lanes_without_begin = 0;
  // session_spans lanes whose thread no kernel record named (its lane_begin
  // lost, the thread not seen before): joined by the body's tid, which is
  // the host's only when the target shares the host's pid namespace.
  uint64_t lanes_unjoined = 0;
  // Span and I/O records past JoinerLimits::max_events_per_session or
  // max_events_total.
  uint64_t events_over_cap = 0;
  // Records of a new lane past max_lanes_per_session or max_lanes_total.
  uint64_t lanes_over_cap = 0;
  // Scheduler records (off-CPU intervals, thread start/exit) dropped by the
  // per-thread and per-process bounds.
  uint64_t off_cpu_dropped = 0;
  // Open sessions closed early by max_open_sessions (also in sessions_truncated).
  uint64_t sessions_evicted = 0;
  // session_spans bodies read (USDT contract v2): one per session, and one
  // per checkpoint of a long session.
  uint64_t bodies_applied = 0;
  // A session whose final session_spans body lost a piece (ring full): its
  // lanes keep the last whole body (a checkpoint's) or nothing, truncated.
  uint64_t bodies_incomplete = 0;
  // A session_spans body of a contract version this agent does not read (a
  // newer extension): its spans are not shown. The newest such version.
  uint64_t bodies_unknown_version = 0;
  // Records whose contents (a name, an off-CPU interval, a thread event, a
  // body piece) would have passed JoinerLimits::max_bytes_total: not kept.
  // A body that lost a piece so is incomplete (bodies_incomplete).
  uint64_t bytes_over_cap = 0;
  uint32_t unknown_version = 0;
  uint32_t unknown_version_pid = 0;  // the first process that sent one
};

// Bounds on what the joiner holds, so that a session that never ends or a
// process that never begins one cannot grow it without limit.
struct JoinerLimits {
  size_t max_events_per_session = size_t{1} << 22;  // 64 MiB of events; then lanes truncated
  size_t max_events_total = size_t{1} << 24;        // all open sessions together (256 MiB)
  size_t max_open_sessions = 1024;                  // per process; the oldest is closed first
  // Lanes (threads and asyncio tasks) of one session, and of all open
  // sessions: about 400 bytes each (their map node and state), so 100 MB.
  size_t max_lanes_per_session = size_t{1} << 16;
  size_t max_lanes_total = size_t{1} << 18;
  size_t max_off_cpu_per_thread = 1 << 16;  // buffered intervals per thread (oldest dropped)
  size_t max_threads_per_process = 4096;    // threads with buffered intervals
  size_t max_thread_events = 1 << 16;       // buffered start/exit records per process
  size_t max_names_per_process = 1 << 20;   // function and label NAME entries
  size_t max_processes = 1 << 16;           // processes with state (names, buffers)
  // What all processes hold together besides events and lanes: names,
  // buffered off-CPU intervals and thread events, partial bodies. The caps
  // above are per process or per thread; their product is unbounded.
  size_t max_bytes_total = size_t{512} << 20;
};

class Joiner {
 public:
  // Provenance written into every Profile's meta (host, container, agent version ...).
  explicit Joiner(std::map<std::string, std::string> meta = {}, JoinerLimits limits = {});
  ~Joiner();
  Joiner(Joiner&&) noexcept;
  Joiner& operator=(Joiner&&) noexcept;

  // One ring-buffer record. Never throws; bad records are counted.
  void on_record(const void* data, size_t size);
  // The process exited: its open sessions end now, open spans flagged
  // truncated, and everything held for it (names, buffers) is forgotten, so
  // a new process with the same pid starts clean. A THREAD_EXIT record of a
  // process's main thread (tid == tgid) does the same at the record's time.
  void on_process_exit(uint32_t tgid, int64_t now_ns);
  // End of capture: every open session ends now, flagged truncated.
  void finish(int64_t now_ns);
  // The ring buffer's lost-record counter (a running total, e.g. the
  // loader's stats): a session's KernelData::lost_events is its increase
  // between the session's begin and its end.
  void set_lost_events(uint64_t total);

  // Sessions that ended since the last call, oldest first: one Profile each
  // (meta: pid, session, source "ebpf", ...; kernel data attributed).
  std::vector<Profile> take_finished();
  // The same, but a session that ended at or after `ended_before_ns` stays
  // held: scheduler records of other threads (an off-CPU interval that began
  // inside the session ends, and is shipped, later) still land in it. Pass
  // CLOCK_MONOTONIC now minus a settling delay (say 50 ms).
  std::vector<Profile> take_finished(int64_t ended_before_ns);
  // The same, one session at a time, each handed to `each` as soon as it is
  // built (while its arrays are still in the cache). What `each` leaves in
  // the Profile (it may move it out) is reused for the next session's
  // arrays, so a caller that only reads them (the agent's stall report) costs no
  // allocation for them.
  void drain_finished(int64_t ended_before_ns, const std::function<void(Profile&)>& each);
  JoinerStats stats() const;
  // Bytes held against max_bytes_total now, and "" when that figure is what
  // a recount of everything held gives (else what differs): for the tests
  // and the fuzz targets, which check it after every record.
  uint64_t bytes_held() const;
  std::string check_bytes_held() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mlprof::agent
