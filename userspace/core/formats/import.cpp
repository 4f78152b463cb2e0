#include "formats/import.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <rapidjson/encodedstream.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include "formats/import_json.h"
#include "formats/json_numbers.h"
#include "util/file_io.h"
#include "util/utf8.h"

namespace mlprof {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

Error bad_folded(const std::string& why) { return Error{Error::Kind::kCorrupt, 0, why}; }

}  // namespace

namespace import_detail {

std::optional<Error> parse_json(std::string_view data, const char* format,
                                rapidjson::Document& doc) {
  // Encoding validated: a string that is not UTF-8 is refused here, not
  // left to fail in Python or SQL (as json_stream.cpp's documents).
  // Numbers by std::from_chars (json_numbers.h), as the document reader.
  if (const size_t at = lone_surrogate_escape(data); at != std::string_view::npos) {
    return Error{Error::Kind::kCorrupt, 0,
                 std::string("not ") + format + " JSON: invalid at offset " + std::to_string(at) +
                     " " + kLoneSurrogateReason};
  }
  rapidjson::ParseResult result;
  auto generate = [&](rapidjson::Document& d) {
    rapidjson::MemoryStream ms(data.data(), data.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> is(ms);
    rapidjson::Reader reader;
    NumbersAsValues<rapidjson::Document> numbers(d);
    result = reader.Parse<kJsonParseFlags>(is, numbers);
    return !result.IsError();
  };
  doc.Populate(generate);
  if (!result.IsError()) return std::nullopt;
  const size_t end = trim(data).size() + static_cast<size_t>(trim(data).data() - data.data());
  if (result.Offset() + 1 >= end) {
    return Error{Error::Kind::kTruncated, 0,
                 std::string("the ") + format + " JSON ends early, after " +
                     std::to_string(data.size()) +
                     " bytes (the file was cut off while being written or copied)"};
  }
  return Error{Error::Kind::kCorrupt, 0,
               std::string("not ") + format + " JSON: invalid at offset " +
                   std::to_string(result.Offset()) + " (" + json_parse_error_text(result.Code()) +
                   ")"};
}

std::optional<int64_t> to_ns(double value, double ns_per_unit) {
  const double ns = value * ns_per_unit;
  constexpr double kLimit = 4611686018427387904.0;  // 2^62
  if (!std::isfinite(ns) || ns > kLimit || ns < -kLimit) return std::nullopt;
  return static_cast<int64_t>(std::llround(ns));
}

}  // namespace import_detail

FrameName parse_frame_name(std::string_view text) {
  FrameName out;
  text = trim(text);
  // "name (file:line)": the last " (" and a closing ")".
  const size_t open = text.rfind(" (");
  if (open != std::string_view::npos && text.back() == ')') {
    const std::string_view inner = text.substr(open + 2, text.size() - open - 3);
    const size_t colon = inner.rfind(':');
    int32_t line = 0;
    if (colon != std::string_view::npos) {
      const auto [p, ec] =
          std::from_chars(inner.data() + colon + 1, inner.data() + inner.size(), line);
      if (ec == std::errc() && p == inner.data() + inner.size()) {
        out.name = std::string(text.substr(0, open));
        out.file = std::string(inner.substr(0, colon));
        out.line = line;
        return out;
      }
    }
  }
  out.name = std::string(text);
  return out;
}

InputFormat detect_input(std::string_view bytes) {
  const std::string_view head = trim(bytes.substr(0, 4096));
  if (head.empty()) return InputFormat::kUnknown;
  if (head.front() == '[') return InputFormat::kChromeTrace;  // the JSON Array Format
  if (head.front() == '{') {
    if (head.find("\"traceEvents\"") != std::string_view::npos) return InputFormat::kChromeTrace;
    if (head.find("speedscope") != std::string_view::npos ||
        head.find("\"profiles\"") != std::string_view::npos) {
      return InputFormat::kSpeedscope;
    }
    return InputFormat::kDocument;
  }
  // A protobuf Profile starts with a field of wire type 2 or 0 (sample_type,
  // sample, ... or a varint): text of folded stacks starts with a printable.
  const auto b = static_cast<unsigned char>(bytes.front());
  if (b == 0x0a || b == 0x12 || b == 0x1a || b == 0x22 || b == 0x2a || b == 0x32 || b == 0x48) {
    return InputFormat::kPprof;
  }
  // Folded stacks: the first line ends in " COUNT" (an empty stack, " 2",
  // is py-spy's idle samples).
  std::string_view line = bytes.substr(0, std::min(bytes.find('\n'), bytes.size()));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  const size_t space = line.rfind(' ');
  if (space != std::string_view::npos) {
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(line.data() + space + 1, line.data() + line.size(), n);
    if (ec == std::errc() && p == line.data() + line.size()) return InputFormat::kFolded;
  }
  return InputFormat::kUnknown;
}

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kDocument:
      return "document";
    case InputFormat::kChromeTrace:
      return "chrome-trace";
    case InputFormat::kSpeedscope:
      return "speedscope";
    case InputFormat::kPprof:
      return "pprof";
    case InputFormat::kFolded:
      return "folded";
    default:
      return "unknown";
  }
}

Result<Imported> import_profile(std::string_view raw) {
  std::string inflated;
  if (is_gzip(raw)) {
    Result<std::string> r = gzip_decompress(raw, gzip_input_limit(raw.size()));
    if (!r.ok()) return r.error();
    inflated = std::move(r.value());
    raw = inflated;
  }
  switch (detect_input(raw)) {
    case InputFormat::kChromeTrace:
      return import_chrome_trace(raw);
    case InputFormat::kSpeedscope:
      return import_speedscope(raw);
    case InputFormat::kPprof:
      return import_pprof(raw);
    case InputFormat::kFolded:
      return import_folded(raw);
    case InputFormat::kDocument:
      return Error{Error::Kind::kUnsupported, 0,
                   "a profile document: read it with load(), not as an import"};
    default:
      return bad_folded(
          "not a format this build imports (a profile document, Chrome trace JSON, speedscope "
          "JSON, pprof, "
          "or folded stacks)");
  }
}

// Folded stacks: "frame;frame;frame count" a line, root first (py-spy
// --format raw, Brendan Gregg's stackcollapse). One thread; a line is one
// sample whose ("samples", "count") value is its count, so the store grows
// with the text, not with the counts (docs/design/store.md).
Result<Imported> import_folded(std::string_view text) {
  StackSamples out;
  out.value_types = {{"samples", "count"}};
  out.threads.push_back({"all threads", 0});
  out.meta["source"] = "folded";
  size_t at = 0, line_no = 0;
  int64_t total = 0;
  while (at < text.size()) {
    size_t eol = text.find('\n', at);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(at, eol - at);
    at = eol + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (trim(line).empty()) continue;
    const size_t space = line.rfind(' ');
    int64_t count = 0;
    if (space == std::string_view::npos)
      return bad_folded("line " + std::to_string(line_no) + " has no sample count");
    const auto [p, ec] = std::from_chars(line.data() + space + 1, line.data() + line.size(), count);
    if (ec != std::errc() || p != line.data() + line.size() || count < 0) {
      return bad_folded("line " + std::to_string(line_no) + " does not end in a sample count");
    }
    if (const size_t bad = first_invalid_utf8(line); bad != std::string_view::npos) {
      return bad_folded("line " + std::to_string(line_no) + " is not UTF-8 text (" +
                        invalid_utf8_text(line, bad) + ")");
    }
    if (count == 0) continue;  // a stack seen 0 times holds nothing
    if (count > kMaxValueSum - total) {
      return bad_folded("its counts add up past 2^62 by line " + std::to_string(line_no));
    }
    total += count;
    StackSamples::Sample s;
    std::string_view stack = trim(line.substr(0, space));  // empty: a sample with no frames (idle)
    while (!stack.empty()) {
      if (s.frames.size() == kMaxStackDepth) {
        return bad_folded("line " + std::to_string(line_no) + "'s stack is deeper than " +
                          std::to_string(kMaxStackDepth) + " frames");
      }
      const size_t semi = stack.find(';');
      const FrameName f = parse_frame_name(stack.substr(0, semi));
      const uint32_t fn =
          out.functions.add(f.name, "", f.file, f.line, FunctionKind::kPython, false);
      s.frames.push_back({fn, f.line});
      if (semi == std::string_view::npos) break;
      stack.remove_prefix(semi + 1);
    }
    s.values = {count};
    out.samples.push_back(std::move(s));
  }
  if (out.samples.empty()) return bad_folded("no stacks in the folded text");
  return Imported{std::move(out)};
}

}  // namespace mlprof
