#pragma once
// String interning: each distinct string is stored once and named by a dense
// uint32 id. Id 0 is always the empty string (pprof's convention too).
//
// A table may start on a shared, immutable base (the agent's names of one
// process, shared by every session Profile of it): the base's strings keep
// their ids and are never copied; strings interned later are the table's own.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace mlprof {

class StringTable {
 public:
  StringTable();
  // Starts as `base`'s strings, same ids (base must not change afterwards).
  explicit StringTable(std::shared_ptr<const StringTable> base);
  StringTable(const StringTable&) = delete;  // index_ holds views into strings_
  StringTable& operator=(const StringTable&) = delete;
  StringTable(StringTable&&) = default;
  StringTable& operator=(StringTable&&) = default;

  // Returns the id of `s`, adding it if new.
  uint32_t intern(std::string_view s);
  // The string for `id`; an unknown id gives the empty string.
  const std::string& get(uint32_t id) const;
  // The id of `s` if it is here (in the base or the table's own).
  std::optional<uint32_t> find(std::string_view s) const;
  size_t size() const { return base_size_ + std::max<size_t>(own_size(), base_ ? 0 : 1); }
  // The base this table started on; nullptr if none.
  const StringTable* base() const { return base_.get(); }
  const std::shared_ptr<const StringTable>& shared_base() const { return base_; }

 private:
  size_t own_size() const { return strings_ ? strings_->size() : 0; }

  std::shared_ptr<const StringTable> base_;
  uint32_t base_size_ = 0;  // ids below it are the base's
  // deque: stable addresses for the views below. Made at the first string of
  // the table's own: libstdc++'s deque allocates when constructed and when
  // moved from, and a table on a shared base (an agent session's) often
  // interns nothing. Without a base, id 0 ("") is stored with the first
  // other string: until then size() counts it and get(0) gives it.
  std::unique_ptr<std::deque<std::string>> strings_;
  std::unordered_map<std::string_view, uint32_t> index_;
};

}  // namespace mlprof
