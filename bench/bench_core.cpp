// bench_core: how long the core takes to turn a large capture into a tree
// and a JSON document. Builds a synthetic 1M-event lane (nested calls to
// depth ~8, a few generators suspended and resumed), then times build_tree,
// to_json_document and render_text separately, median of 5 runs each.
//
//   ./build/bench/bench_core [events]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "formats/json_doc.h"
#include "model/tree.h"
#include "render/render_text.h"
#include "synthetic.h"

namespace {

using mlprof::Event;
using mlprof::EventKind;
using mlprof::bench::make;
using mlprof::bench::median_ms;

mlprof::Profile synthetic_profile(size_t target_events) {
  mlprof::Profile p;
  const std::vector<uint32_t> fns = mlprof::bench::add_functions(p);
  std::mt19937 rng(42);
  std::vector<Event> ev;
  ev.reserve(target_events + 64);
  std::vector<uint32_t> stack;      // call indices of running spans
  std::vector<uint32_t> suspended;  // generators waiting for a resume
  std::vector<uint8_t> generator;   // per event: the call opened a generator
  generator.reserve(target_events + 64);
  int64_t ts = 1'000'000;
  constexpr size_t kMaxDepth = 8;
  while (ev.size() + stack.size() + 2 * suspended.size() < target_events) {
    ts += 50 + rng() % 2000;
    const uint32_t r = rng() % 100;
    if (!suspended.empty() && r < 3) {
      const uint32_t g = suspended.back();
      suspended.pop_back();
      ev.push_back(make(EventKind::kResume, ts, g));
      stack.push_back(g);
    } else if (!stack.empty() && generator[stack.back()] && r < 30) {
      ev.push_back(make(EventKind::kSuspend, ts, stack.back()));
      suspended.push_back(stack.back());
      stack.pop_back();
    } else if (stack.empty() || (stack.size() < kMaxDepth && r < 58)) {
      const uint32_t fn = fns[rng() % fns.size()];
      const bool c = p.functions.get(fn).kind == mlprof::FunctionKind::kC;
      generator.resize(ev.size() + 1, 0);
      generator[ev.size()] = !c && rng() % 50 == 0;
      stack.push_back(static_cast<uint32_t>(ev.size()));
      ev.push_back(make(EventKind::kCall, ts, fn, c ? mlprof::kEvCFunction : 0));
    } else {
      ev.push_back(make(EventKind::kReturn, ts, 0));
      stack.pop_back();
    }
    generator.resize(ev.size() + 1, 0);
  }
  // Finish every generator and every open call, as a session would.
  for (const uint32_t g : suspended) {
    ts += 100;
    ev.push_back(make(EventKind::kResume, ts, g));
    ev.push_back(make(EventKind::kReturn, ts + 50, 0));
  }
  for (size_t i = 0; i < stack.size(); ++i) {
    ts += 100;
    ev.push_back(make(EventKind::kReturn, ts, 0));
  }
  mlprof::Lane lane;
  lane.thread_id = 1;
  lane.native_tid = 1;
  lane.thread_name = "MainThread";
  lane.events = std::move(ev);
  p.lanes.push_back(std::move(lane));
  p.captured_depth = static_cast<int>(kMaxDepth);
  p.start_ns = 0;
  p.end_ns = ts + 1000;
  p.stats.events_captured = p.lanes[0].events.size();
  p.meta["engine"] = "synthetic";
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t target = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  mlprof::Profile p = synthetic_profile(target);
  const size_t events = p.lanes[0].events.size();

  const double build = median_ms([&] { mlprof::build_tree(p); });
  size_t generators = 0;
  for (const mlprof::Span& s : p.spans) generators += (s.flags & mlprof::kSpanGenerator) != 0;

  size_t json_bytes = 0;
  const double json = median_ms([&] { json_bytes = mlprof::to_json_document(p).size(); });

  mlprof::ViewOptions opts;
  opts.depth = 3;
  size_t text_bytes = 0;
  const double text = median_ms([&] { text_bytes = mlprof::render_text(p, opts).size(); });

  std::printf("build_tree: %zu events, %zu spans (%zu generators, max depth %d): median %.1f ms\n",
              events, p.spans.size(), generators, p.max_depth(), build);
  std::printf("to_json_document: %zu spans, %.1f MB: median %.1f ms\n", p.spans.size(),
              static_cast<double>(json_bytes) / 1e6, json);
  std::printf("render_text (depth 3, C calls folded): %.1f MB: median %.1f ms\n",
              static_cast<double>(text_bytes) / 1e6, text);
  return 0;
}
