#include "model/resources.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace mlprof {

namespace {

// The outermost span of s's lane that holds s: a task's coroutine, a thread's root.
int32_t lane_root(const Profile& p, int32_t s) {
  const uint32_t lane = p.spans[static_cast<size_t>(s)].lane;
  while (true) {
    const int32_t parent = p.spans[static_cast<size_t>(s)].parent;
    if (parent < 0 || p.spans[static_cast<size_t>(parent)].lane != lane) return s;
    s = parent;
  }
}

bool inside_same_resource(const Profile& p, int32_t s) {
  const uint32_t resource = p.spans[static_cast<size_t>(s)].resource;
  for (int32_t a = p.spans[static_cast<size_t>(s)].parent; a >= 0;
       a = p.spans[static_cast<size_t>(a)].parent) {
    if (p.spans[static_cast<size_t>(a)].resource == resource) return true;
  }
  return false;
}

// When the task's coroutine `root` first suspended before `before`: the end
// of its first segment, or `before` if it ran straight to it.
int64_t first_suspension(const Profile& p, int32_t root, int64_t before) {
  const auto [first, last] = p.segments_of(root);
  if (first == last || first->end_ns >= before) return before;
  return first->end_ns;
}

void assign_slots(Resource& r) {
  std::sort(r.calls.begin(), r.calls.end(), [](const ResourceCall& a, const ResourceCall& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.span < b.span;
  });
  // (end, slot) of the calls in flight; a call ending at t frees its slot for one starting at t.
  std::multimap<int64_t, uint32_t> busy;
  std::set<uint32_t> free_slots;
  uint32_t next = 1;
  for (ResourceCall& c : r.calls) {
    while (!busy.empty() && busy.begin()->first <= c.start_ns) {
      free_slots.insert(busy.begin()->second);
      busy.erase(busy.begin());
    }
    if (free_slots.empty()) {
      c.slot = next++;
    } else {
      c.slot = *free_slots.begin();
      free_slots.erase(free_slots.begin());
    }
    busy.emplace(c.end_ns, c.slot);
  }
  r.slots = next - 1;
}

void sample(Resource& r) {
  // (ts, in-flight change, queued change): ends before starts at one time.
  std::vector<std::tuple<int64_t, int, int>> changes;
  for (const ResourceCall& c : r.calls) {
    changes.emplace_back(c.start_ns, +1, 0);
    changes.emplace_back(c.end_ns, -1, 0);
    if (c.queued_from_ns < c.start_ns) {
      changes.emplace_back(c.queued_from_ns, 0, +1);
      changes.emplace_back(c.start_ns, 0, -1);
    }
  }
  std::sort(changes.begin(), changes.end());
  int in_flight = 0, queued = 0;
  for (size_t i = 0; i < changes.size();) {
    const int64_t ts = std::get<0>(changes[i]);
    for (; i < changes.size() && std::get<0>(changes[i]) == ts; ++i) {
      in_flight += std::get<1>(changes[i]);
      queued += std::get<2>(changes[i]);
    }
    const ResourceSample s{ts, static_cast<uint32_t>(std::max(in_flight, 0)),
                           static_cast<uint32_t>(std::max(queued, 0))};
    if (!r.samples.empty() && r.samples.back().in_flight == s.in_flight &&
        r.samples.back().queued == s.queued)
      continue;
    r.samples.push_back(s);
    r.peak_queued = std::max(r.peak_queued, s.queued);
  }
}

}  // namespace

std::vector<Resource> resource_view(const Profile& p) {
  std::vector<Resource> out;
  std::map<uint32_t, size_t> index;                     // resource string -> out
  std::set<std::pair<int32_t, uint32_t>> queued_roots;  // (task root, resource) already queued once
  // Spans are ordered by lane, then start: a task's first call comes first.
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    if (s.resource == 0 || (s.flags & kSpanWait) ||
        inside_same_resource(p, static_cast<int32_t>(i)))
      continue;
    auto [it, added] = index.emplace(s.resource, out.size());
    if (added) out.push_back(Resource{s.resource, {}, 0, 0, {}});
    ResourceCall c{static_cast<int32_t>(i), 0, s.start_ns, std::max(s.end_ns, s.start_ns),
                   s.start_ns};
    const int32_t root = lane_root(p, static_cast<int32_t>(i));
    if (p.lanes[s.lane].task != 0 && root != static_cast<int32_t>(i) &&
        queued_roots.emplace(root, s.resource).second) {
      c.queued_from_ns = first_suspension(p, root, s.start_ns);
    }
    out[it->second].calls.push_back(c);
  }
  for (Resource& r : out) {
    assign_slots(r);
    sample(r);
  }
  // In order of first call.
  std::sort(out.begin(), out.end(), [](const Resource& a, const Resource& b) {
    return a.calls.front().start_ns < b.calls.front().start_ns;
  });
  return out;
}

}  // namespace mlprof
