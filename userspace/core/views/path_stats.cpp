#include "views/path_stats.h"

#include <algorithm>
#include <cmath>

namespace mlprof {

namespace {

constexpr double kGamma =
    (1 + QuantileSketch::kRelativeAccuracy) / (1 - QuantileSketch::kRelativeAccuracy);
const double kInvLogGamma = 1.0 / std::log(kGamma);

// Bucket i holds (gamma^(i-1), gamma^i]; value > 0.
int32_t bucket_index(int64_t value) {
  return static_cast<int32_t>(std::ceil(std::log(static_cast<double>(value)) * kInvLogGamma));
}

double bucket_value(int32_t index) { return 2 * std::pow(kGamma, index) / (kGamma + 1); }

// The string id a span's display name comes from (Profile::display_name);
// an id out of the table (a hand-edited document) is the empty string's, as
// StringTable::get would show it.
uint32_t display_string(const Profile& p, const Span& s) {
  uint32_t id = 0;
  if (s.label != 0) {
    id = s.label;
  } else if (s.function < p.functions.size()) {
    id = p.functions.get(s.function).name;
  }
  return id < p.functions.strings().size() ? id : 0;
}

constexpr uint32_t kUnknownName = UINT32_MAX;  // name_cache_: looked up, not in names_

PathSummary::Durations durations(const QuantileSketch& q) {
  PathSummary::Durations d;
  d.count = q.count();
  if (d.count == 0) return d;
  d.min_ns = q.min();
  d.max_ns = q.max();
  d.sum_ns = q.sum();
  d.mean_ns = static_cast<double>(q.sum()) / static_cast<double>(q.count());
  d.p50_ns = q.quantile(0.50);
  d.p95_ns = q.quantile(0.95);
  d.p99_ns = q.quantile(0.99);
  return d;
}

}  // namespace

void QuantileSketch::add(int64_t value) {
  value = std::max<int64_t>(value, 0);
  if (count_ == 0 || value < min_) min_ = value;
  if (count_ == 0 || value > max_) max_ = value;
  ++count_;
  sum_ += static_cast<uint64_t>(value);
  if (value == 0) {
    ++zero_count_;
    return;
  }
  const int32_t i = bucket_index(value);
  if (counts_.empty()) {
    first_index_ = i;
    counts_.assign(1, 0);
  } else if (i < first_index_ || i >= first_index_ + static_cast<int32_t>(counts_.size())) {
    // Grow to exactly [lo, hi]: the span of indices is bounded (see path_stats.h),
    // so the copies are too, and capacity stays equal to size.
    const int32_t lo = std::min(i, first_index_);
    const int32_t hi = std::max(i, first_index_ + static_cast<int32_t>(counts_.size()) - 1);
    std::vector<uint64_t> grown(static_cast<size_t>(hi - lo + 1), 0);
    std::copy(counts_.begin(), counts_.end(), grown.begin() + (first_index_ - lo));
    counts_.swap(grown);
    first_index_ = lo;
  }
  ++counts_[static_cast<size_t>(i - first_index_)];
}

double QuantileSketch::quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // The sample of 0-based rank floor(q*(n-1)) lies in the first bucket whose
  // cumulative count exceeds that rank.
  const auto rank = static_cast<uint64_t>(std::floor(q * static_cast<double>(count_ - 1)));
  uint64_t seen = zero_count_;
  double value = 0;
  if (seen <= rank) {
    for (size_t k = 0; k < counts_.size(); ++k) {
      seen += counts_[k];
      if (seen > rank) {
        value = bucket_value(first_index_ + static_cast<int32_t>(k));
        break;
      }
    }
  }
  return std::clamp(value, static_cast<double>(min_), static_cast<double>(max_));
}

CallPathStats::CallPathStats(size_t max_paths, bool keep_walls, Figures figures)
    : max_paths_(std::min<size_t>(max_paths, kDropped - 1)),
      keep_walls_(keep_walls),
      wall_only_(figures == Figures::kWallOnly) {}

uint32_t CallPathStats::name_id(std::string_view name) {
  const auto it = name_index_.find(name);
  if (it != name_index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  name_index_.emplace(names_.back(), id);
  return id;
}

uint32_t CallPathStats::child_of(uint32_t parent, uint32_t name) {
  const auto it = children_.find(static_cast<uint64_t>(parent) << 32 | name);
  if (it != children_.end()) return it->second;
  if (paths_.size() >= max_paths_) return kDropped;
  const auto path = static_cast<uint32_t>(paths_.size());
  PathRecord& r = paths_.emplace_back();
  r.parent = parent;
  r.name = name;
  children_.emplace(static_cast<uint64_t>(parent) << 32 | name, path);
  return path;
}

uint32_t CallPathStats::child_path(uint32_t parent, const Profile& profile, uint32_t string_id) {
  uint32_t& cached = name_cache_[string_id];
  if (cached == 0) {
    const auto it = name_index_.find(std::string_view(profile.functions.strings().get(string_id)));
    cached = it == name_index_.end() ? kUnknownName : it->second + 1;
  }
  if (cached != kUnknownName) {
    const auto it = children_.find(static_cast<uint64_t>(parent) << 32 | (cached - 1));
    if (it != children_.end()) return it->second;
  }
  if (paths_.size() >= max_paths_) return kDropped;
  if (cached == kUnknownName) cached = name_id(profile.functions.strings().get(string_id)) + 1;
  return child_of(parent, cached - 1);
}

uint32_t CallPathStats::path(uint32_t parent, std::string_view name) {
  if (parent == kDropped) return kDropped;
  if (paths_.size() >= max_paths_ && name_index_.find(name) == name_index_.end()) return kDropped;
  const uint32_t path = child_of(parent, name_id(name));
  return path == kDropped ? kDropped : path + 1;
}

void CallPathStats::record(uint32_t path, bool incomplete, int64_t wall_ns, int64_t self_ns,
                           int64_t waiting_ns, const CallKernel& kernel) {
  if (path == kDropped || path == kRoot) {
    ++dropped_;
    return;
  }
  PathRecord& r = paths_[path - 1];
  if (r.last_session != sessions_) {
    r.last_session = sessions_;
    ++r.sessions;
  }
  if (incomplete) {
    ++r.incomplete;
    return;
  }
  r.wall.add(wall_ns);
  if (!wall_only_) {
    r.self.add(self_ns);
    r.waiting.add(waiting_ns);
    if (kernel.off_cpu_ns >= 0) {
      r.off_cpu.add(kernel.off_cpu_ns);
      const auto ns = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
      ++r.kernel.calls;
      r.kernel.on_cpu_ns += ns(kernel.on_cpu_ns);
      r.kernel.blocked_ns += ns(kernel.blocked_ns);
      r.kernel.runq_ns += ns(kernel.runq_ns);
      r.kernel.gil_ns += ns(kernel.gil_ns);
    }
  }
  if (keep_walls_) r.walls.push_back(std::max<int64_t>(wall_ns, 0));
}

uint64_t profile_sessions(const Profile& profile) {
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  for (const Lane& lane : profile.lanes) {
    if (lane.session == 0) continue;
    const std::pair<uint32_t, uint64_t> key{lane.pid, lane.session};
    if (std::find(seen.begin(), seen.end(), key) == seen.end()) seen.push_back(key);
  }
  return std::max<uint64_t>(1, seen.size());
}

void CallPathStats::add(const Profile& p, int depth, std::vector<uint32_t>* span_paths) {
  begin_profile(profile_sessions(p));
  if (span_paths) span_paths->assign(p.spans.size(), 0);
  if (const auto& base = p.functions.strings().shared_base(); base != cache_base_) {
    cache_base_ = base;
    name_cache_.clear();
    memo_.clear();
  }
  const size_t base_size = cache_base_ ? cache_base_->size() : 0;
  name_cache_.resize(std::min(name_cache_.size(), base_size));
  name_cache_.resize(p.functions.strings().size(),
                     0);  // the profile's own strings: not looked up yet
  stack_.clear();
  const auto n = static_cast<int32_t>(p.spans.size());
  const bool kernel = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  const auto kept = [&](int32_t s) {
    return s >= 0 && s < n && (depth < 0 || p.spans[s].depth <= static_cast<uint32_t>(depth));
  };
  for (auto it = p.roots.rbegin(); it != p.roots.rend(); ++it) {
    if (kept(*it)) stack_.emplace_back(*it, 0u);
  }
  while (!stack_.empty()) {
    const auto [s, parent] = stack_.back();
    stack_.pop_back();
    const Span& span = p.spans[s];
    uint32_t path = kDropped;
    if (parent != kDropped) {
      const uint32_t sid = display_string(p, span);
      const auto at = static_cast<size_t>(s);
      if (at < memo_.size() && memo_[at].parent == parent && memo_[at].string_id == sid) {
        path = memo_[at].path;
      } else {
        path = child_path(parent, p, sid);
        if (sid < base_size &&
            path != kDropped) {  // the base's ids mean the same in the next profile
          if (memo_.size() <= at) memo_.resize(at + 1);
          memo_[at] = Memo{parent, sid, path};
        }
      }
    }
    if (span_paths && path != kDropped) (*span_paths)[static_cast<size_t>(s)] = path + 1;
    // Children go on the stack in reverse so that paths are made in start order.
    const size_t first_pushed = stack_.size();
    int64_t self = span.running_ns();
    for (int32_t c = span.first_child; c >= 0 && c < n; c = p.spans[c].next_sibling) {
      if (!kept(c)) continue;
      if (p.spans[c].lane == span.lane) self -= p.spans[c].running_ns();
      stack_.emplace_back(c, path == kDropped ? kDropped : path + 1);
    }
    std::reverse(stack_.begin() + static_cast<std::ptrdiff_t>(first_pushed), stack_.end());
    CallKernel k;
    if (kernel) {
      const SpanKernel& sk = p.kernel.spans[s];
      k = CallKernel{sk.off_cpu_ns, sk.on_cpu_ns, sk.own_blocked_ns, sk.own_runq_ns, sk.own_gil_ns};
    }
    const int64_t waiting =
        std::clamp<int64_t>(span.waiting_ns, 0, std::max<int64_t>(span.duration_ns(), 0));
    record(path == kDropped ? kDropped : path + 1,
           (span.flags & (kSpanOpenAtEnd | kSpanSuspendedAtEnd)) != 0, span.duration_ns(),
           std::max<int64_t>(self, 0), waiting, k);
  }
}

std::vector<PathSummary> CallPathStats::summary() const {
  std::vector<PathSummary> out(paths_.size());
  for (size_t i = 0; i < paths_.size(); ++i) {
    const PathRecord& r = paths_[i];
    PathSummary& s = out[i];
    // A parent is made before its children, so its path is already filled in.
    if (r.parent != 0) s.path = out[r.parent - 1].path;
    s.path.push_back(names_[r.name]);
    s.sessions = r.sessions;
    s.incomplete = r.incomplete;
    s.wall = durations(r.wall);
    s.self = durations(r.self);
    s.waiting = durations(r.waiting);
    s.off_cpu = durations(r.off_cpu);
    s.kernel = r.kernel;
    s.walls = r.walls;
    std::sort(s.walls.begin(), s.walls.end());
  }
  return out;
}

size_t CallPathStats::memory_bytes() const {
  size_t bytes = paths_.capacity() * sizeof(PathRecord);
  for (const PathRecord& r : paths_) {
    bytes += r.wall.heap_bytes() + r.self.heap_bytes() + r.waiting.heap_bytes() +
             r.off_cpu.heap_bytes() + r.walls.capacity() * sizeof(int64_t);
  }
  bytes += names_.size() * sizeof(std::string) + 512;  // + a deque block
  for (const std::string& s : names_) bytes += s.capacity() + 1;
  // Hash nodes: the stored pair and a next pointer, plus the bucket array.
  bytes += name_index_.size() * (sizeof(std::string_view) + sizeof(uint32_t) + sizeof(void*)) +
           name_index_.bucket_count() * sizeof(void*);
  bytes += children_.size() * (sizeof(uint64_t) + sizeof(uint32_t) + sizeof(void*)) +
           children_.bucket_count() * sizeof(void*);
  bytes += name_cache_.capacity() * sizeof(uint32_t) + memo_.capacity() * sizeof(Memo) +
           stack_.capacity() * sizeof(std::pair<int32_t, uint32_t>);
  return bytes;
}

void CallPathStats::reset() {
  sessions_ = 0;
  session_count_ = 0;
  dropped_ = 0;
  paths_ = {};
  names_ = {};
  name_index_ = {};
  children_ = {};
  name_cache_ = {};
  cache_base_ = nullptr;
  memo_ = {};
  stack_ = {};
}

}  // namespace mlprof
