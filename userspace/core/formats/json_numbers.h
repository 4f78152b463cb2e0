#pragma once
// JSON numbers to a rapidjson SAX handler, converted by std::from_chars
// (exact and correctly rounded) instead of rapidjson 1.1.0's full-precision
// parse, which reads a zero significand with an exponent wrongly: "0e308"
// as -6.06e-269, "0.000000000000000000000e100" as 8.06e+264 (and is
// undefined behaviour there: found by fuzz/fuzz_document). The readers parse
// with kParseNumbersAsStringsFlag and hand each RawNumber to emit_number.

#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>

namespace mlprof {

// The flags every JSON reader of the core parses with.
inline constexpr unsigned kJsonParseFlags = rapidjson::kParseNumbersAsStringsFlag |
                                            rapidjson::kParseIterativeFlag |
                                            rapidjson::kParseValidateEncodingFlag;

namespace json_detail {

// The power of ten of a JSON number's first nonzero digit ("120" 2,
// "0.05e3" 1); 0 for zero. Saturates far past any double's range.
inline int64_t leading_power_of_ten(std::string_view text) {
  if (!text.empty() && text.front() == '-') text.remove_prefix(1);
  const size_t e = text.find_first_of("eE");
  std::string_view mantissa = text.substr(0, e);
  int64_t exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view digits = text.substr(e + 1);
    const bool negative = !digits.empty() && digits.front() == '-';
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+'))
      digits.remove_prefix(1);
    for (const char c : digits) {
      exponent = std::min<int64_t>(exponent * 10 + (c - '0'), int64_t{1} << 40);
    }
    if (negative) exponent = -exponent;
  }
  const size_t dot = mantissa.find('.');
  const size_t int_digits = dot == std::string_view::npos ? mantissa.size() : dot;
  const size_t first = mantissa.find_first_of("123456789");
  if (first == std::string_view::npos) return 0;
  const int64_t at = first < int_digits ? static_cast<int64_t>(int_digits - 1 - first)
                                        : -static_cast<int64_t>(first - int_digits);
  return at + exponent;
}

}  // namespace json_detail

// Calls the handler's Uint/Int/Uint64/Int64 as rapidjson would for an
// integer (the narrowest that holds it), or Double; false (the parse stops)
// for a number past a double's range, as rapidjson's "Number too big".
template <typename Handler>
bool emit_number(Handler& h, std::string_view text) {
  const char* first = text.data();
  const char* last = first + text.size();
  if (text.find_first_of(".eE") == std::string_view::npos) {
    if (!text.empty() && text.front() == '-') {
      int64_t i = 0;
      if (auto [p, ec] = std::from_chars(first, last, i); ec == std::errc() && p == last) {
        return i >= std::numeric_limits<int32_t>::min() ? h.Int(static_cast<int>(i)) : h.Int64(i);
      }
    } else {
      uint64_t u = 0;
      if (auto [p, ec] = std::from_chars(first, last, u); ec == std::errc() && p == last) {
        return u <= std::numeric_limits<uint32_t>::max() ? h.Uint(static_cast<unsigned>(u))
                                                         : h.Uint64(u);
      }
    }
    // Past 64 bits: a double, as rapidjson reads it.
  }
  double d = 0;
  const auto [p, ec] = std::from_chars(first, last, d);
  if (p != last) return false;
  if (ec == std::errc::result_out_of_range) {
    // Too big is refused; too small is zero, as rapidjson reads it.
    if (json_detail::leading_power_of_ten(text) > 0) return false;
    d = text.front() == '-' ? -0.0 : 0.0;
  } else if (ec != std::errc()) {
    return false;
  }
  return h.Double(d);
}

// What a parse error says, for these readers: emit_number's refusal stops
// the parse as a handler's (kParseErrorTermination), and means a number too
// big for a double (rapidjson's own words for it otherwise).
inline const char* json_parse_error_text(rapidjson::ParseErrorCode code) {
  return code == rapidjson::kParseErrorTermination
             ? rapidjson::GetParseError_En(rapidjson::kParseErrorNumberTooBig)
             : rapidjson::GetParseError_En(code);
}

// Why every reader refuses the text lone_surrogate_escape finds in.
inline constexpr const char* kLoneSurrogateReason =
    "(a \\u escape of a lone UTF-16 surrogate, which is no character)";

// The offset of the first "\\uDC00"-"\\uDFFF" escape that does not follow a
// high-surrogate escape, or npos. rapidjson 1.1.0 takes such a lone low
// surrogate and writes it as three bytes that are not UTF-8, which no reader
// (ours included) takes back (found by fuzz_import_speedscope); lone high
// surrogates it refuses itself. A backslash in JSON text is always an escape,
// so no string state is needed.
inline size_t lone_surrogate_escape(std::string_view text) {
  auto hex4 = [&](size_t at, uint32_t* cp) {
    if (at + 4 > text.size()) return false;
    uint32_t v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = text[k];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<uint32_t>(d);
    }
    *cp = v;
    return true;
  };
  size_t after_high = std::string_view::npos;  // where an escape right after a high one starts
  for (size_t i = text.find('\\'); i != std::string_view::npos; i = text.find('\\', i)) {
    uint32_t cp = 0;
    if (i + 1 < text.size() && text[i + 1] == 'u' && hex4(i + 2, &cp)) {
      if (cp >= 0xDC00 && cp <= 0xDFFF && i != after_high) return i;
      after_high = cp >= 0xD800 && cp <= 0xDBFF ? i + 6 : std::string_view::npos;
      i += 6;
    } else {
      i += 2;
    }
  }
  return std::string_view::npos;
}

// A SAX handler that hands every event to `inner` (a rapidjson::Document,
// say), each RawNumber through emit_number.
// RapidJSON's SAX handler interface names these methods (Null, StartObject...).
// NOLINTBEGIN(readability-identifier-naming)
template <typename Inner>
class NumbersAsValues {
 public:
  explicit NumbersAsValues(Inner& inner) : inner_(inner) {}
  bool Null() { return inner_.Null(); }
  bool Bool(bool b) { return inner_.Bool(b); }
  bool Int(int i) { return inner_.Int(i); }
  bool Uint(unsigned u) { return inner_.Uint(u); }
  bool Int64(int64_t i) { return inner_.Int64(i); }
  bool Uint64(uint64_t u) { return inner_.Uint64(u); }
  bool Double(double d) { return inner_.Double(d); }
  bool RawNumber(const char* str, rapidjson::SizeType length, bool) {
    return emit_number(inner_, std::string_view(str, length));
  }
  bool String(const char* str, rapidjson::SizeType length, bool copy) {
    return inner_.String(str, length, copy);
  }
  bool StartObject() { return inner_.StartObject(); }
  bool Key(const char* str, rapidjson::SizeType length, bool copy) {
    return inner_.Key(str, length, copy);
  }
  bool EndObject(rapidjson::SizeType members) { return inner_.EndObject(members); }
  bool StartArray() { return inner_.StartArray(); }
  bool EndArray(rapidjson::SizeType elements) { return inner_.EndArray(elements); }

 private:
  Inner& inner_;
};
// NOLINTEND(readability-identifier-naming)

}  // namespace mlprof
