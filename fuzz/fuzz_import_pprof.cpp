// Fuzz target: import_pprof: profile.proto (Go's, ours).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_common.h"

using namespace mlprof;
using namespace mlprof::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  exercise(import_pprof(bytes));
  return 0;
}
