#pragma once
// Bubbles and utilization (docs/design/analysis.md, "Analysis verbs"): the idle gaps of a session,
// when none of its threads or tasks runs, and how busy the lanes of a fan-out were (docs/store.md,
// "mlprof bubbles").
//
// A lane runs while one of its spans runs (a generator or coroutine only in
// its segments: a task between awaits does not run), less the time it waits:
// in a selector (an event loop with nothing ready; kSpanWait, at any
// depth), inside a blocking C call (time.sleep, a lock's acquire, a queue's
// get ..., seen with capture_c_calls) or off the CPU (the agent's kernel data).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/tree.h"

namespace mlprof {

struct Bubble {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  // Per lane that had a span open: the innermost one (what it waited in).
  std::vector<std::pair<uint32_t, int32_t>> waiting;
};

struct FanOut {
  // The step that started these threads or tasks: the span they hang under,
  // or up from it past threading's, concurrent.futures' and asyncio's own
  // frames and C calls (a pool's threads started by one map() share it).
  int32_t span = -1;
  std::vector<uint32_t> lanes;   // lanes started under it
  std::vector<int64_t> busy_ns;  // per lane: running within the span's wall time
  double utilization = 0;        // sum(busy) / (lanes * wall)
  double mean_concurrency = 0;   // sum(busy) / wall
  uint32_t max_concurrency = 0;  // most lanes running at once
};

struct BubbleReport {
  int64_t window_start_ns = 0;  // first root start .. last root end
  int64_t window_end_ns = 0;
  int64_t bubble_ns = 0;  // sum of the bubbles
  std::vector<Bubble> bubbles;
  std::vector<FanOut> fan_outs;
  // Whether anything says when a lane waited: kernel data, captured C calls
  // or, for a session that ran an event loop (task lanes or kSpanWait
  // spans), the watched selectors (meta "loop_waits"). Without it a
  // session's root keeps its lane running throughout, so no bubble can be
  // seen.
  bool wait_data = false;
};

// Gaps of at least min_ns with no lane running, and the fan-outs.
BubbleReport find_bubbles(const Profile& p, int64_t min_ns);

// Whether a C function blocks its thread (module, name as the capture names them).
bool is_blocking_call(const std::string& module, const std::string& name);

}  // namespace mlprof
