// SPDX-License-Identifier: GPL-2.0
/* Part of mlprof.bpf.c (one BPF object): the helpers its programs share:
 * ring-buffer records and their batching, the cgroup filter, the USDT
 * handlers' context, sessions (open, shed), following threads, NAME
 * records. Included by mlprof.bpf.c after its configuration and maps;
 * not a standalone header. */

/* ---- helpers ----------------------------------------------------------- */

static __always_inline void* reserve(__u64 size) {
  void* p = bpf_ringbuf_reserve(&events, size, 0);

  if (!p) __sync_fetch_and_add(&lost, 1);
  return p;
}

/* Submit flags for a record of `size` bytes: wake the reader only with the
 * record that brings the pending data to wakeup_bytes. Forcing a wakeup with
 * every record past the mark (a reader that lags) cost a self-IPI per
 * record: 5 us per probe hit in this VM instead of ~1. */
static __always_inline __u64 batched(__u64 size) {
  __u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA); /* ours included */

  return avail >= wakeup_bytes && avail < wakeup_bytes + size ? BPF_RB_FORCE_WAKEUP
                                                              : BPF_RB_NO_WAKEUP;
}

static __always_inline void fill_header(struct mlprof_ev_header* h, __u16 kind, __u64 ts,
                                        __u32 tgid, __u32 tid) {
  h->ts_ns = ts;
  h->tgid = tgid;
  h->tid = tid;
  h->kind = kind;
  h->reserved = 0;
  h->cpu = bpf_get_smp_processor_id();
}

static __always_inline bool cgroup_ok(void) {
  if (!filter_cgroup_id) return true;
  if (filter_cgroup_level >= 0)
    return bpf_get_current_ancestor_cgroup_id(filter_cgroup_level) == filter_cgroup_id;
  for (int level = 0; level < 16; level++) {
    __u64 id = bpf_get_current_ancestor_cgroup_id(level);

    if (id == filter_cgroup_id) return true;
    if (!id) /* above the current cgroup's own level */
      break;
  }
  return false;
}

/* Start time of the current process (its thread group leader). */
static __always_inline __u64 current_pstart(void) {
  struct task_struct* task = (struct task_struct*)bpf_get_current_task();

  return BPF_CORE_READ(task, group_leader, start_time);
}

struct usdt_ctx {
  __u64 ts;
  __u64 pstart;
  __u32 tgid;
  __u32 tid;
};

static __always_inline bool usdt_begin(struct usdt_ctx* c) {
  if (!cgroup_ok()) return false;
  __u64 pid_tgid = bpf_get_current_pid_tgid();

  c->tgid = pid_tgid >> 32;
  c->tid = (__u32)pid_tgid;
  c->ts = bpf_ktime_get_ns();
  c->pstart = current_pstart();
  return true;
}

static __always_inline bool session_open(const struct usdt_ctx* c, __u64 session) {
  struct session_key k = {.pstart = c->pstart, .session = session, .tgid = c->tgid};

  return bpf_map_lookup_elem(&sessions, &k) != NULL;
}

static __always_inline bool is_shed(const struct usdt_ctx* c, __u64 session) {
  if (*(volatile __s64*)&shed_open <= 0) return false;
  struct session_key k = {.pstart = c->pstart, .session = session, .tgid = c->tgid};

  return bpf_map_lookup_elem(&shed_sessions, &k) != NULL;
}

/* A shed session ended: forget it. */
static __always_inline void end_shed(const struct usdt_ctx* c, __u64 session) {
  struct session_key k = {.pstart = c->pstart, .session = session, .tgid = c->tgid};

  if (bpf_map_delete_elem(&shed_sessions, &k) == 0) __sync_fetch_and_add(&shed_open, -1);
}

/* The current thread works in `session`: follow it. check_open: only if the
 * session is known to be open (a lane or span event of a session whose
 * begin the agent did not see, attached mid-session, follows nothing). */
static __always_inline void follow_current(const struct usdt_ctx* c, __u64 session,
                                           bool check_open) {
  struct thread_state* st = bpf_map_lookup_elem(&followed, &c->tid);

  if (st && (st->flags & FOLLOW_SESSION) && st->session == session && st->pstart == c->pstart)
    return; /* the common case: every span of a session after its first */
  if (check_open && !session_open(c, session)) return;
  if (st) {
    st->pstart = c->pstart;
    st->tgid = c->tgid;
    st->session = session;
    st->flags |= FOLLOW_SESSION;
    return;
  }
  struct thread_state ns = {};

  ns.pstart = c->pstart;
  ns.tgid = c->tgid;
  ns.session = session;
  ns.flags = FOLLOW_SESSION;
  bpf_map_update_elem(&followed, &c->tid, &ns, BPF_NOEXIST);
}

/* A followed thread, or NULL; a thread followed only for a session that has
 * ended since is dropped here. Called on the thread's own CPU (switch,
 * fork, exit), never from a waker on another CPU, so it cannot race the
 * thread's own USDT handlers re-following it. */
static __always_inline struct thread_state* lookup_followed(__u32 tid) {
  struct thread_state* st = bpf_map_lookup_elem(&followed, &tid);

  if (!st) return NULL;
  if (st->flags & FOLLOW_CHILD) return st;
  struct session_key k = {.pstart = st->pstart, .session = st->session, .tgid = st->tgid};

  if (bpf_map_lookup_elem(&sessions, &k)) return st;
  bpf_map_delete_elem(&followed, &tid);
  return NULL;
}

/* OFF_CPU: the thread's time off the CPU from st->off_start to `end` (its
 * switch-in), with what its switch-out and wakeup saw; off-CPU ends. */
static __always_inline void send_off_cpu(struct thread_state* st, __u32 tid, __u64 end) {
  struct mlprof_ev_off_cpu* e = reserve(sizeof(*e));

  if (e) {
    fill_header(&e->h, MLPROF_EV_OFF_CPU, end, st->tgid, tid);
    e->start_ns = st->off_start;
    e->wake_ns = st->wake_ns;
    e->waker_tid = st->waker_tid;
    e->waker_tgid = st->waker_tgid;
    e->prev_state = st->prev_state;
    e->blocked = st->blocked;
    e->syscall = st->syscall;
    e->waker_kind = st->waker_kind;
    __builtin_memcpy(e->waker_comm, st->waker_comm, sizeof(e->waker_comm));
    e->futex_addr = st->futex_addr;
    e->wait_object = st->wait_object;
    e->reserved = 0;
    bpf_ringbuf_submit(e, batched(sizeof(*e)));
  }
  st->off_start = 0;
}

/* CLOCK_MONOTONIC minus the scheduler's clock (rq_clock: sched_info's
 * stamps), measured at the latest wakeup of a followed thread; 0 none yet. */
__s64 rq_clock_offset = 0;

/* `p` was enqueued just now (a wakeup), at `now`: sched_info stamped its
 * last_queued (rq_clock) there. */
static __always_inline void note_rq_clock_offset(struct task_struct* p, __u64 now) {
  if (!bpf_core_field_exists(p->sched_info)) return;
  __u64 queued = BPF_CORE_READ(p, sched_info.last_queued);

  if (queued) rq_clock_offset = (__s64)(now - queued);
}

/* `t` (a followed thread, st) switches in after a sleep whose wakeup no
 * program saw (the gap missed_switch_in describes): its enqueue is its wake
 * time. sched_info's last_queued still holds it at sched_switch (it is
 * cleared after the tracepoint, as the thread arrives). Unknown without an
 * offset or sched_info: the interval is then sent unsplit. */
static __always_inline void missed_wakeup(struct thread_state* st, struct task_struct* t,
                                          __u64 now) {
  __s64 offset = *(volatile __s64*)&rq_clock_offset;

  if (!offset || !bpf_core_field_exists(t->sched_info)) return;
  __u64 queued = BPF_CORE_READ(t, sched_info.last_queued);
  __u64 wake = queued + offset;

  if (queued && wake > st->off_start && wake <= now) st->wake_ns = wake;
}

/* `t` (a followed thread, st) runs, at its switch-out or in one of its
 * probes, while still off the CPU by st: the sched_switch program did not
 * run for its switch-in (seen on 6.18 while a uprobe was being registered
 * in its process, by this agent or another; bpf/README.md). The kernel's
 * own bookkeeping has it: sched_info's last arrival (the switch-in) and
 * run_delay (its run-queue wait), so the interval is sent as the switch-in
 * would have sent it; without sched_info, up to its wakeup if seen. */
static __always_inline void missed_switch_in(struct thread_state* st, __u32 tid,
                                             struct task_struct* t) {
  if (!st->off_start) return;
  __s64 offset = *(volatile __s64*)&rq_clock_offset;

  if (offset && bpf_core_field_exists(t->sched_info)) {
    __u64 in = BPF_CORE_READ(t, sched_info.last_arrival) + offset;
    __u64 runq = BPF_CORE_READ(t, sched_info.run_delay) - st->run_delay_out;

    if (in > st->off_start && in <= bpf_ktime_get_ns()) {
      if (runq > in - st->off_start) runq = in - st->off_start;
      /* A wakeup stamped after the switch-in came while the thread ran
       * (the kernel wakes a running thread that was about to sleep, as a
       * GIL handover does) and replaced this sleep's: its enqueue is then
       * the kernel's, in - runq. Kept, it gave a wake after the end. */
      if (st->blocked && (!st->wake_ns || st->wake_ns > in)) st->wake_ns = in - runq;
      send_off_cpu(st, tid, in);
      return;
    }
  }
  if (st->blocked && st->wake_ns > st->off_start) {
    send_off_cpu(st, tid, st->wake_ns);
    return;
  }
  st->off_start = 0;
}

/* MLPROF_EV_NAME for a function (is_label 0) or label id, the first time the
 * process uses it. The id is marked seen only when the record was reserved
 * and the name was read: a lost or unreadable NAME is sent again with the
 * next span that uses the id (a later NAME for an id replaces the earlier). */
static __always_inline void send_name_once(const struct usdt_ctx* c, __u32 id, __u32 is_label,
                                           const char* name, const char* module, const char* file,
                                           __s64 line) {
  struct seen_key k = {.pstart = c->pstart, .tgid = c->tgid, .id = id, .is_label = is_label};

  if (bpf_map_lookup_elem(&seen_ids, &k)) return;
  struct mlprof_ev_name* e = reserve(sizeof(*e));

  if (!e) return;
  fill_header(&e->h, MLPROF_EV_NAME, c->ts, c->tgid, c->tid);
  e->id = id;
  e->is_label = is_label;
  e->line = line;
  long n;

  if (is_label) {
    n = bpf_probe_read_user_str(e->name, MLPROF_LABEL_LEN, name);
    e->module[0] = 0;
    e->file[0] = 0;
  } else {
    n = bpf_probe_read_user_str(e->name, sizeof(e->name), name);
    if (bpf_probe_read_user_str(e->module, sizeof(e->module), module) < 0) e->module[0] = 0;
    if (bpf_probe_read_user_str(e->file, sizeof(e->file), file) < 0) e->file[0] = 0;
  }
  if (n < 0) e->name[0] = 0;
  bpf_ringbuf_submit(e, batched(sizeof(*e)));
  if (n > 0) {
    __u8 one = 1;

    bpf_map_update_elem(&seen_ids, &k, &one, BPF_ANY);
  }
}

static __always_inline int emit_span(const struct usdt_ctx* c, __u16 kind, __u64 session,
                                     __u64 lane_index, __u32 function, __u32 label, __u32 depth,
                                     __u32 flags) {
  struct mlprof_ev_span* e = reserve(sizeof(*e));

  if (!e) return 0;
  fill_header(&e->h, kind, c->ts, c->tgid, c->tid);
  e->session = session;
  e->lane = MLPROF_HI(lane_index);
  e->index = MLPROF_LO(lane_index);
  e->function = function;
  e->label = label;
  e->depth = depth;
  e->flags = flags;
  bpf_ringbuf_submit(e, batched(sizeof(*e)));
  return 0;
}
