// The kernel join: each off-CPU interval the agent saw, cut at the spans
// running on its thread, summed into the spans' inclusive figures
// (attribute_kernel, off_cpu_pieces). The names of its numbers are
// sched_names.cpp; the self figures derived from its sums, sched_self.cpp.

#include "analysis/sched.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "analysis/sched_detail.h"
#include "formats/export_util.h"
#include "model/tree.h"
#include "views/waiting.h"

namespace mlprof {

uint32_t profile_pid(const Profile& profile) {
  const auto it = profile.meta.find("pid");
  if (it == profile.meta.end()) return 0;
  uint32_t pid = 0;
  const std::string& s = it->second;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
  return ec == std::errc() && ptr == s.data() + s.size() ? pid : 0;
}

uint32_t lane_pid(const Profile& profile, const Lane& lane) {
  return lane.pid != 0 ? lane.pid : profile_pid(profile);
}

namespace sched_detail {

// The thread a span runs on: its lane's (pid, native_tid); (0, 0) unknown.
ThreadKey span_thread(const Profile& profile, int32_t s) {
  const Span& span = profile.spans[static_cast<size_t>(s)];
  const Lane* lane = span.lane < profile.lanes.size() ? &profile.lanes[span.lane] : nullptr;
  return lane == nullptr || lane->native_tid == 0
             ? ThreadKey{0, 0}
             : ThreadKey{lane_pid(profile, *lane), lane->native_tid};
}

}  // namespace sched_detail

namespace {

constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

using sched_detail::ThreadKey;

// Which span is innermost on one thread, over time: piecewise constant,
// owner[i] over [at[i], at[i + 1]) (the last one to forever), -1 before at[0].
struct Timeline {
  std::vector<int64_t> at;
  std::vector<int32_t> owner;

  // Index of the stretch holding t, -1 before the first.
  ptrdiff_t stretch(int64_t t) const {
    return std::upper_bound(at.begin(), at.end(), t) - at.begin() - 1;
  }
  int32_t owner_at(int64_t t) const {
    const ptrdiff_t i = stretch(t);
    return i < 0 ? -1 : owner[static_cast<size_t>(i)];
  }
};

// Everything the attribution needs about the threads, built once.
class Threads {
 public:
  explicit Threads(const Profile& p) : p_(p), meta_pid_(profile_pid(p)) {
    build_timelines();
    index_lifetimes();
    resolve_started_under();
  }

  // The pieces of every interval, in interval order.
  std::vector<OffCpuPiece> pieces() const {
    std::vector<OffCpuPiece> out;
    out.reserve(p_.kernel.off_cpu.size());
    const std::vector<int64_t> starts = disjoint_starts();
    for (size_t i = 0; i < p_.kernel.off_cpu.size(); ++i) {
      const OffCpuInterval& iv = p_.kernel.off_cpu[i];
      if (starts[i] == kNoStart) continue;
      const int64_t start = starts[i];
      const ThreadKey key{pid_or_meta(iv.pid), iv.tid};
      const auto tl = timelines_.find(key);
      const auto idx = static_cast<uint32_t>(i);
      const int64_t end = std::max(iv.end_ns, start);
      if (end == start) {  // switched out and in at one instant: still a switch
        const int32_t own = tl == timelines_.end() ? -1 : tl->second.owner_at(start);
        if (own >= 0) {
          out.push_back({idx, own, true, start, end});
        } else {
          add_fallback(out, key, idx, start, end);
        }
        continue;
      }
      if (tl == timelines_.end()) {
        add_fallback(out, key, idx, start, end);
        continue;
      }
      const Timeline& t = tl->second;
      ptrdiff_t s = t.stretch(start);
      for (int64_t from = start; from < end; ++s) {
        const int64_t stretch_end =
            static_cast<size_t>(s + 1) < t.at.size() ? t.at[static_cast<size_t>(s + 1)] : kForever;
        const int64_t to = std::min(end, stretch_end);
        const int32_t own = s < 0 ? -1 : t.owner[static_cast<size_t>(s)];
        if (own >= 0) {
          out.push_back({idx, own, true, from, to});
        } else {
          add_fallback(out, key, idx, from, to);
        }
        from = to;
      }
    }
    return out;
  }

  const std::vector<int32_t>& started_under() const { return started_under_; }

 private:
  uint32_t pid_or_meta(uint32_t pid) const { return pid != 0 ? pid : meta_pid_; }

  static constexpr int64_t kNoStart = std::numeric_limits<int64_t>::min();

  // Per interval, where its pieces start. A thread is off the CPU once at a
  // time: an interval that overlaps an earlier one of its thread (records a
  // target or a file made up) starts where that one ended, and one inside it
  // has no pieces (kNoStart). So the pieces of a thread never overlap, and
  // no sum of them passes its timeline (fuzz_agent_records: two made-up
  // intervals of 2^62 ns overflowed a span's off-CPU sum).
  std::vector<int64_t> disjoint_starts() const {
    const std::vector<OffCpuInterval>& ivs = p_.kernel.off_cpu;
    std::vector<uint32_t> order(ivs.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto key_of = [&](const OffCpuInterval& iv) {
      return std::make_tuple(pid_or_meta(iv.pid), iv.tid, iv.start_ns);
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return key_of(ivs[a]) < key_of(ivs[b]); });
    std::vector<int64_t> starts(ivs.size(), kNoStart);
    ThreadKey thread{};
    int64_t reach = kNoStart;  // the latest end of the thread's intervals so far
    for (const uint32_t i : order) {
      const OffCpuInterval& iv = ivs[i];
      const ThreadKey key{pid_or_meta(iv.pid), iv.tid};
      if (key != thread) {
        thread = key;
        reach = kNoStart;  // below every time: the tests below pass the thread's first
      }
      const int64_t end = std::max(iv.end_ns, iv.start_ns);
      if (end < reach || (iv.start_ns < reach && end == reach)) continue;
      starts[i] = std::max(iv.start_ns, reach);
      reach = std::max(reach, end);
    }
    return starts;
  }

  // Per thread, the innermost running span over time: a sweep over the
  // running intervals (export_util::lane_intervals: whole spans, generator
  // segments) of every lane of the thread. Only for the threads something
  // is attributed on (an off-CPU interval, a thread start): most sessions
  // have none, and the agent builds this for every session.
  void build_timelines() {
    std::vector<ThreadKey> needed;
    for (const OffCpuInterval& iv : p_.kernel.off_cpu)
      needed.emplace_back(pid_or_meta(iv.pid), iv.tid);
    for (const ThreadLifetime& t : p_.kernel.threads) {
      if (t.parent_tid != 0 && t.start_ns != 0)
        needed.emplace_back(pid_or_meta(t.pid), t.parent_tid);
    }
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    std::map<ThreadKey, std::vector<size_t>> lanes_of;  // needed threads' lanes
    for (size_t li = 0; li < p_.lanes.size(); ++li) {
      const Lane& lane = p_.lanes[li];
      if (lane.native_tid == 0) continue;  // not joinable with kernel events
      const ThreadKey key{lane_pid(p_, lane), lane.native_tid};
      if (std::binary_search(needed.begin(), needed.end(), key)) lanes_of[key].push_back(li);
    }
    if (lanes_of.empty()) return;
    const auto lanes = export_util::lane_intervals(p_);
    for (const auto& [key, list] : lanes_of) {
      Timeline& t = timelines_[key];
      if (list.size() == 1) {
        one_lane(lanes[list[0]], t);
      } else {
        several_lanes(lanes, list, t);
      }
    }
  }

  // The owner from `ts` on: a later change at the same instant replaces an
  // earlier one, and a change to the owner already in force is none.
  static void change(Timeline& t, int64_t ts, int32_t owner) {
    if (!t.at.empty() && t.at.back() == ts) {
      t.at.pop_back();
      t.owner.pop_back();
    }
    if (!t.owner.empty() && t.owner.back() == owner) return;
    t.at.push_back(ts);
    t.owner.push_back(owner);
  }

  // One lane: its intervals come sorted and nested (lane_intervals), so the
  // innermost open one is the top of a stack.
  static void one_lane(const std::vector<export_util::RunInterval>& runs, Timeline& t) {
    std::vector<const export_util::RunInterval*> open;
    auto close_until = [&](int64_t ts) {
      while (!open.empty() && open.back()->end_ns <= ts) {
        const int64_t end = open.back()->end_ns;
        open.pop_back();
        change(t, end, open.empty() ? -1 : open.back()->span);
      }
    };
    for (const auto& iv : runs) {
      if (iv.end_ns <= iv.start_ns) continue;
      close_until(iv.start_ns);
      open.push_back(&iv);
      change(t, iv.start_ns, iv.span);
    }
    close_until(std::numeric_limits<int64_t>::max());
  }

  // Several lanes on one thread (tasks of an event loop): their intervals
  // interleave, so the open ones are kept in a set ordered by (start,
  // depth, span), the innermost last.
  void several_lanes(const std::vector<std::vector<export_util::RunInterval>>& lanes,
                     const std::vector<size_t>& list, Timeline& t) const {
    using Open = std::tuple<int64_t, uint32_t, int32_t>;  // start, depth, span
    struct Change {
      int64_t ts;
      bool opens;
      Open key;
    };
    std::vector<Change> changes;
    for (const size_t li : list) {
      for (const auto& iv : lanes[li]) {
        if (iv.end_ns <= iv.start_ns) continue;
        const Open k{iv.start_ns, p_.spans[iv.span].depth, iv.span};
        changes.push_back({iv.start_ns, true, k});
        changes.push_back({iv.end_ns, false, k});
      }
    }
    std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
      return std::tie(a.ts, a.opens, a.key) < std::tie(b.ts, b.opens, b.key);
    });
    std::set<Open> open;
    for (size_t i = 0; i < changes.size();) {
      const int64_t ts = changes[i].ts;
      for (; i < changes.size() && changes[i].ts == ts; ++i) {
        if (changes[i].opens) {
          open.insert(changes[i].key);
        } else {
          open.erase(changes[i].key);
        }
      }
      change(t, ts, open.empty() ? -1 : std::get<2>(*open.rbegin()));
    }
  }

  void index_lifetimes() {
    const auto& threads = p_.kernel.threads;
    for (size_t i = 0; i < threads.size(); ++i) {
      lifetimes_[{pid_or_meta(threads[i].pid), threads[i].tid}].push_back(i);
    }
    for (auto& [key, list] : lifetimes_) {
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return threads[a].start_ns < threads[b].start_ns;
      });
    }
  }

  // The lifetime of thread `key` that covers time t: the last one started at
  // or before t (0: before the capture). Also after its end_ns: the agent
  // stamps a thread's exit at sched_process_exit and follows it to its last
  // switch-out, so an interval after its exit is its way out (a wait for a
  // CPU), still the doing of the span that started it.
  const size_t* lifetime_at(const ThreadKey& key, int64_t t) const {
    const auto it = lifetimes_.find(key);
    if (it == lifetimes_.end()) return nullptr;
    const auto& threads = p_.kernel.threads;
    const auto& list = it->second;
    auto after = std::upper_bound(list.begin(), list.end(), t,
                                  [&](int64_t v, size_t i) { return v < threads[i].start_ns; });
    if (after == list.begin()) return nullptr;
    return &*(after - 1);
  }

  // In start order, so a creating thread that was itself started is resolved
  // before the threads it starts.
  void resolve_started_under() {
    const auto& threads = p_.kernel.threads;
    started_under_.assign(threads.size(), -1);
    std::vector<size_t> order(threads.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return threads[a].start_ns < threads[b].start_ns; });
    const auto n_spans = static_cast<int64_t>(p_.spans.size());
    for (const size_t i : order) {
      const ThreadLifetime& t = threads[i];
      if (t.parent_tid == 0 || t.start_ns == 0) {
        started_under_[i] =
            t.started_under >= 0 && t.started_under < n_spans ? t.started_under : -1;
        continue;
      }
      const ThreadKey parent{pid_or_meta(t.pid), t.parent_tid};
      const auto tl = timelines_.find(parent);
      int32_t under = tl == timelines_.end() ? -1 : tl->second.owner_at(t.start_ns);
      if (under < 0) {
        const size_t* creator = lifetime_at(parent, t.start_ns);
        if (creator != nullptr && *creator != i) under = started_under_[*creator];
      }
      started_under_[i] = under;
    }
  }

  // A piece with no span of its own thread: the thread's started_under span
  // where the piece lies within its wall time, else the nearest ancestor of
  // it that covers that part (a worker still blocked after the call that
  // started it returned counts for that call's caller); nothing outside the
  // root's. Pieces in time order.
  void add_fallback(std::vector<OffCpuPiece>& out, const ThreadKey& key, uint32_t idx, int64_t from,
                    int64_t to) const {
    const size_t* life = lifetime_at(key, from);
    const int32_t under = life == nullptr ? -1 : started_under_[*life];
    if (from == to) {  // an instant: the innermost of the chain that holds it
      int32_t owner = under;
      while (owner >= 0 && !(from >= span(owner).start_ns && from < span(owner).end_ns)) {
        owner = parent_of(owner);
      }
      out.push_back({idx, owner, false, from, to});
      return;
    }
    const size_t first = out.size();
    // [lo, hi): the part of [from, to) a deeper span of the chain took.
    int64_t lo = 0, hi = 0;
    bool taken = false;
    for (int32_t a = under; a >= 0 && !(taken && lo == from && hi == to); a = parent_of(a)) {
      const int64_t in_lo = std::max(from, span(a).start_ns);
      const int64_t in_hi = std::min(to, span(a).end_ns);
      if (in_hi <= in_lo) continue;
      if (!taken) {
        out.push_back({idx, a, false, in_lo, in_hi});
        lo = in_lo;
        hi = in_hi;
        taken = true;
        continue;
      }
      if (in_lo < lo) out.push_back({idx, a, false, in_lo, lo});
      if (in_hi > hi) out.push_back({idx, a, false, hi, in_hi});
      lo = std::min(lo, in_lo);
      hi = std::max(hi, in_hi);
    }
    if (!taken) {
      out.push_back({idx, -1, false, from, to});
      return;
    }
    if (from < lo) out.push_back({idx, -1, false, from, lo});
    if (hi < to) out.push_back({idx, -1, false, hi, to});
    std::sort(out.begin() + static_cast<ptrdiff_t>(first), out.end(),
              [](const OffCpuPiece& x, const OffCpuPiece& y) { return x.start_ns < y.start_ns; });
  }

  const Span& span(int32_t s) const { return p_.spans[static_cast<size_t>(s)]; }
  // The parent of a span, -1 for a root or a parent that is not an earlier
  // span (a parent cycle must not loop the chain walk).
  int32_t parent_of(int32_t s) const {
    const int32_t up = span(s).parent;
    return up >= 0 && up < s ? up : -1;
  }

  const Profile& p_;
  const uint32_t meta_pid_;
  std::map<ThreadKey, Timeline> timelines_;
  std::map<ThreadKey, std::vector<size_t>> lifetimes_;  // indices into threads, by start
  std::vector<int32_t> started_under_;                  // parallel to kernel.threads
};

int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// The blocked and run-queue parts of a piece of interval iv.
std::pair<int64_t, int64_t> split_piece(const OffCpuInterval& iv, int64_t from, int64_t to) {
  if (!iv.blocked) return {0, to - from};
  const int64_t end = std::max(iv.end_ns, iv.start_ns);
  if (iv.wake_ns < iv.start_ns || iv.wake_ns > end) return {0, 0};  // wakeup not seen
  return {overlap(from, to, iv.start_ns, iv.wake_ns), overlap(from, to, iv.wake_ns, end)};
}

// A waker as the sums key it: a task by its tid, an interrupt kind by the
// kind in the top bits (all timer wakeups are one waker, whatever they hit).
constexpr uint64_t kKindKey = uint64_t{1} << 63;
uint64_t waker_key(const OffCpuInterval& iv) {
  return iv.waker_kind == WakerKind::kTask ? iv.waker_tid
                                           : kKindKey | static_cast<uint64_t>(iv.waker_kind);
}

// A wait reason: (syscall, state, futex object).
using sched_detail::WaitKey;

WaitKey wait_key(const OffCpuInterval& iv) { return {iv.syscall, iv.state_letter(), iv.wait}; }

// Who ended a wait, as a reason's waker is named: the interrupt's kind, a
// thread's comm at the wakeup (the kernel's workers, "kworker/u4:2" ...,
// together as "kworker": which one ran an I/O completion does not matter),
// "tid N" when the comm is unknown; "" when nobody is known.
std::string waker_label(const OffCpuInterval& iv) {
  if (iv.waker_kind != WakerKind::kTask) {
    const char* kind = waker_kind_name(iv.waker_kind);
    return kind ? kind : "interrupt";
  }
  if (iv.waker_name.starts_with("kworker/")) return "kworker";
  if (!iv.waker_name.empty()) return iv.waker_name;
  return iv.waker_tid ? "tid " + std::to_string(iv.waker_tid) : "";
}

// One reason's blocked time in a span's subtree, and per waker the time
// each ended (a few at most: a short list, not a map).
struct WaitSum {
  int64_t ns = 0;
  uint32_t count = 0;
  std::vector<std::pair<std::string, int64_t>> wakers;

  void add_waker(const std::string& label, int64_t piece_ns) {
    if (label.empty()) return;
    for (auto& [name, sum] : wakers) {
      if (name == label) {
        sum += piece_ns;
        return;
      }
    }
    wakers.emplace_back(label, piece_ns);
  }
  void add(const OffCpuInterval& iv, int64_t blocked_ns) {
    ns += blocked_ns;
    ++count;
    add_waker(waker_label(iv), blocked_ns);
  }
  void merge(const WaitSum& o) {
    ns += o.ns;
    count += o.count;
    for (const auto& [name, sum] : o.wakers) add_waker(name, sum);
  }
  WaitReason reason(const WaitKey& key) const {
    WaitReason r{std::get<0>(key), std::get<1>(key), ns, count, std::get<2>(key), "", 0};
    for (const auto& [name, sum] : wakers) {
      if (sum > r.waker_ns || (sum == r.waker_ns && name < r.waker)) {
        r.waker = name;
        r.waker_ns = sum;
      }
    }
    return r;
  }
};

// Blocked time ended, per waker, of one span's subtree; the best entry
// is kept up to date as sums only grow, so merging small into large is
// O(entries of the smaller) and the top waker never needs a scan.
struct Wakers {
  std::unordered_map<uint64_t, int64_t> sums;
  uint64_t best_tid = 0;
  int64_t best_ns = 0;

  void add(uint64_t tid, int64_t ns) {
    const int64_t total = sums[tid] += ns;
    if (total > best_ns || (total == best_ns && total > 0 && tid < best_tid)) {
      best_ns = total;
      best_tid = tid;
    }
  }
};

using sched_detail::span_thread;

// The span tree as the attribution walks it: parents from Span::parent only
// (child links and depths may not be set on a hand-built profile).
struct Forest {
  std::vector<int32_t> parent;  // -1 for a root or a parent that is not a span
  std::vector<int32_t> bfs;     // breadth-first from the roots: parents before children
  std::vector<uint32_t> depth;
  std::vector<uint32_t> pre;  // depth-first preorder number
  std::vector<bool> reached;  // reached from a root (false on a parent cycle)

  explicit Forest(const Profile& p) {
    const auto n = static_cast<int32_t>(p.spans.size());
    parent.assign(p.spans.size(), -1);
    std::vector<int32_t> first(p.spans.size(), -1), next(p.spans.size(), -1);
    std::vector<int32_t> roots;
    for (int32_t i = n - 1; i >= 0; --i) {
      const int32_t up = p.spans[static_cast<size_t>(i)].parent;
      if (up >= 0 && up < n && up != i) {
        parent[static_cast<size_t>(i)] = up;
        next[static_cast<size_t>(i)] = first[static_cast<size_t>(up)];
        first[static_cast<size_t>(up)] = i;
      } else {
        roots.push_back(i);
      }
    }
    std::reverse(roots.begin(), roots.end());
    // Spans on a parent cycle are reached from no root: they keep depth 0 and
    // take part in nothing that needs the tree.
    depth.assign(p.spans.size(), 0);
    pre.assign(p.spans.size(), 0);
    reached.assign(p.spans.size(), false);
    bfs = roots;
    for (size_t k = 0; k < bfs.size(); ++k) {
      const int32_t s = bfs[k];
      for (int32_t c = first[static_cast<size_t>(s)]; c >= 0; c = next[static_cast<size_t>(c)]) {
        depth[static_cast<size_t>(c)] = depth[static_cast<size_t>(s)] + 1;
        bfs.push_back(c);
      }
    }
    for (const int32_t s : bfs) reached[static_cast<size_t>(s)] = true;
    uint32_t counter = 0;
    std::vector<int32_t> stack(roots.rbegin(), roots.rend());
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      pre[static_cast<size_t>(s)] = counter++;
      const size_t mark = stack.size();
      for (int32_t c = first[static_cast<size_t>(s)]; c >= 0; c = next[static_cast<size_t>(c)]) {
        stack.push_back(c);
      }
      std::reverse(stack.begin() + static_cast<ptrdiff_t>(mark), stack.end());
    }
  }

  // Lowest common ancestor, -1 for spans of different trees. Walks as many
  // steps as the spans are apart: consecutive pieces of an interval are a few
  // span boundaries apart.
  int32_t lca(int32_t a, int32_t b) const {
    while (a >= 0 && b >= 0 && a != b) {
      if (depth[static_cast<size_t>(a)] >= depth[static_cast<size_t>(b)]) {
        a = parent[static_cast<size_t>(a)];
      } else {
        b = parent[static_cast<size_t>(b)];
      }
    }
    return a == b ? a : -1;
  }
};

}  // namespace

std::vector<OffCpuPiece> off_cpu_pieces(const Profile& profile) {
  return Threads(profile).pieces();
}

namespace {

// No interval and no thread: each span's wall is on the CPU, the rest is 0
// (what the general case below gives, without its tree and timelines; most
// sessions of a served model are like this).
void attribute_nothing(Profile& profile) {
  KernelData& k = profile.kernel;
  k.spans.clear();
  k.spans.resize(profile.spans.size());
  for (size_t i = 0; i < k.spans.size(); ++i) {
    const Span& span = profile.spans[i];
    k.spans[i].on_cpu_ns =
        std::max<int64_t>(0, (span.flags & kSpanGenerator) ? span.active_ns : span.duration_ns());
  }
}

}  // namespace

namespace {
void attribute_spans(Profile& profile);
}  // namespace

void attribute_kernel(Profile& profile) {
  attribute_spans(profile);
  if (profile.kernel.present) compute_waiting(profile);  // the kernel's off-CPU time, now
}

namespace {
void attribute_spans(Profile& profile) {
  KernelData& k = profile.kernel;
  if (k.off_cpu.empty() && k.threads.empty()) return attribute_nothing(profile);
  const Threads threads(profile);
  for (size_t i = 0; i < k.threads.size(); ++i)
    k.threads[i].started_under = threads.started_under()[i];

  const size_t n = profile.spans.size();
  k.spans.clear();
  k.spans.resize(n);
  std::vector<int64_t> own(n, 0);  // off-CPU of the span's own thread in its subtree
  std::vector<std::map<WaitKey, WaitSum>> waits(n);
  std::vector<int32_t> waker_of(n, -1);
  std::vector<Wakers> wakers;
  auto wakers_for = [&](int32_t s) -> Wakers& {
    int32_t& w = waker_of[static_cast<size_t>(s)];
    if (w < 0) {
      w = static_cast<int32_t>(wakers.size());
      wakers.emplace_back();
    }
    return wakers[static_cast<size_t>(w)];
  };

  // Switches: an interval counts once for every span whose subtree holds a
  // piece of it. With the spans of its pieces in preorder, +1 at each and -1
  // at the common ancestor of each consecutive two leaves, summed over a
  // subtree, give exactly 1 where any of them lies below (the union of their
  // root paths).
  const Forest forest(profile);
  std::vector<int64_t> vol(n, 0), invol(n, 0);
  std::vector<int32_t> hit;
  const std::vector<OffCpuPiece> pieces = threads.pieces();
  for (size_t i = 0; i < pieces.size();) {
    const uint32_t interval = pieces[i].interval;
    const OffCpuInterval& iv = k.off_cpu[interval];
    std::vector<int64_t>& count = iv.blocked ? vol : invol;
    hit.clear();
    for (; i < pieces.size() && pieces[i].interval == interval; ++i) {
      const OffCpuPiece& piece = pieces[i];
      if (piece.span < 0) continue;
      SpanKernel& sk = k.spans[static_cast<size_t>(piece.span)];
      const int64_t len = piece.end_ns - piece.start_ns;
      const auto [blocked, runq] = split_piece(iv, piece.start_ns, piece.end_ns);
      sk.off_cpu_ns += len;
      sk.blocked_ns += blocked;
      sk.runq_ns += runq;
      if (piece.own_thread) {
        own[static_cast<size_t>(piece.span)] += len;
        sk.own_blocked_ns += blocked;
        sk.own_runq_ns += runq;
        if (blocked > 0) waits[static_cast<size_t>(piece.span)][wait_key(iv)].add(iv, blocked);
      }
      // Who woke the span's own thread (the threads it started have wakers of their own).
      if (piece.own_thread && blocked > 0 &&
          (iv.waker_tid != 0 || iv.waker_kind != WakerKind::kTask))
        wakers_for(piece.span).add(waker_key(iv), blocked);
      if (forest.reached[static_cast<size_t>(piece.span)]) hit.push_back(piece.span);
    }
    std::sort(hit.begin(), hit.end(), [&](int32_t a, int32_t b) {
      return forest.pre[static_cast<size_t>(a)] < forest.pre[static_cast<size_t>(b)];
    });
    hit.erase(std::unique(hit.begin(), hit.end()), hit.end());
    for (size_t h = 0; h < hit.size(); ++h) {
      ++count[static_cast<size_t>(hit[h])];
      if (h == 0) continue;
      const int32_t common = forest.lca(hit[h - 1], hit[h]);
      if (common >= 0) --count[static_cast<size_t>(common)];
    }
  }

  // A task waker's name: the latest comm its wakeups carried (a thread that
  // renamed itself is named by its new name).
  std::unordered_map<uint64_t, std::pair<int64_t, const std::string*>> waker_names;
  for (const OffCpuInterval& iv : k.off_cpu) {
    if (iv.waker_kind != WakerKind::kTask || iv.waker_tid == 0 || iv.waker_name.empty()) continue;
    auto [it, added] = waker_names.try_emplace(iv.waker_tid, iv.wake_ns, &iv.waker_name);
    if (!added && iv.wake_ns >= it->second.first) it->second = {iv.wake_ns, &iv.waker_name};
  }

  // Inclusive sums, children first.
  for (auto it = forest.bfs.rbegin(); it != forest.bfs.rend(); ++it) {
    const int32_t s = *it;
    const auto si = static_cast<size_t>(s);
    SpanKernel& sk = k.spans[si];
    sk.voluntary_switches = static_cast<uint32_t>(std::max<int64_t>(0, vol[si]));
    sk.involuntary_switches = static_cast<uint32_t>(std::max<int64_t>(0, invol[si]));
    if (waker_of[si] >= 0) {
      const Wakers& w = wakers[static_cast<size_t>(waker_of[si])];
      if (w.best_tid & kKindKey) {
        sk.top_waker_kind = static_cast<WakerKind>(w.best_tid & 0xff);
        sk.top_waker_name = waker_kind_name(sk.top_waker_kind);
      } else {
        sk.top_waker_tid = w.best_tid;
        if (auto n = waker_names.find(w.best_tid); n != waker_names.end())
          sk.top_waker_name = *n->second.second;
      }
      sk.top_waker_ns = w.best_ns;
    }
    const Span& span = profile.spans[si];
    const int64_t wall = (span.flags & kSpanGenerator) ? span.active_ns : span.duration_ns();
    sk.on_cpu_ns = std::max<int64_t>(0, wall - own[si]);
    sk.own_off_cpu_ns = own[si];
    for (const auto& [key, w] : waits[si]) {
      sk.waits.push_back(w.reason(key));
      if (std::get<2>(key) == WaitObject::kGil) sk.own_gil_ns += w.ns;
      if (std::get<2>(key) == WaitObject::kLock) sk.own_lock_ns += w.ns;
    }
    std::stable_sort(
        sk.waits.begin(), sk.waits.end(),
        [](const WaitReason& a, const WaitReason& b) { return a.blocked_ns > b.blocked_ns; });
    if (forest.parent[si] < 0) continue;
    const auto pi = static_cast<size_t>(span.parent);
    SpanKernel& pk = k.spans[pi];
    pk.off_cpu_ns += sk.off_cpu_ns;
    pk.blocked_ns += sk.blocked_ns;
    pk.runq_ns += sk.runq_ns;
    vol[pi] += vol[si];
    invol[pi] += invol[si];
    const ThreadKey mine = span_thread(profile, s);
    const bool same_thread = mine.second != 0 && mine == span_thread(profile, span.parent);
    if (same_thread) {
      own[pi] += own[si];
      pk.own_blocked_ns += sk.own_blocked_ns;
      pk.own_runq_ns += sk.own_runq_ns;
      auto& into = waits[pi];
      if (into.size() < waits[si].size()) std::swap(into, waits[si]);
      for (const auto& [key, w] : waits[si]) into[key].merge(w);
    }
    waits[si].clear();
    if (waker_of[si] < 0 || !same_thread) continue;
    if (waker_of[pi] < 0) {
      waker_of[pi] = waker_of[si];  // the child's sums become the parent's
      continue;
    }
    Wakers* big = &wakers[static_cast<size_t>(waker_of[pi])];
    Wakers* small = &wakers[static_cast<size_t>(waker_of[si])];
    if (big->sums.size() < small->sums.size()) {
      std::swap(big, small);
      waker_of[pi] = waker_of[si];
    }
    for (const auto& [tid, ns] : small->sums) big->add(tid, ns);
    small->sums.clear();
  }
}
}  // namespace

}  // namespace mlprof
