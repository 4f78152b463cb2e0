#pragma once
// Where the interpreter keeps its GIL: the address range of its GIL state,
// whose condition variables and mutexes are the futexes a thread sleeps on
// while it waits for the GIL (take_gil) or hands it over (drop_gil). The
// agent tells a GIL wait from other futex waits by this range (USDT
// session_begin, docs/usdt.md). gil_range.c is compiled as C against the
// interpreter's internal headers, so each release's layout is its own.

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The current interpreter's GIL state: its address and size in bytes. The
// caller holds the GIL. 3.9-3.11: the runtime's one GIL; 3.12+: the
// interpreter's (subinterpreters may have their own).
void mlprof_gil_range(uint64_t* start, uint64_t* bytes);

#ifdef __cplusplus
}
#endif
