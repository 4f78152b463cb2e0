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
 *   session_begin(u64 session, s64 ceiling, u64 flags)
 *       session: the session's serial, unique within the process.
 *       ceiling: the captured depth (-1 unlimited). flags: MLPROF_SESSION_*.
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
 */
#ifndef MLPROF_USDT_H
#define MLPROF_USDT_H

#define MLPROF_USDT_PROVIDER mlprof

#define MLPROF_PACK(hi, lo) ((((unsigned long long)(unsigned int)(hi)) << 32) | (unsigned int)(lo))
#define MLPROF_HI(v) ((unsigned int)((unsigned long long)(v) >> 32))
#define MLPROF_LO(v) ((unsigned int)((unsigned long long)(v) & 0xffffffffu))
#define MLPROF_NO_PARENT_LANE 0xffffffffu

/* session_begin flags */
#define MLPROF_SESSION_CAPTURE_IO 0x1u   /* span_io probes will fire */
#define MLPROF_SESSION_ALL_THREADS 0x2u  /* other threads open lanes */
#define MLPROF_SESSION_AUTOPROFILE 0x4u  /* started by autoprofile() around a predict */

/* span flags: the same values as mlprof::EventFlag (core/event.h); the
 * extension static_asserts that they agree. */
#define MLPROF_SPAN_EXCEPTION 0x01u         /* exit: left by an exception */
#define MLPROF_SPAN_C_FUNCTION 0x02u        /* enter: a C function (capture_c_calls) */
#define MLPROF_SPAN_BLOCK 0x04u             /* enter: a profile_block region */
#define MLPROF_SPAN_CONTINUED 0x08u         /* enter: a coroutine resumed with no start seen */
#define MLPROF_SPAN_CHILDREN_DROPPED 0x10u  /* exit: calls under it were dropped */

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
#define MLPROF_SEMAPHORE_(name) \
  __extension__ volatile unsigned short mlprof_##name##_semaphore __attribute__((used, section(".probes")))
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
#undef MLPROF_SEMAPHORE_
#ifdef __cplusplus
}
#endif

/* True while a tracer is attached to this probe: the one load and branch. */
#define MLPROF_USDT_ENABLED(name) __builtin_expect(mlprof_##name##_semaphore != 0, 0)

#define MLPROF_USDT_SESSION_BEGIN(session, ceiling, flags) \
  STAP_PROBE3(mlprof, session_begin, (unsigned long long)(session), (long long)(ceiling), \
              (unsigned long long)(flags))
#define MLPROF_USDT_SESSION_END(session, dropped) \
  STAP_PROBE2(mlprof, session_end, (unsigned long long)(session), (unsigned long long)(dropped))
#define MLPROF_USDT_LANE_BEGIN(session, lane, parent_lane, parent_call, task, ident, thread_name) \
  STAP_PROBE5(mlprof, lane_begin, (unsigned long long)(session), MLPROF_PACK(lane, parent_lane), \
              MLPROF_PACK(parent_call, task), (unsigned long long)(ident), (const char*)(thread_name))
#define MLPROF_USDT_SPAN_ENTER(session, lane, index, function, label_id, depth, flags, name, module, \
                               file, line, label)                                                 \
  STAP_PROBE9(mlprof, span_enter, (unsigned long long)(session), MLPROF_PACK(lane, index),         \
              MLPROF_PACK(function, label_id), MLPROF_PACK(depth, flags), (const char*)(name),     \
              (const char*)(module), (const char*)(file), (long long)(line), (const char*)(label))
#define MLPROF_USDT_SPAN_EXIT(session, lane, index, flags) \
  STAP_PROBE3(mlprof, span_exit, (unsigned long long)(session), MLPROF_PACK(lane, index), \
              (unsigned long long)(flags))
#define MLPROF_USDT_SPAN_SUSPEND(session, lane, index) \
  STAP_PROBE2(mlprof, span_suspend, (unsigned long long)(session), MLPROF_PACK(lane, index))
#define MLPROF_USDT_SPAN_RESUME(session, lane, index) \
  STAP_PROBE2(mlprof, span_resume, (unsigned long long)(session), MLPROF_PACK(lane, index))
#define MLPROF_USDT_SPAN_IO(session, lane, index, role, name, summary)                       \
  STAP_PROBE5(mlprof, span_io, (unsigned long long)(session), MLPROF_PACK(lane, index),      \
              (unsigned long long)(role), (const char*)(name), (const char*)(summary))

#endif /* userspace */
#endif /* MLPROF_USDT_H */
