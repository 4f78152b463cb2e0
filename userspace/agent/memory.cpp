#include "agent/memory.h"

#include <cstdlib>  // defines __GLIBC__ under glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mlprof::agent {

void bound_allocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);  // also turns off the threshold's rise
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
#endif
}

void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace mlprof::agent
