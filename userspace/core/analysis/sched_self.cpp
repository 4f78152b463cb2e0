// A span's self kernel figures, derived from the inclusive ones the join
// (sched.cpp) summed: self off-CPU, the top stalls, a span's own wait reasons.

#include <algorithm>
#include <cstddef>
#include <map>
#include <vector>

#include "analysis/sched.h"
#include "analysis/sched_detail.h"
#include "model/tree.h"

namespace mlprof {

using sched_detail::span_thread;
using sched_detail::ThreadKey;
using sched_detail::WaitKey;

std::vector<SelfOffCpu> self_off_cpu(const Profile& profile) {
  const auto& ks = profile.kernel.spans;
  if (ks.size() != profile.spans.size()) return {};
  std::vector<SelfOffCpu> self(ks.size());
  for (size_t i = 0; i < ks.size(); ++i)
    self[i] = {ks[i].off_cpu_ns, ks[i].blocked_ns, ks[i].runq_ns};
  for (size_t i = 0; i < ks.size(); ++i) {
    const int32_t up = profile.spans[i].parent;
    if (up < 0 || static_cast<size_t>(up) >= ks.size() || static_cast<size_t>(up) == i) continue;
    SelfOffCpu& parent = self[static_cast<size_t>(up)];
    parent.off_cpu_ns -= ks[i].off_cpu_ns;
    parent.blocked_ns -= ks[i].blocked_ns;
    parent.runq_ns -= ks[i].runq_ns;
  }
  for (SelfOffCpu& s : self) {
    s.off_cpu_ns = std::max<int64_t>(0, s.off_cpu_ns);
    s.blocked_ns = std::max<int64_t>(0, s.blocked_ns);
    s.runq_ns = std::max<int64_t>(0, s.runq_ns);
  }
  return self;
}

namespace {
// A span's children on its own thread, for the own-thread self figures.
bool same_thread_child(const Profile& p, size_t child, int32_t up) {
  const ThreadKey mine = span_thread(p, static_cast<int32_t>(child));
  return mine.second != 0 && mine == span_thread(p, up);
}
}  // namespace

std::vector<Stall> top_stalls(const Profile& profile, size_t n, int64_t min_wall_ns) {
  const auto& ks = profile.kernel.spans;
  if (std::none_of(ks.begin(), ks.end(), [](const SpanKernel& k) { return k.off_cpu_ns > 0; }))
    return {};
  const std::vector<SelfOffCpu> total = self_off_cpu(profile);
  if (total.empty() || n == 0) return {};
  std::vector<SelfOffCpu> own(ks.size());
  for (size_t i = 0; i < ks.size(); ++i)
    own[i] = {ks[i].own_off_cpu_ns, ks[i].own_blocked_ns, ks[i].own_runq_ns};
  for (size_t i = 0; i < ks.size(); ++i) {
    const int32_t up = profile.spans[i].parent;
    if (up < 0 || static_cast<size_t>(up) >= ks.size() || static_cast<size_t>(up) == i) continue;
    if (!same_thread_child(profile, i, up)) continue;
    SelfOffCpu& parent = own[static_cast<size_t>(up)];
    parent.off_cpu_ns -= ks[i].own_off_cpu_ns;
    parent.blocked_ns -= ks[i].own_blocked_ns;
    parent.runq_ns -= ks[i].own_runq_ns;
  }
  std::vector<Stall> out;
  for (size_t i = 0; i < own.size(); ++i) {
    Stall s;
    s.span = static_cast<int32_t>(i);
    s.wall_ns = profile.spans[i].duration_ns();
    s.off_cpu_ns = std::max<int64_t>(0, own[i].off_cpu_ns);
    s.blocked_ns = std::max<int64_t>(0, own[i].blocked_ns);
    s.runq_ns = std::max<int64_t>(0, own[i].runq_ns);
    s.threads_off_cpu_ns = std::max<int64_t>(0, total[i].off_cpu_ns - s.off_cpu_ns);
    if (s.wall_ns < min_wall_ns || s.off_cpu_ns + s.threads_off_cpu_ns <= 0) continue;
    s.off_fraction =
        s.wall_ns > 0
            ? std::min(1.0, static_cast<double>(s.off_cpu_ns) / static_cast<double>(s.wall_ns))
            : 0;
    out.push_back(s);
  }
  const auto by_off = [](const Stall& a, const Stall& b) {
    const int64_t x = a.off_cpu_ns + a.threads_off_cpu_ns, y = b.off_cpu_ns + b.threads_off_cpu_ns;
    return x != y ? x > y : a.span < b.span;
  };
  if (out.size() > n) {
    std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(n), out.end(), by_off);
    out.resize(n);
  } else {
    std::sort(out.begin(), out.end(), by_off);
  }
  return out;
}

std::vector<WaitReason> self_waits(const Profile& profile, int32_t span) {
  const auto& ks = profile.kernel.spans;
  if (ks.size() != profile.spans.size() || span < 0 || static_cast<size_t>(span) >= ks.size())
    return {};
  std::map<WaitKey, WaitReason> sums;
  for (const WaitReason& w : ks[static_cast<size_t>(span)].waits)
    sums[{w.syscall, w.state, w.object}] = w;
  const Span& s = profile.spans[static_cast<size_t>(span)];
  // Children: Span::first_child/next_sibling when linked, else a scan.
  std::vector<size_t> children;
  if (s.first_child >= 0) {
    for (int32_t c = s.first_child; c >= 0; c = profile.spans[static_cast<size_t>(c)].next_sibling)
      children.push_back(static_cast<size_t>(c));
  } else {
    for (size_t i = 0; i < profile.spans.size(); ++i)
      if (profile.spans[i].parent == span && static_cast<int32_t>(i) != span) children.push_back(i);
  }
  for (size_t c : children) {
    if (!same_thread_child(profile, c, span)) continue;
    for (const WaitReason& w : ks[c].waits) {
      auto it = sums.find({w.syscall, w.state, w.object});
      if (it == sums.end()) continue;
      it->second.blocked_ns -= w.blocked_ns;
      it->second.count -= std::min(it->second.count, w.count);
      // Only the sums per waker could say who ended the rest: a waker
      // the child's own differs from is not claimed for it.
      it->second.waker_ns = w.waker == it->second.waker ? it->second.waker_ns - w.waker_ns : 0;
      if (it->second.waker_ns <= 0) {  // the rest's waker is not known
        it->second.waker.clear();
        it->second.waker_ns = 0;
      }
    }
  }
  std::vector<WaitReason> out;
  for (auto& [key, w] : sums)
    if (w.blocked_ns > 0) out.push_back(w);
  std::stable_sort(out.begin(), out.end(), [](const WaitReason& a, const WaitReason& b) {
    return a.blocked_ns > b.blocked_ns;
  });
  return out;
}

}  // namespace mlprof
