#pragma once
// alloc_bytes: a counting wrapper over Python's allocators. Each thread's
// counter grows by the bytes its PyMem_*/PyObject_* calls request; spans read
// it at their boundaries (the engine's readings). docs/capture.md, "Per-span
// CPU time and allocated bytes", has the rules and why.

#include <cstdint>
#include <string>

namespace mlprof::alloc_count {

// Bytes the calling thread requested from the wrapped domains while counting
// was on (any session). Grows only.
uint64_t thread_bytes();

// A session that wants alloc_bytes starts and stops counting, nested and in
// any order. start() returns false with `why` where it cannot count (a
// free-threaded build, no wrapper slot left): the session records no alloc.
// Needs the GIL (or an attached thread state).
bool start(std::string* why);
void stop();

}  // namespace mlprof::alloc_count
