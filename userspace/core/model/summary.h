#pragma once
// I/O summaries (docs/design/capture.md, "I/O summaries"): what the data flowing through a span
// looked like (type, shape, dtype, length, bytes, device, a short repr).
// Primitives only: a summary never refers to the object it describes.

#include <cstdint>
#include <string>
#include <vector>

namespace mlprof {

struct IOSummary {
  std::string type_name;       // "pandas.core.frame.DataFrame"; "builtins." is dropped
  bool has_shape = false;      // shape is meaningful (a 0-d array has an empty shape)
  std::vector<int64_t> shape;  // -1 for a dimension that is not known
  std::string dtype;           // "" = none; a frame with mixed columns: "float64,object"
  int64_t length = -1;         // -1 = none
  int64_t size_bytes = -1;     // -1 = none
  std::string device;          // "" = none; "cpu", "cuda:0"
  std::string repr_short;      // "" = none; bounded by the summarizer

  bool operator==(const IOSummary&) const = default;
};

enum class IORole : uint8_t {
  kArgument = 0,  // an argument at call; name is the parameter's name
  kReturn = 1,    // the return value (a generator's: its final return); name ""
};

// What a capture hook saw, in a Lane: attached to the span that the lane's
// kCall event `call` opened.
struct IORecord {
  uint32_t call = 0;
  IORole role = IORole::kArgument;
  std::string name;
  IOSummary summary;
};

// An I/O summary attached to a span of a built Profile.
struct SpanIO {
  int32_t span = -1;
  IORole role = IORole::kArgument;
  std::string name;
  IOSummary summary;

  bool operator==(const SpanIO&) const = default;
};

// "DataFrame" for "pandas.core.frame.DataFrame": the last dotted component.
std::string short_type_name(const std::string& type_name);

// "7.8KB", "512B", "1.5GB": 1024-based, one decimal (docs/design/capture.md, "The text tree").
std::string format_bytes(int64_t bytes);

// The parenthesised form (docs/design/capture.md, "The text tree"), fields present only when set:
//   (DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)
//   (Tensor, shape=(8, 128), dtype=float32, device=cuda:0, 4.0KB)
//   (list, len=3, 120B)   (int, 42)   (str, len=5, 'hello')   (NoneType)
std::string format_io(const IOSummary& s);

// format_io's text read back (the eBPF agent gets span I/O as that text, cut
// to MLPROF_IO_SUMMARY_LEN - 1 bytes): the fields, so that a document holds
// shape/dtype/bytes as an in-process capture does and format_io renders the
// same text again. The type keeps only its short name; a size is the byte
// count its text rounds to. Text not in that form goes whole into repr_short.
IOSummary parse_io_text(const std::string& text);

}  // namespace mlprof
