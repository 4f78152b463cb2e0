#include "core/export.h"

#include <stdexcept>

namespace mlprof {

std::string to_chrome_trace(const Profile&) { throw std::logic_error("to_chrome_trace: not written yet"); }

}  // namespace mlprof
