#include "formats/export.h"

#include <array>

#include "formats/json_doc.h"
#include "util/file_io.h"

namespace mlprof {

namespace {

struct FormatInfo {
  ExportFormat format;
  std::string_view extension;
  const char* name;
};

// Longest extensions first, so ".trace.json" wins over ".json".
constexpr std::array<FormatInfo, 7> kFormats = {{
    {ExportFormat::kSpeedscope, ".speedscope.json", "speedscope"},
    {ExportFormat::kChromeTrace, ".trace.json", "chrome_trace"},
    {ExportFormat::kJsonGz, ".json.gz", "json_gz"},
    {ExportFormat::kFolded, ".folded", "folded"},
    {ExportFormat::kPprof, ".pb.gz", "pprof"},
    {ExportFormat::kHtml, ".html", "html"},
    {ExportFormat::kJson, ".json", "json"},
}};

// Case-insensitive: "Predict.JSON.GZ" is a .json.gz file.
bool ends_with_any_case(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  s = s.substr(s.size() - suffix.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != suffix[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<ExportFormat> format_for_path(std::string_view path) {
  for (const FormatInfo& f : kFormats) {
    if (ends_with_any_case(path, f.extension)) return f.format;
  }
  return std::nullopt;
}

std::string known_extensions() {
  // Listed in the order a user reads them, not the matching order.
  return ".html, .json, .json.gz, .trace.json, .pb.gz, .speedscope.json, .folded";
}

const char* format_name(ExportFormat f) {
  for (const FormatInfo& info : kFormats) {
    if (info.format == f) return info.name;
  }
  return "?";
}

std::optional<ExportFormat> format_from_name(std::string_view name) {
  for (const FormatInfo& info : kFormats) {
    if (name == info.name) return info.format;
  }
  return std::nullopt;
}

std::string export_profile(const Profile& p, ExportFormat format) {
  switch (format) {
    case ExportFormat::kJson:
      return to_json_document(p);
    case ExportFormat::kJsonGz:
      return gzip_compress(to_json_document(p));
    case ExportFormat::kChromeTrace:
      return to_chrome_trace(p);
    case ExportFormat::kPprof:
      return to_pprof(p);
    case ExportFormat::kSpeedscope:
      return to_speedscope(p);
    case ExportFormat::kFolded:
      return to_folded(p);
    case ExportFormat::kHtml:
      return to_html_report(p);
  }
  return {};
}

Result<Ok> save_profile(const Profile& p, const std::string& path, ExportFormat format) {
  return write_file_atomic(path, export_profile(p, format));
}

}  // namespace mlprof
