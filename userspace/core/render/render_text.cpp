#include "render/render_text.h"

#include <cstdlib>

#include <cstdio>
#include <unordered_map>

#include "views/waiting.h"

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
  // The agent's lanes say where they come from: a profile holds many.
  if (lane.pid != 0) title += ", pid " + std::to_string(lane.pid);
  if (lane.session != 0) title += ", session " + std::to_string(lane.session);
  return title;
}

std::vector<std::string> lane_track_titles(const Profile& p, bool with_origin) {
  std::vector<std::string> out(p.lanes.size());
  for (size_t i = 0; i < p.lanes.size(); ++i) {
    Lane bare;
    const Lane& lane = p.lanes[i];
    if (!with_origin) {
      bare.thread_id = lane.thread_id;
      bare.thread_name = lane.thread_name;
      bare.task = lane.task;
    }
    out[i] = lane_title(with_origin ? lane : bare);
  }
  std::vector<bool> seen(p.lanes.size(), false);
  for (const Span& s : p.spans) {
    if (s.lane >= p.lanes.size() || seen[s.lane]) continue;
    if (s.parent >= 0 && p.spans[static_cast<size_t>(s.parent)].lane == s.lane) continue;
    seen[s.lane] = true;
    if (p.lanes[s.lane].task != 0) out[s.lane] += ": " + p.display_name(s);
  }
  return out;
}

std::string format_kernel(const SpanKernel& k, const std::string& waker_name) {
  // The span's own thread (on + off = wall); the threads it started apart.
  std::string out = "[cpu ";
  out += format_duration(k.on_cpu_ns);
  out += ", off ";
  out += format_duration(k.own_off_cpu_ns);
  if (k.own_off_cpu_ns > 0) {
    out += ": blocked ";
    out += format_duration(k.own_blocked_ns);
    out += ", runq ";
    out += format_duration(k.own_runq_ns);
  }
  if (k.started_off_cpu_ns() > 0) {
    out += "; threads off ";
    out += format_duration(k.started_off_cpu_ns());
  }
  // The two largest waits in a known syscall ("futex S 1.20ms").
  size_t shown = 0;
  for (size_t i = 0; i < k.waits.size() && shown < 2; ++i) {
    if (k.waits[i].syscall < 0) continue;
    out += shown++ ? ", " : "; in ";
    out += k.waits[i].text();
    out += ' ';
    out += format_duration(k.waits[i].blocked_ns);
    if (k.waits[i].state == 'D' && !k.waits[i].waker.empty()) {  // the I/O completion's
      out += " by ";
      out += k.waits[i].waker;
    }
  }
  if (k.top_waker_ns > 0 && k.top_waker_kind != WakerKind::kTask) {
    out += "; woken by ";
    out += waker_kind_name(k.top_waker_kind) ? waker_kind_name(k.top_waker_kind) : "interrupt";
  } else if (k.top_waker_ns > 0 && k.top_waker_tid != 0) {
    out += "; woken by ";
    out += std::to_string(k.top_waker_tid);
    const std::string& name = k.top_waker_name.empty() ? waker_name : k.top_waker_name;
    if (!name.empty()) {
      out += " (";
      out += name;
      out += ')';
    }
  }
  out += ']';
  return out;
}

namespace {

// Thread names for "woken by": a lane's name, else the comm the agent saw.
std::unordered_map<uint64_t, std::string> waker_names(const Profile& p) {
  std::unordered_map<uint64_t, std::string> names;
  if (!p.kernel.present) return names;
  for (const ThreadLifetime& t : p.kernel.threads) {
    if (!t.name.empty()) names[t.tid] = t.name;
  }
  for (const Lane& lane : p.lanes) {
    if (lane.native_tid != 0 && !lane.thread_name.empty())
      names[lane.native_tid] = lane.thread_name;
  }
  return names;
}

// The in:/out: lines (docs/design/capture.md, "The text tree") under a node, indented one level
// deeper. One argument is shown bare, as the design shows; several are named.
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

// What the renderer needs besides the view: the kernel columns, when shown.
struct Columns {
  bool kernel = false;  // the profile has attributed kernel figures
  std::unordered_map<uint64_t, std::string> wakers;
};

void append_node(const Profile& p, const View& view, const Columns& cols, int32_t idx,
                 std::string& out) {
  const ViewNode& node = view.nodes[idx];
  out.append(2 * static_cast<size_t>(node.depth), ' ');
  out += node_name(p, node);
  out += ": ";
  out += format_duration(node.duration_ns);
  // Running vs waiting (views/waiting.h): what of it waited, once it is more
  // than the clocks' jitter and 1% of it. With the kernel's figures, their
  // off-CPU time says it (refined): only a suspended span's is added.
  int64_t waiting = node.waiting_ns;
  if (cols.kernel) {
    waiting = node.collapsed.empty()
                  ? waiting - p.kernel.spans[static_cast<size_t>(node.span)].own_off_cpu_ns
                  : 0;
    if (waiting > 0) waiting = node.waiting_ns;
  }
  // In double: times from a hostile writer may be near the int64 range.
  if (waiting >= kOffCpuMinNs &&
      static_cast<double>(waiting) * 100 >= static_cast<double>(node.duration_ns)) {
    out += ", waiting " + format_duration(waiting);
  }
  if (!node.collapsed.empty()) {
    if (node.merged > 1) out += " [x" + std::to_string(node.merged) + "]";
  } else {
    const Span& s = p.spans[node.span];
    if ((s.flags & kSpanException) && !(s.flags & kSpanCaught)) out += " [exception]";
    if (s.flags & kSpanOpenAtEnd) out += " [open]";
    if (s.flags & kSpanSuspendedAtEnd) out += " [suspended]";
    if ((s.flags & kSpanGenerator) && node.duration_ns != s.duration_ns()) {
      // The headline is its running time; wall time overlaps its consumer's other calls.
      out += " (generator, " + std::to_string(s.resumes) +
             (s.resumes == 1 ? " resume, " : " resumes, ") + format_duration(s.duration_ns()) +
             " wall)";
    }
    // A collapsed node stands for several spans: no figures of its own.
    if (cols.kernel) {
      const SpanKernel& k = p.kernel.spans[static_cast<size_t>(node.span)];
      const auto name = cols.wakers.find(k.top_waker_tid);
      out += ' ';
      out += format_kernel(k, name == cols.wakers.end() ? std::string() : name->second);
    }
    // Values measured in process (cpu_time, alloc_bytes); the kernel's cpu wins.
    const uint64_t* cpu = cols.kernel ? nullptr : p.value_of(node.span, ValueKind::kCpuNs);
    const uint64_t* alloc = p.value_of(node.span, ValueKind::kAllocBytes);
    if (cpu || alloc) {
      out += " [";
      if (cpu) out += "cpu " + format_duration(static_cast<int64_t>(*cpu));
      if (cpu && alloc) out += ", ";
      if (alloc) out += "alloc " + format_bytes(static_cast<int64_t>(*alloc));
      out += ']';
    }
  }
  out += '\n';
}

// blank_pending: the last node written had I/O lines; a blank line separates
// it from the next node (docs/design/capture.md, "The text tree"), never ends the text.
void append_subtree(const Profile& p, const View& view, const Columns& cols, int32_t root,
                    bool show_io, bool& blank_pending, std::string& out,
                    std::vector<int32_t>& stack) {
  stack.assign(1, root);
  while (!stack.empty()) {
    const int32_t idx = stack.back();
    stack.pop_back();
    if (blank_pending) out += '\n';
    append_node(p, view, cols, idx, out);
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
  Columns cols;
  cols.kernel = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  if (cols.kernel) cols.wakers = waker_names(p);

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
      append_subtree(p, view, cols, r, opts.show_io, blank_pending, out, stack);
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
  if (const auto it = p.meta.find("profiler_overhead_ns"); it != p.meta.end()) {
    // Said when it moved the times by 1% and 0.1 ms or more: naming the
    // few functions a short session meets first (about 0.6 us each) is not news.
    const int64_t ns = std::strtoll(it->second.c_str(), nullptr, 10);
    if (ns >= 100000 && static_cast<double>(ns) * 100 >=
                            static_cast<double>(p.end_ns) - static_cast<double>(p.start_ns)) {
      out += "(profiler's own work: ";
      out += format_duration(ns);
      out += ", left out of every time above)\n";
    }
  }
  if (p.kernel.present && p.kernel.lost_events > 0) {
    out += '(';
    out += std::to_string(p.kernel.lost_events);
    out += " kernel events lost: the off-CPU figures are low)\n";
  }
  if (p.spans.empty()) out += "(no spans captured)\n";
  return out;
}

}  // namespace mlprof
