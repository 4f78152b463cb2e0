/* CO-RE shims for kernel drift, one place (docs/design/style.md, as bcc libbpf-tools'
 * core_fixes.bpf.h). Each names the kernel change it covers. BPF only. */
#ifndef MLPROF_CORE_FIXES_BPF_H
#define MLPROF_CORE_FIXES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>

/* commit 2f064a59a11f ("sched: Change task_struct::state", v5.14) renamed
 * task_struct::state (volatile long) to task_struct::__state (unsigned int).
 * The ___o / ___x flavours let one object read whichever this kernel has. */
struct task_struct___o {
  volatile long int state;
} __attribute__((preserve_access_index));

struct task_struct___x {
  unsigned int __state;
} __attribute__((preserve_access_index));

static __always_inline __u32 mlprof_task_state(void* task) {
  struct task_struct___x* t = task;

  if (bpf_core_field_exists(t->__state)) return BPF_CORE_READ(t, __state);
  return (__u32)BPF_CORE_READ((struct task_struct___o*)task, state);
}

/* commit fa2c3254d7cf ("sched/tracing: Don't re-read p->state when emitting
 * sched_switch event", v5.18) gave the sched_switch tracepoint the state
 * __schedule() read at entry, and commit 9c2136be0878 ("sched/tracing: Append
 * prev_state to tp args instead", v5.18) made it the 4th, last argument:
 * (preempt, prev, next, prev_state). Re-reading prev's state at the
 * tracepoint races with a wakeup that already ran; older kernels have only
 * that. clang 14 cannot emit bpf_core_type_matches() on the tracepoint's
 * prototype, so the loader counts its parameters in the kernel's BTF and
 * sets this before load; the verifier then drops the branch not taken (and
 * a raw_tp program never reads a ctx slot the kernel does not pass).
 * Kernels 5.18 to 6.15 pass a stale state when a signal was pending (the
 * task stayed runnable): fixed by commit 8feb053d5319 ("sched: Fix
 * trace_sched_switch(.prev_state)", v6.16). */
const volatile bool sched_switch_has_prev_state = true;

static __always_inline __u32 mlprof_switch_prev_state(unsigned long long* ctx,
                                                      struct task_struct* prev) {
  if (sched_switch_has_prev_state) return (__u32)ctx[3];
  return mlprof_task_state(prev);
}

#endif /* MLPROF_CORE_FIXES_BPF_H */
