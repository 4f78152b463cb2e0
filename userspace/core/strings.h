#pragma once
// String interning: each distinct string is stored once and named by a dense
// uint32 id. Id 0 is always the empty string (pprof's convention too).

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

namespace mlprof {

class StringTable {
 public:
  StringTable();
  StringTable(const StringTable&) = delete;  // index_ holds views into strings_
  StringTable& operator=(const StringTable&) = delete;
  StringTable(StringTable&&) = default;
  StringTable& operator=(StringTable&&) = default;

  // Returns the id of `s`, adding it if new.
  uint32_t intern(std::string_view s);
  // The string for `id`; an unknown id gives the empty string.
  const std::string& get(uint32_t id) const;
  size_t size() const { return strings_.size(); }

 private:
  std::deque<std::string> strings_;  // deque: stable addresses for the views below
  std::unordered_map<std::string_view, uint32_t> index_;
};

}  // namespace mlprof
