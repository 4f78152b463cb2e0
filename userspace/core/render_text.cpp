#include "core/render_text.h"

#include <cstdio>

namespace mlprof {

std::string format_duration(int64_t ns) {
  char buf[64];
  // Below 0.01 ms "0.00ms" would say nothing; microseconds keep two digits.
  if (ns >= 10'000 || ns <= -10'000) {
    std::snprintf(buf, sizeof(buf), "%.2fms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fus", static_cast<double>(ns) / 1e3);
  }
  return buf;
}

std::string lane_title(const Lane& lane) {
  std::string title = "thread ";
  title += lane.thread_name.empty() ? std::to_string(lane.thread_id) : lane.thread_name;
  if (lane.task != 0) title += ", task " + std::to_string(lane.task);
  return title;
}

namespace {

// The in:/out: lines of spec 000 section 4 under a node, indented one level
// deeper. One argument is shown bare, as in the spec; several are named.
// Returns true if it wrote any.
bool append_io(const Profile& p, const ViewNode& node, std::string& out) {
  if (!node.collapsed.empty()) return false;
  auto [first, last] = p.io_of(node.span);
  if (first == last) return false;
  size_t arguments = 0;
  for (const SpanIO* io = first; io != last; ++io) arguments += io->role == IORole::kArgument;
  const size_t indent = 2 * static_cast<size_t>(node.depth) + 2;
  for (const SpanIO* io = first; io != last; ++io) {
    out.append(indent, ' ');
    if (io->role == IORole::kArgument) {
      out += "in:  ";
      if (arguments > 1) {
        out += io->name;
        out += '=';
      }
    } else {
      out += "out: ";
    }
    out += format_io(io->summary);
    out += '\n';
  }
  return true;
}

void append_node(const Profile& p, const View& view, int32_t idx, std::string& out) {
  const ViewNode& node = view.nodes[idx];
  out.append(2 * static_cast<size_t>(node.depth), ' ');
  out += node_name(p, node);
  out += ": ";
  out += format_duration(node.duration_ns);
  if (!node.collapsed.empty()) {
    if (node.merged > 1) out += " [x" + std::to_string(node.merged) + "]";
  } else {
    const Span& s = p.spans[node.span];
    if (s.flags & kSpanException) out += " [exception]";
    if (s.flags & kSpanOpenAtEnd) out += " [open]";
    if (s.flags & kSpanSuspendedAtEnd) out += " [suspended]";
    if (s.flags & kSpanGenerator) {
      out += " (active " + format_duration(s.active_ns) + ", " + std::to_string(s.resumes) +
             (s.resumes == 1 ? " resume)" : " resumes)");
    }
  }
  out += '\n';
}

// blank_pending: the last node written had I/O lines; a blank line separates
// it from the next node (spec 000 section 4), never ends the text.
void append_subtree(const Profile& p, const View& view, int32_t root, bool show_io,
                    bool& blank_pending, std::string& out, std::vector<int32_t>& stack) {
  stack.assign(1, root);
  while (!stack.empty()) {
    const int32_t idx = stack.back();
    stack.pop_back();
    if (blank_pending) out += '\n';
    append_node(p, view, idx, out);
    blank_pending = show_io && append_io(p, view.nodes[idx], out);
    const auto& children = view.nodes[idx].children;
    stack.insert(stack.end(), children.rbegin(), children.rend());
  }
}

}  // namespace

std::string render_text(const Profile& p, const ViewOptions& opts) {
  const View view = make_view(p, opts);
  std::string out;
  std::vector<int32_t> stack;
  bool blank_pending = false;

  // Roots grouped by lane, lanes in order; roots keep start order within a lane.
  std::vector<std::vector<int32_t>> lane_roots(p.lanes.size());
  size_t lanes_with_roots = 0;
  for (const int32_t r : view.roots) {
    auto& roots = lane_roots[p.spans[view.nodes[r].span].lane];
    if (roots.empty()) ++lanes_with_roots;
    roots.push_back(r);
  }
  for (size_t li = 0; li < lane_roots.size(); ++li) {
    if (lane_roots[li].empty()) continue;
    if (blank_pending) out += '\n';
    blank_pending = false;
    if (lanes_with_roots > 1) out += lane_title(p.lanes[li]) + "\n";
    for (const int32_t r : lane_roots[li]) {
      append_subtree(p, view, r, opts.show_io, blank_pending, out, stack);
    }
  }

  for (const Lane& lane : p.lanes) {
    if (lane.dropped == 0) continue;
    // Appended piece by piece: `"(" + std::string` trips GCC 12's -Wrestrict.
    out += '(';
    out += std::to_string(lane.dropped);
    out += " calls dropped in ";
    out += lane_title(lane);
    out += ": the buffer of max_events was full)\n";
  }
  if (view.depth_clamped) {
    const std::string captured = std::to_string(p.captured_depth);
    out += "(captured at depth ";
    out += captured;
    out += "; depth ";
    out += std::to_string(view.requested_depth);
    out += " was requested, showing depth ";
    out += captured;
    out += ")\n";
  }
  if (p.spans.empty()) out += "(no spans captured)\n";
  return out;
}

}  // namespace mlprof
