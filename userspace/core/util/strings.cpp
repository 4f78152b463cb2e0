#include "util/strings.h"

#include <utility>

namespace mlprof {

StringTable::StringTable() = default;

StringTable::StringTable(std::shared_ptr<const StringTable> base)
    : base_(std::move(base)), base_size_(base_ ? static_cast<uint32_t>(base_->size()) : 0) {}

std::optional<uint32_t> StringTable::find(std::string_view s) const {
  if (base_) {
    if (auto id = base_->find(s)) return id;
  }
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  if (s.empty() && !base_) return 0;  // not stored yet
  return std::nullopt;
}

uint32_t StringTable::intern(std::string_view s) {
  if (auto id = find(s)) return *id;
  const auto id = static_cast<uint32_t>(size());
  // The key views the deque's copy, never the caller's buffer.
  if (!strings_) {
    strings_ = std::make_unique<std::deque<std::string>>();
    if (!base_) index_.emplace(std::string_view(strings_->emplace_back()), 0);  // id 0
  }
  const std::string& stored = strings_->emplace_back(s);
  index_.emplace(std::string_view(stored), id);
  return id;
}

const std::string& StringTable::get(uint32_t id) const {
  static const std::string kEmpty;
  if (id < base_size_) return base_->get(id);
  id -= base_size_;
  return id < own_size() ? (*strings_)[id] : kEmpty;
}

}  // namespace mlprof
