#pragma once
// Profiles written by other tools, read for the store (docs/store.md,
// "Imports"): Chrome trace JSON (viztracer's, Perfetto's) and speedscope's
// evented profiles have call boundaries and become a Profile; pprof,
// speedscope's sampled profiles (py-spy's) and folded stacks (py-spy's
// --format raw) become StackSamples. Each returns an Error naming the cause
// for input that is not its format or is cut off.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "model/stack_samples.h"
#include "model/tree.h"
#include "util/result.h"

namespace mlprof {

enum class InputFormat { kDocument, kChromeTrace, kSpeedscope, kPprof, kFolded, kUnknown };

// What `bytes` (gunzipped already) holds, by content.
InputFormat detect_input(std::string_view bytes);
const char* input_format_name(
    InputFormat f);  // "chrome-trace", "speedscope", "pprof", "folded", ...

using Imported = std::variant<Profile, StackSamples>;

// What an import may grow to (docs/store.md, "Limits"). A pre-aggregated
// sample keeps its count as a value, so rows grow with the input's size;
// frames could still multiply (a pprof sample naming one location of many
// lines many times), so they are bounded against the input's size too.
inline constexpr size_t kMaxStackDepth = 100'000;  // frames in one sample's stack
inline constexpr size_t kFramesPerInputByte = 8;   // all samples' frames, per byte ...
inline constexpr size_t kFramesFloor = 1'000'000;  // ... or this many, if more
// A value's sum over a source stays within +-2^62, so sums never overflow.
inline constexpr int64_t kMaxValueSum = int64_t{1} << 62;

Result<Imported> import_chrome_trace(std::string_view json);
Result<Imported> import_speedscope(std::string_view json);
Result<Imported> import_pprof(std::string_view bytes);
Result<Imported> import_folded(std::string_view text);

// By detect_input; raw may be gzip-compressed (it is gunzipped first).
Result<Imported> import_profile(std::string_view raw);

// "leaf (spy_target.py:4)" or "leaf (/path/spy_target.py:4)": the name, the
// file and the line (0 when absent); a name without them is all name.
struct FrameName {
  std::string name, file;
  int32_t line = 0;
};
FrameName parse_frame_name(std::string_view text);

}  // namespace mlprof
