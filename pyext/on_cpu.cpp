// The rseq critical-section pointer as a "has this thread left the CPU"
// flag (on_cpu.h says why). glibc 2.35+ exports where its per-thread
// rseq area is (__rseq_offset from the thread pointer) and whether it
// registered one (__rseq_size); both are looked up at run time, so a
// build on a newer glibc still loads, and reads by system call, on an
// older one.
#include "on_cpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <cstddef>

#include "clock.h"

#if defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define MLPROF_HAS_RSEQ 1
#endif
#endif
#ifndef MLPROF_HAS_RSEQ
#define MLPROF_HAS_RSEQ 0
#endif

namespace mlprof::on_cpu {
namespace {

#if MLPROF_HAS_RSEQ
// The section the pointer names: empty (post_commit_offset 0), so no
// instruction is ever in it and the kernel clears the pointer instead of
// restarting anything. The kernel checks it each time it looks (a bad one
// ends the process): version 0, addresses in user space, the abort address
// outside the section and right after the signature glibc registered.
alignas(32) struct rseq_cs g_section;
uint32_t g_signature[2] = {RSEQ_SIG, 0};
ptrdiff_t g_offset = 0;
bool g_available = false;

// The thread's last read; ticks 0: none (a tick count is never 0). 16
// bytes: the extension's thread_locals stay within glibc's static TLS
// surplus (tests/python/test_extension_tls.py).
thread_local Read t_last;

inline struct rseq* area() {
  return reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) + g_offset);
}
inline uint64_t armed_value() { return reinterpret_cast<uintptr_t>(&g_section); }
inline bool registered() {
  return static_cast<int32_t>(__atomic_load_n(&area()->cpu_id, __ATOMIC_RELAXED)) >= 0;
}
inline void arm() { __atomic_store_n(&area()->rseq_cs, armed_value(), __ATOMIC_RELAXED); }
inline bool armed() { return __atomic_load_n(&area()->rseq_cs, __ATOMIC_RELAXED) == armed_value(); }

// A forked child's thread is not the one its last read was of (and its CPU
// clock starts again): it reads afresh.
void forget_in_child() {
  t_last = Read{};
  if (g_available && armed()) __atomic_store_n(&area()->rseq_cs, uint64_t{0}, __ATOMIC_RELAXED);
}
#endif

}  // namespace

int64_t thread_cpu_ns() { return clock::now_ns(CLOCK_THREAD_CPUTIME_ID); }

void init() {
#if MLPROF_HAS_RSEQ
  const auto* offset = static_cast<const ptrdiff_t*>(dlsym(RTLD_DEFAULT, "__rseq_offset"));
  const auto* size = static_cast<const unsigned int*>(dlsym(RTLD_DEFAULT, "__rseq_size"));
  if (!offset || !size || *size == 0) return;  // no glibc rseq area in this process
  g_offset = *offset;
  g_section.version = 0;
  g_section.flags = 0;
  g_section.start_ip = reinterpret_cast<uintptr_t>(&g_signature[0]);
  g_section.post_commit_offset = 0;
  g_section.abort_ip = reinterpret_cast<uintptr_t>(&g_signature[1]);
  if (!registered()) return;
  // The kernel must clear the pointer over a switch: a sleep is one (the
  // timer's slack alone keeps the thread off the CPU for about 50 us).
  arm();
  const timespec brief{0, 1};
  nanosleep(&brief, nullptr);
  const bool cleared = !armed();
  __atomic_store_n(&area()->rseq_cs, uint64_t{0}, __ATOMIC_RELAXED);
  if (!cleared) return;
  pthread_atfork(nullptr, nullptr, forget_in_child);
  g_available = true;
#endif
}

bool available() {
#if MLPROF_HAS_RSEQ
  return g_available;
#else
  return false;
#endif
}

bool stayed_since(Read* last) {
#if MLPROF_HAS_RSEQ
  if (!g_available || t_last.ticks == 0 || !armed()) return false;
  *last = t_last;
  return true;
#else
  (void)last;
  return false;
#endif
}

Read read_now() {
#if MLPROF_HAS_RSEQ
  // Armed before the read: a switch from here on clears it.
  const bool watch = g_available && registered();
  if (watch) arm();
#endif
  Read r;
  r.ticks = clock::ticks();
  r.cpu_ns = thread_cpu_ns();
#if MLPROF_HAS_RSEQ
  t_last = watch ? r : Read{};
#endif
  return r;
}

}  // namespace mlprof::on_cpu
