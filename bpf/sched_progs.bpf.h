// SPDX-License-Identifier: GPL-2.0
/* Part of mlprof.bpf.c (one BPF object): the scheduler and thread-lifetime
 * programs (followed threads only), each in a tp_btf and a raw_tp variant,
 * and the interrupt marks that tell who woke a thread. Included by
 * mlprof.bpf.c after helpers.bpf.h; not a standalone header. */

/* ---- scheduler and thread lifetime (followed threads only) -------------- */

#define MLPROF_TASK_DEAD 0x80 /* TASK_DEAD: the state of a task's final switch-out */
#define MLPROF_ENOSYS 38

/* What is running now on this CPU besides the current task: timer callbacks
 * (hrtimer_expire_*, timer_expire_*), softirqs and device interrupt handlers
 * (irq:*), counted by their tracepoints. A wakeup from one of them is not
 * the doing of the task it interrupted (the CPU hog, the idle task).
 * Tracepoints, not the preempt count: the per-CPU __preempt_count (and
 * pcpu_hot on v6.2 to v6.14) is a typed ksym the kernel resolves through
 * kallsyms, which lists per-CPU variables only with CONFIG_KALLSYMS_ALL (not
 * on this 6.18 kernel: the load fails). Counts, not flags: a hard IRQ or an
 * hrtimer can interrupt a softirq's timer callback. */
struct irq_depth {
  __u32 hrtimer;
  __u32 wheel;
  __u32 softirq;
  __u32 hardirq;
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct irq_depth);
} in_irq SEC(".maps");

static __always_inline __u32 waker_kind(void) {
  __u32 zero = 0;
  struct irq_depth* d = bpf_map_lookup_elem(&in_irq, &zero);

  if (!d) return MLPROF_WAKER_TASK;
  if (d->hrtimer) /* hard-IRQ context, above any softirq it interrupted */
    return MLPROF_WAKER_TIMER;
  if (d->hardirq) return MLPROF_WAKER_HARDIRQ;
  if (d->wheel) return MLPROF_WAKER_TIMER;
  if (d->softirq) return MLPROF_WAKER_SOFTIRQ;
  return MLPROF_WAKER_TASK;
}

#define IRQ_HRTIMER 0
#define IRQ_WHEEL 1
#define IRQ_SOFTIRQ 2
#define IRQ_HARDIRQ 3

static __always_inline int irq_mark(int which, int delta) {
  __u32 zero = 0;
  struct irq_depth* d = bpf_map_lookup_elem(&in_irq, &zero);

  if (!d) return 0;
  __u32* c = which == IRQ_HRTIMER   ? &d->hrtimer
             : which == IRQ_WHEEL   ? &d->wheel
             : which == IRQ_SOFTIRQ ? &d->softirq
                                    : &d->hardirq;

  if (delta > 0)
    *c += 1;
  else if (*c) /* an exit whose entry came before the attach */
    *c -= 1;
  return 0;
}

/* The syscall the current task (prev, at sched_switch) is in: the number its
 * entry saved in pt_regs->orig_ax while ax still holds -ENOSYS (the entry code
 * sets it so; a fault or interrupt from user mode leaves the user's ax there
 * and an error code or vector in orig_ax). -1: not in a syscall, or a kernel
 * without bpf_task_pt_regs (v5.15), or not x86-64. */
#define MLPROF_SYS_FUTEX 202 /* x86-64 */

static __always_inline __s32 current_syscall(__u64* first_arg) {
#if defined(__TARGET_ARCH_x86)
  if (!bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs)) return -1;
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(bpf_get_current_task_btf());
  long ax = BPF_CORE_READ(regs, ax);
  long orig = BPF_CORE_READ(regs, orig_ax);

  if (ax != -MLPROF_ENOSYS || orig < 0 || orig > 0xffff) return -1;
  if (orig == MLPROF_SYS_FUTEX) /* its uaddr: which futex (the GIL's, a lock's) */
    *first_arg = BPF_CORE_READ(regs, di);
  return (__s32)orig;
#else
  return -1;
#endif
}

/* What a thread that went to sleep in futex waited on: a lock when the
 * futex is the semaphore of the sem_*wait call it is in (a glibc sem_t is
 * 32 bytes; its futex word is at its start), else a futex the agent
 * classifies by address (the GIL's range comes with session_begin). */
static __always_inline void note_futex(struct thread_state* st, __u64 addr) {
  st->futex_addr = addr;
  st->wait_object = st->sem_addr && addr - st->sem_addr < 32 ? MLPROF_WAIT_LOCK : MLPROF_WAIT_FUTEX;
}

/* The final switch-out of a dead followed thread: the end of its following.
 * THREAD_EXIT went out at sched_process_exit, which comes earlier: on its way
 * out from there the thread can still be preempted, and wait for a CPU (its
 * OFF_CPU records are its own, stamped after its exit). */
static __always_inline void on_last_switch(__u32 tid) { bpf_map_delete_elem(&followed, &tid); }

/* prev_tid/next_tid come from the wrappers: tp_btf reads them with plain
 * loads (BTF pointers), raw_tp with BPF_CORE_READ; this runs ~100k times a
 * second on a busy machine, for every thread, so a helper call counts. */
static __always_inline int on_switch(unsigned long long* ctx, bool preempt,
                                     struct task_struct* prev, __u32 prev_tid,
                                     struct task_struct* next, __u32 next_tid) {
  __u64 now = 0;
  struct thread_state* st = prev_tid ? lookup_followed(prev_tid) : NULL;

  if (st) {
    missed_switch_in(st, prev_tid, prev);
    /* Off-CPU begins. Blocked: it went to sleep (a voluntary switch
     * with a state other than TASK_RUNNING); otherwise it was
     * preempted or yielded and stays runnable: all run-queue wait. */
    __u32 state = mlprof_switch_prev_state(ctx, prev);

    if (state & MLPROF_TASK_DEAD) {
      on_last_switch(prev_tid);
    } else {
      now = bpf_ktime_get_ns();
      st->off_start = now;
      if (bpf_core_field_exists(prev->sched_info))
        st->run_delay_out = BPF_CORE_READ(prev, sched_info.run_delay);
      st->prev_state = state;
      st->blocked = !preempt && state != 0;
      st->wake_ns = st->blocked ? 0 : now;
      st->waker_tid = 0;
      st->waker_tgid = 0;
      st->waker_kind = MLPROF_WAKER_TASK;
      st->waker_comm[0] = 0;
      __u64 arg = 0;

      st->syscall = st->blocked ? current_syscall(&arg) : -1;
      st->futex_addr = 0;
      st->wait_object = MLPROF_WAIT_NONE;
      if (st->syscall == MLPROF_SYS_FUTEX) note_futex(st, arg);
    }
  }

  st = next_tid ? lookup_followed(next_tid) : NULL;
  if (!st || !st->off_start) return 0;
  if (!now) now = bpf_ktime_get_ns();
  if (st->blocked && !st->wake_ns) missed_wakeup(st, next, now);
  send_off_cpu(st, next_tid, now);
  return 0;
}

/* The waker comes from sched_waking: it always runs in the waker's context
 * (sched_wakeup may run on the target CPU, from an IPI), so the current task
 * is the waker, unless an interrupt is running: then the current task is
 * whatever the interrupt hit (often the idle task, tid 0) and the waker is
 * the interrupt (waker_kind). The waker's comm is read now: a thread renamed
 * since it started is named by its current name. wake_ns is stamped here
 * and again at sched_wakeup (on_wakeup), the enqueue. */
static __always_inline int on_waking(__u32 tid) {
  struct thread_state* st = bpf_map_lookup_elem(&followed, &tid);

  if (!st || !st->off_start || !st->blocked || st->wake_ns) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();

  st->wake_ns = bpf_ktime_get_ns();
  st->waker_tid = (__u32)pid_tgid;
  st->waker_tgid = pid_tgid >> 32;
  st->waker_kind = waker_kind();
  if (bpf_get_current_comm(st->waker_comm, sizeof(st->waker_comm))) st->waker_comm[0] = 0;
  return 0;
}

/* sched_wakeup: the thread is on a run queue now. Its run-queue wait starts
 * here, as the kernel's run_delay (schedstat) does: between sched_waking and
 * this, the wakeup can wait for an IPI to an idle CPU (in a VM, for the host
 * to run that vCPU: hundreds of microseconds), and neither the kernel nor
 * this counts that as waiting for a CPU; it stays blocked time. Runs before
 * the thread's next switch-in (it must be enqueued to run), after
 * on_waking of the same wakeup; without one (attached in between) the
 * thread's wake time is stamped here alone. */
static __always_inline int on_wakeup(struct task_struct* p, __u32 tid) {
  struct thread_state* st = bpf_map_lookup_elem(&followed, &tid);

  if (!st || !st->off_start || !st->blocked) {
    /* Any thread's until a followed one's: missed_wakeup needs one from the start. */
    if (!*(volatile __s64*)&rq_clock_offset) note_rq_clock_offset(p, bpf_ktime_get_ns());
    return 0;
  }
  st->wake_ns = bpf_ktime_get_ns();
  note_rq_clock_offset(p, st->wake_ns);
  return 0;
}

/* A new thread of a followed thread becomes runnable for the first time:
 * its wait until it first runs is run-queue wait (an OFF_CPU record with
 * blocked 0 at its first switch-in; the waker is its creator). */
static __always_inline int on_wakeup_new(struct task_struct* p) {
  __u32 tid = BPF_CORE_READ(p, pid);
  struct thread_state* st = bpf_map_lookup_elem(&followed, &tid);

  if (!st) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u64 now = bpf_ktime_get_ns();

  st->off_start = now;
  st->wake_ns = now;
  st->waker_tid = (__u32)pid_tgid;
  st->waker_tgid = pid_tgid >> 32;
  st->prev_state = 0;
  st->blocked = 0;
  st->syscall = -1;
  st->futex_addr = 0;
  st->wait_object = MLPROF_WAIT_NONE;
  st->waker_kind = MLPROF_WAKER_TASK;
  if (bpf_get_current_comm(st->waker_comm, sizeof(st->waker_comm))) st->waker_comm[0] = 0;
  return 0;
}

/* Runs in the parent (the creator). Threads only: a new process is not
 * followed (its probes are not attached; the agent attaches pids itself). */
static __always_inline int on_fork(struct task_struct* parent, struct task_struct* child) {
  __u32 parent_tid = BPF_CORE_READ(parent, pid);
  struct thread_state* pst = lookup_followed(parent_tid);

  if (!pst) return 0;
  __u32 child_tgid = BPF_CORE_READ(child, tgid);

  if (child_tgid != pst->tgid) return 0;
  __u32 child_tid = BPF_CORE_READ(child, pid);
  struct thread_state ns = {};

  ns.pstart = pst->pstart;
  ns.tgid = child_tgid;
  ns.session = pst->session;
  ns.flags = FOLLOW_CHILD;
  ns.syscall = -1;
  bpf_map_update_elem(&followed, &child_tid, &ns, BPF_ANY);

  struct mlprof_ev_thread* e = reserve(sizeof(*e));

  if (!e) return 0;
  fill_header(&e->h, MLPROF_EV_THREAD_START, bpf_ktime_get_ns(), child_tgid, child_tid);
  e->parent_tid = parent_tid;
  e->exit_code = 0;
  BPF_CORE_READ_STR_INTO(&e->comm, child, comm);
  bpf_ringbuf_submit(e, batched(sizeof(*e)));
  return 0;
}

/* Runs in the exiting thread, for every thread (the process's last one too).
 * THREAD_EXIT goes out now (the joiner places the session's threads by it,
 * and a session's end waits only 50 ms for late records: the final
 * switch-out can come later on a loaded CPU), but the thread stays followed
 * until its final switch-out (on_last_switch). A thread followed only for a
 * session that has ended was dropped by lookup_followed, so an entry
 * outlives its thread only when that final switch is never seen (the
 * programs detached in between); a new thread with the tid replaces it. */
static __always_inline int on_exit(struct task_struct* p) {
  __u32 tid = BPF_CORE_READ(p, pid);
  struct thread_state* st = lookup_followed(tid);

  if (!st) return 0;
  struct mlprof_ev_thread* e = reserve(sizeof(*e));

  if (e) {
    fill_header(&e->h, MLPROF_EV_THREAD_EXIT, bpf_ktime_get_ns(), st->tgid, tid);
    e->parent_tid = 0;
    e->exit_code = (__u32)BPF_CORE_READ(p, exit_code);
    BPF_CORE_READ_STR_INTO(&e->comm, p, comm);
    bpf_ringbuf_submit(e, batched(sizeof(*e)));
  }
  return 0;
}

/* tp_btf variant (BTF-typed arguments; kernel >= 5.5). */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct* prev, struct task_struct* next) {
  return on_switch(ctx, preempt, prev, prev->pid, next, next->pid);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct* p) { return on_waking(p->pid); }

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct* p) { return on_wakeup(p, p->pid); }

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_btf, struct task_struct* p) { return on_wakeup_new(p); }

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork_btf, struct task_struct* parent, struct task_struct* child) {
  return on_fork(parent, child);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct* p) { return on_exit(p); }

/* raw_tp variant (untyped u64 arguments; kernel >= 4.17). */
SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct* prev, struct task_struct* next) {
  return on_switch(ctx, preempt, prev, BPF_CORE_READ(prev, pid), next, BPF_CORE_READ(next, pid));
}

SEC("raw_tp/sched_waking")
int BPF_PROG(sched_waking_raw, struct task_struct* p) { return on_waking(BPF_CORE_READ(p, pid)); }

SEC("raw_tp/sched_wakeup")
int BPF_PROG(sched_wakeup_raw, struct task_struct* p) {
  return on_wakeup(p, BPF_CORE_READ(p, pid));
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_raw, struct task_struct* p) { return on_wakeup_new(p); }

SEC("raw_tp/sched_process_fork")
int BPF_PROG(sched_process_fork_raw, struct task_struct* parent, struct task_struct* child) {
  return on_fork(parent, child);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw, struct task_struct* p) { return on_exit(p); }

/* Interrupt context (waker_kind): raw_tp in both variants, they read no
 * argument. */
SEC("raw_tp/hrtimer_expire_entry")
int BPF_PROG(hrtimer_expire_entry_raw) { return irq_mark(IRQ_HRTIMER, 1); }

SEC("raw_tp/hrtimer_expire_exit")
int BPF_PROG(hrtimer_expire_exit_raw) { return irq_mark(IRQ_HRTIMER, -1); }

SEC("raw_tp/timer_expire_entry")
int BPF_PROG(timer_expire_entry_raw) { return irq_mark(IRQ_WHEEL, 1); }

SEC("raw_tp/timer_expire_exit")
int BPF_PROG(timer_expire_exit_raw) { return irq_mark(IRQ_WHEEL, -1); }

SEC("raw_tp/softirq_entry")
int BPF_PROG(softirq_entry_raw) { return irq_mark(IRQ_SOFTIRQ, 1); }

SEC("raw_tp/softirq_exit")
int BPF_PROG(softirq_exit_raw) { return irq_mark(IRQ_SOFTIRQ, -1); }

SEC("raw_tp/irq_handler_entry")
int BPF_PROG(irq_handler_entry_raw) { return irq_mark(IRQ_HARDIRQ, 1); }

SEC("raw_tp/irq_handler_exit")
int BPF_PROG(irq_handler_exit_raw) { return irq_mark(IRQ_HARDIRQ, -1); }
