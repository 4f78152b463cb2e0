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

#include "core/json_doc.h"
#include "core/render_text.h"
#include "core/tree.h"

namespace {

using mlprof::Event;
using mlprof::EventKind;

Event make(EventKind kind, int64_t ts, uint32_t id, uint8_t flags = 0) {
  Event e;
  e.kind = kind;
  e.ts_ns = ts;
  e.id = id;
  e.flags = flags;
  return e;
}

mlprof::Profile synthetic_profile(size_t target_events) {
  mlprof::Profile p;
  std::vector<uint32_t> fns;
  const char* modules[] = {"app.model",
                           "app.features",
                           "sklearn.preprocessing._data",
                           "numpy.core.fromnumeric",
                           "torch.nn.modules.linear",
                           "builtins"};
  for (int i = 0; i < 300; ++i) {
    const int m = i % 6;
    const bool user = m < 2;
    const std::string file =
        user ? "/app/model.py"
             : "/venv/lib/python3.12/site-packages/" + std::string(modules[m]) + ".py";
    fns.push_back(p.functions.add("function_" + std::to_string(i), modules[m], file, i,
                                  m == 5 ? mlprof::FunctionKind::kC : mlprof::FunctionKind::kPython,
                                  user));
  }
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

template <typename F>
double median_ms(F&& f, int runs = 5) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
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
