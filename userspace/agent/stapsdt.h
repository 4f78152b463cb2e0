#pragma once
// Whether an ELF file carries the mlprof USDT probes: its .note.stapsdt
// notes of provider "mlprof" (an executable built with mlprof_usdt.h, or the
// extension). TargetFinder asks it of each candidate executable.

#include <string>

#include "util/result.h"

namespace mlprof::agent {

// True if the ELF file at `path` has a .note.stapsdt note of provider
// "mlprof". Errors: the file cannot be read, or is not a 64-bit ELF.
Result<bool> has_mlprof_usdt(const std::string& path);

}  // namespace mlprof::agent
