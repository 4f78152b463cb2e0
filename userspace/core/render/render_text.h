#pragma once
// The text tree (docs/design/capture.md, "The text tree"):
//   predict: 48.12ms
//     preprocess: 2.31ms
// Two spaces per level. Notes (dropped calls, depth clamped, open spans) follow
// the tree.

#include <string>
#include <vector>

#include "model/tree.h"
#include "views/view.h"

namespace mlprof {

// With more than one lane contributing roots, each such lane's roots follow a
// header line (lane_title); lanes nested under a span render inside it.
// A profile with kernel figures (the eBPF agent's, attributed) shows them
// after each span's duration (format_kernel), and lost kernel events in a
// note; an in-process profile renders as before.
std::string render_text(const Profile& p, const ViewOptions& opts);

// "thread MainThread" for a lane of task 0, "thread MainThread, task 2"
// otherwise; a lane with no thread name is named by its thread_id. A lane
// with a pid or session (the agent's) adds them: ", pid 4242, session 3".
std::string lane_title(const Lane& lane);
// Each lane's title as timelines show it (the HTML report, the Chrome
// trace): lane_title, and for an asyncio task's lane ": " and the display
// name of its first root span (what the task runs). `with_origin` false
// leaves out the pid and session (a Chrome track's process says them).
std::vector<std::string> lane_track_titles(const Profile& p, bool with_origin = true);

// A span's kernel figures as the text tree shows them:
// "[cpu 2.10ms, off 10.20ms: blocked 10.10ms, runq 0.10ms; woken by 4243 (Worker)]";
// the breakdown only when off-CPU time is not 0, the waker only when known.
std::string format_kernel(const SpanKernel& k, const std::string& waker_name);

// "48.12ms", "0.03ms", "4.20us": the duration format the renderers share.
std::string format_duration(int64_t ns);

}  // namespace mlprof
