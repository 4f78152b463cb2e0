#include "model/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string_view>
#include <vector>

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
  // "?" for no type, and for one whose short name is empty: "()" would
  // read back as no type and format as "(?)".
  const std::string type = short_type_name(s.type_name);
  out += type.empty() ? std::string("?") : type;
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

// ---- parse_io_text: format_io and format_bytes read back ------------------------

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// format_bytes' text back to a byte count that formats to the same text, or -1.
int64_t parse_bytes(std::string_view s) {
  static constexpr std::string_view kUnits[] = {"KB", "MB", "GB", "TB", "PB"};
  // Lengths are checked first: a summary can come from a target's memory
  // (the agent), and std::stoll/stod throw past their range.
  if (s.size() >= 2 && s.size() <= 5 && s.back() == 'B' && all_digits(s.substr(0, s.size() - 1))) {
    int64_t v = std::stoll(std::string(s.substr(0, s.size() - 1)));
    return v < 1024 ? v : -1;  // format_bytes writes larger values with a unit
  }
  for (size_t u = 0; u < std::size(kUnits); ++u) {
    if (s.size() < 5 || !s.ends_with(kUnits[u])) continue;
    std::string_view num = s.substr(0, s.size() - 2);
    const size_t dot = num.find('.');
    if (dot == std::string_view::npos || dot > 4 || dot + 2 != num.size() ||
        !all_digits(num.substr(0, dot)) || !all_digits(num.substr(dot + 1))) {
      return -1;
    }
    const double scale = std::pow(1024.0, static_cast<double>(u + 1));
    const double value = std::stod(std::string(num));
    if (value * scale > 9e18) return -1;
    auto bytes = static_cast<int64_t>(std::llround(value * scale));
    // "1024.0KB" (1023.95..1023.99 KiB): the next unit starts at 1024^(u+2).
    if (u + 1 < std::size(kUnits)) bytes = std::min(bytes, static_cast<int64_t>(scale * 1024) - 1);
    return std::max<int64_t>(bytes, 1024);
  }
  return -1;
}

}  // namespace

IOSummary parse_io_text(const std::string& text) {
  IOSummary out;
  std::string_view rest(text);
  if (rest.size() < 2 || rest.front() != '(') {
    out.repr_short = text;
    return out;
  }
  rest.remove_prefix(1);
  if (rest.back() == ')') rest.remove_suffix(1);  // else: cut at MLPROF_IO_SUMMARY_LEN
  // The type, then the fields in format_io's order; the first piece that is
  // not the next field starts repr_short, which runs to the end.
  size_t sep = rest.find(", ");
  out.type_name = std::string(rest.substr(0, sep));
  if (out.type_name == "?") out.type_name.clear();
  rest = sep == std::string_view::npos ? std::string_view() : rest.substr(sep + 2);
  enum Stage { kShape, kDtype, kDevice, kBytes, kRepr };
  Stage stage = kShape;
  while (!rest.empty()) {
    if (stage <= kShape && rest.starts_with("shape=(")) {
      const size_t close = rest.find(')');
      if (close == std::string_view::npos) break;
      std::string_view dims = rest.substr(7, close - 7);
      std::vector<int64_t> shape;
      bool ok = true;
      while (!dims.empty() && ok) {
        size_t comma = dims.find(',');
        std::string_view d = dims.substr(0, comma);
        while (!d.empty() && d.front() == ' ') d.remove_prefix(1);
        if (d == "?")
          shape.push_back(-1);
        else if (all_digits(d) && d.size() < 19)
          shape.push_back(std::stoll(std::string(d)));
        else if (!(d.empty() && comma == std::string_view::npos))
          ok = false;
        dims = comma == std::string_view::npos ? std::string_view() : dims.substr(comma + 1);
      }
      if (!ok) break;
      out.has_shape = true;
      out.shape = std::move(shape);
      stage = kDtype;
      rest = rest.substr(close + 1);
    } else {
      sep = rest.find(", ");
      std::string_view piece = rest.substr(0, sep);
      if (stage <= kShape && piece.starts_with("len=") && all_digits(piece.substr(4)) &&
          piece.size() < 23) {
        out.length = std::stoll(std::string(piece.substr(4)));
        stage = kDtype;
      } else if (stage <= kDtype && piece.starts_with("dtype=") && piece.size() > 6) {
        out.dtype = std::string(piece.substr(6));
        stage = kDevice;
      } else if (stage <= kDevice && piece.starts_with("device=") && piece.size() > 7) {
        out.device = std::string(piece.substr(7));
        stage = kBytes;
      } else if (stage <= kBytes && parse_bytes(piece) >= 0) {
        out.size_bytes = parse_bytes(piece);
        stage = kRepr;
      } else {
        break;
      }
      rest = sep == std::string_view::npos ? std::string_view() : rest.substr(sep);
    }
    if (rest.starts_with(", "))
      rest.remove_prefix(2);
    else if (!rest.empty())
      break;  // "shape=(..)x": not format_io's form
  }
  out.repr_short = std::string(rest);
  return out;
}

}  // namespace mlprof
