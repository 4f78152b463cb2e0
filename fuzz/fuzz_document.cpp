// Fuzz target: read_json_document: the profile document, DOM and streamed rows, plain or gzip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_common.h"

using namespace mlprof;
using namespace mlprof::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<Profile> p = read_json_document(bytes);
  if (p.ok()) exercise(p.value());
  return 0;
}
