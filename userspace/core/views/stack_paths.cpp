#include "views/stack_paths.h"

#include <algorithm>

namespace mlprof {

void StackPathTotals::add(const StackSamples& ss, int depth) {
  ++sources_;
  // This source's value types as indices into the union.
  std::vector<size_t> slot;
  for (const auto& t : ss.value_types) {
    auto it = std::find(types_.begin(), types_.end(), t);
    if (it == types_.end()) {
      types_.push_back(t);
      for (Node& n : nodes_) {
        n.self.push_back(0);
        n.total.push_back(0);
      }
      it = types_.end() - 1;
    }
    slot.push_back(static_cast<size_t>(it - types_.begin()));
  }
  const auto& strings = ss.functions.strings();
  const int counted = ss.count_type();
  for (const StackSamples::Sample& s : ss.samples) {
    samples_ += StackSamples::weight(s, counted);
    uint32_t parent = 0;
    const size_t frames =
        depth < 0 ? s.frames.size() : std::min(s.frames.size(), static_cast<size_t>(depth) + 1);
    for (size_t f = 0; f < frames; ++f) {
      const std::string& name = strings.get(ss.functions.get(s.frames[f].function).name);
      std::string key = std::to_string(parent);
      key += '\0';
      key += name;
      auto it = index_.find(key);
      if (it == index_.end()) {
        nodes_.push_back({parent, name, std::vector<int64_t>(types_.size(), 0),
                          std::vector<int64_t>(types_.size(), 0)});
        it = index_.emplace(std::move(key), static_cast<uint32_t>(nodes_.size() - 1)).first;
      }
      Node& node = nodes_[it->second];
      for (size_t v = 0; v < s.values.size() && v < slot.size(); ++v) {
        node.total[slot[v]] += s.values[v];
        if (f + 1 == frames) node.self[slot[v]] += s.values[v];
      }
      parent = it->second + 1;
    }
  }
}

std::vector<StackPathTotals::Row> StackPathTotals::rows() const {
  std::vector<Row> out(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.parent != 0) out[i].path = out[n.parent - 1].path;  // parents come first
    out[i].path.push_back(n.name);
    out[i].self = n.self;
    out[i].total = n.total;
  }
  return out;
}

}  // namespace mlprof
