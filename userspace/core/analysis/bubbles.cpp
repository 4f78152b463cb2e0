#include "analysis/bubbles.h"

#include <algorithm>
#include <map>
#include <set>

#include "analysis/sched.h"
#include "formats/export_util.h"

namespace mlprof {

namespace {

using Interval = std::pair<int64_t, int64_t>;

// Sorted, overlaps joined, empty ones dropped.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

// a less b; both merged.
std::vector<Interval> minus(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (auto [s, e] : a) {
    while (j < b.size() && b[j].second <= s) ++j;
    size_t k = j;
    while (k < b.size() && b[k].first < e) {
      if (b[k].first > s) out.emplace_back(s, b[k].first);
      s = std::max(s, b[k].second);
      ++k;
    }
    if (s < e) out.emplace_back(s, e);
  }
  return out;
}

int64_t overlap(const std::vector<Interval>& v, int64_t s, int64_t e) {
  int64_t total = 0;
  for (const auto& [a, b] : v) total += std::max<int64_t>(0, std::min(b, e) - std::max(a, s));
  return total;
}

// The span a lane started under stands for the step that fanned out: up
// from its start site past the concurrency library's own frames and C calls
// (Thread.start, ThreadPoolExecutor.submit, asyncio.gather, start_new_thread),
// so the pool's threads started by one map() share `predict`.
bool is_plumbing(const Profile& p, int32_t span) {
  const Span& s = p.spans[span];
  const std::string& module = p.functions.strings().get(p.functions.get(s.function).module);
  return (s.flags & kSpanCFunction) || module == "threading" || module == "_thread" ||
         module.starts_with("concurrent.futures") || module.starts_with("asyncio") ||
         module.starts_with("multiprocessing");
}

int32_t fan_out_anchor(const Profile& p, int32_t span) {
  while (span >= 0 && is_plumbing(p, span) && p.spans[span].parent >= 0)
    span = p.spans[span].parent;
  return span;
}

}  // namespace

bool is_blocking_call(const std::string& module, const std::string& name) {
  static const std::set<std::pair<std::string, std::string>> kBlocking = {
      {"time", "sleep"},
      {"_thread", "lock.acquire"},
      {"_thread", "lock.__enter__"},
      {"_thread", "RLock.acquire"},
      {"_thread", "RLock.__enter__"},
      {"_thread", "RLock._acquire_restore"},
      {"_thread", "_ThreadHandle.join"},
      {"_queue", "SimpleQueue.get"},
      {"select", "select"},
      {"select", "poll.poll"},
      {"select", "epoll.poll"},
      {"_socket", "socket.recv"},
      {"_socket", "socket.recv_into"},
      {"_socket", "socket.recvfrom"},
      {"_socket", "socket.accept"},
      {"_socket", "socket.connect"},
      {"_socket", "socket.sendall"},
      {"posix", "read"},
      {"posix", "waitpid"},
      {"_ssl", "_SSLSocket.read"},
  };
  return kBlocking.count({module, name}) > 0;
}

BubbleReport find_bubbles(const Profile& p, int64_t min_ns) {
  BubbleReport r;
  if (p.roots.empty()) return r;
  r.window_start_ns = INT64_MAX;
  r.window_end_ns = INT64_MIN;
  for (const int32_t root : p.roots) {
    r.window_start_ns = std::min(r.window_start_ns, p.spans[root].start_ns);
    r.window_end_ns = std::max(r.window_end_ns, p.spans[root].end_ns);
  }

  // Each lane's running time, less its thread's waits: a task cannot run
  // while its thread sleeps in the selector or a blocking call, whatever
  // the task's own lane saw (below the ceiling on 3.12+, sys.monitoring
  // does not report a task's suspensions, so its block looks busy).
  const auto intervals = export_util::lane_intervals(p);
  std::vector<std::vector<Interval>> busy(p.lanes.size()), running_of(p.lanes.size());
  std::map<std::pair<uint32_t, uint64_t>, std::vector<Interval>> thread_waits;  // (pid, thread id)
  auto thread_of = [&](size_t li) {
    return std::make_pair(lane_pid(p, p.lanes[li]), p.lanes[li].thread_id);
  };
  std::set<std::pair<uint32_t, uint64_t>> kernel_added;
  bool c_calls = false, event_loop = false;
  const auto& strings = p.functions.strings();
  for (size_t li = 0; li < intervals.size() && li < p.lanes.size(); ++li) {
    std::vector<Interval>& running = running_of[li];
    std::vector<Interval>& waits = thread_waits[thread_of(li)];
    for (const export_util::RunInterval& iv : intervals[li]) {
      const Span& s = p.spans[iv.span];
      running.emplace_back(iv.start_ns, iv.end_ns);
      if (s.flags & kSpanWait) {
        event_loop = true;
        waits.emplace_back(iv.start_ns, iv.end_ns);
      }
      if (s.flags & kSpanCFunction) {
        c_calls = true;
        const FunctionInfo& f = p.functions.get(s.function);
        if (is_blocking_call(strings.get(f.module), strings.get(f.name)))
          waits.emplace_back(iv.start_ns, iv.end_ns);
      }
    }
    // The kernel's off-CPU intervals are the thread's: added once, by its first lane.
    if (p.kernel.present && kernel_added.insert(thread_of(li)).second) {
      const Lane& lane = p.lanes[li];
      const uint32_t pid = lane_pid(p, lane);
      for (const OffCpuInterval& o : p.kernel.off_cpu) {
        if (o.tid == lane.native_tid && (o.pid == 0 || pid == 0 || o.pid == pid))
          waits.emplace_back(o.start_ns, o.end_ns);
      }
    }
    event_loop = event_loop || p.lanes[li].task != 0;
  }
  for (auto& [thread, waits] : thread_waits) waits = merged(std::move(waits));
  for (size_t li = 0; li < intervals.size() && li < p.lanes.size(); ++li) {
    busy[li] = minus(merged(std::move(running_of[li])), thread_waits[thread_of(li)]);
  }
  // An asyncio task's coroutine suspended at an await is waiting; a plain
  // generator suspended is not (its consumer runs). But the thread that runs
  // the event loop is seen to wait only where the selectors were watched
  // (loop_watch.cpp) or a coroutine entered the session, in captured
  // blocking C calls, or by the agent. Watched selectors say nothing of a
  // thread asleep elsewhere (time.sleep below the ceiling): they count for
  // a session that ran an event loop (task lanes, or waits seen).
  const auto watched = p.meta.find("loop_waits");  // "selector" or "awaits" (docs/format.md)
  r.wait_data = p.kernel.present || c_calls ||
                (event_loop && watched != p.meta.end() && !watched->second.empty());

  // Bubbles: the window less every lane's running time.
  std::vector<Interval> all;
  for (const auto& b : busy) all.insert(all.end(), b.begin(), b.end());
  const std::vector<Interval> gaps =
      minus({{r.window_start_ns, r.window_end_ns}}, merged(std::move(all)));
  for (const auto& [s, e] : gaps) {
    if (e - s < min_ns) continue;
    Bubble b{s, e, {}};
    // What each lane waited in: its innermost span open at the bubble's start.
    std::map<uint32_t, int32_t> innermost;
    for (int32_t i = 0; i < static_cast<int32_t>(p.spans.size()); ++i) {
      const Span& sp = p.spans[i];
      if (sp.start_ns > s || sp.end_ns <= s) continue;
      auto it = innermost.find(sp.lane);
      if (it == innermost.end() || p.spans[it->second].depth < sp.depth) innermost[sp.lane] = i;
    }
    b.waiting.assign(innermost.begin(), innermost.end());
    r.bubble_ns += e - s;
    r.bubbles.push_back(std::move(b));
  }

  // Fan-outs: the lanes whose roots hang under a span of another lane,
  // grouped by the step that started them (fan_out_anchor).
  std::map<int32_t, std::set<uint32_t>> children;
  // A lane that runs only the library's own code (asyncio's
  // _set_result_unless_cancelled, gather's _done_callback) is bookkeeping,
  // not a worker: a worker runs something else (a pool thread's task).
  std::vector<bool> works(p.lanes.size(), false);
  for (int32_t i = 0; i < static_cast<int32_t>(p.spans.size()); ++i) {
    if (!is_plumbing(p, i)) works[p.spans[i].lane] = true;
  }
  for (const Span& s : p.spans) {
    if (s.parent >= 0 && p.spans[s.parent].lane != s.lane && works[s.lane] &&
        !busy[s.lane].empty()) {
      children[fan_out_anchor(p, s.parent)].insert(s.lane);
    }
  }
  for (const auto& [parent, lanes] : children) {
    const Span& ps = p.spans[parent];
    const int64_t wall = ps.end_ns - ps.start_ns;
    FanOut f;
    f.span = parent;
    f.lanes.assign(lanes.begin(), lanes.end());
    int64_t sum = 0;
    std::vector<std::pair<int64_t, int>> edges;
    for (const uint32_t li : f.lanes) {
      f.busy_ns.push_back(overlap(busy[li], ps.start_ns, ps.end_ns));
      sum += f.busy_ns.back();
      for (const auto& [a, b] : busy[li]) {
        const int64_t s = std::max(a, ps.start_ns), e = std::min(b, ps.end_ns);
        if (s < e) {
          edges.emplace_back(s, 1);
          edges.emplace_back(e, -1);
        }
      }
    }
    std::sort(edges.begin(), edges.end());  // at one time, ends (-1) before starts
    int running = 0;
    for (const auto& [t, d] : edges) {
      running += d;
      f.max_concurrency =
          std::max<uint32_t>(f.max_concurrency, static_cast<uint32_t>(std::max(running, 0)));
    }
    if (wall > 0) {
      f.utilization = static_cast<double>(sum) /
                      (static_cast<double>(f.lanes.size()) * static_cast<double>(wall));
      f.mean_concurrency = static_cast<double>(sum) / static_cast<double>(wall);
    }
    r.fan_outs.push_back(std::move(f));
  }
  return r;
}

}  // namespace mlprof
