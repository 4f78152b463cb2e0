#pragma once
// The agent's health signal for a kubelet exec probe in an image with no
// shell (docs/ebpf.md, "Health"; deploy/daemonset.yaml's probes).
//
// The agent (--health-file FILE) keeps a small status file, replaced
// atomically at most once a second from its main loop: when the loop last
// drained the ring buffer, whether the programs are loaded and the first
// scan for targets is done, and the delivery thread's progress (a call to
// the sink in flight since when, the last delivery). `mlprof-ebpf --health
// FILE` reads it and decides, in one line and its exit status:
//   live  (the default): the loop drained the ring within max_loop_gap, and
//         no call to the sink has been in flight longer than max_sink_call.
//         A sink that refuses (down, retrying) is alive: a restart would not
//         bring it back, and would lose the period held in memory.
//   ready (--ready): live, and the programs loaded and the first scan done.
// Times are CLOCK_MONOTONIC, the same in the agent and in a probe exec'd in
// its container, and unmoved by a wall-clock step.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace mlprof::agent {

class Sink;
class Spool;

// What the file says.
struct HealthState {
  int64_t pid = 0;
  int64_t started_ns = 0;  // CLOCK_MONOTONIC: the agent's start
  bool ready = false;      // the programs are loaded and the first scan for targets is done
  bool stopping = false;   // SIGTERM (or --duration): flushing the last period
  int64_t loop_ns = 0;     // the main loop's last pass (the ring drained); started_ns before it
  // The continuous agent's delivery (all 0 / "" without --continuous).
  bool has_sink = false;
  std::string sink;                // the sink as the summary lines name it
  int64_t sink_call_since_ns = 0;  // a call to the sink in flight since (0: none)
  int64_t last_delivered_ns = 0;   // the last item the sink took (0: none yet)
  uint64_t delivered = 0, pending = 0, failures = 0;
  std::string last_error;       // the last failure's cause, "" after a delivery
  int64_t written_unix_ns = 0;  // wall clock of the write, for a person reading the file
};

// The file's text: "key=value" lines (a person can `cat` it).
std::string format_health(const HealthState& s);
// The inverse; an error for text that is not a health file of this version.
Result<HealthState> parse_health(std::string_view text);

// Limits of the probe's verdict (documented defaults; --max-loop-gap and
// --max-sink-call change them).
struct HealthLimits {
  // The loop passes 4 times a second when idle; its longest legitimate pass
  // is a duty cycle's detach of every target (about 0.3 s each) or a large
  // rotation. Also the most the start (loading the programs, the first
  // scan) may take before the agent counts as stuck.
  int64_t max_loop_gap_ns = 60'000'000'000;
  // Longer than any call a working sink makes: the MLflow sink's requests
  // time out after 120 s, libpq and a hung NFS directory never do.
  int64_t max_sink_call_ns = 300'000'000'000;
};

struct HealthVerdict {
  bool ok = false;
  std::string line;  // one line, without "mlprof-ebpf: " and newline
};

// The verdict on `s` at CLOCK_MONOTONIC `now_ns`. Pure: tests give it states.
HealthVerdict judge_health(const HealthState& s, int64_t now_ns, bool readiness,
                           const HealthLimits& limits = {});

// The agent's side: writes the file (temporary file and rename, no fsync: it
// is a status, on a tmpfs emptyDir) at most once a second.
class HealthFile {
 public:
  explicit HealthFile(std::string path) : path_(std::move(path)) {}
  // Writes the first state (not ready) now: an error names the file, so a
  // missing or read-only mount is said at start.
  Result<Ok> start(int64_t now_ns);
  // Where each write takes the delivery fields from (delivery_progress on
  // the continuous agent's spool); none: no sink.
  void set_delivery(std::function<HealthState()> progress) { progress_ = std::move(progress); }
  // The programs are loaded and the first scan is done (written at once).
  void set_ready(int64_t now_ns);
  // Flushing at the end (written at once).
  void set_stopping(int64_t now_ns);
  // True when a beat is due (a second since the last write).
  bool due(int64_t now_ns) const { return now_ns - written_ns_ >= kIntervalNs; }
  // A pass of the main loop: the loop time is `now_ns`. Written when due().
  void beat(int64_t now_ns);
  const HealthState& state() const { return state_; }
  const std::string& path() const { return path_; }

  static constexpr int64_t kIntervalNs = 1'000'000'000;

 private:
  Result<Ok> write(int64_t now_ns);

  std::string path_;
  HealthState state_;
  std::function<HealthState()> progress_;
  int64_t written_ns_ = INT64_MIN / 2;
};

// The delivery fields of a HealthState from the continuous agent's spool
// and sink (HealthFile::set_delivery's provider).
HealthState delivery_progress(const Spool& spool, const Sink& sink);

// `mlprof-ebpf --health FILE [--ready] [--max-loop-gap D] [--max-sink-call D]`:
// prints one line (stdout when healthy, stderr when not) and returns 0
// (live / ready), 1 (not), or 2 (usage). `argv` is the whole command line.
int health_main(int argc, char* const* argv);
// True when argv asks for the probe (a "--health" word).
bool is_health_probe(int argc, char* const* argv);

// CLOCK_MONOTONIC now, in ns (clock.h's now_ns): the clock of the file's times.
int64_t health_clock_ns();

}  // namespace mlprof::agent
