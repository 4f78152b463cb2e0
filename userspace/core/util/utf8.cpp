#include "util/utf8.h"

#include <cstdio>

namespace mlprof {

size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (table 3-7)
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // no overlong forms
      if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;  // no overlong forms
      if (b == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s) {
  size_t bad = first_invalid_utf8(s);
  if (bad == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  while (bad != std::string_view::npos) {
    out.append(s.substr(0, bad));
    out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
    s.remove_prefix(bad + 1);
    bad = first_invalid_utf8(s);
  }
  out.append(s);
  return out;
}

std::string terminal_text(std::string_view text, bool lines) {
  const std::string valid = to_valid_utf8(text);
  std::string out;
  out.reserve(valid.size());
  char buf[8];
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    const auto next = i + 1 < valid.size() ? static_cast<unsigned char>(valid[i + 1]) : 0u;
    if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {  // U+0080..U+009F, the C1 controls
      std::snprintf(buf, sizeof buf, "\\u%04x", next);
      out += buf;
      ++i;
    } else if ((c < 0x20 && c != '\t' && !(lines && c == '\n')) || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string invalid_utf8_text(std::string_view s, size_t at) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "byte 0x%02x at offset %zu",
                at < s.size() ? static_cast<unsigned char>(s[at]) : 0u, at);
  return buf;
}

}  // namespace mlprof
