#include "core/export.h"

#include <stdexcept>

namespace mlprof {

std::string to_pprof(const Profile&) { throw std::logic_error("to_pprof: not written yet"); }

}  // namespace mlprof
