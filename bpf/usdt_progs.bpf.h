// SPDX-License-Identifier: GPL-2.0
/* Part of mlprof.bpf.c (one BPF object): the USDT handlers of the
 * contract's probes (mlprof_usdt.h), v2's session_spans included: each
 * hit becomes ring-buffer records (mlprof_events.h). Included by
 * mlprof.bpf.c after helpers.bpf.h; not a standalone header. */

/* ---- USDT handlers (attached per pid by the loader) --------------------- */

SEC("usdt")
int BPF_USDT(mlprof_session_begin, __u64 session, __s64 ceiling, __u64 flags, __u64 gil,
             __u64 gil_bytes) {
  struct usdt_ctx c;

  if (!usdt_begin(&c)) return 0;
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

  struct mlprof_ev_session* e = reserve(sizeof(*e));

  if (!e) return 0;
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
static __always_inline void end_session(const struct usdt_ctx* cp, __u64 session, __u64 dropped,
                                        bool wake) {
  struct usdt_ctx c = *cp;
  struct thread_state* st = bpf_map_lookup_elem(&followed, &c.tid);

  if (st) /* it runs: its last wait ended in the session */
    missed_switch_in(st, c.tid, (struct task_struct*)bpf_get_current_task());
  struct mlprof_ev_session* e = reserve(sizeof(*e));

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
  st = bpf_map_lookup_elem(&followed, &c.tid);

  if (st && st->session == session && st->pstart == c.pstart) {
    if (st->flags & FOLLOW_CHILD)
      st->flags &= ~FOLLOW_SESSION;
    else
      bpf_map_delete_elem(&followed, &c.tid);
  }
}

SEC("usdt")
int BPF_USDT(mlprof_session_end, __u64 session, __u64 dropped) {
  struct usdt_ctx c;

  if (!usdt_begin(&c)) return 0;
  if (is_shed(&c, session)) {
    end_shed(&c, session);
    return 0;
  }
  end_session(&c, session, dropped, true);
  return 0;
}

SEC("usdt")
int BPF_USDT(mlprof_lane_begin, __u64 session, __u64 lane_parent, __u64 parent_call_task,
             __u64 thread_ident, const char* thread_name) {
  struct usdt_ctx c;

  if (!usdt_begin(&c) || is_shed(&c, session)) return 0;
  follow_current(&c, session, true);

  struct mlprof_ev_lane* e = reserve(sizeof(*e));

  if (!e) return 0;
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
int BPF_USDT(mlprof_span_enter, __u64 session, __u64 lane_index, __u64 function_label,
             __u64 depth_flags, const char* name, const char* module, const char* file, __s64 line,
             const char* label) {
  struct usdt_ctx c;

  if (!usdt_begin(&c) || is_shed(&c, session)) return 0;
  follow_current(&c, session, true);

  __u32 function = MLPROF_HI(function_label);
  __u32 label_id = MLPROF_LO(function_label);

  send_name_once(&c, function, 0, name, module, file, line);
  if (label_id) send_name_once(&c, label_id, 1, label, NULL, NULL, 0);
  return emit_span(&c, MLPROF_EV_SPAN_ENTER, session, lane_index, function, label_id,
                   MLPROF_HI(depth_flags), MLPROF_LO(depth_flags));
}

SEC("usdt")
int BPF_USDT(mlprof_span_exit, __u64 session, __u64 lane_index, __u64 flags) {
  struct usdt_ctx c;

  if (!usdt_begin(&c) || is_shed(&c, session)) return 0;
  return emit_span(&c, MLPROF_EV_SPAN_EXIT, session, lane_index, 0, 0, 0, (__u32)flags);
}

SEC("usdt")
int BPF_USDT(mlprof_span_suspend, __u64 session, __u64 lane_index) {
  struct usdt_ctx c;

  if (!usdt_begin(&c) || is_shed(&c, session)) return 0;
  return emit_span(&c, MLPROF_EV_SPAN_SUSPEND, session, lane_index, 0, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(mlprof_span_resume, __u64 session, __u64 lane_index) {
  struct usdt_ctx c;

  if (!usdt_begin(&c) || is_shed(&c, session)) return 0;
  return emit_span(&c, MLPROF_EV_SPAN_RESUME, session, lane_index, 0, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(mlprof_span_io, __u64 session, __u64 lane_index, __u64 role, const char* name,
             const char* summary) {
  struct usdt_ctx c;

  if (!usdt_begin(&c) || is_shed(&c, session)) return 0;
  struct mlprof_ev_io* e = reserve(sizeof(*e));

  if (!e) return 0;
  fill_header(&e->h, MLPROF_EV_SPAN_IO, c.ts, c.tgid, c.tid);
  e->session = session;
  e->lane = MLPROF_HI(lane_index);
  e->index = MLPROF_LO(lane_index);
  e->role = (__u32)role;
  e->reserved = 0;
  if (bpf_probe_read_user_str(e->name, sizeof(e->name), name) < 0) e->name[0] = 0;
  if (bpf_probe_read_user_str(e->summary, sizeof(e->summary), summary) < 0) e->summary[0] = 0;
  bpf_ringbuf_submit(e, batched(sizeof(*e)));
  return 0;
}

/* ---- contract v2: the session's spans in one probe hit ------------------ */

/* session_spans: the NAME records of the ids the body uses (once per process
 * and id, as span_enter sends them), then the body in MLPROF_CHUNK_BYTES
 * pieces, then (final, not a checkpoint) SESSION_END. Copied synchronously, while the probe runs:
 * the body is the extension's scratch buffer, valid only until it returns, and a copy here cannot
 * race the process (an agent reading it later with process_vm_readv would need the extension to
 * keep every body until read, and a process that exits right after its session would lose it). The
 * loops are bpf_loop callbacks (kernel 5.17+): verified once each, where unrolled bounded loops of
 * this size took the verifier minutes. */
struct spans_loop {
  struct usdt_ctx c;
  __u64 session;
  __u64 body;
  __u64 body_bytes;
  __u64 names;
  __u64 name_count;
};

static long spans_name_cb(__u32 i, void* data) {
  struct spans_loop* x = data;
  struct mlprof_spans_name n;

  if (i >= x->name_count) return 1;
  if (bpf_probe_read_user(&n, sizeof(n), (const void*)(x->names + (__u64)i * sizeof(n)))) return 1;
  send_name_once(&x->c, n.id, n.is_label, (const char*)n.name, (const char*)n.module,
                 (const char*)n.file, n.line);
  return 0;
}

static long spans_chunk_cb(__u32 i, void* data) {
  struct spans_loop* x = data;
  __u64 off = (__u64)i * MLPROF_CHUNK_BYTES;

  if (off >= x->body_bytes) return 1;
  __u64 n = x->body_bytes - off;

  if (n > MLPROF_CHUNK_BYTES) n = MLPROF_CHUNK_BYTES;
  struct mlprof_ev_chunk* e = reserve(sizeof(*e));

  if (!e) return 1; /* counted in `lost`; the agent sees the gap */
  fill_header(&e->h, MLPROF_EV_SPANS_CHUNK, x->c.ts, x->c.tgid, x->c.tid);
  e->session = x->session;
  e->offset = (__u32)off;
  e->total = (__u32)x->body_bytes;
  e->bytes = (__u32)n;
  e->reserved = 0;
  if (bpf_probe_read_user(e->data, n, (const void*)(x->body + off))) {
    bpf_ringbuf_discard(e, 0);
    return 1;
  }
  bpf_ringbuf_submit(e, batched(sizeof(*e)));
  return 0;
}

SEC("usdt")
int BPF_USDT(mlprof_session_spans, __u64 session, __u64 body, __u64 body_bytes, __u64 names,
             __u64 name_count, __u64 final) {
  struct spans_loop x = {};

  if (!usdt_begin(&x.c)) return 0;
  if (is_shed(&x.c, session)) {
    if (final) end_shed(&x.c, session);
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
