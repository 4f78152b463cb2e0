// agent/memory.h on glibc: with the bound set, a large block freed is given
// back to the kernel and a later, smaller one is mapped rather than taken
// from the heap (the threshold does not rise); release_free_memory() gives
// back the free memory in the middle of the heap, which glibc keeps.

#include "agent/memory.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "sanitized.h"

namespace mlprof::agent {
namespace {

// Touches n bytes at p, in a way no optimizer may drop (with the malloc and
// free around it).
void touch(void* p, size_t n) {
  std::memset(p, 1, n);
  asm volatile("" : : "r"(p) : "memory");
}

long rss_anon_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("RssAnon:")) return std::stol(line.substr(8));
  }
  return -1;
}

// Under a sanitizer's allocator glibc's figures say nothing.
#if MLPROF_SANITIZED
#define SKIP_WITHOUT_GLIBC_MALLOC() GTEST_SKIP() << "glibc's malloc is replaced"
#else
#define SKIP_WITHOUT_GLIBC_MALLOC() (void)0
#endif

TEST(Memory, ALargeBlockIsMappedAndGivenBackEvenAfterALargerOne) {
  SKIP_WITHOUT_GLIBC_MALLOC();
  bound_allocator();
  // glibc alone: freeing this mapped 16 MiB block raises its mmap threshold
  // to 16 MiB, and the 4 MiB block below comes from the heap, kept when freed.
  void* big = std::malloc(16 << 20);
  touch(big, 16 << 20);
  std::free(big);
  const size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(4 << 20);
  touch(block, 4 << 20);
  EXPECT_GE(mallinfo2().hblkhd, mapped_before + (4 << 20));
  std::free(block);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before);
}

TEST(Memory, FreeMemoryInTheMiddleOfTheHeapIsGivenBack) {
  SKIP_WITHOUT_GLIBC_MALLOC();
  bound_allocator();
  // 64 MiB of 1 KiB blocks; one in 64 kept, so the free ones sit between
  // live ones and trimming the heap's top gives nothing back.
  std::vector<void*> blocks(64 << 10);
  for (void*& b : blocks) {
    b = std::malloc(1024);
    touch(b, 1024);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i % 64 != 0) std::free(blocks[i]);
  }
  const long kept = rss_anon_kb();
  release_free_memory();
  const long after = rss_anon_kb();
  EXPECT_LT(after, kept - 32 * 1024) << "RssAnon " << kept << " kB -> " << after << " kB";
  for (size_t i = 0; i < blocks.size(); i += 64) std::free(blocks[i]);
}

}  // namespace
}  // namespace mlprof::agent
