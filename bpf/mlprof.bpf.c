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
 *
 * This file holds the configuration and the maps; the helpers and the
 * programs are in the parts it includes at its end (helpers.bpf.h,
 * usdt_progs.bpf.h, lock_progs.bpf.h, sched_progs.bpf.h): one object.
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
  __u64 pstart;    /* the process's start time (pid reuse) */
  __u64 session;   /* the session it was last seen in */
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
  __u64 run_delay_out; /* its sched_info.run_delay at off_start (missed_switch_in) */
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

/* The programs, in parts (one object: these are not standalone headers).
 * The order is the object's: helpers first, then the programs. */
#include "helpers.bpf.h"
#include "usdt_progs.bpf.h"
#include "lock_progs.bpf.h"
#include "sched_progs.bpf.h"
