#pragma once
// USDT probe sites of the capture engine (provider `mlprof`, contract:
// bpf/mlprof_usdt.h, for people: docs/usdt.md).
//
// Each site is the inline gate below: one load of the probe's semaphore and
// one branch. Only when a tracer is attached does the out-of-line, cold
// fire_* function run, which computes the arguments (the registry's name,
// module, file and line, the label text, the I/O summary text) and hits the
// probe. Events that the engine does not push (dropped, below the ceiling,
// transparent) have no site, so a tracer rebuilds each lane's events exactly.
// The fire_* functions are defined in usdt_fire.cpp, the semaphores in engine.cpp.

#include <cstdint>
#include <string>

#include "clock.h"
#include "mlprof_usdt.h"
#include "model/event.h"
#include "model/functions.h"
#include "model/summary.h"

// The contract's values are the core's: the agent copies flags into events.
static_assert(MLPROF_SPAN_EXCEPTION == mlprof::kEvException);
static_assert(MLPROF_SPAN_C_FUNCTION == mlprof::kEvCFunction);
static_assert(MLPROF_SPAN_BLOCK == mlprof::kEvBlock);
static_assert(MLPROF_SPAN_CONTINUED == mlprof::kEvContinued);
static_assert(MLPROF_SPAN_CHILDREN_DROPPED == mlprof::kEvChildrenDropped);
static_assert(MLPROF_SPAN_WAIT == mlprof::kEvWait);
static_assert(MLPROF_IO_ARGUMENT == static_cast<unsigned>(mlprof::IORole::kArgument));
static_assert(MLPROF_IO_RETURN == static_cast<unsigned>(mlprof::IORole::kReturn));

namespace mlprof {
class Engine;
}

namespace mlprof::probes {

/// Flags the session with this serial MLPROF_SESSION_AUTOPROFILE at its
/// session_begin (autoprofile calls it between creating and starting it).
void mark_autoprofile(uint64_t session);

// --- out of line, cold: run only while a tracer is attached -------------------
[[gnu::cold, gnu::noinline]] void fire_session_begin(uint64_t session, int64_t ceiling,
                                                     uint32_t flags);
[[gnu::cold, gnu::noinline]] void fire_session_end(uint64_t session, uint64_t dropped);
[[gnu::cold, gnu::noinline]] void fire_lane_begin(uint64_t session, uint32_t lane,
                                                  int32_t parent_lane, uint32_t parent_call,
                                                  uint32_t task, uint64_t ident,
                                                  const std::string& thread_name);
// function: registry id (its name, module, file, line are looked up here);
// label: label string id, 0 none.
[[gnu::cold, gnu::noinline]] void fire_span_enter(uint64_t session, uint32_t lane, uint32_t index,
                                                  uint32_t function, uint32_t label, int32_t depth,
                                                  uint32_t flags);
[[gnu::cold, gnu::noinline]] void fire_span_exit(uint64_t session, uint32_t lane, uint32_t index,
                                                 uint32_t flags);
[[gnu::cold, gnu::noinline]] void fire_span_suspend(uint64_t session, uint32_t lane,
                                                    uint32_t index);
[[gnu::cold, gnu::noinline]] void fire_span_resume(uint64_t session, uint32_t lane, uint32_t index);
// summary: format_io's text, cut to MLPROF_IO_SUMMARY_LEN - 1 bytes.
[[gnu::cold, gnu::noinline]] void fire_span_io(uint64_t session, uint32_t lane, uint32_t index,
                                               IORole role, const std::string& name,
                                               const std::string& summary);

// session_spans (contract v2): the session's lanes in one body, its
// function and label ids in a names list (session_spans.cpp). flags: the
// session's MLPROF_SESSION_*. clk maps the events' ticks to CLOCK_MONOTONIC.
// final: the session ended (false: a checkpoint of an open session).
[[gnu::cold, gnu::noinline]] void fire_session_spans(const Engine& engine,
                                                     const FunctionTable& registry,
                                                     const clock::Mapping& clk, uint32_t flags,
                                                     bool final);
// A session began / stopped while session_spans was traced (GIL held): the
// checkpoint thread (session_spans.cpp) watches how long the oldest is open.
void checkpoints_session_started(int64_t start_ns);
void checkpoints_session_stopped();

// --- the sites: a load and a branch each ----------------------------------------

/// True while a tracer is attached to session_begin: autoprofile then
/// captures every predict (docs/usdt.md, "What the semaphore switches on").
inline bool session_traced() { return MLPROF_USDT_ENABLED(session_begin); }
/// True while a v2 tracer is attached (session_spans): the session's spans
/// go to it at the end, in one piece.
inline bool spans_traced() { return MLPROF_USDT_ENABLED(session_spans); }
/// True while a tracer is attached to span_io: summaries are formatted once.
inline bool io_traced() { return MLPROF_USDT_ENABLED(span_io); }

/// A session begins (fired before its origin lane's lane_begin).
inline void session_begin(uint64_t session, int64_t ceiling, uint32_t flags) {
  if (MLPROF_USDT_ENABLED(session_begin)) fire_session_begin(session, ceiling, flags);
}
/// A session ends; dropped: calls not recorded, summed over its lanes.
inline void session_end(uint64_t session, uint64_t dropped) {
  if (MLPROF_USDT_ENABLED(session_end)) fire_session_end(session, dropped);
}
/// A lane opens, in its own thread, before its first span.
inline void lane_begin(uint64_t session, uint32_t lane, int32_t parent_lane, uint32_t parent_call,
                       uint32_t task, uint64_t ident, const std::string& thread_name) {
  if (MLPROF_USDT_ENABLED(lane_begin)) {
    fire_lane_begin(session, lane, parent_lane, parent_call, task, ident, thread_name);
  }
}
/// The engine pushed [kLabel,] kCall at `index` of the lane.
inline void span_enter(uint64_t session, uint32_t lane, uint32_t index, uint32_t function,
                       uint32_t label, int32_t depth, uint32_t flags) {
  if (MLPROF_USDT_ENABLED(span_enter))
    fire_span_enter(session, lane, index, function, label, depth, flags);
}
/// The engine pushed kReturn closing the span whose kCall is at `index`.
inline void span_exit(uint64_t session, uint32_t lane, uint32_t index, uint32_t flags) {
  if (MLPROF_USDT_ENABLED(span_exit)) fire_span_exit(session, lane, index, flags);
}
/// The engine pushed kSuspend for the span whose kCall is at `index`.
inline void span_suspend(uint64_t session, uint32_t lane, uint32_t index) {
  if (MLPROF_USDT_ENABLED(span_suspend)) fire_span_suspend(session, lane, index);
}
/// The engine pushed kResume for the span whose kCall is at `index`.
inline void span_resume(uint64_t session, uint32_t lane, uint32_t index) {
  if (MLPROF_USDT_ENABLED(span_resume)) fire_span_resume(session, lane, index);
}

}  // namespace mlprof::probes
