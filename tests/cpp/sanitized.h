#pragma once
// MLPROF_SANITIZED: 1 in a build under ASan or TSan (gcc's macros, clang's
// __has_feature), whose allocator replaces glibc's: a test of glibc malloc's
// figures, or of std::bad_alloc on a real allocation failure (a sanitizer's
// operator new reports and dies instead), skips there and says why.

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MLPROF_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MLPROF_SANITIZED 1
#endif
#endif
#ifndef MLPROF_SANITIZED
#define MLPROF_SANITIZED 0
#endif

// A long randomized test runs this many times fewer rounds under a
// sanitizer (several times slower there): CI runs the C++ tests only there,
// and the fuzz targets of the same build put far more inputs through the
// same readers.
inline constexpr int kSanitizedRoundsDivisor = MLPROF_SANITIZED ? 4 : 1;
