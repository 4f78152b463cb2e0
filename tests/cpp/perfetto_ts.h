#pragma once
// How Perfetto reads a Chrome trace's microsecond times (json_utils.cc's
// CoerceToTs): what the Chrome export's times must survive.

#include <cstdint>
#include <cstdlib>
#include <string>

namespace mlprof::test {

// A string: drop the '.', keep three fractional digits (pad or truncate),
// read an integer.
inline int64_t textual_ns(const std::string& us) {
  std::string digits = us;
  size_t whole = digits.size();
  if (const size_t dot = us.find('.'); dot != std::string::npos) {
    digits.erase(dot, 1);
    whole = dot;
  }
  digits.resize(whole + 3, '0');
  return std::strtoll(digits.c_str(), nullptr, 10);
}

// A JSON real: the double times 1000, truncated.
inline int64_t double_ns(const std::string& us) {
  return static_cast<int64_t>(std::strtod(us.c_str(), nullptr) * 1000.0);
}

}  // namespace mlprof::test
