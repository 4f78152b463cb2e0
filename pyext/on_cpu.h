#pragma once
// Whether the calling thread stayed on the CPU since its last read of its
// CPU clock, told without a system call. Running vs waiting reads that
// clock (CLOCK_THREAD_CPUTIME_ID, a system call: 0.6-1.2 us on the CI VM)
// at most once per kOffCpuQuantumNs of a lane's wall time; a busy lane
// spends 1-2% of its time there. The kernel's rseq ABI gives the answer
// for free: glibc registers an rseq area per thread, and the kernel sets
// its rseq_cs pointer to NULL whenever it switches the thread out or
// delivers it a signal outside the critical section the pointer names.
// A read points it at a section no code runs in (arm); while it still
// does, the thread never left the CPU, and its CPU clock is that read's
// plus the wall time since. Where glibc has no rseq area, or the kernel
// did not clear the pointer over a sleep at import, every read is a
// system call, as before.

#include <cstdint>

namespace mlprof::on_cpu {

// The calling thread's CPU clock (CLOCK_THREAD_CPUTIME_ID), in ns: a
// system call (no vDSO).
int64_t thread_cpu_ns();

// Once, at import (with the GIL, on the importing thread).
void init();
// Whether the answer comes without a system call in this process.
bool available();

// The thread's last read of its CPU clock.
struct Read {
  int64_t ticks = 0;   // clock::ticks() when it was read
  int64_t cpu_ns = 0;  // the thread's CPU clock then
};

// True, with the thread's last read, if the thread has not left the CPU
// since that read (take the time to pair with it before asking).
bool stayed_since(Read* last);
// Reads the thread's CPU clock, pairs it with clock::ticks(), and arms the
// pointer for the next stayed_since().
Read read_now();

}  // namespace mlprof::on_cpu
