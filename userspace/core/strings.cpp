#include "core/strings.h"

namespace mlprof {

StringTable::StringTable() { intern(""); }

uint32_t StringTable::intern(std::string_view s) {
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(strings_.size());
  // The key views the deque's copy, never the caller's buffer.
  const std::string& stored = strings_.emplace_back(s);
  index_.emplace(std::string_view(stored), id);
  return id;
}

const std::string& StringTable::get(uint32_t id) const {
  static const std::string kEmpty;
  return id < strings_.size() ? strings_[id] : kEmpty;
}

}  // namespace mlprof
