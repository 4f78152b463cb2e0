#pragma once
// The one place where a resume is written to a lane: a generator resumed
// straight from the kSuspend it left (nothing recorded in the lane between:
// it went back to its consumer, which is below the ceiling or a C function,
// and came back) does not add a kSuspend/kResume pair but is folded into a
// kFold/kFoldCount pair that counts the resumes and the paused time
// (model/event.h). `sum(i * i for i in range(20000))` is then 3 events and
// one segment, not 40,001 events and 20,001 segments. The engine
// (pyext/engine.cpp) and, mirrored in Python, the reference engine
// (_reference.py, _append_resume) write resumes this way. Which resumes
// may fold is theirs to say (docs/capture.md, "Busy generators"): plain
// generators' only, and none while a v1 tracer rebuilds the lane from
// per-event probes (its kCall indices count every kSuspend and kResume).

#include <cstddef>
#include <cstdint>

#include "model/event.h"
#include "model/span_value.h"

namespace mlprof {

// What append_resume did to lane.events.
enum class ResumeWrite : uint8_t {
  kAppended,  // a kResume was appended
  kFolded,    // the trailing kSuspend was folded: one event fewer, or a kFoldCount more
};

// Writes the resume at `ts` of the span whose kCall is at index `call`.
// When `fold` and the lane's last event is a flag-free kSuspend of that span
// it folds:
// - after [kFold(call), kFoldCount] the kSuspend is removed and the pair
//   takes its pause (count + 1, kFoldCount.ts = ts, kFold.ts moves so that
//   the difference is the paused total);
// - otherwise the kSuspend becomes kFold(call) (its ts stays) and
//   kFoldCount(1, ts) follows.
// Otherwise it appends a kResume. A count at UINT32_MAX takes no further
// resume (a new fold starts after it).
//
// Readings (cpu_time, alloc_bytes): `now` holds the counters read at the
// resume (Reading::event ignored), `n` of them, or none. Appended: they
// become the kResume's readings. Folded: the kSuspend's readings are removed
// and what each counter grew while paused (now less the kSuspend's reading,
// never negative) is added to the kFold's readings, so the consumer's CPU
// and allocations while the generator was paused stay out of its values.
ResumeWrite append_resume(Lane& lane, uint32_t call, int64_t ts, bool fold,
                          const Reading* now = nullptr, size_t n = 0);

}  // namespace mlprof
