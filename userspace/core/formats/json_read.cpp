// Reads a profile document's text: gzip or plain, and tells a text cut
// short (kTruncated) from one that is not JSON (kCorrupt) before the
// parsed tree goes to the section reader (json_read_sections.cpp).

#include "formats/json_read.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <string>
#include <string_view>
#include <utility>

#include "formats/json_numbers.h"
#include "formats/json_read_detail.h"
#include "formats/json_stream.h"
#include "util/file_io.h"

namespace mlprof {

namespace {

using json_read_detail::kWhatLoadReads;

// The tail of a text cut inside a token: a literal, number, escape or UTF-8
// sequence that ends early. rapidjson reports those at the token's start.
bool cut_token(std::string_view tail) {
  for (const std::string_view literal : {"true", "false", "null"}) {
    if (tail.size() < literal.size() && literal.starts_with(tail)) return true;
  }
  if (tail.find_first_not_of("-+.eE0123456789") == std::string_view::npos) return true;
  // The longest escape that can be cut short is a \uXXXX\uXXXX pair.
  if (tail.front() == '\\') {
    return tail.size() < 12 &&
           tail.find_first_not_of("\\u0123456789abcdefABCDEF") == std::string_view::npos;
  }
  const auto lead = static_cast<unsigned char>(tail.front());
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (tail.size() >= length) return false;
  for (const char c : tail.substr(1)) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) return false;
  }
  return true;
}

// True when a parse error is the text running out rather than a wrong byte.
bool ran_out(std::string_view text, const rapidjson::ParseResult& r) {
  const size_t at = r.Offset();
  if (at >= text.size()) return true;
  switch (r.Code()) {
    case rapidjson::kParseErrorValueInvalid:
    case rapidjson::kParseErrorStringUnicodeEscapeInvalidHex:
    case rapidjson::kParseErrorStringUnicodeSurrogateInvalid:
    case rapidjson::kParseErrorStringEscapeInvalid:
    case rapidjson::kParseErrorStringInvalidEncoding:
    case rapidjson::kParseErrorNumberMissFraction:
    case rapidjson::kParseErrorNumberMissExponent:
      return cut_token(text.substr(at));
    default:
      return false;
  }
}

}  // namespace

Result<Profile> read_json_document(std::string_view data) {
  std::string inflated;
  if (data == "\x1f") {  // one byte of the gzip magic
    return Error{Error::Kind::kTruncated, 0, "the gzip stream ends after its first byte"};
  }
  if (is_gzip(data)) {
    Result<std::string> text = gzip_decompress(data, gzip_input_limit(data.size()));
    if (!text.ok()) {
      Error e = text.error();
      e.message = "cannot read the compressed profile: " + e.message;
      return e;
    }
    inflated = std::move(text.value());
    data = inflated;
  }
  if (data.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return Error{Error::Kind::kTruncated, 0,
                 "the profile is empty: the file was cut off before anything was written"};
  }
  // JSON text never holds a raw NUL; rapidjson would take one as the end.
  if (const size_t nul = data.find('\0'); nul != std::string_view::npos) {
    return Error{Error::Kind::kCorrupt, 0,
                 "not a profile document: a NUL byte at offset " + std::to_string(nul) +
                     " (JSON text never holds one; a .pb.gz or other binary export?) " +
                     kWhatLoadReads};
  }
  if (const size_t at = lone_surrogate_escape(data); at != std::string_view::npos) {
    return Error{Error::Kind::kCorrupt, 0,
                 "not a profile document: invalid JSON at offset " + std::to_string(at) + " " +
                     kLoneSurrogateReason + " " + kWhatLoadReads};
  }
  rapidjson::Document doc;
  SpanRows spans;
  if (const rapidjson::ParseResult r = parse_document(data, doc, spans); r.IsError()) {
    if (ran_out(data, r)) {
      return Error{Error::Kind::kTruncated, 0,
                   "the profile is truncated: the JSON text ends early, after " +
                       std::to_string(data.size()) +
                       " bytes (the file was cut off while being written or copied)"};
    }
    return Error{Error::Kind::kCorrupt, 0,
                 std::string("not a profile document: invalid JSON at offset ") +
                     std::to_string(r.Offset()) + " (" + json_parse_error_text(r.Code()) + ") " +
                     kWhatLoadReads};
  }
  // The DOM holds copies of the text's strings: the inflated text (about 54
  // bytes a span) goes before the profile is built beside the DOM.
  std::string().swap(inflated);
  return json_read_detail::read_document(doc, spans);
}

}  // namespace mlprof
