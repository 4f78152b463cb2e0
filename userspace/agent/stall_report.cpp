#include "agent/stall_report.h"

#include <algorithm>
#include <cstdio>

#include "analysis/sched.h"
#include "render/render_text.h"
#include "views/merge.h"
#include "views/view.h"

namespace mlprof::agent {

namespace {

constexpr size_t kMaxWakersPerPath = 64;  // distinct waker threads remembered per call path
constexpr size_t kMaxWaitsPerPath = 64;   // distinct wait reasons remembered per call path
constexpr size_t kMaxPids = 10000;        // pids remembered for the header
constexpr size_t kNameWidth = 48;         // widest name cell of the summary table
constexpr size_t kPathWidth = 60;         // widest call path cell of the stall table

bool complete(const Span& s) { return !(s.flags & (kSpanOpenAtEnd | kSpanSuspendedAtEnd)); }

bool has_kernel(const Profile& p) {
  return p.kernel.present && p.kernel.spans.size() == p.spans.size();
}

// A thread's name: its lane's thread name, or its comm; "" if unknown.
std::string thread_name(const Profile& p, uint64_t tid) {
  for (const Lane& lane : p.lanes) {
    if (lane.native_tid == tid && !lane.thread_name.empty()) return lane.thread_name;
  }
  for (const ThreadLifetime& t : p.kernel.threads) {
    if (t.tid == tid && !t.name.empty()) return t.name;
  }
  return "";
}

// The name a span's top waker goes by: "timer", "softirq", "hardirq" for an
// interrupt; a thread's comm at its wakeup, else its lane or thread name.
std::string waker_name(const Profile& p, const SpanKernel& k) {
  if (k.top_waker_kind != WakerKind::kTask) {
    const char* kind = waker_kind_name(k.top_waker_kind);
    return kind ? kind : "interrupt";
  }
  if (!k.top_waker_name.empty()) return k.top_waker_name;
  // A document read back: the latest comm the intervals carry for that tid.
  const OffCpuInterval* latest = nullptr;
  for (const OffCpuInterval& iv : p.kernel.off_cpu) {
    if (iv.waker_tid == k.top_waker_tid && iv.waker_kind == WakerKind::kTask &&
        !iv.waker_name.empty() && (!latest || iv.wake_ns >= latest->wake_ns))
      latest = &iv;
  }
  return latest ? latest->waker_name : thread_name(p, k.top_waker_tid);
}

// A wait worth a cell: in a known syscall, or in a known state (D, S).
bool shown_wait(const WaitReason& w) { return w.syscall >= 0 || w.state != '-'; }

// A reason as the report groups it: its text, and for an uninterruptible
// wait (disk I/O, page faults) who ended it, the I/O completion's
// ("fsync D by kworker", "read D by softirq"): the span's top waker is
// often the thread that handed it the GIL afterwards, not the disk.
std::string wait_label(const WaitReason& w) {
  return w.state == 'D' && !w.waker.empty() ? w.text() + " by " + w.waker : w.text();
}

// "futex S 12.3ms, fsync D 2.1ms by kworker": the first `n` reasons.
std::string waits_text(const std::vector<std::pair<std::string, int64_t>>& waits, size_t n) {
  std::string out;
  for (size_t i = 0; i < waits.size() && i < n; ++i) {
    if (i) out += ", ";
    const std::string& label = waits[i].first;
    const size_t by = label.find(" by ");
    out += label.substr(0, by) + " " + format_duration(waits[i].second);
    if (by != std::string::npos) out += label.substr(by);
  }
  return out;
}

// "worker-1 (tid 4250)", or "tid 4250" for a thread whose name is unknown.
std::string thread_text(const std::string& name, uint64_t tid) {
  if (name.empty()) return "tid " + std::to_string(tid);
  return name + " (tid " + std::to_string(tid) + ")";
}

// A cell cut to `width` characters, keeping its end ("...c/d/encode"):
// the innermost names say the most.
std::string cut_left(const std::string& s, size_t width) {
  if (s.size() <= width || width < 4) return s;
  return "..." + s.substr(s.size() - (width - 3));
}
std::string cut_right(const std::string& s, size_t width) {
  if (s.size() <= width || width < 4) return s;
  return s.substr(0, width - 3) + "...";
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", fraction * 100.0);
  return buf;
}

std::string mean(int64_t sum, uint64_t count) {
  if (count == 0) return "-";
  return format_duration(sum / static_cast<int64_t>(count));
}

// A text table: the first column (and, if `last_left`, the last) aligned
// left, the others right; two spaces between columns; no trailing blanks.
std::string table(const std::vector<std::vector<std::string>>& rows, bool last_left) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c) line += "  ";
      const bool left = c == 0 || (last_left && c + 1 == row.size());
      const size_t pad = width[c] - row[c].size();
      if (!left) line.append(pad, ' ');
      line += row[c];
      if (left) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace

std::vector<Stall> span_stalls(const Profile& p, const StallReportOptions& opts) {
  if (!has_kernel(p)) return {};
  std::vector<Stall> out;
  const bool cut = opts.depth >= 0;
  for (const Stall& st : top_stalls(p, p.spans.size(), opts.min_wall_ns)) {
    const Span& s = p.spans[static_cast<size_t>(st.span)];
    // Deeper than the cut: shown by its ancestor at the cut, whose inclusive
    // figures (below) hold it.
    if (cut && (static_cast<int>(s.depth) > opts.depth ||
                (static_cast<int>(s.depth) == opts.depth && s.first_child >= 0))) {
      continue;
    }
    out.push_back(st);
  }
  if (cut) {
    for (size_t i = 0; i < p.spans.size(); ++i) {
      const Span& s = p.spans[i];
      if (static_cast<int>(s.depth) != opts.depth || s.first_child < 0) continue;
      const SpanKernel& k = p.kernel.spans[i];
      const int64_t wall = s.duration_ns();
      if (k.off_cpu_ns <= 0 || wall < opts.min_wall_ns) continue;
      Stall st;
      st.span = static_cast<int32_t>(i);
      st.wall_ns = wall;
      st.off_cpu_ns = k.own_off_cpu_ns;
      st.blocked_ns = k.own_blocked_ns;
      st.runq_ns = k.own_runq_ns;
      st.threads_off_cpu_ns = k.started_off_cpu_ns();
      st.off_fraction =
          wall > 0
              ? std::min(1.0, static_cast<double>(k.own_off_cpu_ns) / static_cast<double>(wall))
              : 0;
      out.push_back(st);
    }
  }
  std::sort(out.begin(), out.end(), [](const Stall& a, const Stall& b) {
    const int64_t x = a.off_cpu_ns + a.threads_off_cpu_ns, y = b.off_cpu_ns + b.threads_off_cpu_ns;
    return x != y ? x > y : a.span < b.span;
  });
  return out;
}

// ---- CaptureStallReport ------------------------------------------------------------------

CaptureStallReport::CaptureStallReport(StallReportOptions opts, size_t max_paths)
    : opts_(opts),
      max_paths_(max_paths),
      // Only wall-time quantiles are shown: its kernel figures are kernel_'s sums.
      stats_(max_paths, false, CallPathStats::Figures::kWallOnly) {}

void CaptureStallReport::add(const Profile& p) {
  ++sessions_;
  if (p.meta.count("truncated")) ++truncated_;
  if (auto pid = p.meta.find("pid"); pid != p.meta.end() && pids_.size() < kMaxPids)
    pids_.insert(pid->second);
  lost_events_ += p.kernel.lost_events;
  if (sessions_ == 1 || p.start_ns < first_start_ns_) first_start_ns_ = p.start_ns;
  last_end_ns_ = std::max(last_end_ns_, p.end_ns);
  stats_.add(p, opts_.depth, &span_path_);
  kernel_.resize(stats_.paths());
  stalls_.resize(stats_.paths());

  const bool kernel = has_kernel(p);
  if (kernel) ++kernel_sessions_;
  std::vector<int32_t> stall_of(p.spans.size(), -1);
  const std::vector<Stall> stalls = span_stalls(p, opts_);
  for (size_t k = 0; k < stalls.size(); ++k)
    stall_of[static_cast<size_t>(stalls[k].span)] = static_cast<int32_t>(k);

  // Each span's path (index + 1; 0: cut by depth or past max_paths).
  for (size_t s = 0; s < p.spans.size(); ++s) {
    const uint32_t id = span_path_[s];
    if (id == 0) continue;
    const Span& span = p.spans[s];
    if (kernel && complete(span)) {
      const SpanKernel& k = p.kernel.spans[s];
      KernelSums& sums = kernel_[id - 1];
      ++sums.count;
      sums.on_cpu += k.on_cpu_ns;
      sums.off_cpu += k.own_off_cpu_ns;  // its thread's: on-CPU + off-CPU = wall
      sums.runq += k.own_runq_ns;
    }
    StallSums& st = stalls_[id - 1];
    ++st.calls;
    st.wall += span.duration_ns();
    if (const int32_t k = stall_of[s]; k >= 0) {
      const Stall& stall = stalls[static_cast<size_t>(k)];
      st.off_cpu += stall.off_cpu_ns;
      st.blocked += stall.blocked_ns;
      st.runq += stall.runq_ns;
      st.threads += stall.threads_off_cpu_ns;
      const SpanKernel& sk = p.kernel.spans[s];
      // A span at the depth cut stands for its subtree (inclusive waits).
      const bool at_cut =
          opts_.depth >= 0 && static_cast<int>(span.depth) == opts_.depth && span.first_child >= 0;
      for (const WaitReason& w : at_cut ? sk.waits : self_waits(p, static_cast<int32_t>(s))) {
        if (!shown_wait(w)) continue;
        const std::string label = wait_label(w);
        auto it = st.waits.find(label);
        if (it == st.waits.end() && st.waits.size() >= kMaxWaitsPerPath) continue;
        st.waits[label] += w.blocked_ns;
      }
      if ((sk.top_waker_tid != 0 || sk.top_waker_kind != WakerKind::kTask) && sk.top_waker_ns > 0) {
        // By name: a worker thread started per call is one waker over
        // sessions, though its tid differs each time.
        std::string name = waker_name(p, sk);
        std::string key = name.empty() ? "tid " + std::to_string(sk.top_waker_tid) : name;
        auto w = st.wakers.find(key);
        if (w == st.wakers.end() && st.wakers.size() < kMaxWakersPerPath) {
          w = st.wakers.emplace(std::move(key), Waker{0, sk.top_waker_tid, 0}).first;
        }
        if (w != st.wakers.end()) {
          w->second.blocked_ns += sk.top_waker_ns;
          if (w->second.tid != sk.top_waker_tid) ++w->second.other_tids;
        }
      }
    }
  }
}

std::string CaptureStallReport::summary_text() const {
  if (sessions_ == 0) return "no sessions captured\n";
  std::string out = std::to_string(sessions_) + (sessions_ == 1 ? " session" : " sessions");
  if (!pids_.empty()) {
    out += " of " + std::to_string(pids_.size()) +
           (pids_.size() == 1 ? " process (pid " : " processes (pids ");
    size_t shown = 0;
    for (const std::string& pid : pids_) {
      if (shown == 8) {
        out += ", ...";
        break;
      }
      if (shown++) out += ", ";
      out += pid;
    }
    out += ')';
  }
  out += " over " + format_duration(std::max<int64_t>(0, last_end_ns_ - first_start_ns_));
  if (truncated_) out += ", " + std::to_string(truncated_) + " truncated";
  if (lost_events_) out += ", " + std::to_string(lost_events_) + " events lost";
  if (shed_) out += ", " + std::to_string(shed_) + " more shed (the agent was behind)";
  out += "\n\n";

  const bool kernel = kernel_sessions_ > 0;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {"call path", "calls", "mean", "p50", "p99"};
  if (kernel) head.insert(head.end(), {"on-CPU", "off-CPU", "runq"});
  rows.push_back(head);
  const std::vector<PathSummary> paths = stats_.summary();
  for (size_t index = 0; index < paths.size(); ++index) {
    const PathSummary& ps = paths[index];
    if (ps.path.empty()) continue;
    std::string name(2 * (ps.path.size() - 1), ' ');
    name += ps.path.back();
    std::vector<std::string> row = {cut_right(name, kNameWidth), std::to_string(ps.wall.count)};
    if (ps.incomplete) row[1] += " (+" + std::to_string(ps.incomplete) + " open)";
    const bool any = ps.wall.count > 0;
    row.push_back(any ? format_duration(static_cast<int64_t>(ps.wall.mean_ns)) : "-");
    row.push_back(any ? format_duration(static_cast<int64_t>(ps.wall.p50_ns)) : "-");
    row.push_back(any ? format_duration(static_cast<int64_t>(ps.wall.p99_ns)) : "-");
    if (kernel) {
      const KernelSums& k = kernel_[index];  // the same path's figures here
      row.push_back(mean(k.on_cpu, k.count));
      row.push_back(mean(k.off_cpu, k.count));
      row.push_back(mean(k.runq, k.count));
    }
    rows.push_back(std::move(row));
  }
  out += table(rows, false);
  out += "(mean, p50, p99: wall time of complete calls";
  out += kernel ? "; on-CPU, off-CPU, runq: means per complete call on the call's own thread, "
                  "including callees)\n"
                : ")\n";
  if (stats_.dropped_paths()) {
    out += "(" + std::to_string(stats_.dropped_paths()) + " calls not shown: past the " +
           std::to_string(max_paths_) + " call paths tracked)\n";
  }
  out += '\n';
  out += stall_text();
  return out;
}

std::string CaptureStallReport::stall_text() const {
  if (kernel_sessions_ == 0) return "scheduler stalls: no kernel figures in these sessions\n";
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < stalls_.size(); ++i) {
    if (stalls_[i].off_cpu > 0) order.push_back(i);
  }
  if (order.empty()) return "scheduler stalls: none (no span spent time off the CPU)\n";
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return stalls_[a].off_cpu != stalls_[b].off_cpu ? stalls_[a].off_cpu > stalls_[b].off_cpu
                                                    : a < b;
  });
  if (order.size() > opts_.top) order.resize(opts_.top);
  std::string out =
      "scheduler stalls: the spans most off the CPU (their own time, not their callees'";
  if (opts_.depth >= 0) out += "; at depth " + std::to_string(opts_.depth) + " with their callees";
  out += "), means per call over " + std::to_string(kernel_sessions_) +
         (kernel_sessions_ == 1 ? " session\n" : " sessions\n");
  const std::vector<PathSummary> paths = stats_.summary();
  auto path_text = [&](uint32_t index) {
    std::string out;
    for (const std::string& name : paths[index].path) {
      if (!out.empty()) out += '/';
      out += name;
    }
    return out;
  };
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"call path", "calls", "wall", "off-CPU", "off %", "blocked", "runq", "threads",
                  "waited in", "top waker"});
  for (uint32_t i : order) {
    const StallSums& st = stalls_[i];
    std::string waker = "-";
    int64_t most = 0;
    for (const auto& [key, w] : st.wakers) {
      if (w.blocked_ns <= most) continue;
      most = w.blocked_ns;
      // "worker-1 (tid 4250)" when it was one thread, "worker-1" when several;
      // "timer" for an interrupt kind (its tid is whatever it hit).
      waker = key.starts_with("tid ") || w.other_tids || w.tid == 0 ? key : thread_text(key, w.tid);
    }
    // Own thread only: never above 100% (the started threads' are "threads").
    const double share =
        st.wall > 0 ? std::min(1.0, static_cast<double>(st.off_cpu) / static_cast<double>(st.wall))
                    : 0;
    std::vector<std::pair<std::string, int64_t>> waits;
    for (const auto& [reason, ns] : st.waits)
      waits.emplace_back(reason, ns / static_cast<int64_t>(st.calls));
    std::stable_sort(waits.begin(), waits.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    const std::string waited = waits.empty() ? "-" : waits_text(waits, 2);
    rows.push_back({cut_left(path_text(i), kPathWidth), std::to_string(st.calls),
                    mean(st.wall, st.calls), mean(st.off_cpu, st.calls), percent(share),
                    mean(st.blocked, st.calls), mean(st.runq, st.calls),
                    st.threads ? mean(st.threads, st.calls) : "-", waited, waker});
  }
  out += table(rows, true);
  out +=
      "(off-CPU, off %, blocked, runq: the span's own thread; threads: the threads it started "
      "and its lanes on other threads; waited in: blocked time by syscall and state, D "
      "uninterruptible, S interruptible)\n";
  return out;
}

// ---- free functions -------------------------------------------------------------------

std::string stall_report(const std::vector<Profile>& sessions, const StallReportOptions& opts) {
  CaptureStallReport r(opts);
  for (const Profile& p : sessions) r.add(p);
  return r.stall_text();
}

std::string capture_text(const std::vector<Profile>& sessions, const StallReportOptions& opts) {
  CaptureStallReport r(opts);
  for (const Profile& p : sessions) r.add(p);
  return r.summary_text();
}

std::string session_text(const Profile& p, const StallReportOptions& opts) {
  auto meta = [&](const char* key) {
    auto it = p.meta.find(key);
    return it == p.meta.end() ? std::string("?") : it->second;
  };
  // In a pod: where ("in pod ml/scorer-6c5d8/model"), from the agent's session labels.
  const std::string pod =
      p.meta.count("pod") == 0
          ? std::string()
          : " in pod " + meta("namespace") + "/" + meta("pod") +
                (p.meta.count("container") != 0 ? "/" + meta("container") : std::string());
  std::string out = "pid " + meta("pid") + " session " + meta("session") + pod + ": " +
                    format_duration(p.end_ns - p.start_ns) + ", " + std::to_string(p.spans.size()) +
                    (p.spans.size() == 1 ? " span" : " spans");
  if (p.lanes.size() > 1) out += " in " + std::to_string(p.lanes.size()) + " lanes";
  if (auto t = p.meta.find("truncated"); t != p.meta.end()) out += ", truncated: " + t->second;
  // The trace it ran in: what finds it in MLflow or an OpenTelemetry backend.
  if (!p.lanes.empty() && !p.lanes[0].trace_id.empty()) out += ", trace " + p.lanes[0].trace_id;
  if (p.kernel.lost_events) out += ", " + std::to_string(p.kernel.lost_events) + " events lost";
  out += '\n';
  ViewOptions view;
  view.depth = opts.depth;
  out += render_text(p, view);
  if (!has_kernel(p)) return out;
  std::vector<Stall> stalls = span_stalls(p, opts);
  if (stalls.empty()) {
    out += "stalls: none\n";
    return out;
  }
  if (stalls.size() > opts.top) stalls.resize(opts.top);
  out += "stalls:\n";
  for (const Stall& st : stalls) {
    const SpanKernel& k = p.kernel.spans[static_cast<size_t>(st.span)];
    out += "  " + call_path(p, st.span) + ": off-CPU " + format_duration(st.off_cpu_ns) + " (" +
           percent(st.off_fraction) + " of " + format_duration(st.wall_ns) + "): blocked " +
           format_duration(st.blocked_ns) + ", runq " + format_duration(st.runq_ns);
    const bool at_cut =
        opts.depth >= 0 &&
        static_cast<int>(p.spans[static_cast<size_t>(st.span)].depth) == opts.depth &&
        p.spans[static_cast<size_t>(st.span)].first_child >= 0;
    std::vector<std::pair<std::string, int64_t>> waits;
    for (const WaitReason& w : at_cut ? k.waits : self_waits(p, st.span))
      if (shown_wait(w)) waits.emplace_back(wait_label(w), w.blocked_ns);
    if (!waits.empty()) out += "; waited in " + waits_text(waits, 3);
    if (k.top_waker_kind != WakerKind::kTask) {
      out += "; woken by " + waker_name(p, k);
    } else if (k.top_waker_tid) {
      out += "; woken by " + thread_text(waker_name(p, k), k.top_waker_tid);
    }
    if (st.threads_off_cpu_ns > 0)
      out += "; threads it started: off-CPU " + format_duration(st.threads_off_cpu_ns);
    out += '\n';
  }
  return out;
}

Profile combine_sessions(const std::vector<Profile>& sessions) {
  Profile out;
  std::vector<const Profile*> parts;
  parts.reserve(sessions.size());
  for (const Profile& p : sessions) parts.push_back(&p);
  append_profiles(out, parts);  // linear in the sessions, not quadratic
  return out;
}

}  // namespace mlprof::agent
