#pragma once
// The continuous agent's heap, kept flat (docs/ebpf.md, "Continuous mode",
// Memory; bench/RESULTS.md, issue 40 item 2). Each rotation and each
// delivery builds, then frees, tens to hundreds of MB (a period's combined
// profile and document; an item's parsed profile and its rows). glibc's
// default keeps much of it: its mmap threshold rises to the largest block
// freed (up to 32 MB), after which blocks that size come from the heap and
// stay there when freed, and each thread's arena keeps its own free memory.
// Measured, the SQLite sink's RSS between periods crept from 200 to 260 MB
// in 7 minutes and stayed there.

namespace mlprof::agent {

// A fixed mmap threshold (1 MiB: larger blocks are mapped and unmapped,
// never kept) and trim threshold (8 MiB). Called once at start, before the
// threads. No effect outside glibc.
void bound_allocator();

// Gives the free memory of every arena back to the kernel (malloc_trim): the
// spool's thread calls it after each delivery, when the item's memory has
// just been freed.
void release_free_memory();

}  // namespace mlprof::agent
