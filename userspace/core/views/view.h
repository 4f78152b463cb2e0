#pragma once
// A view of a profile: which spans a renderer shows and how. Views never
// modify the profile; rendering at depth k hides spans deeper than k.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tree.h"

namespace mlprof {

struct ViewOptions {
  int depth = -1;                         // -1: everything captured
  bool show_c_calls = false;              // false: C-function spans are folded into their caller
  bool collapse_frameworks = false;       // merge runs of library spans into "[pkg]" nodes
  std::vector<std::string> user_modules;  // module prefixes always treated as user code
  bool show_io = false;                   // text: in:/out: lines under spans with I/O summaries
};

// One node of a view. Either a span of the profile, or a collapsed group of
// consecutive library sibling spans (span = first of them, group > 1 or name set).
struct ViewNode {
  int32_t span = -1;      // index into Profile::spans
  std::string collapsed;  // non-empty for a "[pkg]" node
  // duration_ns: the time the node stands for, what renderers show. A span's
  // end - start; a generator's or coroutine's running time under this parent
  // (its segments, less any that ran inside a sibling): suspended in its
  // consumer, its wall time overlaps its siblings'. Collapsed: the sum.
  int64_t start_ns = 0, end_ns = 0, duration_ns = 0;
  // Of duration_ns, the time it waited (views/waiting.h): a span's
  // waiting_ns; for a generator's running time, its off-CPU part.
  // Collapsed: the sum.
  int64_t waiting_ns = 0;
  uint32_t depth = 0;             // depth in the view
  int32_t parent = -1;            // index into View::nodes
  std::vector<int32_t> children;  // indices into View::nodes
  uint32_t merged = 1;            // spans merged into this node
};

struct View {
  std::vector<ViewNode> nodes;  // pre-order
  std::vector<int32_t> roots;
  int requested_depth = -1;
  int effective_depth = -1;    // min(requested, captured)
  bool depth_clamped = false;  // requested deeper than captured
};

// True if the span's code is user code under the options' user_modules.
// Labelled spans and profile_block regions always count as user code.
bool is_user_code(const Profile& p, const Span& s, const ViewOptions& opts);

// Builds the view. Settled details:
// - Depth filtering uses the depth in the view (after C calls are folded), so
//   the lines of a view at depth k are the lines of the full view at indent
//   <= k. Nothing is filtered when opts.depth is -1 (adopted thread lanes
//   can hold spans deeper than the ceiling; they stay visible). A view at
//   depth k is the same for every capture depth >= k (-1 included), k equal
//   to the captured depth too: a thread's spans deeper than k are cut there.
// - Under a kSpanGroup node (views/group.h) nodes show down to the requested
//   depth, or the captured one when none is asked for, even where the
//   filter is off: grouping moved them one level below where they ran, so
//   the captured depth keeps its meaning; a deeper request shows them all.
// - Times add up: on one lane, a node's duration_ns is at least the sum of
//   its children's (threads adopted from other lanes run beside it).
// - collapse_frameworks merges only siblings of the same lane, and a single
//   library span also becomes a "[pkg]" node (merged = 1).
View make_view(const Profile& p, const ViewOptions& opts);

// The package a collapsed node is named after: the module's leading dotted
// components, at most two, stopping before the first private one
// ("sklearn.preprocessing._data" -> "sklearn.preprocessing",
// "torch.nn.modules.linear" -> "torch.nn", "numpy" -> "numpy"). A module that
// starts with a private component keeps that one ("_thread").
std::string framework_package(std::string_view module);

// The name a renderer shows for a node: "[pkg]" for a collapsed node, else
// the span's display name.
const std::string& node_name(const Profile& p, const ViewNode& node);

// "predict/preprocess/encode": display names from the root, joined by '/'.
std::string call_path(const Profile& p, int32_t span);

}  // namespace mlprof
