#include "model/tree.h"

#include <algorithm>

#include "views/waiting.h"

namespace mlprof {

const std::string& Profile::display_name(const Span& s) const {
  if (s.label != 0) return functions.strings().get(s.label);
  if (s.function < functions.size()) return functions.name(s.function);
  return functions.strings().get(0);
}

namespace {
template <typename T>
std::pair<const T*, const T*> span_range(const std::vector<T>& v, int32_t s) {
  auto lo =
      std::lower_bound(v.begin(), v.end(), s, [](const T& x, int32_t k) { return x.span < k; });
  auto hi = std::upper_bound(lo, v.end(), s, [](int32_t k, const T& x) { return k < x.span; });
  return {v.data() + (lo - v.begin()), v.data() + (hi - v.begin())};
}
}  // namespace

std::pair<const SpanIO*, const SpanIO*> Profile::io_of(int32_t s) const {
  return span_range(io, s);
}

std::pair<const Segment*, const Segment*> Profile::segments_of(int32_t s) const {
  return span_range(segments, s);
}

const uint64_t* Profile::value_of(int32_t s, ValueKind kind) const {
  for (auto [v, end] = span_range(values, s); v != end; ++v) {
    if (v->kind == kind) return &v->value;
  }
  return nullptr;
}

int Profile::max_depth() const {
  int deepest = -1;
  for (const Span& s : spans) deepest = std::max(deepest, static_cast<int>(s.depth));
  return deepest;
}

namespace {

enum class SpanState : uint8_t { kRunning, kSuspended, kClosed };

// Scratch state of one build_tree call. Per-span vectors run parallel to
// profile.spans; call_span maps (lane, event index) to the span a kCall opened.
class TreeBuilder {
 public:
  explicit TreeBuilder(Profile& p) : p_(p) {}

  void build() {
    p_.spans.clear();
    p_.roots.clear();
    p_.io.clear();
    p_.segments.clear();
    p_.values.clear();
    p_.marks.clear();
    p_.stats.unmatched_returns = 0;
    size_t calls = 0, events = 0;
    for (const Lane& lane : p_.lanes) {
      events += lane.events.size();
      with_values_ = with_values_ || !lane.readings.empty();
      for (const Event& ev : lane.events) calls += ev.kind == EventKind::kCall;
    }
    move_budget_ = stack_move_budget(events);
    moves_ = 0;
    p_.spans.reserve(calls);
    run_start_.reserve(calls);
    state_.reserve(calls);
    segment_of_.reserve(calls);
    fold_paused_.reserve(calls);
    fold_count_.reserve(calls);
    call_span_.reserve(events);
    lane_offset_.resize(p_.lanes.size());
    if (with_values_) {
      value_run_.assign(calls * kValueKinds, kNoReading);
      value_sum_.assign(calls * kValueKinds, 0);
      value_has_.assign(calls * kValueKinds, 0);
    }
    for (uint32_t li = 0; li < p_.lanes.size(); ++li) build_lane(li);
    if (with_values_) {
      for (size_t i = 0; i < p_.spans.size() * kValueKinds; ++i) {
        if (value_has_[i]) {
          p_.values.push_back({static_cast<int32_t>(i / kValueKinds),
                               static_cast<ValueKind>(i % kValueKinds), value_sum_[i]});
        }
      }
    }
    link_tree(p_);
    // Stable: a span's segments stay in time order, its arguments before its return.
    auto by_span = [](const auto& a, const auto& b) { return a.span < b.span; };
    std::stable_sort(p_.segments.begin(), p_.segments.end(), by_span);
    std::stable_sort(p_.io.begin(), p_.io.end(), by_span);
    std::stable_sort(p_.marks.begin(), p_.marks.end(),
                     [](const Mark& x, const Mark& y) { return x.ts_ns < y.ts_ns; });
    compute_waiting(p_);  // reads the segments in span order
  }

 private:
  void build_lane(uint32_t li) {
    Lane& lane = p_.lanes[li];
    lane.recorded = lane.events.size();
    const size_t base = call_span_.size();
    lane_offset_[li] = base;
    call_span_.resize(base + lane.events.size(), -1);

    const int32_t adopt = adoption_parent(li);
    const size_t first_span = p_.spans.size();
    stack_.clear();
    segments_.clear();
    free_segments_.clear();
    uint32_t pending_label = 0;
    uint32_t pending_resource = 0;
    bool marked_dropped = false;
    int64_t last_ts = p_.end_ns;

    auto lookup = [&](uint32_t event_index) -> int32_t {
      return event_index < lane.events.size() ? call_span_[base + event_index] : -1;
    };
    // The readings taken at event i: at most one per kind (a repeat replaces).
    // A kFold's are not counters but what they grew while paused.
    size_t next_reading = 0;
    int64_t at[kValueKinds];
    bool have[kValueKinds];
    int64_t last[kValueKinds];
    bool seen[kValueKinds] = {};
    auto readings_at = [&](size_t i, bool counters) {
      bool any = false;
      for (int k = 0; k < kValueKinds; ++k) have[k] = false;
      while (next_reading < lane.readings.size() && lane.readings[next_reading].event <= i) {
        const Reading& r = lane.readings[next_reading++];
        const int k = static_cast<int>(r.kind);
        if (r.event != i || k < 0 || k >= kValueKinds) continue;
        at[k] = r.value;
        have[k] = any = true;
        if (counters) {
          last[k] = r.value;
          seen[k] = true;
        }
      }
      return any;
    };

    for (size_t i = 0; i < lane.events.size(); ++i) {
      if (moves_ > move_budget_) {  // the lane stops here (tree.h)
        lane.truncated = true;
        break;
      }
      const Event& ev = lane.events[i];
      const bool readings = with_values_ && readings_at(i, ev.kind != EventKind::kFold);
      if (ev.kind != EventKind::kLabel) last_ts = std::max(last_ts, ev.ts_ns);
      switch (ev.kind) {
        case EventKind::kLabel:
          if (ev.flags & kEvResource) {
            if (!(ev.flags & kEvRelabel)) {
              pending_resource = ev.id;
            } else if (!stack_.empty()) {
              p_.spans[stack_.back()].resource = ev.id;
            }
          } else if (!(ev.flags & kEvRelabel)) {
            pending_label = ev.id;
          } else if (!stack_.empty()) {
            p_.spans[stack_.back()].label = ev.id;
            p_.spans[stack_.back()].flags |= kSpanLabelled;
          }
          break;
        case EventKind::kCall: {
          Span s;
          s.parent = stack_.empty() ? adopt : stack_.back();
          s.depth = s.parent < 0 ? 0 : p_.spans[s.parent].depth + 1;
          s.function = ev.id;
          s.lane = li;
          s.start_ns = s.end_ns = ev.ts_ns;
          if (ev.flags & kEvCFunction) s.flags |= kSpanCFunction;
          if (ev.flags & kEvBlock) s.flags |= kSpanBlock;
          if (ev.flags & kEvContinued) s.flags |= kSpanContinued;
          if (ev.flags & kEvWait) s.flags |= kSpanWait;
          if (pending_label != 0) {
            s.label = pending_label;
            s.flags |= kSpanLabelled;
            pending_label = 0;
          }
          s.resource = pending_resource;
          pending_resource = 0;
          const auto idx = static_cast<int32_t>(p_.spans.size());
          p_.spans.push_back(s);
          run_start_.push_back(ev.ts_ns);
          state_.push_back(SpanState::kRunning);
          segment_of_.push_back(-1);
          fold_paused_.push_back(0);
          fold_count_.push_back(0);
          call_span_[base + i] = idx;
          stack_.push_back(idx);
          if (readings) start_values(idx, at, have);
          break;
        }
        case EventKind::kReturn: {
          if (stack_.empty()) {
            ++p_.stats.unmatched_returns;
            break;
          }
          const int32_t idx = stack_.back();
          stack_.pop_back();
          if (readings) end_values(idx, at, have);
          Span& s = p_.spans[idx];
          s.end_ns = ev.ts_ns;
          end_run(idx, ev.ts_ns);
          state_[idx] = SpanState::kClosed;
          if (ev.flags & kEvException) s.flags |= kSpanException;
          if (ev.flags & kEvChildrenDropped) {
            s.flags |= kSpanChildrenDropped;
            marked_dropped = true;
          }
          break;
        }
        case EventKind::kSuspend: {
          const int32_t idx = lookup(ev.id);
          if (idx < 0 || state_[idx] != SpanState::kRunning) break;
          if (ev.flags & kEvChildrenDropped) {
            p_.spans[idx].flags |= kSpanChildrenDropped;
            marked_dropped = true;
          }
          suspend(idx, ev.ts_ns);
          if (readings) {
            for (const int32_t s : segments_[segment_of_[idx]]) end_values(s, at, have);
          }
          break;
        }
        case EventKind::kResume: {
          const int32_t idx = lookup(ev.id);
          if (idx < 0 || state_[idx] != SpanState::kSuspended || segment_of_[idx] < 0) break;
          if (readings) {
            for (const int32_t s : segments_[segment_of_[idx]]) start_values(s, at, have);
          }
          resume(idx, ev.ts_ns);
          break;
        }
        case EventKind::kFold: {
          if (i + 1 >= lane.events.size() || lane.events[i + 1].kind != EventKind::kFoldCount)
            break;
          const Event& count = lane.events[++i];
          last_ts = std::max(last_ts, count.ts_ns);
          const int32_t idx = lookup(ev.id);
          if (idx < 0 || state_[idx] != SpanState::kRunning) break;
          moves_ += stack_.size();  // the find, then the spans above it
          const auto pos = std::find(stack_.begin(), stack_.end(), idx);
          if (pos == stack_.end()) break;
          fold(pos, count.id, std::max<int64_t>(0, count.ts_ns - ev.ts_ns), readings ? at : nullptr,
               have);
          break;
        }
        case EventKind::kMark:
          p_.marks.push_back(
              Mark{li, ev.ts_ns, stack_.empty() ? adopt : stack_.back(), ev.id, pending_resource});
          pending_resource = 0;
          break;
        default:
          break;  // an unknown kind from a newer writer: skip it, keep the tree
      }
    }

    const int64_t lane_end = last_ts;
    const uint32_t truncated = lane.truncated ? kSpanTruncated : 0u;
    for (const int32_t idx : stack_) {
      if (with_values_) end_values(idx, last, seen);
      Span& s = p_.spans[idx];
      s.end_ns = std::max(lane_end, s.start_ns);
      end_run(idx, s.end_ns);
      s.flags |= kSpanOpenAtEnd | truncated;
      state_[idx] = SpanState::kClosed;
    }
    for (size_t idx = first_span; idx < p_.spans.size(); ++idx) {
      if (state_[idx] != SpanState::kSuspended) continue;
      Span& s = p_.spans[idx];
      s.end_ns = std::max(lane_end, s.start_ns);
      s.flags |= kSpanSuspendedAtEnd | truncated;
      state_[idx] = SpanState::kClosed;
    }
    for (const IORecord& rec : lane.io) {
      const int32_t idx = lookup(rec.call);
      if (idx >= 0) p_.io.push_back(SpanIO{idx, rec.role, rec.name, rec.summary});
    }
    if (lane.dropped > 0 && !marked_dropped) {
      for (size_t idx = first_span; idx < p_.spans.size(); ++idx) {
        if (p_.spans[idx].parent == adopt) p_.spans[idx].flags |= kSpanChildrenDropped;
      }
    }
  }

  void start_values(int32_t span, const int64_t* at, const bool* have) {
    for (int k = 0; k < kValueKinds; ++k) {
      if (have[k]) value_run_[static_cast<size_t>(span) * kValueKinds + k] = at[k];
    }
  }

  // Ends a running stretch of `span`: adds what each counter grew since its start.
  void end_values(int32_t span, const int64_t* at, const bool* have) {
    for (int k = 0; k < kValueKinds; ++k) {
      const size_t slot = static_cast<size_t>(span) * kValueKinds + k;
      if (!have[k] || value_run_[slot] == kNoReading) continue;
      if (at[k] > value_run_[slot])
        value_sum_[slot] += static_cast<uint64_t>(at[k] - value_run_[slot]);
      value_has_[slot] = 1;
      value_run_[slot] = kNoReading;
    }
  }

  // The span a nested lane's top-level spans hang under, or -1.
  int32_t adoption_parent(uint32_t li) const {
    const Lane& lane = p_.lanes[li];
    if (lane.parent_lane < 0 || static_cast<uint32_t>(lane.parent_lane) >= li) return -1;
    const Lane& parent = p_.lanes[lane.parent_lane];
    if (lane.parent_call >= parent.events.size()) return -1;
    return call_span_[lane_offset_[lane.parent_lane] + lane.parent_call];
  }

  // Detaches `idx` and every span above it; they stay open, not running.
  void suspend(int32_t idx, int64_t ts) {
    auto pos = stack_.end();
    while (*--pos != idx) {
    }
    int32_t slot;
    if (!free_segments_.empty()) {
      slot = free_segments_.back();
      free_segments_.pop_back();
    } else {
      slot = static_cast<int32_t>(segments_.size());
      segments_.emplace_back();
    }
    std::vector<int32_t>& segment = segments_[slot];
    segment.assign(pos, stack_.end());
    moves_ += segment.size();
    stack_.erase(pos, stack_.end());
    for (const int32_t s : segment) {
      p_.spans[s].flags |= kSpanGenerator;
      end_run(s, ts);
      state_[s] = SpanState::kSuspended;
    }
    segment_of_[idx] = slot;
  }

  // Ends the running stretch of `span` at `ts`: its active time, and its
  // segment if it is a generator, less the pauses folded into the stretch.
  void end_run(int32_t span, int64_t ts) {
    Span& s = p_.spans[span];
    s.active_ns += ts - run_start_[span] - fold_paused_[span];
    if (s.flags & kSpanGenerator) {
      p_.segments.push_back({span, run_start_[span], ts, fold_count_[span], fold_paused_[span]});
    }
    fold_paused_[span] = 0;
    fold_count_[span] = 0;
  }

  // Coalesced resumes (kFold) of the span at `pos` of the stack: it and the
  // spans above it (its segment) were paused `paused` ns over `count`
  // resumes; `grew` (or nullptr): what the counters grew meanwhile, which
  // moves the start readings of their running stretches forward.
  void fold(std::vector<int32_t>::iterator pos, uint32_t count, int64_t paused, const int64_t* grew,
            const bool* have) {
    for (auto it = pos; it != stack_.end(); ++it) {
      const int32_t s = *it;
      p_.spans[s].flags |= kSpanGenerator;
      p_.spans[s].resumes += count;
      fold_paused_[s] += paused;
      fold_count_[s] += count;
      if (grew == nullptr) continue;
      for (int k = 0; k < kValueKinds; ++k) {
        const size_t slot = static_cast<size_t>(s) * kValueKinds + k;
        if (have[k] && value_run_[slot] != kNoReading) value_run_[slot] += grew[k];
      }
    }
  }

  void resume(int32_t idx, int64_t ts) {
    const int32_t slot = segment_of_[idx];
    segment_of_[idx] = -1;
    moves_ += segments_[slot].size();
    for (const int32_t s : segments_[slot]) {
      stack_.push_back(s);
      run_start_[s] = ts;
      ++p_.spans[s].resumes;
      state_[s] = SpanState::kRunning;
    }
    free_segments_.push_back(slot);
  }

  Profile& p_;
  std::vector<int64_t> run_start_;              // per span: when it last started running
  std::vector<SpanState> state_;                // per span
  std::vector<int32_t> segment_of_;             // per span: its detached segment's slot, -1
  std::vector<int64_t> fold_paused_;            // per span: pauses folded into its running stretch
  std::vector<uint32_t> fold_count_;            // per span: and their resumes
  std::vector<std::vector<int32_t>> segments_;  // detached segments of the lane
  std::vector<int32_t> free_segments_;
  std::vector<size_t> lane_offset_;  // per lane: its first slot in call_span_
  std::vector<int32_t> call_span_;   // per (lane, event): the span a kCall opened, -1
  std::vector<int32_t> stack_;       // open, running spans of the lane, innermost last
  size_t moves_ = 0;                 // spans suspended, resumed or folded so far
  size_t move_budget_ = 0;           // stack_move_budget of all the lanes' events
  // Per (span, kind), when some lane has readings: the reading the running
  // stretch started at (kNoReading: none), the sum so far, whether it has one.
  static constexpr int64_t kNoReading = INT64_MIN;
  bool with_values_ = false;
  std::vector<int64_t> value_run_;
  std::vector<uint64_t> value_sum_;
  std::vector<uint8_t> value_has_;
};

}  // namespace

void build_tree(Profile& profile) { TreeBuilder(profile).build(); }

void drop_empty_lanes(Profile& p) {
  std::vector<int32_t> index(p.lanes.size(), -1);
  std::vector<Lane> kept;
  kept.reserve(p.lanes.size());
  for (size_t i = 0; i < p.lanes.size(); ++i) {
    Lane& lane = p.lanes[i];
    if (lane.task > 0 && lane.events.empty() && lane.recorded == 0 && lane.dropped == 0 &&
        !lane.truncated && lane.io.empty())
      continue;
    index[i] = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(lane));
  }
  if (kept.size() == p.lanes.size()) {
    p.lanes = std::move(kept);
    return;
  }
  for (Lane& lane : kept) {
    if (lane.parent_lane < 0) continue;
    const int32_t to =
        static_cast<size_t>(lane.parent_lane) < index.size() ? index[lane.parent_lane] : -1;
    lane.parent_lane = to;
    if (to < 0) lane.parent_call = 0;
  }
  p.lanes = std::move(kept);
}

namespace {
// An exception is caught where it stops: by a caller (same lane) that did not
// exit by an exception, or that called something after it. A caller that did
// exit by one right after (this was its last call) passed it on. Parents come
// before their children, and a lane's children in start order: two passes.
void mark_caught(std::vector<Span>& spans) {
  std::vector<int32_t> last_child(spans.size(), -1);
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    if (s.parent >= 0 && spans[s.parent].lane == s.lane)
      last_child[s.parent] = static_cast<int32_t>(i);
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    Span& s = spans[i];
    s.flags &= ~kSpanCaught;
    if (!(s.flags & kSpanException) || s.parent < 0) continue;
    const Span& parent = spans[s.parent];
    if (parent.lane != s.lane) continue;  // a thread's root: it ended its thread
    const bool passed_on = (parent.flags & kSpanException) && !(parent.flags & kSpanCaught) &&
                           last_child[s.parent] == static_cast<int32_t>(i);
    if (!passed_on) s.flags |= kSpanCaught;
  }
}
}  // namespace

void link_tree(Profile& p) {
  std::vector<Span>& spans = p.spans;
  mark_caught(spans);
  for (Span& s : spans) s.first_child = s.next_sibling = -1;
  p.roots.clear();
  // Walking backwards and prepending gives children in index order, which is
  // start order within a lane.
  std::vector<int32_t> adopters;  // spans with children from another lane
  for (auto i = static_cast<int32_t>(spans.size()) - 1; i >= 0; --i) {
    Span& s = spans[i];
    if (s.parent < 0) continue;
    Span& parent = spans[s.parent];
    s.next_sibling = parent.first_child;
    parent.first_child = i;
    if (s.lane != parent.lane) adopters.push_back(s.parent);
  }
  // Index order is lane order there: sort those lists by start.
  std::sort(adopters.begin(), adopters.end());
  adopters.erase(std::unique(adopters.begin(), adopters.end()), adopters.end());
  std::vector<int32_t> children;
  for (const int32_t parent : adopters) {
    children.clear();
    for (int32_t c = spans[parent].first_child; c >= 0; c = spans[c].next_sibling) {
      children.push_back(c);
    }
    std::stable_sort(children.begin(), children.end(),
                     [&](int32_t a, int32_t b) { return spans[a].start_ns < spans[b].start_ns; });
    int32_t next = -1;
    for (auto it = children.rbegin(); it != children.rend(); ++it) {
      spans[*it].next_sibling = next;
      next = *it;
    }
    spans[parent].first_child = next;
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].parent < 0) p.roots.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(p.roots.begin(), p.roots.end(),
                   [&](int32_t a, int32_t b) { return spans[a].start_ns < spans[b].start_ns; });
}

}  // namespace mlprof
