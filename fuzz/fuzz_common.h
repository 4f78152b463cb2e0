#pragma once
// What every parser's fuzz target does with what it read: the views, the
// renderers and the exports run over it, and what we write we must read
// back. A round trip that fails is a finding (fuzz_check aborts), the same
// as a crash or a sanitizer report. docs/fuzzing.md says how to run them.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/export.h"
#include "formats/import.h"
#include "formats/json_read.h"
#include "formats/pprof_aggregate.h"
#include "model/stack_samples.h"
#include "model/tree.h"
#include "render/render_text.h"
#include "views/function_stats.h"
#include "views/stack_paths.h"

namespace mlprof::fuzz {

inline void fuzz_check(bool ok, const char* what, const std::string& detail) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A Profile a parser returned: rendered, exported in every format, and its
// document read back with the same spans.
inline void exercise(const Profile& p) {
  ViewOptions opts;
  opts.depth = 3;
  (void)render_text(p, opts);
  FunctionStats stats;
  stats.add(p);
  (void)stats.span_rows();
  for (ExportFormat f : {ExportFormat::kChromeTrace, ExportFormat::kPprof,
                         ExportFormat::kSpeedscope, ExportFormat::kFolded}) {
    (void)export_profile(p, f);
  }
  Result<Profile> back = read_json_document(export_profile(p, ExportFormat::kJson));
  fuzz_check(back.ok(), "the document of what was read does not read back",
             back.ok() ? "" : back.error().message);
  fuzz_check(back.value().spans.size() == p.spans.size(), "the document's spans differ",
             std::to_string(back.value().spans.size()) + " vs " + std::to_string(p.spans.size()));
}

// Sampled stacks a parser returned: every view, and the pprof they
// aggregate to read back with the same total count.
inline void exercise(const StackSamples& s) {
  FunctionStats stats;
  stats.add(s, 2);
  (void)stats.sampled_rows();
  StackPathTotals paths;
  paths.add(s);
  (void)paths.rows();
  PprofAggregate agg;
  agg.add(s, {{"source", "1"}});
  if (agg.samples() == 0) return;
  Result<Imported> back = import_profile(agg.to_pprof());
  fuzz_check(back.ok(), "the pprof of what was read does not read back",
             back.ok() ? "" : back.error().message);
}

inline void exercise(const Result<Imported>& r) {
  if (!r.ok()) return;
  std::visit([](const auto& v) { exercise(v); }, r.value());
}

}  // namespace mlprof::fuzz
