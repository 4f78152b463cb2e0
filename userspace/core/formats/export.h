#pragma once
// Exporters: one function per file format, each a pure function of the
// Profile (and of the I/O summaries and segments it holds). save_profile
// picks a format from the file name and writes atomically.

#include <optional>
#include <string>
#include <string_view>

#include "model/tree.h"
#include "util/result.h"

namespace mlprof {

enum class ExportFormat {
  kJson,         // .json: the profile document (docs/format.md)
  kJsonGz,       // .json.gz: the same, gzip-compressed
  kChromeTrace,  // .trace.json: Chrome Trace Event JSON (Perfetto, chrome://tracing)
  kPprof,        // .pb.gz: pprof profile.proto, gzip-compressed
  kSpeedscope,   // .speedscope.json: speedscope's evented file format
  kFolded,       // .folded: "a;b;c <ns>" lines for flamegraph tools
  kHtml,         // .html: the self-contained report
};

// The format a file name asks for, by its extension (longest match first:
// "x.trace.json" is Chrome trace, not the document). nullopt if none fits.
std::optional<ExportFormat> format_for_path(std::string_view path);
// ".html, .json, .json.gz, .trace.json, .pb.gz, .speedscope.json, .folded"
std::string known_extensions();
const char* format_name(ExportFormat f);  // "json", "chrome_trace", ...
std::optional<ExportFormat> format_from_name(std::string_view name);

// The bytes of the file for `format` (already gzip-compressed for kJsonGz and kPprof).
std::string export_profile(const Profile& p, ExportFormat format);

// Writes export_profile(p, format) to `path` atomically: a temporary file in
// the same directory, fsync, rename. An interrupted write leaves either the
// old file or none, never a truncated one.
Result<Ok> save_profile(const Profile& p, const std::string& path, ExportFormat format);

// One function per format (export_<name>.cpp).
std::string to_chrome_trace(const Profile& p);
std::string to_pprof(const Profile& p);  // gzip-compressed
std::string to_speedscope(const Profile& p);
std::string to_folded(const Profile& p);
std::string to_html_report(const Profile& p);

// The self-contained page of an analysis result (`mlprof top`/`diff --html`,
// docs/store.md): `payload`, a JSON object (title, facts, notes, columns,
// rows; python/mlflow_profiler/analysis.py writes it), embedded in the
// report's second template (report/analysis.html with report.css and
// analysis.js). std::invalid_argument if the payload is not a JSON object.
std::string to_html_analysis(std::string_view payload);

}  // namespace mlprof
