// Folded stacks, Brendan Gregg's stackcollapse format read by flamegraph.pl,
// inferno and speedscope: one line per distinct stack, "a;b;c 12345".
// - The stack is the display names from the root span down to the span,
//   along the call tree: a thread or task started under a span of another
//   lane continues that span's stack.
// - The value is the self wall time in nanoseconds (export_util::self_times)
//   summed over the spans with that stack, as an integer. Stacks whose value
//   is 0 are left out: they add nothing to a flame graph.
// - With more than one lane holding spans, every stack starts with the title
//   of the lane the span ran on ("thread MainThread", "thread MainThread,
//   task 2", with ", pid N" for the agent's lanes), so the graph has one
//   root per thread and asyncio task; the sessions of one thread share it.
// - ';' separates frames and '\n' ends a line, so a ';' inside a name becomes
//   ':' and control characters (newline, tab, ...) become spaces. Spaces stay:
//   every reader takes the count after the last space. An empty name is "?".
// - Lines follow the call tree depth-first, children in order of first call:
//   the same profile gives the same bytes.

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/export.h"
#include "formats/export_util.h"
#include "render/render_text.h"
#include "util/saturating.h"

namespace mlprof {

namespace {

std::string escape_frame(std::string_view name) {
  if (name.empty()) return "?";
  std::string out(name);
  for (char& c : out) {
    if (c == ';') {
      c = ':';
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = ' ';
    }
  }
  return out;
}

// The distinct stacks as a prefix tree; node 0 is the empty stack.
class StackTree {
 public:
  StackTree() { nodes_.push_back({}); }

  // The node for `name` under `parent`; `name` is a frame text id (frame()).
  uint32_t child(uint32_t parent, uint32_t name) {
    const uint64_t key = (static_cast<uint64_t>(parent) << 32) | name;
    const auto [it, inserted] = index_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
    if (inserted) {
      nodes_.push_back({name, 0, -1, -1, -1});
      Node& p = nodes_[parent];
      if (p.last_child < 0) {
        p.first_child = static_cast<int32_t>(it->second);
      } else {
        nodes_[p.last_child].next_sibling = static_cast<int32_t>(it->second);
      }
      p.last_child = static_cast<int32_t>(it->second);
    }
    return it->second;
  }
  // Saturates: spans of one stack in overlapping sessions of a thread
  // (a hostile document's, each up to 2^62 ns) may add up past int64.
  void add(uint32_t node, int64_t value) {
    nodes_[node].value = saturating_add(nodes_[node].value, value);
  }

  // Appends the lines, depth-first.
  void write(std::string& out, const std::vector<std::string>& frames) const {
    std::string path;
    std::vector<std::pair<int32_t, size_t>> todo;  // node, length of path before it
    for (int32_t c = nodes_[0].first_child; c >= 0; c = nodes_[c].next_sibling) {
      todo.emplace_back(c, 0);
    }
    std::reverse(todo.begin(), todo.end());
    char digits[24];
    while (!todo.empty()) {
      const auto [idx, before] = todo.back();
      todo.pop_back();
      const Node& n = nodes_[idx];
      path.resize(before);
      if (before > 0) path += ';';
      path += frames[n.name];
      if (n.value > 0) {
        out += path;
        out += ' ';
        out.append(digits, std::to_chars(digits, digits + sizeof(digits), n.value).ptr);
        out += '\n';
      }
      const size_t at = todo.size();
      for (int32_t c = n.first_child; c >= 0; c = nodes_[c].next_sibling) {
        todo.emplace_back(c, path.size());
      }
      std::reverse(todo.begin() + static_cast<std::ptrdiff_t>(at), todo.end());
    }
  }

 private:
  struct Node {
    uint32_t name = 0;
    int64_t value = 0;
    int32_t first_child = -1, last_child = -1;
    int32_t next_sibling = -1;
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> index_;
};

}  // namespace

std::string to_folded(const Profile& p) {
  const StringTable& strings = p.functions.strings();
  // Frame texts: the escaped strings of the profile's table (by string id),
  // then the lane titles.
  std::vector<std::string> frames(strings.size());
  std::vector<bool> escaped(strings.size(), false);
  auto frame_of = [&](uint32_t string_id) {
    if (string_id >= strings.size()) string_id = 0;
    if (!escaped[string_id]) {
      frames[string_id] = escape_frame(strings.get(string_id));
      escaped[string_id] = true;
    }
    return string_id;
  };

  StackTree tree;
  const std::vector<bool> has_spans = export_util::lanes_with_spans(p);
  size_t lanes_shown = 0;
  for (const bool h : has_spans) lanes_shown += h;
  std::vector<uint32_t> lane_root(p.lanes.size(), 0);
  if (lanes_shown > 1) {
    // Lanes of one thread in several sessions (the agent's profiles) share
    // its root: the title leaves the session out.
    std::map<std::string, uint32_t> root_of;
    for (size_t li = 0; li < p.lanes.size(); ++li) {
      if (!has_spans[li]) continue;
      const Lane& lane = p.lanes[li];
      Lane thread;
      thread.thread_id = lane.thread_id;
      thread.thread_name = lane.thread_name;
      thread.task = lane.task;
      thread.pid = lane.pid;
      const auto [it, added] = root_of.try_emplace(lane_title(thread), 0);
      if (added) {
        frames.push_back(escape_frame(it->first));
        it->second = tree.child(0, static_cast<uint32_t>(frames.size() - 1));
      }
      lane_root[li] = it->second;
    }
  }

  const std::vector<int64_t> self = export_util::self_times(p);
  std::vector<int64_t> node_of(p.spans.size(), -1);
  std::vector<int32_t> chain;
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    const uint32_t root = s.lane < lane_root.size() ? lane_root[s.lane] : 0;
    const uint32_t name = frame_of(export_util::display_name_id(p, s));
    uint32_t node;
    if (s.parent >= 0 && node_of[s.parent] >= 0 && p.spans[s.parent].lane == s.lane) {
      node = tree.child(static_cast<uint32_t>(node_of[s.parent]), name);
    } else {
      // A root, or a span hung under another lane's span: its stack through
      // the other lane starts at this lane's root.
      chain.clear();
      for (int32_t a = s.parent; a >= 0 && chain.size() < p.spans.size(); a = p.spans[a].parent) {
        chain.push_back(a);
      }
      node = root;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        node = tree.child(node, frame_of(export_util::display_name_id(p, p.spans[*it])));
      }
      node = tree.child(node, name);
    }
    node_of[i] = node;
    tree.add(node, self[i]);
  }

  std::string out;
  tree.write(out, frames);
  return out;
}

}  // namespace mlprof
