// The capture (capture.h).

#include "agent/capture.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <utility>

#include "agent/cli.h"
#include "agent/clock.h"
#include "mlprof_usdt.h"
#include "util/utf8.h"
#include "views/merge.h"

namespace mlprof::agent {

namespace {

constexpr int64_t kSettleNs = 50'000'000;  // late scheduler records of a session still land

}  // namespace

Agent::Agent(const Options& opts, BpfLoader& loader, std::map<std::string, std::string> meta,
             StoreWriter* store)
    : opts_(opts),
      loader_(loader),
      joiner_(meta),
      labels_(std::move(meta)),
      stall_report_(StallReportOptions{opts.depth}),
      store_(store) {}

void Agent::set_capture(bool on, const std::map<pid_t, Target>& targets) {
  if (on == capturing_) return;
  capturing_ = on;
  if (!on) {
    for (pid_t pid : attached_) loader_.detach(pid);
    attached_.clear();
    finish();
    return;
  }
  TargetFinder::Changes again;
  for (const auto& [pid, t] : targets) again.started.push_back(t);
  apply(again, true);
}

void Agent::apply(const TargetFinder::Changes& changes, bool quiet) {
  // An exited process's last records may still wait in the ring (a busy
  // agent is behind): read them first, or its last sessions would be cut
  // short and the records after the cut count as unmatched.
  if (!changes.exited.empty()) drain_ring();
  const int64_t now = now_ns();
  for (pid_t pid : changes.exited) {
    joiner_.on_process_exit(static_cast<uint32_t>(pid), now);
    loader_.detach(pid);
    if (attached_.erase(pid) != 0) say("pid " + std::to_string(pid) + " exited");
    failed_.erase(pid);
    labels_.exited(pid, now);
  }
  for (const Target& t : changes.started) {
    if (failed_.count(t.pid) != 0 || !capturing_) continue;  // paused: attached when capture is on
    auto r = loader_.attach(t.pid, t.binary);
    if (!r) {
      failed_.insert(t.pid);
      // A process that exited meanwhile is no news.
      if (kill(t.pid, 0) == 0 || errno != ESRCH) {
        say("cannot attach to pid " + std::to_string(t.pid) + " (" + t.comm +
            "): " + r.error().message);
      }
      continue;
    }
    attached_.insert(t.pid);
    labels_.started(t.pid, t.labels);
    if (quiet) continue;
    std::string line = "attached to pid " + std::to_string(t.pid) + " (" + t.comm + ")";
    if (opts_.verbose > 0) line += ": " + t.binary;
    say(line);
    if (loader_.contract(t.pid) == 1 && loader_.session_spans()) {
      say("pid " + std::to_string(t.pid) +
          ": its mlflow_profiler is older (USDT contract v1, a probe per span, no session_spans): "
          "capturing through the per-span probes, which cost the target a uprobe hit per span; "
          "upgrade mlflow_profiler for session-level delivery (v" +
          std::to_string(MLPROF_USDT_VERSION) + ")");
    }
  }
}

bool Agent::poll(int timeout_ms) {
  const int n = read_ring(timeout_ms);
  if (n < 0 && n != -EINTR) {
    poll_error_ = -n;
    return false;
  }
  return true;
}

void Agent::collect(bool all) {
  joiner_.drain_finished(all ? std::numeric_limits<int64_t>::max() : now_ns() - kSettleNs,
                         [this](Profile& p) { collect_one(p); });
}

void Agent::collect_one(Profile& p) {
  labels_.label(p, now_ns());  // namespace, pod, container, node: where it ran
  // The duty cycle's off time starts at its edge, not when the targets
  // are detached (a few hundred ms later, more on a loaded node): a
  // session that began after the edge is not part of the capture.
  if (const DutyCycle duty{opts_.duty_on_ns, opts_.duty_period_ns}; duty.enabled()) {
    const auto it = p.meta.find("start_unix_ns");
    if (it != p.meta.end() && !duty.on_at(std::strtoll(it->second.c_str(), nullptr, 10))) return;
  }
  if (continuous_ != nullptr) {
    continuous_->add(std::move(p));
    return;
  }
  stall_report_.add(p);
  if (opts_.stream &&
      !write_stdout(terminal_text(session_text(p, StallReportOptions{opts_.depth}), true) + "\n"))
    stdout_broken_ = true;
  const bool keep = !opts_.output.empty() || opts_.format || (store_ != nullptr && !opts_.stream);
  // --stream --store: each session is a source as it finishes (on the
  // writer's thread), so a long-running agent accumulates; else the
  // capture is one, at the end.
  if (opts_.stream && store_ != nullptr) {
    auto shared = std::make_shared<const Profile>(std::move(p));
    store_->submit(shared);
    if (keep) sessions_.push_back(std::move(shared));
  } else if (keep) {
    sessions_.push_back(std::make_shared<const Profile>(std::move(p)));
  }
}

void Agent::finish() {
  // What is still in the ring buffer (not after a second stop signal),
  // then every open session, truncated.
  if (!hurried()) {
    drain_ring();
  } else if (!said_hurried_) {
    said_hurried_ = true;
    say(std::string("a second ") + stop_signal_name() +
        ": the records still in the ring buffer are not read; what was captured is written "
        "(sessions still open end now, flagged truncated)");
  }
  joiner_.finish(now_ns());
  collect(true);
}

const Profile& Agent::combined() {
  if (!combined_) {
    std::vector<const Profile*> parts;
    parts.reserve(sessions_.size());
    for (const auto& s : sessions_) parts.push_back(s.get());
    combined_ = std::make_unique<Profile>();
    append_profiles(*combined_, parts);  // as combine_sessions: linear in the sessions
    labels_.annotate_combined(*combined_);
    combined_->kernel.present = true;
    combined_->kernel.lost_events = std::max(combined_->kernel.lost_events, lost_);
    if (shed_ > 0) combined_->meta["sessions_shed"] = std::to_string(shed_);
  }
  return *combined_;
}

int Agent::read_ring(int timeout_ms) {
  const int n = loader_.poll(
      timeout_ms, [this](const void* data, size_t size) { joiner_.on_record(data, size); });
  joiner_.set_lost_events(loader_.stats().lost);
  return n;
}

void Agent::drain_ring() {
  for (int i = 0; i < 64 && read_ring(0) > 0; ++i) {
  }
}

}  // namespace mlprof::agent
