// Fuzz target of one importer: fuzz/CMakeLists.txt builds it once an
// importer, MLPROF_FUZZ_IMPORT naming the function (import_profile:
// gunzip, detect by content, then import).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  mlprof::fuzz::exercise(mlprof::MLPROF_FUZZ_IMPORT(bytes));
  return 0;
}
