// SPDX-License-Identifier: GPL-2.0
/* Part of mlprof.bpf.c (one BPF object): the uprobes on sem_wait & co.
 * that mark a followed thread's futex sleep as a lock wait. Included by
 * mlprof.bpf.c after helpers.bpf.h; not a standalone header. */

/* ---- locks: sem_wait & co. in the target's C library ---------------------- */

/* CPython's locks (threading.Lock, RLock, Condition, Event, Queue; 3.13+
 * every PyMutex that parks) sleep in sem_wait, sem_timedwait or
 * sem_clockwait once the lock is taken: a futex sleep of a followed thread
 * between the entry and the return, on the semaphore, is a lock wait. The
 * loader attaches these per target pid to the C library it maps; an
 * uncontended acquire never calls them (CPython tries the lock first). */
static __always_inline int sem_mark(__u64 sem) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct thread_state* st = bpf_map_lookup_elem(&followed, &tid);

  if (st) st->sem_addr = sem;
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(mlprof_sem_wait, void* sem) { return sem_mark((__u64)sem); }

SEC("uretprobe")
int BPF_URETPROBE(mlprof_sem_wait_return) { return sem_mark(0); }
