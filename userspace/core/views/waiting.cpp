#include "views/waiting.h"

#include <algorithm>
#include <vector>

#include "model/tree.h"

namespace mlprof {

namespace {

// A lane's readings as disjoint stretches in time order, with the running
// total before each: off_before(t) is the off-CPU time placed before t.
class LaneOffCpu {
 public:
  explicit LaneOffCpu(const std::vector<OffCpuReading>& readings) {
    total_.push_back(0);
    for (const OffCpuReading& r : readings) {
      if (r.off_ns <= 0) continue;
      int64_t start = r.end_ns - r.off_ns;
      if (!end_.empty()) start = std::max(start, end_.back());
      if (start >= r.end_ns) continue;
      start_.push_back(start);
      end_.push_back(r.end_ns);
      total_.push_back(total_.back() + (r.end_ns - start));
    }
  }

  bool empty() const { return end_.empty(); }

  int64_t off_before(int64_t t) const {
    const size_t i = std::upper_bound(end_.begin(), end_.end(), t) - end_.begin();
    int64_t off = total_[i];
    if (i < start_.size() && start_[i] < t) off += t - start_[i];
    return off;
  }

  int64_t off_within(int64_t a, int64_t b) const {
    return b > a ? off_before(b) - off_before(a) : 0;
  }

 private:
  std::vector<int64_t> start_, end_, total_;
};

}  // namespace

void compute_waiting(Profile& p) {
  const bool kernel = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  std::vector<LaneOffCpu> lanes;
  if (!kernel) {
    lanes.reserve(p.lanes.size());
    for (const Lane& lane : p.lanes) lanes.emplace_back(lane.off_cpu);
  }
  for (size_t i = 0; i < p.spans.size(); ++i) {
    Span& s = p.spans[i];
    const int64_t wall = s.duration_ns();
    int64_t off = 0;
    if (s.flags & kSpanGroup) {
      off = 0;  // its members', below
    } else if (kernel) {
      off = p.kernel.spans[i].own_off_cpu_ns;
    } else if (s.lane < lanes.size() && !lanes[s.lane].empty()) {
      const LaneOffCpu& lane = lanes[s.lane];
      if (s.flags & kSpanGenerator) {
        const auto [first, last] = p.segments_of(static_cast<int32_t>(i));
        for (const Segment* seg = first; seg != last; ++seg)
          off += lane.off_within(seg->start_ns, seg->end_ns);
      } else {
        off = lane.off_within(s.start_ns, s.end_ns);
      }
    }
    const int64_t suspended = (s.flags & kSpanGroup) ? 0 : std::max<int64_t>(0, wall - s.active_ns);
    s.waiting_ns = std::clamp<int64_t>(suspended + off, 0, std::max<int64_t>(0, wall));
  }
  // A group (0 so far) sums its members, which come after it: from the last
  // span up, so a group inside a group is whole before it is counted.
  const auto is_group = [](const Span& s) { return (s.flags & kSpanGroup) != 0; };
  if (std::none_of(p.spans.begin(), p.spans.end(), is_group)) return;
  std::vector<int64_t> running(p.spans.size(), 0);  // per group: its members' running time
  for (size_t i = p.spans.size(); i-- > 0;) {
    Span& s = p.spans[i];
    if (is_group(s)) s.waiting_ns = group_waiting_ns(s.duration_ns(), s.waiting_ns, running[i]);
    const int32_t parent = s.parent;
    if (parent >= 0 && static_cast<size_t>(parent) < i && is_group(p.spans[parent])) {
      p.spans[parent].waiting_ns += s.waiting_ns;
      running[static_cast<size_t>(parent)] += s.running_ns();
    }
  }
}

}  // namespace mlprof
