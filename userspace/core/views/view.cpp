#include "views/view.h"

#include <algorithm>
#include <climits>
#include <utility>

namespace mlprof {

bool is_user_code(const Profile& p, const Span& s, const ViewOptions& opts) {
  if (s.flags & (kSpanLabelled | kSpanBlock)) return true;
  if (s.function >= p.functions.size()) return false;
  const FunctionInfo& fn = p.functions.get(s.function);
  if (fn.user_code) return true;
  if (opts.user_modules.empty()) return false;
  const std::string& module = p.functions.strings().get(fn.module);
  return std::any_of(opts.user_modules.begin(), opts.user_modules.end(),
                     [&](const std::string& prefix) { return module_in(module, prefix); });
}

std::string framework_package(std::string_view module) {
  std::string pkg;
  int parts = 0;
  size_t pos = 0;
  while (parts < 2 && pos <= module.size()) {
    size_t dot = module.find('.', pos);
    if (dot == std::string_view::npos) dot = module.size();
    const std::string_view part = module.substr(pos, dot - pos);
    // Private components are implementation detail ("_data"), except when the
    // module starts with one and nothing else would name it.
    if (part.empty() || (part.front() == '_' && parts > 0)) break;
    if (parts > 0) pkg += '.';
    pkg += part;
    ++parts;
    if (part.front() == '_') break;
    pos = dot + 1;
  }
  return pkg;
}

const std::string& node_name(const Profile& p, const ViewNode& node) {
  if (!node.collapsed.empty() || node.span < 0) return node.collapsed;
  return p.display_name(p.spans[node.span]);
}

namespace {

class ViewBuilder {
 public:
  ViewBuilder(const Profile& p, const ViewOptions& opts, int filter_depth, int group_depth)
      : p_(p), opts_(opts), filter_depth_(filter_depth), group_depth_(group_depth) {}

  void build(View& view) {
    visible_.clear();
    for (const int32_t root : p_.roots) expand(root);
    push_siblings(-1, 0, false, -1);
    while (!pending_.empty()) {
      Pending item = std::move(pending_.back());
      pending_.pop_back();
      const auto idx = static_cast<int32_t>(view.nodes.size());
      ViewNode& node = view.nodes.emplace_back();
      node.span = item.span;
      node.collapsed = std::move(item.collapsed);
      node.start_ns = item.start_ns;
      node.end_ns = item.end_ns;
      node.duration_ns = item.duration_ns;
      node.waiting_ns = item.waiting_ns;
      node.depth = item.depth;
      node.parent = item.parent;
      node.merged = item.merged;
      if (item.parent < 0) {
        view.roots.push_back(idx);
      } else {
        view.nodes[item.parent].children.push_back(idx);
      }
      // A collapsed node hides its descendants; the filter hides deeper ones.
      if (!view.nodes[idx].collapsed.empty()) continue;
      if (filter_depth_ >= 0 && static_cast<int>(item.depth) >= filter_depth_) continue;
      // A group's calls were within the ceiling before grouping moved them a
      // level down: they show when the view asks for that level.
      const bool in_group = item.in_group || (p_.spans[item.span].flags & kSpanGroup);
      if (in_group && group_depth_ >= 0 && static_cast<int>(item.depth) >= group_depth_) continue;
      visible_.clear();
      for (int32_t c = p_.spans[item.span].first_child; c >= 0; c = p_.spans[c].next_sibling) {
        expand(c);
      }
      push_siblings(idx, item.depth + 1, in_group, item.span);
    }
  }

 private:
  struct Pending {
    int32_t span;
    std::string collapsed;
    int64_t start_ns, end_ns, duration_ns, waiting_ns;
    uint32_t merged;
    int32_t parent;
    uint32_t depth;
    bool in_group;  // under a kSpanGroup node
  };

  bool folded(int32_t span) const {
    return !opts_.show_c_calls && (p_.spans[span].flags & kSpanCFunction);
  }

  // Appends `span` to visible_, or, when it is a folded C call, its visible
  // descendants in order (explicit stack: C calls can nest deeply).
  void expand(int32_t span) {
    if (!folded(span)) {
      visible_.push_back(span);
      return;
    }
    cursors_.assign(1, p_.spans[span].first_child);
    while (!cursors_.empty()) {
      const int32_t c = cursors_.back();
      if (c < 0) {
        cursors_.pop_back();
        continue;
      }
      cursors_.back() = p_.spans[c].next_sibling;
      if (folded(c)) {
        cursors_.push_back(p_.spans[c].first_child);
      } else {
        visible_.push_back(c);
      }
    }
  }

  std::string package_label(const Span& s) const {
    const std::string& module =
        s.function < p_.functions.size() ? p_.functions.module(s.function) : std::string();
    return "[" + (module.empty() ? p_.display_name(s) : framework_package(module)) + "]";
  }

  // The time each of visible_ stands for (view.h, "Times add up"): a
  // generator's running segments, less those that ran inside a sibling; the
  // wall time of a span on another lane than its parent's (an awaited task:
  // its time in flight) or one its parent awaited (suspended whenever it
  // was: an await chain). Then the waiting part of it.
  void shown_times(int32_t parent) {
    shown_.resize(visible_.size());
    waiting_.resize(visible_.size());
    busy_.clear();
    bool generators = false;
    for (size_t i = 0; i < visible_.size(); ++i) {
      const Span& s = p_.spans[visible_[i]];
      shown_[i] = s.duration_ns();
      waiting_[i] = s.waiting_ns;
      if ((s.flags & kSpanGenerator) && parent >= 0 && in_flight(visible_[i], parent)) {
      } else if (s.flags & kSpanGenerator) {
        generators = true;
      } else if (s.lane == p_.spans[visible_[0]].lane) {
        busy_.emplace_back(s.start_ns, s.end_ns);
      }
    }
    if (!generators) return;
    std::sort(busy_.begin(), busy_.end());
    for (size_t i = 0; i < visible_.size(); ++i) {
      const Span& s = p_.spans[visible_[i]];
      if (!(s.flags & kSpanGenerator)) continue;
      if (parent >= 0 && in_flight(visible_[i], parent)) continue;
      // Running time only: what it waited of it is its off-CPU time.
      const int64_t off = std::max<int64_t>(0, s.waiting_ns - (s.duration_ns() - s.active_ns));
      auto [first, last] = p_.segments_of(visible_[i]);
      if (first == last) {
        shown_[i] = s.active_ns;
        waiting_[i] = std::min(off, shown_[i]);
        continue;
      }
      int64_t total = 0;
      for (const Segment* seg = first; seg != last; ++seg) {
        // A coalesced segment's pauses hold no recorded span, so a sibling
        // holds all of it or none: taking them out first is exact.
        int64_t len = seg->running_ns();
        // Siblings on one lane do not overlap each other: those that can
        // overlap this segment start before its end, from the last one that
        // starts at or before its start.
        auto it =
            std::upper_bound(busy_.begin(), busy_.end(), std::make_pair(seg->start_ns, INT64_MAX));
        if (it != busy_.begin()) --it;
        for (; it != busy_.end() && it->first < seg->end_ns; ++it) {
          len -= std::max<int64_t>(
              0, std::min(it->second, seg->end_ns) - std::max(it->first, seg->start_ns));
        }
        total += std::max<int64_t>(0, len);
      }
      shown_[i] = total;
      waiting_[i] = std::min(off, total);
    }
  }

  // Turns visible_ (siblings in order) into pending nodes, merging runs of
  // library spans, and pushes them so that the first one is popped first.
  // Whether suspended span `s` stands for its wall time under `parent`: on
  // another lane, or awaited by it (the parent ran in none of its pauses).
  bool in_flight(int32_t s, int32_t parent) const {
    const Span& c = p_.spans[s];
    const Span& up = p_.spans[parent];
    if (c.lane != up.lane) return true;
    if (!(up.flags & kSpanGenerator)) return false;
    auto [first, last] = p_.segments_of(s);
    auto [pf, pl] = p_.segments_of(parent);
    if (first == last) return false;
    const Segment* ps = pf;  // both in time order: one pass
    for (const Segment* seg = first; seg != last; ++seg) {
      if (seg->resumes > 0) return false;  // folded pauses: its consumer ran in them
    }
    for (const Segment* seg = first; seg + 1 != last; ++seg) {
      const int64_t a = seg->end_ns, b = (seg + 1)->start_ns;  // a pause
      while (ps != pl && ps->end_ns <= a) ++ps;
      if (ps != pl && ps->start_ns < b) return false;
    }
    return true;
  }

  void push_siblings(int32_t parent_node, uint32_t depth, bool in_group, int32_t parent) {
    const size_t first = pending_.size();
    shown_times(parent);
    for (size_t k = 0; k < visible_.size(); ++k) {
      const int32_t idx = visible_[k];
      const int64_t shown = shown_[k];
      const int64_t waiting = waiting_[k];
      const Span& s = p_.spans[idx];
      if (opts_.collapse_frameworks && !is_user_code(p_, s, opts_)) {
        std::string label = package_label(s);
        if (pending_.size() > first) {
          Pending& prev = pending_.back();
          if (!prev.collapsed.empty() && prev.collapsed == label &&
              p_.spans[prev.span].lane == s.lane) {
            prev.end_ns = std::max(prev.end_ns, s.end_ns);
            prev.duration_ns += shown;
            prev.waiting_ns += waiting;
            ++prev.merged;
            continue;
          }
        }
        pending_.push_back(Pending{idx, std::move(label), s.start_ns, s.end_ns, shown, waiting, 1,
                                   parent_node, depth, in_group});
        continue;
      }
      pending_.push_back(Pending{idx, std::string(), s.start_ns, s.end_ns, shown, waiting, 1,
                                 parent_node, depth, in_group});
    }
    std::reverse(pending_.begin() + static_cast<std::ptrdiff_t>(first), pending_.end());
  }

  const Profile& p_;
  const ViewOptions& opts_;
  const int filter_depth_;        // deepest view depth shown, -1: all
  const int group_depth_;         // deepest depth whose group nodes are opened, -1: all
  std::vector<Pending> pending_;  // DFS stack; back() is the next node in pre-order
  std::vector<int32_t> visible_;  // scratch: the siblings being grouped
  std::vector<int32_t> cursors_;  // scratch: expand()'s stack
  std::vector<int64_t> shown_;    // scratch: shown_times() of visible_
  std::vector<int64_t> waiting_;  // scratch: the waiting part of shown_
  std::vector<std::pair<int64_t, int64_t>> busy_;  // scratch: siblings' intervals
};

}  // namespace

View make_view(const Profile& p, const ViewOptions& opts) {
  View view;
  const int requested = opts.depth < 0 ? -1 : opts.depth;
  const int captured = p.captured_depth < 0 ? -1 : p.captured_depth;
  view.requested_depth = requested;
  if (requested < 0) {
    view.effective_depth = captured;
  } else if (captured < 0) {
    view.effective_depth = requested;
  } else {
    view.effective_depth = std::min(requested, captured);
    view.depth_clamped = requested > captured;
  }
  // A view at depth k shows nothing deeper than k, even at k >= the captured
  // depth, where only adopted thread lanes (whose frames get the whole
  // ceiling) go deeper: so it is the same for every capture depth >= k.
  const bool filter = requested >= 0;
  view.nodes.reserve(p.spans.size());
  ViewBuilder(p, opts, filter ? requested : -1, requested >= 0 ? requested : captured).build(view);
  return view;
}

std::string call_path(const Profile& p, int32_t span) {
  std::vector<int32_t> chain;
  for (int32_t s = span; s >= 0 && static_cast<size_t>(s) < p.spans.size(); s = p.spans[s].parent) {
    chain.push_back(s);
  }
  std::string path;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += p.display_name(p.spans[*it]);
  }
  return path;
}

}  // namespace mlprof
