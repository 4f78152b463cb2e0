#pragma once
// The capture: attaching to each target as it starts and letting go as it
// exits, polling the ring buffer into the joiner, and collecting each
// finished session into the stall report, --stream, -o/--format, --store or
// --continuous's rotation. main.cpp drives it step by step.

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "agent/bpf_loader.h"
#include "agent/continuous.h"
#include "agent/joiner.h"
#include "agent/options.h"
#include "agent/session_labels.h"
#include "agent/stall_report.h"
#include "agent/store_writer.h"
#include "agent/targets.h"
#include "model/tree.h"

namespace mlprof::agent {

class Agent {
 public:
  // `store`: --store's writer, or null.
  Agent(const Options& opts, BpfLoader& loader, std::map<std::string, std::string> meta,
        StoreWriter* store);

  // --continuous: finished sessions go to the rotation, nothing else holds them.
  void set_continuous(Continuous* c) { continuous_ = c; }

  // The duty cycle: off detaches every target (their semaphores drop to 0,
  // so they pay nothing) and ends the sessions the pause cuts; on attaches
  // the current targets again, quietly.
  void set_capture(bool on, const std::map<pid_t, Target>& targets);
  bool capturing() const { return capturing_; }

  // Attaches the targets that started and lets go of those that exited.
  void apply(const TargetFinder::Changes& changes, bool quiet = false);

  // One poll of the ring buffer; false on an error other than a signal.
  bool poll(int timeout_ms);

  // Sessions that ended (at least kSettleNs ago unless `all`).
  // One at a time, as each is built: a Profile this does not keep lends its
  // memory to the next (Joiner::drain_finished).
  void collect(bool all);

  // The ring's last records, then every open session, truncated (after a
  // second stop signal: the ring is not read).
  void finish();

  // The capture's lost records, also those outside any session, in the written profile.
  void set_lost_events(uint64_t lost) { lost_ = std::max(lost_, lost); }
  // Sessions the kernel side shed (LoaderStats::shed): in the stall report and the written
  // profile's meta.
  void set_sessions_shed(uint64_t shed) {
    shed_ = shed;
    stall_report_.set_sessions_shed(shed);
  }

  const std::set<pid_t>& attached() const { return attached_; }
  int poll_error() const { return poll_error_; }
  bool stdout_broken() const { return stdout_broken_; }
  const CaptureStallReport& stall_report() const { return stall_report_; }
  // Every session in one Profile, combined once at the end: appending each
  // session as it ended redid the whole-profile steps every time, and the
  // agent's CPU per predict grew with the sessions captured.
  const Profile& combined();
  JoinerStats joiner_stats() const { return joiner_.stats(); }
  // "pod ml/scorer-6c5d8/model (pid 4242), node n1\n" above the summary, or "".
  std::string pods_line() const { return labels_.summary_line(); }

 private:
  void collect_one(Profile& p);
  // Feeds what the ring buffer holds to the joiner, with the lost count so
  // far; returns the loader's poll result.
  int read_ring(int timeout_ms);
  // What the ring holds now; bounded, since a busy target keeps filling it.
  void drain_ring();

  const Options& opts_;
  BpfLoader& loader_;
  Joiner joiner_;
  SessionLabels labels_;
  CaptureStallReport stall_report_;
  std::vector<std::shared_ptr<const Profile>> sessions_;  // for -o / --format / --store
  std::unique_ptr<Profile> combined_;                     // built by combined()
  uint64_t lost_ = 0;
  uint64_t shed_ = 0;
  StoreWriter* store_;
  std::set<pid_t> attached_;
  std::set<pid_t> failed_;  // attach refused: not retried while the process lives
  Continuous* continuous_ = nullptr;
  bool capturing_ = true;  // false: the duty cycle's off time
  int poll_error_ = 0;
  bool stdout_broken_ = false;
  bool said_hurried_ = false;
};

}  // namespace mlprof::agent
