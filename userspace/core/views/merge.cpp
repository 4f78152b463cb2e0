#include "views/merge.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/sched.h"

namespace mlprof {

namespace {

uint64_t meta_session(const Profile& p) {
  const auto it = p.meta.find("session");
  if (it == p.meta.end()) return 0;
  uint64_t v = 0;
  const std::string& s = it->second;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() ? v : 0;
}

// Writes the profile's meta pid/session into the lanes and kernel records
// that leave them 0, before meta stops saying it.
void pin_provenance(std::vector<Lane>& lanes, std::vector<OffCpuInterval>& off_cpu,
                    std::vector<ThreadLifetime>& threads, uint32_t pid, uint64_t session) {
  for (Lane& lane : lanes) {
    if (lane.pid == 0) lane.pid = pid;
    if (lane.session == 0) lane.session = session;
  }
  for (OffCpuInterval& iv : off_cpu) {
    if (iv.pid == 0) iv.pid = pid;
  }
  for (ThreadLifetime& t : threads) {
    if (t.pid == 0) t.pid = pid;
  }
}

// No timeline yet: its start, end and depth say nothing.
bool no_timeline(const Profile& p) { return p.lanes.empty() && p.spans.empty(); }

}  // namespace

namespace {

// A part's function and string ids in `into`'s tables, each made on first
// use: names no span or event of the part uses are not copied, and the ids
// of a shared base (the agent's sessions of one process start on their
// process's names, FunctionTable's base) are mapped once for all the parts
// that share it rather than once per part.
class Remap {
 public:
  explicit Remap(Profile& into) : into_(into) {}

  void start(const Profile& from) {
    from_ = &from;
    const FunctionTable* base = from.functions.base();
    shared_ = base ? &by_base_[base] : nullptr;
    function_base_ = base ? static_cast<uint32_t>(base->size()) : 0;
    string_base_ = base ? static_cast<uint32_t>(base->strings().size()) : 0;
    own_.functions.assign(from.functions.size() - function_base_, kUnset);
    own_.strings.assign(from.functions.strings().size() - string_base_, kUnset);
  }

  // Out-of-range ids are kept as they are.
  uint32_t function(uint32_t id) {
    if (id >= from_->functions.size()) return id;
    uint32_t& slot = id < function_base_ ? slot_of(shared_->functions, function_base_, id)
                                         : own_.functions[id - function_base_];
    if (slot == kUnset) {
      const FunctionInfo& fn = from_->functions.get(id);
      const StringTable& strings = from_->functions.strings();
      slot = into_.functions.add(strings.get(fn.name), strings.get(fn.module), strings.get(fn.file),
                                 fn.line, fn.kind, fn.user_code);
    }
    return slot;
  }

  uint32_t string(uint32_t id) {
    if (id == 0) return 0;
    if (id >= from_->functions.strings().size())
      return 0;  // names the empty string, as StringTable::get
    uint32_t& slot = id < string_base_ ? slot_of(shared_->strings, string_base_, id)
                                       : own_.strings[id - string_base_];
    if (slot == kUnset) slot = into_.functions.strings().intern(from_->functions.strings().get(id));
    return slot;
  }

 private:
  static constexpr uint32_t kUnset = UINT32_MAX;
  struct Ids {
    std::vector<uint32_t> functions, strings;
  };
  static uint32_t& slot_of(std::vector<uint32_t>& ids, uint32_t size, uint32_t id) {
    if (ids.size() < size) ids.resize(size, kUnset);
    return ids[id];
  }

  Profile& into_;
  const Profile* from_ = nullptr;
  std::map<const FunctionTable*, Ids> by_base_;  // the parts keep their bases alive meanwhile
  Ids* shared_ = nullptr;
  uint32_t function_base_ = 0, string_base_ = 0;
  Ids own_;
};

// One part appended without the whole-profile steps (linking, sorting the
// intervals, attribution), which append_profiles does once for all parts:
// appending n sessions one by one stays linear, not quadratic.
void append_one(Profile& into, const Profile& from, Remap& remap, bool& take_meta, bool& first,
                bool& all_attributed) {
  all_attributed = all_attributed && from.kernel.spans.size() == from.spans.size();
  std::vector<Lane> lanes = from.lanes;
  KernelData kernel = from.kernel;
  pin_provenance(lanes, kernel.off_cpu, kernel.threads, profile_pid(from), meta_session(from));

  // Functions and labels into into's tables.
  remap.start(from);
  const auto lane_base = static_cast<int32_t>(into.lanes.size());
  const auto span_base = static_cast<int32_t>(into.spans.size());
  // Events name functions (kCall) and strings (kLabel) too: a rebuild of the
  // merged profile from its lanes gives the same tree.
  for (Lane& lane : lanes) {
    if (lane.parent_lane >= 0) lane.parent_lane += lane_base;
    for (Event& e : lane.events) {
      if (e.kind == EventKind::kCall) e.id = remap.function(e.id);
      if (e.kind == EventKind::kLabel || e.kind == EventKind::kMark) e.id = remap.string(e.id);
    }
    into.lanes.push_back(std::move(lane));
  }
  for (Span s : from.spans) {
    if (s.parent >= 0) s.parent += span_base;
    s.function = remap.function(s.function);
    s.label = remap.string(s.label);
    s.resource = remap.string(s.resource);
    s.lane += static_cast<uint32_t>(lane_base);
    into.spans.push_back(s);
  }
  for (SpanIO r : from.io) {
    r.span += span_base;
    into.io.push_back(std::move(r));
  }
  for (Segment seg : from.segments) {
    seg.span += span_base;
    into.segments.push_back(seg);
  }
  for (SpanValue v : from.values) {
    v.span += span_base;
    into.values.push_back(v);
  }
  for (Mark m : from.marks) {
    m.lane += static_cast<uint32_t>(lane_base);
    if (m.span >= 0) m.span += span_base;
    m.name = remap.string(m.name);
    m.resource = remap.string(m.resource);
    into.marks.push_back(m);
  }

  KernelData& k = into.kernel;
  k.present = k.present || kernel.present;
  k.lost_events += kernel.lost_events;
  k.off_cpu.insert(k.off_cpu.end(), kernel.off_cpu.begin(), kernel.off_cpu.end());
  for (ThreadLifetime& t : kernel.threads) {
    if (t.started_under >= 0) t.started_under += span_base;
    k.threads.push_back(std::move(t));
  }
  k.spans.insert(k.spans.end(), kernel.spans.begin(), kernel.spans.end());

  into.stats.events_captured += from.stats.events_captured;
  into.stats.events_skipped += from.stats.events_skipped;
  into.stats.unmatched_returns += from.stats.unmatched_returns;
  if (take_meta) {
    into.meta = from.meta;
  } else {
    for (auto it = into.meta.begin(); it != into.meta.end();) {
      const auto other = from.meta.find(it->first);
      it = other == from.meta.end() || other->second != it->second ? into.meta.erase(it)
                                                                   : std::next(it);
    }
  }
  take_meta = false;
  const int depth = from.captured_depth;
  if (first) {
    into.captured_depth = depth;
    into.start_ns = from.start_ns;
    into.end_ns = from.end_ns;
    first = false;
  } else {
    into.captured_depth =
        into.captured_depth < 0 || depth < 0 ? -1 : std::max(into.captured_depth, depth);
    into.start_ns = std::min(into.start_ns, from.start_ns);
    into.end_ns = std::max(into.end_ns, from.end_ns);
  }
}

}  // namespace

void append_profiles(Profile& into, const std::vector<const Profile*>& parts) {
  if (parts.empty()) return;
  // A part may be `into` itself: append a copy of what it holds now (a
  // Profile is not copyable; appending it to an empty one is the copy).
  std::unique_ptr<Profile> self_copy;
  for (const Profile* part : parts) {
    if (part == &into && !self_copy) {
      self_copy = std::make_unique<Profile>();
      bool copy_meta = true, copy_first = true, copy_attributed = true;
      Remap copy_remap(*self_copy);
      append_one(*self_copy, into, copy_remap, copy_meta, copy_first, copy_attributed);
    }
  }
  bool first = no_timeline(into);
  bool take_meta = first && into.meta.empty();
  bool all_attributed = into.kernel.spans.size() == into.spans.size();
  pin_provenance(into.lanes, into.kernel.off_cpu, into.kernel.threads, profile_pid(into),
                 meta_session(into));
  // Room for every part's spans at once: a reserve per part (exact size)
  // reallocated and copied the spans so far for each one, and combining n
  // sessions was quadratic (the continuous agent's 13,000-session period
  // took minutes).
  size_t spans = into.spans.size();
  for (const Profile* part : parts) spans += (part == &into ? *self_copy : *part).spans.size();
  into.spans.reserve(spans);
  Remap remap(into);
  for (const Profile* part : parts) {
    append_one(into, part == &into ? *self_copy : *part, remap, take_meta, first, all_attributed);
  }
  link_tree(into);
  KernelData& k = into.kernel;
  std::stable_sort(k.off_cpu.begin(), k.off_cpu.end(),
                   [](const OffCpuInterval& a, const OffCpuInterval& b) {
                     return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
                   });
  if (!k.present) {  // no kernel figures to keep (in-process profiles only)
    k.spans.clear();
  } else if (!all_attributed) {
    attribute_kernel(into);
  }
}

void append_profile(Profile& into, const Profile& from) { append_profiles(into, {&from}); }

}  // namespace mlprof
