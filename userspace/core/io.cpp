#include "core/io.h"

#include <cstdio>

namespace mlprof {

std::string short_type_name(const std::string& type_name) {
  const size_t dot = type_name.rfind('.');
  return dot == std::string::npos ? type_name : type_name.substr(dot + 1);
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KB", "MB", "GB", "TB", "PB"};
  if (bytes < 1024) return std::to_string(bytes) + "B";
  double v = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    v /= 1024.0;
    ++unit;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.1f%s", v, kUnits[unit]);
  return buf;
}

std::string format_io(const IOSummary& s) {
  std::string out = "(";
  out += s.type_name.empty() ? std::string("?") : short_type_name(s.type_name);
  if (s.has_shape) {
    out += ", shape=(";
    for (size_t i = 0; i < s.shape.size(); ++i) {
      if (i) out += ", ";
      out += s.shape[i] < 0 ? std::string("?") : std::to_string(s.shape[i]);
    }
    // A one-element tuple keeps Python's trailing comma: (1000,).
    out += s.shape.size() == 1 ? ",)" : ")";
  } else if (s.length >= 0) {
    out += ", len=" + std::to_string(s.length);
  }
  if (!s.dtype.empty()) out += ", dtype=" + s.dtype;
  if (!s.device.empty()) out += ", device=" + s.device;
  if (s.size_bytes >= 0) out += ", " + format_bytes(s.size_bytes);
  if (!s.repr_short.empty()) out += ", " + s.repr_short;
  out += ')';
  return out;
}

}  // namespace mlprof
