#pragma once
// What the agent prints: the stall report (spans whose wall time is most
// off-CPU or in the run queue), the text summary of a capture of many
// sessions, the text of one session for --stream, and the one Profile that
// -o/--format writes for all sessions.

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/tree.h"
#include "views/path_stats.h"

namespace mlprof::agent {

struct StallReportOptions {
  // Spans deeper than this (Span::depth, root = 0) are not shown; their
  // figures stay in the shown ancestor at this depth. -1: all captured.
  int depth = -1;
  size_t top = 10;          // rows of the stall report
  int64_t min_wall_ns = 0;  // spans shorter than this are not stalls
};

// One span's stall as the stall report shows it: self figures (core top_stalls:
// not what its children already show), except for a span at the depth cut,
// which stands for its hidden subtree and shows its inclusive figures.
// Largest off-CPU first; spans with none are left out.
std::vector<Stall> span_stalls(const Profile& profile, const StallReportOptions& opts);

// Accumulates finished sessions for the capture summary and the stall
// report, in memory bounded by the number of call paths (max_paths, as
// CallPathStats), not by the number of sessions.
class CaptureStallReport {
 public:
  explicit CaptureStallReport(StallReportOptions opts = {},
                              size_t max_paths = CallPathStats::kDefaultMaxPaths);

  void add(const Profile& session);

  // The capture's text: a header line (sessions, processes, truncated,
  // events lost), per call path (indented as a tree) calls, mean/p50/p99
  // wall (core CallPathStats) and mean on-CPU, off-CPU and run-queue time,
  // then stall_text().
  std::string summary_text() const;
  // The stall report: call paths ranked by their spans' total off-CPU time
  // over all sessions, top `opts.top`: calls, mean wall, mean off-CPU of the
  // span's own thread and its share of the wall time (never above 100%),
  // mean blocked and run-queue time, mean off-CPU of the threads it started
  // (and lanes under it on other threads), the two largest wait reasons
  // ("futex S"), and the waker that ended the most blocked time (a thread by
  // its name at the wakeup, or timer, softirq, hardirq).
  std::string stall_text() const;

  uint64_t sessions() const { return sessions_; }
  // Sessions the agent shed, not captured (LoaderStats::shed): in the header.
  void set_sessions_shed(uint64_t shed) { shed_ = shed; }

 private:
  struct KernelSums {  // complete calls of a path (CallPathStats' samples)
    uint64_t count = 0;
    int64_t on_cpu = 0, off_cpu = 0, runq = 0;
  };
  struct Waker {
    int64_t blocked_ns = 0;   // the blocked time its wakeups ended
    uint64_t tid = 0;         // the first thread seen under this name
    uint64_t other_tids = 0;  // times it was another thread of that name
  };
  struct StallSums {
    uint64_t calls = 0;  // every call of the path, complete or not
    int64_t wall = 0, off_cpu = 0, blocked = 0, runq = 0, threads = 0;
    std::map<std::string, Waker> wakers;   // by thread name ("tid N" when unnamed), or kind
    std::map<std::string, int64_t> waits;  // blocked time by reason ("futex S")
  };
  StallReportOptions opts_;
  size_t max_paths_;
  CallPathStats stats_;              // the call paths: kernel_ and stalls_ go by its path index
  std::vector<uint32_t> span_path_;  // scratch for add(): each span's path (CallPathStats::add)
  std::vector<KernelSums> kernel_;   // by path index
  std::vector<StallSums> stalls_;    // by path index
  uint64_t sessions_ = 0;
  uint64_t kernel_sessions_ = 0;  // sessions with kernel data
  uint64_t truncated_ = 0;
  uint64_t lost_events_ = 0;
  uint64_t shed_ = 0;
  std::set<std::string> pids_;
  int64_t first_start_ns_ = 0, last_end_ns_ = 0;
};

// (a) The stall report of one or many sessions (CaptureStallReport::stall_text).
std::string stall_report(const std::vector<Profile>& sessions, const StallReportOptions& opts = {});
// (b) The text output of a capture (CaptureStallReport::summary_text).
std::string capture_text(const std::vector<Profile>& sessions, const StallReportOptions& opts = {});
// (c) One finished session, for --stream: a header line, the text tree at
// opts.depth (core render_text, with its kernel columns), then its top
// stalls, one line each.
std::string session_text(const Profile& session, const StallReportOptions& opts = {});

// All sessions in one Profile (core append_profile: ids remapped, lanes keep
// their pid and session) for -o/--format. No sessions: an empty Profile,
// which append_profile treats as empty (the first session appended to it
// gives its meta and depth as they are), so it can seed a running
// combination: `Profile all = combine_sessions({}); append_profile(all, s);`.
Profile combine_sessions(const std::vector<Profile>& sessions);

}  // namespace mlprof::agent
