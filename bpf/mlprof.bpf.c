// SPDX-License-Identifier: GPL-2.0
/* The kernel side of mlprof-ebpf (CO-RE, libbpf-tools style).
 *
 * USDT handlers for the 8 probes of the contract (mlprof_usdt.h) turn each
 * hit into a ring-buffer record (mlprof_events.h). Scheduler tracepoints add
 * what only the kernel sees, for FOLLOWED threads only:
 *   - a thread is followed while it is in an open session of its process:
 *     session_begin ran on it, or lane_begin/span_enter of an open session
 *     ran on it (another lane of that session);
 *   - a thread started by a followed thread is followed until it exits.
 * sched_switch/sched_waking/sched_wakeup/sched_wakeup_new look the thread up in
 * `followed` and return before any ring-buffer reserve when it is not there:
 * unfiltered, sched_switch fires ~68k times a second on an idle machine.
 *
 * Scheduler programs come in two variants, tp_btf (BTF-typed, kernel >= 5.5)
 * and raw_tp; the loader probes the kernel and autoloads one set. Both call
 * the same __always_inline bodies, which read task fields with
 * BPF_CORE_READ so that the raw_tp variant works too.
 *
 * Configuration: const volatile globals set in the skeleton's rodata before
 * load (cgroup filter, the sched_switch shim in core_fixes.bpf.h); the ring
 * buffer's size is set on the map before load.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* libbpf keeps one USDT spec per (attach call, distinct argument layout) in a
 * map of this many entries, default 256. The agent attaches per pid (8
 * probes, several call sites each), so 256 would cap it at a few dozen
 * processes; libbpf sizes the map from this value. */
#define BPF_USDT_MAX_SPEC_CNT 4096
#include <bpf/usdt.bpf.h>

#include "mlprof_events.h"
#include "core_fixes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* ---- configuration (rodata, set before load) --------------------------- */

/* cgroup v2 id the target processes must be in (or below); 0: no filter. */
const volatile __u64 filter_cgroup_id = 0;
/* Its level under the v2 root (root = 0); -1: search levels 0..15. */
const volatile int filter_cgroup_level = -1;
/* Wake the reader only once this many bytes wait in the ring (or at a
 * session's end). Waking it on every record made it preempt the traced
 * thread tens of thousands of times a second under load (both on 2 CPUs);
 * the reader polls with a timeout, so a quiet ring is still drained. */
const volatile __u64 wakeup_bytes = 1 << 20;
/* Shed whole sessions, at their begin, while this many bytes wait in the
 * ring (0: never): a reader that cannot keep up gets fewer sessions, each
 * whole, instead of records lost from sessions in flight (torn trees). */
const volatile __u64 shed_bytes = 16 << 20;

/* ---- state ------------------------------------------------------------- */

/* Records the ring buffer could not take (reserve failed): read by stats(). */
__u64 lost = 0;
/* Sessions shed at their begin (the reader was behind): read by stats(). */
__u64 shed = 0;
/* Shed sessions not ended yet: a hint, so that the handlers look a session
 * up in shed_sessions only while there may be one. */
__s64 shed_open = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20); /* the loader sets LoaderOptions::ring_bytes */
} events SEC(".maps");

#define FOLLOW_SESSION 0x1 /* in session `session` of its process */
#define FOLLOW_CHILD 0x2   /* started by a followed thread: until its last switch-out */

struct thread_state {
	__u64 pstart;   /* the process's start time (pid reuse) */
	__u64 session;  /* the session it was last seen in */
	__u64 off_start; /* switched out at; 0: on the CPU */
	__u64 wake_ns;   /* made runnable at; 0: not yet */
	__u32 tgid;
	__u32 flags; /* FOLLOW_* */
	__u32 waker_tid;
	__u32 waker_tgid;
	__u32 prev_state;
	__u32 blocked;
	__s32 syscall;    /* the syscall it blocked in, -1 none */
	__u32 waker_kind; /* enum mlprof_waker_kind */
	char waker_comm[16];
	__u64 futex_addr;  /* blocked in futex: its address */
	__u64 sem_addr;    /* inside sem_wait & co. on this semaphore (a lock), 0 not */
	__u32 wait_object; /* enum mlprof_wait_object */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct thread_state);
} followed SEC(".maps");

/* Open sessions. LRU: a process that dies mid-session never sends
 * session_end; its entry ages out instead of filling the map. */
struct session_key {
	__u64 pstart;
	__u64 session;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct session_key);
	__type(value, __u32); /* the thread that began it */
} sessions SEC(".maps");

/* Sessions shed at their begin: their records are not sent either. LRU: one
 * whose end never comes ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct session_key);
	__type(value, __u8);
} shed_sessions SEC(".maps");

/* Function and label ids whose strings were sent (MLPROF_EV_NAME). Keyed by
 * the process's start time too, so a new process that reuses a pid gets its
 * names sent again. */
struct seen_key {
	__u64 pstart;
	__u32 tgid;
	__u32 id;
	__u32 is_label;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seen_key);
	__type(value, __u8);
} seen_ids SEC(".maps");

/* ---- helpers ----------------------------------------------------------- */

static __always_inline void *reserve(__u64 size)
{
	void *p = bpf_ringbuf_reserve(&events, size, 0);

	if (!p)
		__sync_fetch_and_add(&lost, 1);
	return p;
}

/* Submit flags for a record of `size` bytes: wake the reader only with the
 * record that brings the pending data to wakeup_bytes. Forcing a wakeup with
 * every record past the mark (a reader that lags) cost a self-IPI per
 * record: 5 us per probe hit in this VM instead of ~1. */
static __always_inline __u64 batched(__u64 size)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA); /* ours included */

	return avail >= wakeup_bytes && avail < wakeup_bytes + size ? BPF_RB_FORCE_WAKEUP
								      : BPF_RB_NO_WAKEUP;
}

static __always_inline void fill_header(struct mlprof_ev_header *h, __u16 kind, __u64 ts, __u32 tgid,
					__u32 tid)
{
	h->ts_ns = ts;
	h->tgid = tgid;
	h->tid = tid;
	h->kind = kind;
	h->reserved = 0;
	h->cpu = bpf_get_smp_processor_id();
}

static __always_inline bool cgroup_ok(void)
{
	if (!filter_cgroup_id)
		return true;
	if (filter_cgroup_level >= 0)
		return bpf_get_current_ancestor_cgroup_id(filter_cgroup_level) == filter_cgroup_id;
	for (int level = 0; level < 16; level++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);

		if (id == filter_cgroup_id)
			return true;
		if (!id) /* above the current cgroup's own level */
			break;
	}
	return false;
}

/* Start time of the current process (its thread group leader). */
static __always_inline __u64 current_pstart(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return BPF_CORE_READ(task, group_leader, start_time);
}

struct usdt_ctx {
	__u64 ts;
	__u64 pstart;
	__u32 tgid;
	__u32 tid;
};

static __always_inline bool usdt_begin(struct usdt_ctx *c)
{
	if (!cgroup_ok())
		return false;
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	c->tgid = pid_tgid >> 32;
	c->tid = (__u32)pid_tgid;
	c->ts = bpf_ktime_get_ns();
	c->pstart = current_pstart();
	return true;
}

static __always_inline bool session_open(const struct usdt_ctx *c, __u64 session)
{
	struct session_key k = {.pstart = c->pstart, .session = session, .tgid = c->tgid};

	return bpf_map_lookup_elem(&sessions, &k) != NULL;
}

static __always_inline bool is_shed(const struct usdt_ctx *c, __u64 session)
{
	if (*(volatile __s64 *)&shed_open <= 0)
		return false;
	struct session_key k = {.pstart = c->pstart, .session = session, .tgid = c->tgid};

	return bpf_map_lookup_elem(&shed_sessions, &k) != NULL;
}

/* A shed session ended: forget it. */
static __always_inline void end_shed(const struct usdt_ctx *c, __u64 session)
{
	struct session_key k = {.pstart = c->pstart, .session = session, .tgid = c->tgid};

	if (bpf_map_delete_elem(&shed_sessions, &k) == 0)
		__sync_fetch_and_add(&shed_open, -1);
}

/* The current thread works in `session`: follow it. check_open: only if the
 * session is known to be open (a lane or span event of a session whose
 * begin the agent did not see, attached mid-session, follows nothing). */
static __always_inline void follow_current(const struct usdt_ctx *c, __u64 session, bool check_open)
{
	struct thread_state *st = bpf_map_lookup_elem(&followed, &c->tid);

	if (st && (st->flags & FOLLOW_SESSION) && st->session == session && st->pstart == c->pstart)
		return; /* the common case: every span of a session after its first */
	if (check_open && !session_open(c, session))
		return;
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
static __always_inline struct thread_state *lookup_followed(__u32 tid)
{
	struct thread_state *st = bpf_map_lookup_elem(&followed, &tid);

	if (!st)
		return NULL;
	if (st->flags & FOLLOW_CHILD)
		return st;
	struct session_key k = {.pstart = st->pstart, .session = st->session, .tgid = st->tgid};

	if (bpf_map_lookup_elem(&sessions, &k))
		return st;
	bpf_map_delete_elem(&followed, &tid);
	return NULL;
}

/* MLPROF_EV_NAME for a function (is_label 0) or label id, the first time the
 * process uses it. The id is marked seen only when the record was reserved
 * and the name was read: a lost or unreadable NAME is sent again with the
 * next span that uses the id (a later NAME for an id replaces the earlier). */
static __always_inline void send_name_once(const struct usdt_ctx *c, __u32 id, __u32 is_label,
					   const char *name, const char *module, const char *file,
					   __s64 line)
{
	struct seen_key k = {.pstart = c->pstart, .tgid = c->tgid, .id = id, .is_label = is_label};

	if (bpf_map_lookup_elem(&seen_ids, &k))
		return;
	struct mlprof_ev_name *e = reserve(sizeof(*e));

	if (!e)
		return;
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
		if (bpf_probe_read_user_str(e->module, sizeof(e->module), module) < 0)
			e->module[0] = 0;
		if (bpf_probe_read_user_str(e->file, sizeof(e->file), file) < 0)
			e->file[0] = 0;
	}
	if (n < 0)
		e->name[0] = 0;
	bpf_ringbuf_submit(e, batched(sizeof(*e)));
	if (n > 0) {
		__u8 one = 1;

		bpf_map_update_elem(&seen_ids, &k, &one, BPF_ANY);
	}
}

static __always_inline int emit_span(const struct usdt_ctx *c, __u16 kind, __u64 session, __u64 lane_index,
				     __u32 function, __u32 label, __u32 depth, __u32 flags)
{
	struct mlprof_ev_span *e = reserve(sizeof(*e));

	if (!e)
		return 0;
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

/* ---- USDT handlers (attached per pid by the loader) --------------------- */

SEC("usdt")
int BPF_USDT(mlprof_session_begin, __u64 session, __s64 ceiling, __u64 flags, __u64 gil, __u64 gil_bytes)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c))
		return 0;
	struct session_key k = {.pstart = c.pstart, .session = session, .tgid = c.tgid};

	if (shed_bytes && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= shed_bytes) {
		__u8 one = 1;

		if (bpf_map_update_elem(&shed_sessions, &k, &one, BPF_NOEXIST) == 0)
			__sync_fetch_and_add(&shed_open, 1);
		__sync_fetch_and_add(&shed, 1);
		return 0;
	}
	bpf_map_update_elem(&sessions, &k, &c.tid, BPF_ANY);
	follow_current(&c, session, false);

	struct mlprof_ev_session *e = reserve(sizeof(*e));

	if (!e)
		return 0;
	fill_header(&e->h, MLPROF_EV_SESSION_BEGIN, c.ts, c.tgid, c.tid);
	e->session = session;
	e->ceiling = ceiling;
	e->flags = flags;
	e->gil = gil; /* an extension of three arguments: bpf_usdt_arg gives 0 */
	e->gil_bytes = gil_bytes;
	bpf_ringbuf_submit(e, batched(sizeof(*e)));
	return 0;
}

/* The end of a session: its SESSION_END record, then it is no longer open
 * and its thread no longer followed for it. */
static __always_inline void end_session(const struct usdt_ctx *cp, __u64 session, __u64 dropped, bool wake)
{
	struct usdt_ctx c = *cp;
	struct mlprof_ev_session *e = reserve(sizeof(*e));

	if (e) {
		fill_header(&e->h, MLPROF_EV_SESSION_END, c.ts, c.tgid, c.tid);
		e->session = session;
		e->ceiling = 0;
		e->flags = dropped;
		e->gil = 0;
		e->gil_bytes = 0;
		/* v1: a finished session wakes the reader now (a plain submit would
		 * not, with records it was not woken for still ahead of it). v2
		 * (wake false): the batched rule; the reader's 250 ms poll timeout
		 * bounds the delay. A wakeup per session cost the agent ~90 us of
		 * CPU a session (a context switch and a poll for 3 records). */
		bpf_ringbuf_submit(e, wake ? BPF_RB_FORCE_WAKEUP : batched(sizeof(*e)));
	}
	/* Other lanes' threads are dropped lazily, at their next switch. */
	struct session_key k = {.pstart = c.pstart, .session = session, .tgid = c.tgid};

	bpf_map_delete_elem(&sessions, &k);
	struct thread_state *st = bpf_map_lookup_elem(&followed, &c.tid);

	if (st && st->session == session && st->pstart == c.pstart) {
		if (st->flags & FOLLOW_CHILD)
			st->flags &= ~FOLLOW_SESSION;
		else
			bpf_map_delete_elem(&followed, &c.tid);
	}
}

SEC("usdt")
int BPF_USDT(mlprof_session_end, __u64 session, __u64 dropped)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c))
		return 0;
	if (is_shed(&c, session)) {
		end_shed(&c, session);
		return 0;
	}
	end_session(&c, session, dropped, true);
	return 0;
}

SEC("usdt")
int BPF_USDT(mlprof_lane_begin, __u64 session, __u64 lane_parent, __u64 parent_call_task, __u64 thread_ident,
	     const char *thread_name)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c) || is_shed(&c, session))
		return 0;
	follow_current(&c, session, true);

	struct mlprof_ev_lane *e = reserve(sizeof(*e));

	if (!e)
		return 0;
	fill_header(&e->h, MLPROF_EV_LANE_BEGIN, c.ts, c.tgid, c.tid);
	e->session = session;
	e->lane = MLPROF_HI(lane_parent);
	e->parent_lane = MLPROF_LO(lane_parent);
	e->parent_call = MLPROF_HI(parent_call_task);
	e->task = MLPROF_LO(parent_call_task);
	e->thread_ident = thread_ident;
	if (bpf_probe_read_user_str(e->thread_name, sizeof(e->thread_name), thread_name) < 0)
		e->thread_name[0] = 0;
	bpf_ringbuf_submit(e, batched(sizeof(*e)));
	return 0;
}

SEC("usdt")
int BPF_USDT(mlprof_span_enter, __u64 session, __u64 lane_index, __u64 function_label, __u64 depth_flags,
	     const char *name, const char *module, const char *file, __s64 line, const char *label)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c) || is_shed(&c, session))
		return 0;
	follow_current(&c, session, true);

	__u32 function = MLPROF_HI(function_label);
	__u32 label_id = MLPROF_LO(function_label);

	send_name_once(&c, function, 0, name, module, file, line);
	if (label_id)
		send_name_once(&c, label_id, 1, label, NULL, NULL, 0);
	return emit_span(&c, MLPROF_EV_SPAN_ENTER, session, lane_index, function, label_id,
			 MLPROF_HI(depth_flags), MLPROF_LO(depth_flags));
}

SEC("usdt")
int BPF_USDT(mlprof_span_exit, __u64 session, __u64 lane_index, __u64 flags)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c) || is_shed(&c, session))
		return 0;
	return emit_span(&c, MLPROF_EV_SPAN_EXIT, session, lane_index, 0, 0, 0, (__u32)flags);
}

SEC("usdt")
int BPF_USDT(mlprof_span_suspend, __u64 session, __u64 lane_index)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c) || is_shed(&c, session))
		return 0;
	return emit_span(&c, MLPROF_EV_SPAN_SUSPEND, session, lane_index, 0, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(mlprof_span_resume, __u64 session, __u64 lane_index)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c) || is_shed(&c, session))
		return 0;
	return emit_span(&c, MLPROF_EV_SPAN_RESUME, session, lane_index, 0, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(mlprof_span_io, __u64 session, __u64 lane_index, __u64 role, const char *name, const char *summary)
{
	struct usdt_ctx c;

	if (!usdt_begin(&c) || is_shed(&c, session))
		return 0;
	struct mlprof_ev_io *e = reserve(sizeof(*e));

	if (!e)
		return 0;
	fill_header(&e->h, MLPROF_EV_SPAN_IO, c.ts, c.tgid, c.tid);
	e->session = session;
	e->lane = MLPROF_HI(lane_index);
	e->index = MLPROF_LO(lane_index);
	e->role = (__u32)role;
	e->reserved = 0;
	if (bpf_probe_read_user_str(e->name, sizeof(e->name), name) < 0)
		e->name[0] = 0;
	if (bpf_probe_read_user_str(e->summary, sizeof(e->summary), summary) < 0)
		e->summary[0] = 0;
	bpf_ringbuf_submit(e, batched(sizeof(*e)));
	return 0;
}

/* ---- contract v2: the session's spans in one probe hit ------------------ */

/* session_spans: the NAME records of the ids the body uses (once per process
 * and id, as span_enter sends them), then the body in MLPROF_CHUNK_BYTES
 * pieces, then (final, not a checkpoint) SESSION_END. Copied synchronously, while the probe runs: the
 * body is the extension's scratch buffer, valid only until it returns, and
 * a copy here cannot race the process (an agent reading it later with
 * process_vm_readv would need the extension to keep every body until read,
 * and a process that exits right after its session would lose it).
 * The loops are bpf_loop callbacks (kernel 5.17+): verified once each, where
 * unrolled bounded loops of this size took the verifier minutes. */
struct spans_loop {
	struct usdt_ctx c;
	__u64 session;
	__u64 body;
	__u64 body_bytes;
	__u64 names;
	__u64 name_count;
};

static long spans_name_cb(__u32 i, void *data)
{
	struct spans_loop *x = data;
	struct mlprof_spans_name n;

	if (i >= x->name_count)
		return 1;
	if (bpf_probe_read_user(&n, sizeof(n), (const void *)(x->names + (__u64)i * sizeof(n))))
		return 1;
	send_name_once(&x->c, n.id, n.is_label, (const char *)n.name, (const char *)n.module,
		       (const char *)n.file, n.line);
	return 0;
}

static long spans_chunk_cb(__u32 i, void *data)
{
	struct spans_loop *x = data;
	__u64 off = (__u64)i * MLPROF_CHUNK_BYTES;

	if (off >= x->body_bytes)
		return 1;
	__u64 n = x->body_bytes - off;

	if (n > MLPROF_CHUNK_BYTES)
		n = MLPROF_CHUNK_BYTES;
	struct mlprof_ev_chunk *e = reserve(sizeof(*e));

	if (!e)
		return 1; /* counted in `lost`; the agent sees the gap */
	fill_header(&e->h, MLPROF_EV_SPANS_CHUNK, x->c.ts, x->c.tgid, x->c.tid);
	e->session = x->session;
	e->offset = (__u32)off;
	e->total = (__u32)x->body_bytes;
	e->bytes = (__u32)n;
	e->reserved = 0;
	if (bpf_probe_read_user(e->data, n, (const void *)(x->body + off))) {
		bpf_ringbuf_discard(e, 0);
		return 1;
	}
	bpf_ringbuf_submit(e, batched(sizeof(*e)));
	return 0;
}

SEC("usdt")
int BPF_USDT(mlprof_session_spans, __u64 session, __u64 body, __u64 body_bytes, __u64 names,
	     __u64 name_count, __u64 final)
{
	struct spans_loop x = {};

	if (!usdt_begin(&x.c))
		return 0;
	if (is_shed(&x.c, session)) {
		if (final)
			end_shed(&x.c, session);
		return 0;
	}
	x.session = session;
	x.body = body;
	x.body_bytes = body_bytes > MLPROF_SPANS_MAX_BYTES ? MLPROF_SPANS_MAX_BYTES : body_bytes;
	x.names = names;
	x.name_count = name_count > MLPROF_SPANS_MAX_NAMES ? MLPROF_SPANS_MAX_NAMES : name_count;
	bpf_loop(MLPROF_SPANS_MAX_NAMES, spans_name_cb, &x, 0);
	bpf_loop(MLPROF_SPANS_MAX_CHUNKS, spans_chunk_cb, &x, 0);
	if (final) /* a checkpoint (final 0) leaves the session open */
		end_session(&x.c, session, 0, false);
	return 0;
}

/* ---- locks: sem_wait & co. in the target's C library ---------------------- */

/* CPython's locks (threading.Lock, RLock, Condition, Event, Queue; 3.13+
 * every PyMutex that parks) sleep in sem_wait, sem_timedwait or
 * sem_clockwait once the lock is taken: a futex sleep of a followed thread
 * between the entry and the return, on the semaphore, is a lock wait. The
 * loader attaches these per target pid to the C library it maps; an
 * uncontended acquire never calls them (CPython tries the lock first). */
static __always_inline int sem_mark(__u64 sem)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct thread_state *st = bpf_map_lookup_elem(&followed, &tid);

	if (st)
		st->sem_addr = sem;
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(mlprof_sem_wait, void *sem)
{
	return sem_mark((__u64)sem);
}

SEC("uretprobe")
int BPF_URETPROBE(mlprof_sem_wait_return)
{
	return sem_mark(0);
}

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

static __always_inline __u32 waker_kind(void)
{
	__u32 zero = 0;
	struct irq_depth *d = bpf_map_lookup_elem(&in_irq, &zero);

	if (!d)
		return MLPROF_WAKER_TASK;
	if (d->hrtimer) /* hard-IRQ context, above any softirq it interrupted */
		return MLPROF_WAKER_TIMER;
	if (d->hardirq)
		return MLPROF_WAKER_HARDIRQ;
	if (d->wheel)
		return MLPROF_WAKER_TIMER;
	if (d->softirq)
		return MLPROF_WAKER_SOFTIRQ;
	return MLPROF_WAKER_TASK;
}

#define IRQ_HRTIMER 0
#define IRQ_WHEEL 1
#define IRQ_SOFTIRQ 2
#define IRQ_HARDIRQ 3

static __always_inline int irq_mark(int which, int delta)
{
	__u32 zero = 0;
	struct irq_depth *d = bpf_map_lookup_elem(&in_irq, &zero);

	if (!d)
		return 0;
	__u32 *c = which == IRQ_HRTIMER ? &d->hrtimer
		   : which == IRQ_WHEEL ? &d->wheel
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

static __always_inline __s32 current_syscall(__u64 *first_arg)
{
#if defined(__TARGET_ARCH_x86)
	if (!bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs))
		return -1;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	long ax = BPF_CORE_READ(regs, ax);
	long orig = BPF_CORE_READ(regs, orig_ax);

	if (ax != -MLPROF_ENOSYS || orig < 0 || orig > 0xffff)
		return -1;
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
static __always_inline void note_futex(struct thread_state *st, __u64 addr)
{
	st->futex_addr = addr;
	st->wait_object = st->sem_addr && addr - st->sem_addr < 32 ? MLPROF_WAIT_LOCK : MLPROF_WAIT_FUTEX;
}

/* The final switch-out of a dead followed thread: the end of its following.
 * THREAD_EXIT went out at sched_process_exit, which comes earlier: on its way
 * out from there the thread can still be preempted, and wait for a CPU (its
 * OFF_CPU records are its own, stamped after its exit). */
static __always_inline void on_last_switch(__u32 tid)
{
	bpf_map_delete_elem(&followed, &tid);
}

/* prev_tid/next_tid come from the wrappers: tp_btf reads them with plain
 * loads (BTF pointers), raw_tp with BPF_CORE_READ; this runs ~100k times a
 * second on a busy machine, for every thread, so a helper call counts. */
static __always_inline int on_switch(unsigned long long *ctx, bool preempt, struct task_struct *prev,
				     __u32 prev_tid, __u32 next_tid)
{
	__u64 now = 0;
	struct thread_state *st = prev_tid ? lookup_followed(prev_tid) : NULL;

	if (st) {
		/* Off-CPU begins. Blocked: it went to sleep (a voluntary switch
		 * with a state other than TASK_RUNNING); otherwise it was
		 * preempted or yielded and stays runnable: all run-queue wait. */
		__u32 state = mlprof_switch_prev_state(ctx, prev);

		if (state & MLPROF_TASK_DEAD) {
			on_last_switch(prev_tid);
		} else {
			now = bpf_ktime_get_ns();
			st->off_start = now;
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
			if (st->syscall == MLPROF_SYS_FUTEX)
				note_futex(st, arg);
		}
	}

	st = next_tid ? lookup_followed(next_tid) : NULL;
	if (!st || !st->off_start)
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();
	struct mlprof_ev_off_cpu *e = reserve(sizeof(*e));

	if (e) {
		fill_header(&e->h, MLPROF_EV_OFF_CPU, now, st->tgid, next_tid);
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
	return 0;
}

/* The waker comes from sched_waking: it always runs in the waker's context
 * (sched_wakeup may run on the target CPU, from an IPI), so the current task
 * is the waker, unless an interrupt is running: then the current task is
 * whatever the interrupt hit (often the idle task, tid 0) and the waker is
 * the interrupt (waker_kind). The waker's comm is read now: a thread renamed
 * since it started is named by its current name. wake_ns is stamped here
 * and again at sched_wakeup (on_wakeup), the enqueue. */
static __always_inline int on_waking(__u32 tid)
{
	struct thread_state *st = bpf_map_lookup_elem(&followed, &tid);

	if (!st || !st->off_start || !st->blocked || st->wake_ns)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	st->wake_ns = bpf_ktime_get_ns();
	st->waker_tid = (__u32)pid_tgid;
	st->waker_tgid = pid_tgid >> 32;
	st->waker_kind = waker_kind();
	if (bpf_get_current_comm(st->waker_comm, sizeof(st->waker_comm)))
		st->waker_comm[0] = 0;
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
static __always_inline int on_wakeup(__u32 tid)
{
	struct thread_state *st = bpf_map_lookup_elem(&followed, &tid);

	if (!st || !st->off_start || !st->blocked)
		return 0;
	st->wake_ns = bpf_ktime_get_ns();
	return 0;
}

/* A new thread of a followed thread becomes runnable for the first time:
 * its wait until it first runs is run-queue wait (an OFF_CPU record with
 * blocked 0 at its first switch-in; the waker is its creator). */
static __always_inline int on_wakeup_new(struct task_struct *p)
{
	__u32 tid = BPF_CORE_READ(p, pid);
	struct thread_state *st = bpf_map_lookup_elem(&followed, &tid);

	if (!st)
		return 0;
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
	if (bpf_get_current_comm(st->waker_comm, sizeof(st->waker_comm)))
		st->waker_comm[0] = 0;
	return 0;
}

/* Runs in the parent (the creator). Threads only: a new process is not
 * followed (its probes are not attached; the agent attaches pids itself). */
static __always_inline int on_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tid = BPF_CORE_READ(parent, pid);
	struct thread_state *pst = lookup_followed(parent_tid);

	if (!pst)
		return 0;
	__u32 child_tgid = BPF_CORE_READ(child, tgid);

	if (child_tgid != pst->tgid)
		return 0;
	__u32 child_tid = BPF_CORE_READ(child, pid);
	struct thread_state ns = {};

	ns.pstart = pst->pstart;
	ns.tgid = child_tgid;
	ns.session = pst->session;
	ns.flags = FOLLOW_CHILD;
	ns.syscall = -1;
	bpf_map_update_elem(&followed, &child_tid, &ns, BPF_ANY);

	struct mlprof_ev_thread *e = reserve(sizeof(*e));

	if (!e)
		return 0;
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
static __always_inline int on_exit(struct task_struct *p)
{
	__u32 tid = BPF_CORE_READ(p, pid);
	struct thread_state *st = lookup_followed(tid);

	if (!st)
		return 0;
	struct mlprof_ev_thread *e = reserve(sizeof(*e));

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
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(ctx, preempt, prev, prev->pid, next->pid);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct *p)
{
	return on_waking(p->pid);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct *p)
{
	return on_wakeup(p->pid);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_btf, struct task_struct *p)
{
	return on_wakeup_new(p);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(parent, child);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct *p)
{
	return on_exit(p);
}

/* raw_tp variant (untyped u64 arguments; kernel >= 4.17). */
SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(ctx, preempt, prev, BPF_CORE_READ(prev, pid), BPF_CORE_READ(next, pid));
}

SEC("raw_tp/sched_waking")
int BPF_PROG(sched_waking_raw, struct task_struct *p)
{
	return on_waking(BPF_CORE_READ(p, pid));
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(sched_wakeup_raw, struct task_struct *p)
{
	return on_wakeup(BPF_CORE_READ(p, pid));
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_raw, struct task_struct *p)
{
	return on_wakeup_new(p);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(sched_process_fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(parent, child);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw, struct task_struct *p)
{
	return on_exit(p);
}

/* Interrupt context (waker_kind): raw_tp in both variants, they read no
 * argument. */
SEC("raw_tp/hrtimer_expire_entry")
int BPF_PROG(hrtimer_expire_entry_raw)
{
	return irq_mark(IRQ_HRTIMER, 1);
}

SEC("raw_tp/hrtimer_expire_exit")
int BPF_PROG(hrtimer_expire_exit_raw)
{
	return irq_mark(IRQ_HRTIMER, -1);
}

SEC("raw_tp/timer_expire_entry")
int BPF_PROG(timer_expire_entry_raw)
{
	return irq_mark(IRQ_WHEEL, 1);
}

SEC("raw_tp/timer_expire_exit")
int BPF_PROG(timer_expire_exit_raw)
{
	return irq_mark(IRQ_WHEEL, -1);
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(softirq_entry_raw)
{
	return irq_mark(IRQ_SOFTIRQ, 1);
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(softirq_exit_raw)
{
	return irq_mark(IRQ_SOFTIRQ, -1);
}

SEC("raw_tp/irq_handler_entry")
int BPF_PROG(irq_handler_entry_raw)
{
	return irq_mark(IRQ_HARDIRQ, 1);
}

SEC("raw_tp/irq_handler_exit")
int BPF_PROG(irq_handler_exit_raw)
{
	return irq_mark(IRQ_HARDIRQ, -1);
}
