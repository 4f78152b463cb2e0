#pragma once
// Combining profiles (spec 001): several sessions, processes or hosts into
// one Profile, with ids remapped and provenance kept per lane.
// (placeholder: the issue 5 core work fills it)

namespace mlprof {}  // namespace mlprof
