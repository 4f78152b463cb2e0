#pragma once
// Event records: what a capture hook (in-process C++ hook, the pure-Python
// reference, later the eBPF agent) appends to a lane's buffer. Fixed size,
// no pointers: a buffer can be copied, saved and joined across processes.

#include <cstdint>
#include <string>
#include <vector>

#include "model/span_value.h"
#include "model/summary.h"
#include "views/waiting.h"

namespace mlprof {

enum class EventKind : uint8_t {
  // A span opens. id: function id (FunctionTable). The span's parent is the
  // innermost open span of the lane.
  kCall = 1,
  // The innermost open span closes. id: unused.
  kReturn = 2,
  // A generator/coroutine span is suspended (yield/await). id: index, in the
  // same lane's events, of the kCall that opened it. That span and every open
  // span above it are detached from the stack, not closed.
  kSuspend = 3,
  // A suspended span resumes. id: index of the kCall that opened it. The
  // segment detached by the matching kSuspend is pushed back on the stack.
  kResume = 4,
  // Attaches a label (string id) to the next kCall of the lane, or with
  // kEvRelabel to the innermost open span. ts unused.
  kLabel = 5,
  // Coalesced resumes (model/resume.h): a run of kSuspend/kResume pairs of one
  // span with nothing recorded in the lane between each pair (the generator
  // went straight back to its consumer) is one kFold followed by one
  // kFoldCount. kFold: id = the span's kCall index; kFoldCount: id = the
  // number of resumes, ts = the last resume. kFoldCount.ts - kFold.ts is the
  // time the span was paused in all (kFold.ts is not an event's time: it is
  // the last resume less that total, never before the events that precede
  // it). The span keeps running across the pair. Readings of a kFold event
  // are what each counter grew while the span was paused (not counters).
  kFold = 6,
  kFoldCount = 7,
  // An instant of the lane (mlflow_profiler.mark: a rate limit hit, a
  // retry): id = its name (string id). A kLabel flagged kEvResource just
  // before it names the resource it concerns. It opens and closes nothing.
  kMark = 8,
};

// Flags on events.
enum EventFlag : uint8_t {
  kEvException = 1 << 0,  // kReturn: the frame exited by an exception
  kEvCFunction = 1 << 1,  // kCall: a C function (capture_c_calls)
  kEvBlock = 1 << 2,      // kCall: a profile_block region, not a frame
  kEvContinued = 1 << 3,  // kCall: a coroutine resumed with no start seen in this lane
  // kReturn/kSuspend: calls made under this span were dropped (buffer full).
  // Optional: when no event of a lane carries it and the lane has dropped > 0,
  // the builder flags the lane's top-level spans instead (see build_tree).
  kEvChildrenDropped = 1 << 4,
  // kLabel: for the lane's innermost open span (profiling() around a pyfunc:
  // the model's predict folded into PyFuncModel.predict names it).
  kEvRelabel = 1 << 5,
  // kCall: a selector's select waiting for I/O or a timer (an event loop
  // with nothing ready; pyext/loop_watch.cpp): the thread was idle in it.
  kEvWait = 1 << 6,
  // kLabel: the string names the resource the span uses (profile_span's and
  // profile_block's `resource=`; model/resources.h), not its label.
  kEvResource = 1 << 7,
};

struct Event {
  int64_t ts_ns = 0;  // CLOCK_MONOTONIC, nanoseconds
  uint32_t id = 0;
  EventKind kind = EventKind::kCall;
  uint8_t flags = 0;
  uint16_t reserved = 0;
};
static_assert(sizeof(Event) == 16, "Event must stay a 16-byte record");

// One timeline: the events of one session in one thread and one execution
// context (an asyncio task has its own context, hence its own lane).
struct Lane {
  uint64_t thread_id = 0;   // threading.get_ident()
  uint32_t pid = 0;         // process; 0: the profile's meta["pid"] (in-process profiles)
  uint64_t session = 0;     // the session's serial in that process; 0: the only one
  uint64_t native_tid = 0;  // gettid(), joins with kernel events
  std::string thread_name;
  uint32_t task = 0;  // 0: the context the session was entered in; n: n-th other context
  // A lane started inside another lane's span (an asyncio task created in the
  // session, a thread started by it): its roots become children of the span
  // opened by event `parent_call` of lane `parent_lane`. -1: roots stay roots.
  int32_t parent_lane = -1;
  uint32_t parent_call = 0;
  std::vector<Event> events;
  // Events recorded in the lane: events.size() once build_tree ran; a lane read
  // back from a document keeps the count but not the events.
  uint64_t recorded = 0;
  std::vector<IORecord> io;            // I/O summaries (capture_io), keyed by kCall index
  std::vector<Reading> readings;       // cpu_time/alloc_bytes counter readings, by event index
  std::vector<OffCpuReading> off_cpu;  // the thread's off-CPU time, by time (views/waiting.h)
  uint64_t dropped = 0;                // calls not recorded because the buffer was full
  bool truncated = false;              // recording stopped entirely (hard cap reached)
  // The trace context active where the lane's session started (an
  // OpenTelemetry or MLflow span): lower-case hex, 32 and 16 digits, or
  // empty. Every lane of a session carries its session's.
  std::string trace_id;
  std::string span_id;
};

}  // namespace mlprof
