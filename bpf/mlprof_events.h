/* Records the BPF programs (mlprof.bpf.c) put in the ring buffer and the agent
 * (userspace/agent) reads: one header, then a body per kind. Fixed sizes,
 * naturally aligned, no pointers. Included by BPF code (after vmlinux.h) and
 * by C++ (after <linux/types.h>). */
#ifndef MLPROF_EVENTS_H
#define MLPROF_EVENTS_H

#include "mlprof_usdt.h"

enum mlprof_event_kind {
  /* From the USDT probes (mlprof_usdt.h), in the target's thread. */
  MLPROF_EV_SESSION_BEGIN = 1,
  MLPROF_EV_SESSION_END = 2,
  MLPROF_EV_LANE_BEGIN = 3,
  MLPROF_EV_SPAN_ENTER = 4,
  MLPROF_EV_SPAN_EXIT = 5,
  MLPROF_EV_SPAN_SUSPEND = 6,
  MLPROF_EV_SPAN_RESUME = 7,
  MLPROF_EV_SPAN_IO = 8,
  /* The strings of a function or label id, sent once per (process, id)
   * before the first span_enter that uses the id. */
  MLPROF_EV_NAME = 9,
  /* session_spans (contract v2): a piece of a session's body, in order. */
  MLPROF_EV_SPANS_CHUNK = 20,
  /* From the scheduler tracepoints, for threads the agent follows. */
  MLPROF_EV_OFF_CPU = 10,
  MLPROF_EV_THREAD_START = 11,
  MLPROF_EV_THREAD_EXIT = 12,
};

struct mlprof_ev_header {
  __u64 ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
  __u32 tgid;  /* process id */
  __u32 tid;   /* thread id (kernel) */
  __u16 kind;  /* enum mlprof_event_kind */
  __u16 reserved;
  __u32 cpu;
};

/* MLPROF_EV_SESSION_BEGIN / MLPROF_EV_SESSION_END */
struct mlprof_ev_session {
  struct mlprof_ev_header h;
  __u64 session;
  __s64 ceiling; /* begin: the captured depth, -1 unlimited */
  __u64 flags;   /* begin: MLPROF_SESSION_*; end: calls dropped (buffers full) */
  __u64 gil;     /* begin: the interpreter's GIL state, gil_bytes long (0 unknown) */
  __u64 gil_bytes;
};

/* MLPROF_EV_LANE_BEGIN */
struct mlprof_ev_lane {
  struct mlprof_ev_header h;
  __u64 session;
  __u32 lane;
  __u32 parent_lane; /* MLPROF_NO_PARENT_LANE: its roots stay roots */
  __u32 parent_call;
  __u32 task;
  __u64 thread_ident; /* threading.get_ident() */
  char thread_name[MLPROF_THREAD_NAME_LEN];
};

/* MLPROF_EV_SPAN_ENTER / _EXIT / _SUSPEND / _RESUME */
struct mlprof_ev_span {
  struct mlprof_ev_header h;
  __u64 session;
  __u32 lane;
  __u32 index;    /* the span's call index in its lane */
  __u32 function; /* enter: function id (names: MLPROF_EV_NAME) */
  __u32 label;    /* enter: label id, 0 none */
  __u32 depth;    /* enter: nesting in the lane, 0 = lane root */
  __u32 flags;    /* MLPROF_SPAN_* */
};

/* MLPROF_EV_SPAN_IO */
struct mlprof_ev_io {
  struct mlprof_ev_header h;
  __u64 session;
  __u32 lane;
  __u32 index;
  __u32 role; /* MLPROF_IO_ARGUMENT / MLPROF_IO_RETURN */
  __u32 reserved;
  char name[MLPROF_IO_NAME_LEN];
  char summary[MLPROF_IO_SUMMARY_LEN];
};

/* MLPROF_EV_NAME: function `id` (is_label 0: name, module, file, line) or
 * label `id` (is_label 1: the text in name). */
struct mlprof_ev_name {
  struct mlprof_ev_header h;
  __u32 id;
  __u32 is_label;
  __s64 line;
  char name[MLPROF_NAME_LEN];
  char module[MLPROF_MODULE_LEN];
  char file[MLPROF_FILE_LEN];
};

/* MLPROF_EV_SPANS_CHUNK: bytes [offset, offset + bytes) of the body of
 * session `session`'s session_spans (mlprof_usdt.h), total bytes in all. The
 * pieces of one body come in order, from one thread; a lost piece (ring
 * full) ends the copy, so a gap means the body is incomplete. The NAME
 * records of its ids come before its first piece. */
struct mlprof_ev_chunk {
  struct mlprof_ev_header h;
  __u64 session;
  __u32 offset;
  __u32 total;
  __u32 bytes;
  __u32 reserved;
  __u8 data[MLPROF_CHUNK_BYTES];
};

/* Who made a sleeping thread runnable (mlprof_ev_off_cpu.waker_kind): a
 * task, or an interrupt that ran on top of whatever task it hit (that task
 * is then not the waker). */
enum mlprof_waker_kind {
  MLPROF_WAKER_TASK = 0,    /* waker_tid/waker_comm: the waking task */
  MLPROF_WAKER_TIMER = 1,   /* an hrtimer or timer-wheel callback (sleep, timeouts) */
  MLPROF_WAKER_SOFTIRQ = 2, /* softirq context (network receive, RCU, ...) */
  MLPROF_WAKER_HARDIRQ = 3, /* a device interrupt's handler (irq_handler_entry/exit) */
};

/* What a thread asleep in futex waited on (mlprof_ev_off_cpu.wait_object). */
enum mlprof_wait_object {
  MLPROF_WAIT_NONE = 0,  /* not in futex (or not known) */
  MLPROF_WAIT_FUTEX = 1, /* a futex at futex_addr: the agent tells the GIL's by its range */
  MLPROF_WAIT_LOCK = 2,  /* the semaphore of a sem_*wait: a CPython lock (threading.Lock ...) */
};

/* MLPROF_EV_OFF_CPU: thread h.tid was off the CPU from start_ns to h.ts_ns
 * (switched back in). blocked: it went to sleep (prev_state != running) and
 * was put on a run queue at wake_ns (sched_wakeup), woken by waker_tid
 * (sched_waking); the run-queue wait is h.ts_ns - wake_ns, as the kernel's
 * run_delay counts it. Preempted (blocked 0): runnable throughout, wake_ns ==
 * start_ns, the whole interval is run-queue wait. wake_ns 0: the wakeup was
 * not seen (the agent attached meanwhile). */
struct mlprof_ev_off_cpu {
  struct mlprof_ev_header h;
  __u64 start_ns;
  __u64 wake_ns;
  __u32 waker_tid; /* the task current at the wakeup (for an interrupt: the one it hit) */
  __u32 waker_tgid;
  __u32 prev_state; /* the task state at switch-out (TASK_* bits) */
  __u32 blocked;
  __s32 syscall;    /* blocked: the syscall it slept in (the kernel's number), -1 none or unknown */
  __u32 waker_kind; /* enum mlprof_waker_kind */
  char waker_comm[16]; /* the waker's comm at the wakeup (task kind only) */
  __u64 futex_addr;    /* blocked in futex: its address (its first argument), else 0 */
  __u32 wait_object;   /* enum mlprof_wait_object */
  __u32 reserved;
};

/* MLPROF_EV_THREAD_START (h.tid: the new thread, parent_tid: the creator) and
 * MLPROF_EV_THREAD_EXIT (h.tid: the thread that exits). */
struct mlprof_ev_thread {
  struct mlprof_ev_header h;
  __u32 parent_tid;
  __u32 exit_code; /* exit: the task's exit_code */
  char comm[16];
};

#endif /* MLPROF_EVENTS_H */
