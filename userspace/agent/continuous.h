#pragma once
// --continuous (docs/ebpf.md, "Continuous mode"): the node agent's rotation.
// Finished sessions are grouped by workload (a pod's container when the
// session's meta names one, else a process) and held for the current
// period only; every --rotate period each workload's sessions become one
// profile document (.json.gz, the core exporter) in the spool (spool.h),
// whose thread hands it to the sink. One summary line per rotation goes to
// stdout. The duty cycle (--duty-cycle ON/PERIOD) says when capture is on;
// the caller attaches and detaches the targets accordingly.

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/sink.h"
#include "agent/spool.h"
#include "model/tree.h"
#include "util/result.h"

namespace mlprof::agent {

// --duty-cycle ON/PERIOD: capture is on for the first `on_ns` of every
// `period_ns`, the periods aligned to the wall clock (so the agents of a
// fleet profile the same windows). period_ns 0: always on.
struct DutyCycle {
  int64_t on_ns = 0;
  int64_t period_ns = 0;

  bool enabled() const { return period_ns > 0 && on_ns < period_ns; }
  // Whether capture is on at `unix_ns`, and when that next changes.
  bool on_at(int64_t unix_ns) const;
  int64_t next_change(int64_t unix_ns) const;
  // "10s/60s"
  std::string text() const;
};

struct ContinuousOptions {
  int64_t rotate_ns = 60'000'000'000;
  std::string node;                           // NODE_NAME, else the host name
  std::map<std::string, std::string> labels;  // --label KEY=VALUE: on every item
  DutyCycle duty;
  // Spans held across the current period's sessions (each session counting
  // one more, an empty one too), at most: past it the
  // period is cut short and written out (one more item per workload), so
  // memory does not grow with the load. About 750 bytes a span at the
  // rotation's peak (the sessions, then the combined profile and its
  // document): 200,000 spans keep the agent near 230 MB (bench/RESULTS.md).
  uint64_t max_held_spans = 200'000;
};

// What one rotation wrote (also the summary line's figures).
struct RotationSummary {
  int64_t start_unix_ns = 0, end_unix_ns = 0;
  size_t workloads = 0;
  uint64_t sessions = 0, spans = 0;
  size_t items = 0;         // spooled now
  size_t items_failed = 0;  // could not be spooled (counted in the spool's dropped)
  std::string spool_error;  // the last one's cause
  int64_t profiled_ns = 0;  // of the period, with capture on
  uint64_t lost = 0;        // ring-buffer records lost in the period
  uint64_t shed = 0;        // sessions shed in the period (the agent was behind)
};

class Continuous {
 public:
  // `spool` (started on `sink`) outlives this. `out`: where the summary
  // lines go (stdout). Each rotation calls sink.maintain() (the directory's
  // retention) and its line carries sink.retention().
  Continuous(ContinuousOptions opts, Spool& spool, Sink& sink, std::FILE* out, int64_t now_unix_ns);

  // A finished session of the current period.
  void add(Profile&& session);
  // Called every poll: rotates when the period ended, or early when the
  // sessions held pass max_held_spans. Returns true when it rotated.
  bool tick(int64_t now_unix_ns);
  // The loader's running totals of lost records and shed sessions
  // (LoaderStats): each rotation reports their increase.
  void set_capture_counters(uint64_t lost, uint64_t shed) {
    lost_total_ = lost;
    shed_total_ = shed;
  }
  // The duty cycle's accounting: capture switched on or off at `unix_ns`.
  void capture_changed(bool on, int64_t unix_ns);
  // SIGTERM / --duration: the current, partial period is written now.
  void finish(int64_t now_unix_ns);

  // Sessions and spans held now (the bound's measure).
  uint64_t held_sessions() const { return held_sessions_; }
  uint64_t held_spans() const { return held_spans_; }
  const RotationSummary& last() const { return last_; }
  // The summary line of a rotation (no newline), as printed.
  std::string summary_line(const RotationSummary& r) const;

 private:
  struct Workload {
    std::map<std::string, std::string> labels;
    std::vector<Profile> sessions;
    uint64_t spans = 0;
  };
  // The workload of a session: its key ("pod/ns/name/container" or
  // "pid/N") and labels.
  std::pair<std::string, std::map<std::string, std::string>> workload_of(
      const Profile& session) const;
  void rotate(int64_t end_unix_ns);
  int64_t next_boundary(int64_t unix_ns) const;

  ContinuousOptions opts_;
  Spool& spool_;
  Sink& sink_;
  std::FILE* out_;
  std::string run_id_;  // this run's start: keys stay unique across restarts
  uint64_t rotations_ = 0;
  int64_t period_start_ = 0;
  int64_t period_end_ = 0;
  std::map<std::string, Workload> workloads_;
  uint64_t held_sessions_ = 0, held_spans_ = 0;
  // Duty cycle accounting within the period.
  bool capture_on_ = true;
  int64_t on_since_ = 0;
  int64_t profiled_ns_ = 0;
  mutable std::map<uint32_t, std::string>
      comm_;  // pid -> /proc/PID/comm, while its workload is held
  RotationSummary last_;
  uint64_t lost_total_ = 0, shed_total_ = 0;
  uint64_t lost_reported_ = 0, shed_reported_ = 0;
};

}  // namespace mlprof::agent
