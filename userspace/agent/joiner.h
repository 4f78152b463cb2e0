#pragma once
// Joins the agent's ring-buffer records (bpf/mlprof_events.h) into core
// Profiles: per process and session, the lanes' events are rebuilt exactly as
// the extension recorded them (kCall/kReturn/kSuspend/kResume/kLabel), so
// core's build_tree gives the same span tree as in-process; then each
// off-CPU interval of a followed thread is attributed to the innermost span
// open on that thread (core/sched.h).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tree.h"

namespace mlprof::agent {

struct JoinerStats {
  uint64_t records = 0;
  uint64_t malformed = 0;        // too short or of an unknown kind
  uint64_t unmatched = 0;        // span records of a session never begun (agent attached mid-session)
  uint64_t sessions_finished = 0;
  uint64_t sessions_truncated = 0;  // closed because the process exited or the capture ended
};

class Joiner {
 public:
  // Provenance written into every Profile's meta (host, container, agent version ...).
  explicit Joiner(std::map<std::string, std::string> meta = {});

  // One ring-buffer record. Never throws; bad records are counted.
  void on_record(const void* data, size_t size);
  // The process exited: its open sessions end now, open spans flagged truncated.
  void on_process_exit(uint32_t tgid, int64_t now_ns);
  // End of capture: every open session ends now, flagged truncated.
  void finish(int64_t now_ns);

  // Sessions that ended since the last call, oldest first: one Profile each
  // (meta: pid, session, source "ebpf", ...; kernel data attributed).
  std::vector<Profile> take_finished();
  JoinerStats stats() const { return stats_; }

 private:
  JoinerStats stats_;
  std::map<std::string, std::string> meta_;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace mlprof::agent
