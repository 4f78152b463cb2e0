/* The USDT contract between the extension (pyext, the probe sites) and the
 * agent (bpf/mlprof.bpf.c, the handlers). Both sides include this header;
 * docs/usdt.md describes it for people. C and C++, no kernel headers.
 *
 * Provider `mlprof`. Every probe has a semaphore: with no tracer attached a
 * site costs one load and one branch (MLPROF_USDT_ENABLED below), and the
 * arguments are not even computed.
 *
 * Probes and arguments, in order. Two 32-bit values share one 64-bit argument
 * where noted (MLPROF_PACK: high << 32 | low), to stay well inside the 12
 * arguments sys/sdt.h allows and to keep register pressure low at the site.
 *
 *   session_begin(u64 session, s64 ceiling, u64 flags, u64 gil, u64 gil_bytes)
 *       session: the session's serial, unique within the process.
 *       ceiling: the captured depth (-1 unlimited). flags: MLPROF_SESSION_*.
 *       gil, gil_bytes: the address and size of the interpreter's GIL state
 *       (its condition variables and mutexes): a thread asleep in futex on
 *       an address in it waits for the GIL. 0, 0 when unknown. Added after
 *       version 2 without a new version: an extension before it fires three
 *       arguments, and a tracer reads the missing two as 0.
 *   session_end(u64 session, u64 dropped)
 *       dropped: calls not recorded because a buffer was full, summed over lanes.
 *   lane_begin(u64 session, u64 lane_parent, u64 parent_call_task, u64 thread_ident,
 *              const char *thread_name)
 *       lane_parent = PACK(lane, parent_lane as u32; 0xffffffff: none),
 *       parent_call_task = PACK(parent_call, task). Fired in the lane's thread,
 *       before the lane's first span. Lane 0 is the thread that began the session.
 *   span_enter(u64 session, u64 lane_index, u64 function_label, u64 depth_flags,
 *              const char *name, const char *module, const char *file, s64 line,
 *              const char *label)
 *       lane_index = PACK(lane, index): index is the position of the span's
 *       call in its lane (what exit/suspend/resume/io refer to).
 *       function_label = PACK(function id, label id; 0: no label). Function ids
 *       and label ids are process-wide and stable for the process's life, so a
 *       tracer may read name/module/file/label once per id and cache them.
 *       depth_flags = PACK(depth, flags): depth is the span's nesting in its
 *       lane (0: a lane root); flags are MLPROF_SPAN_* (the core's event flags).
 *       label: the profile_span label text, or NULL: non-NULL exactly when the
 *       label id != 0. A profile_block's text is `name` (flag BLOCK, module and
 *       file "", line 0).
 *   span_exit(u64 session, u64 lane_index, u64 flags)
 *       The innermost open span of the lane closes (index names it).
 *       flags: MLPROF_SPAN_EXCEPTION, MLPROF_SPAN_CHILDREN_DROPPED.
 *   span_suspend(u64 session, u64 lane_index)
 *   span_resume(u64 session, u64 lane_index)
 *       A generator/coroutine span (index: its call) is suspended by a
 *       yield/await, and resumed. Spans opened above it travel with it.
 *   span_io(u64 session, u64 lane_index, u64 role, const char *name, const char *summary)
 *       One I/O summary of a span (capture_io): role MLPROF_IO_ARGUMENT with
 *       the parameter's name, or MLPROF_IO_RETURN with name "". summary: the
 *       compact text the tree shows, core format_io
 *       ("(DataFrame, shape=(64, 12), dtype=float64, 6.0KB)").
 *       Fired after the span's enter (arguments) or exit (return value).
 *
 * Times are not arguments: a tracer stamps each probe with CLOCK_MONOTONIC
 * (bpf_ktime_get_ns), the clock the in-process profile also maps to.
 *
 * Version 2 (MLPROF_USDT_VERSION) adds session-level delivery: one probe per
 * session carries the session's spans, so a tracer needs no probe per span.
 *
 *   session_spans(u64 session, const void *body, u64 body_bytes,
 *                 const struct mlprof_spans_name *names, u64 name_count, u64 final)
 *       final 1: fired once, at the session's end, in the thread that ends
 *       it, before session_end. final 0: a checkpoint of a session still
 *       open (past MLPROF_CHECKPOINT_AFTER_NS, then at intervals as long as
 *       its age), fired from a thread of the extension's holding the GIL: the
 *       spans so far, so that a process killed mid-session still leaves
 *       them with the tracer. Each body is whole (it replaces the last one).
 *       body: body_bytes (at most MLPROF_SPANS_MAX_BYTES) laid
 *       out as below; names: name_count (at most MLPROF_SPANS_MAX_NAMES)
 *       entries, one per function id and label id the body's events use.
 *       Both stay valid only while the probe runs: a tracer copies them there
 *       (the agent's BPF handler does, in MLPROF_CHUNK_BYTES pieces).
 *
 *   body = struct mlprof_spans_head, then per lane (head.lanes of them):
 *          struct mlprof_spans_lane, its `events` struct mlprof_spans_event
 *          (model/event.h's Event with ts_ns in CLOCK_MONOTONIC ns), then its
 *          `ios` struct mlprof_spans_io. All 8-byte aligned, host order.
 *
 * A v2 tracer attaches session_begin, lane_begin and session_spans only
 * (session_begin and lane_begin still tell it, as they happen, which threads
 * work for a session: the scheduler join needs that). The extension also
 * keeps every v1 probe, so a v1 tracer works unchanged; an extension without
 * session_spans is v1, and a v2 tracer then attaches the per-span probes.
 * While session_spans is attached, lane 0's lane_begin is not fired
 * (session_begin already names its thread; the body carries its details).
 */
#ifndef MLPROF_USDT_H
#define MLPROF_USDT_H

#define MLPROF_USDT_PROVIDER mlprof

#define MLPROF_PACK(hi, lo) ((((unsigned long long)(unsigned int)(hi)) << 32) | (unsigned int)(lo))
#define MLPROF_HI(v) ((unsigned int)((unsigned long long)(v) >> 32))
#define MLPROF_LO(v) ((unsigned int)((unsigned long long)(v)&0xffffffffu))
#define MLPROF_NO_PARENT_LANE 0xffffffffu

/* session_begin flags */
#define MLPROF_SESSION_CAPTURE_IO 0x1u  /* span_io probes will fire */
#define MLPROF_SESSION_ALL_THREADS 0x2u /* other threads open lanes */
#define MLPROF_SESSION_AUTOPROFILE 0x4u /* started by autoprofile() around a predict */

/* span flags: the same values as mlprof::EventFlag (model/event.h); the
 * extension static_asserts that they agree. */
#define MLPROF_SPAN_EXCEPTION 0x01u        /* exit: left by an exception */
#define MLPROF_SPAN_C_FUNCTION 0x02u       /* enter: a C function (capture_c_calls) */
#define MLPROF_SPAN_BLOCK 0x04u            /* enter: a profile_block region */
#define MLPROF_SPAN_CONTINUED 0x08u        /* enter: a coroutine resumed with no start seen */
#define MLPROF_SPAN_CHILDREN_DROPPED 0x10u /* exit: calls under it were dropped */
#define MLPROF_SPAN_WAIT 0x40u             /* enter: the event loop's selector waiting */

/* span_io roles: the same values as mlprof::IORole. */
#define MLPROF_IO_ARGUMENT 0u
#define MLPROF_IO_RETURN 1u

/* Lengths a tracer copies (bytes, with the terminating NUL); longer strings
 * are cut. The agent's ring-buffer records use the same sizes. */
#define MLPROF_NAME_LEN 128
#define MLPROF_MODULE_LEN 96
#define MLPROF_FILE_LEN 160
#define MLPROF_LABEL_LEN 96
#define MLPROF_THREAD_NAME_LEN 32
#define MLPROF_IO_NAME_LEN 32
#define MLPROF_IO_SUMMARY_LEN 96

/* ---- version 2: session-level delivery (session_spans) -------------------- */

#define MLPROF_USDT_VERSION 2
/* A body that holds coalesced resumes (event kinds 6 and 7, model/event.h)
 * says this version instead, so that an agent older than them reports the
 * extension newer rather than reading those lanes as malformed; every other
 * body stays MLPROF_USDT_VERSION. The layout is the same. */
#define MLPROF_SPANS_FOLDS_VERSION 3
/* A body that holds instants (event kind 8) says this version, for the same
 * reason; it may hold coalesced resumes too. */
#define MLPROF_SPANS_MARKS_VERSION 4
/* Bounds of one session_spans: the extension cuts a longer session (its
 * lanes flagged truncated, in order), the BPF handler's loops stop there.
 * MLPROF_SPANS_MAX_BYTES is unsigned, like the sizes it bounds (size_t,
 * __u64, __u32). */
#define MLPROF_CHUNK_BYTES 4096
#define MLPROF_SPANS_MAX_CHUNKS 256
#define MLPROF_SPANS_MAX_BYTES ((unsigned int)(MLPROF_CHUNK_BYTES * MLPROF_SPANS_MAX_CHUNKS))
#define MLPROF_SPANS_MAX_NAMES 1024
#define MLPROF_CHECKPOINT_AFTER_NS 200000000LL /* a session open 200 ms gets checkpoints */
#define MLPROF_TRACE_ID_LEN 40                 /* 32 hex digits and a NUL, padded */
#define MLPROF_SPAN_ID_LEN 24                  /* 16 hex digits and a NUL, padded */

struct mlprof_spans_head {
  unsigned int version; /* MLPROF_USDT_VERSION of the extension that wrote it */
  unsigned int lanes;   /* struct mlprof_spans_lane records that follow */
  unsigned long long session;
  unsigned long long dropped; /* calls not recorded (buffers full), all lanes */
  long long start_ns;         /* CLOCK_MONOTONIC: the session's start and end */
  long long end_ns;
  long long ceiling;                  /* the captured depth, -1 unlimited */
  unsigned long long flags;           /* MLPROF_SESSION_*, as session_begin gave them */
  char trace_id[MLPROF_TRACE_ID_LEN]; /* lower-case hex, "" when none */
  char span_id[MLPROF_SPAN_ID_LEN];
};

struct mlprof_spans_lane {
  unsigned int lane;
  unsigned int parent_lane; /* MLPROF_NO_PARENT_LANE: its roots stay roots */
  unsigned int parent_call;
  unsigned int task;
  unsigned long long thread_ident; /* threading.get_ident() */
  unsigned long long native_tid;   /* gettid() */
  unsigned long long dropped;
  unsigned int events;    /* struct mlprof_spans_event that follow */
  unsigned int ios;       /* then struct mlprof_spans_io */
  unsigned int truncated; /* recording stopped (buffer full, or cut to the bounds) */
  unsigned int reserved;
  char thread_name[MLPROF_THREAD_NAME_LEN];
};

/* model/event.h's Event: kind 1 call (id: function id), 2 return, 3 suspend
 * and 4 resume (id: the kCall's index in the lane), 5 label (id: label id),
 * 6 fold (id: the kCall's index) and 7 fold count (id: resumes): coalesced
 * resumes, in a body of version MLPROF_SPANS_FOLDS_VERSION or later only;
 * 8 mark (id: label id), an instant, in a body of MLPROF_SPANS_MARKS_VERSION. */
struct mlprof_spans_event {
  long long ts_ns; /* CLOCK_MONOTONIC */
  unsigned int id;
  unsigned char kind;
  unsigned char flags; /* MLPROF_SPAN_* (core's EventFlag) */
  unsigned short reserved;
};

struct mlprof_spans_io {
  unsigned int call; /* the span's kCall index in its lane */
  unsigned int role; /* MLPROF_IO_* */
  char name[MLPROF_IO_NAME_LEN];
  char summary[MLPROF_IO_SUMMARY_LEN];
};

/* A function id (is_label 0: name, module, file, line) or a label id
 * (is_label 1: the text at name). Pointers into the extension's registry,
 * valid for the process's life. */
struct mlprof_spans_name {
  unsigned int id;
  unsigned int is_label;
  long long line;
  unsigned long long name;
  unsigned long long module;
  unsigned long long file;
};

/* ---- probe sites (userspace only) -------------------------------------- */
#if !defined(__bpf__) && !defined(__BPF__)

#ifndef _SDT_HAS_SEMAPHORES
#define _SDT_HAS_SEMAPHORES 1
#endif
#include <sys/sdt.h> /* Debian: systemtap-sdt-dev */

#ifdef __cplusplus
extern "C" {
#endif
/* One semaphore per probe, in section .probes; a tracer increments it while
 * attached. Defined once per binary: MLPROF_USDT_DEFINE_SEMAPHORES in exactly
 * one translation unit before including this header. */
#ifdef MLPROF_USDT_DEFINE_SEMAPHORES
#define MLPROF_SEMAPHORE_(name)                                   \
  __extension__ volatile unsigned short mlprof_##name##_semaphore \
      __attribute__((used, section(".probes")))
#else
#define MLPROF_SEMAPHORE_(name) extern volatile unsigned short mlprof_##name##_semaphore
#endif
MLPROF_SEMAPHORE_(session_begin);
MLPROF_SEMAPHORE_(session_end);
MLPROF_SEMAPHORE_(lane_begin);
MLPROF_SEMAPHORE_(span_enter);
MLPROF_SEMAPHORE_(span_exit);
MLPROF_SEMAPHORE_(span_suspend);
MLPROF_SEMAPHORE_(span_resume);
MLPROF_SEMAPHORE_(span_io);
MLPROF_SEMAPHORE_(session_spans);
#undef MLPROF_SEMAPHORE_
#ifdef __cplusplus
}
#endif

/* True while a tracer is attached to this probe: the one load and branch. */
#define MLPROF_USDT_ENABLED(name) __builtin_expect(mlprof_##name##_semaphore != 0, 0)

#define MLPROF_USDT_SESSION_BEGIN(session, ceiling, flags, gil, gil_bytes)                \
  STAP_PROBE5(mlprof, session_begin, (unsigned long long)(session), (long long)(ceiling), \
              (unsigned long long)(flags), (unsigned long long)(gil),                     \
              (unsigned long long)(gil_bytes))
#define MLPROF_USDT_SESSION_END(session, dropped) \
  STAP_PROBE2(mlprof, session_end, (unsigned long long)(session), (unsigned long long)(dropped))
#define MLPROF_USDT_LANE_BEGIN(session, lane, parent_lane, parent_call, task, ident, thread_name) \
  STAP_PROBE5(mlprof, lane_begin, (unsigned long long)(session), MLPROF_PACK(lane, parent_lane),  \
              MLPROF_PACK(parent_call, task), (unsigned long long)(ident),                        \
              (const char*)(thread_name))
#define MLPROF_USDT_SPAN_ENTER(session, lane, index, function, label_id, depth, flags, name,   \
                               module, file, line, label)                                      \
  STAP_PROBE9(mlprof, span_enter, (unsigned long long)(session), MLPROF_PACK(lane, index),     \
              MLPROF_PACK(function, label_id), MLPROF_PACK(depth, flags), (const char*)(name), \
              (const char*)(module), (const char*)(file), (long long)(line), (const char*)(label))
#define MLPROF_USDT_SPAN_EXIT(session, lane, index, flags)                                \
  STAP_PROBE3(mlprof, span_exit, (unsigned long long)(session), MLPROF_PACK(lane, index), \
              (unsigned long long)(flags))
#define MLPROF_USDT_SPAN_SUSPEND(session, lane, index) \
  STAP_PROBE2(mlprof, span_suspend, (unsigned long long)(session), MLPROF_PACK(lane, index))
#define MLPROF_USDT_SPAN_RESUME(session, lane, index) \
  STAP_PROBE2(mlprof, span_resume, (unsigned long long)(session), MLPROF_PACK(lane, index))
#define MLPROF_USDT_SPAN_IO(session, lane, index, role, name, summary)                  \
  STAP_PROBE5(mlprof, span_io, (unsigned long long)(session), MLPROF_PACK(lane, index), \
              (unsigned long long)(role), (const char*)(name), (const char*)(summary))

#define MLPROF_USDT_SESSION_SPANS(session, body, body_bytes, names, name_count, final)   \
  STAP_PROBE6(mlprof, session_spans, (unsigned long long)(session), (const void*)(body), \
              (unsigned long long)(body_bytes), (const void*)(names),                    \
              (unsigned long long)(name_count), (unsigned long long)(final))

#endif /* userspace */
#endif /* MLPROF_USDT_H */
