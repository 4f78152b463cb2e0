// bench_exporters: how long each timeline and stack exporter takes on a
// large profile, and how big its output is. Builds a synthetic profile of
// about 1M spans (nested calls to depth ~12 with a mix of depths, 1 in 50
// Python calls a generator suspended and resumed, I/O summaries on 1 call in
// 10, three lanes: a thread, an asyncio task and a worker thread hung under
// the first root), then times every format of export_profile (the document,
// gzip'd document, Chrome trace, pprof with gzip, speedscope, folded, HTML),
// median of N runs each (default 5).
//
//   ./build/bench/bench_exporters [spans] [runs]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "formats/export.h"
#include "model/tree.h"
#include "synthetic.h"

namespace {

using mlprof::Event;
using mlprof::EventKind;
using mlprof::bench::make;
using mlprof::bench::median_ms;

mlprof::IOSummary frame_summary(std::mt19937& rng) {
  mlprof::IOSummary s;
  s.type_name = "pandas.core.frame.DataFrame";
  s.has_shape = true;
  s.shape = {static_cast<int64_t>(100 + rng() % 10'000), 50};
  s.dtype = "float64";
  s.size_bytes = s.shape[0] * 50 * 8;
  return s;
}

// One lane of about `spans` calls, starting at `ts`.
mlprof::Lane synthetic_lane(const std::vector<uint32_t>& fns, const mlprof::Profile& p,
                            size_t spans, int64_t& ts, std::mt19937& rng) {
  mlprof::Lane lane;
  std::vector<Event>& ev = lane.events;
  ev.reserve(spans * 2 + spans / 10);
  std::vector<uint32_t> stack;      // call indices of running spans
  std::vector<uint32_t> suspended;  // generators waiting for a resume
  std::vector<uint8_t> generator;   // per event: the call opened a generator
  size_t calls = 0;
  // Each root picks its own ceiling, so the tree has shallow and deep parts.
  size_t max_depth = 4;
  while (calls < spans) {
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
    } else if (stack.empty() || (stack.size() < max_depth && r < 58)) {
      if (stack.empty()) max_depth = 2 + rng() % 12;
      const uint32_t fn = fns[rng() % fns.size()];
      const bool c = p.functions.get(fn).kind == mlprof::FunctionKind::kC;
      const auto idx = static_cast<uint32_t>(ev.size());
      generator.resize(ev.size() + 1, 0);
      generator[idx] = !c && rng() % 50 == 0;
      stack.push_back(idx);
      ev.push_back(make(EventKind::kCall, ts, fn, c ? mlprof::kEvCFunction : 0));
      if (!c && rng() % 10 == 0) {
        lane.io.push_back({idx, mlprof::IORole::kArgument, "df", frame_summary(rng)});
        lane.io.push_back({idx, mlprof::IORole::kReturn, "", frame_summary(rng)});
      }
      ++calls;
    } else {
      ev.push_back(make(EventKind::kReturn, ts, 0, rng() % 100 == 0 ? mlprof::kEvException : 0));
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
  return lane;
}

mlprof::Profile synthetic_profile(size_t spans) {
  mlprof::Profile p;
  const std::vector<uint32_t> fns = mlprof::bench::add_functions(p);
  std::mt19937 rng(42);
  int64_t ts = 1'000'000;
  p.start_ns = ts;
  // 80% on the main thread, 10% each in a task and a worker thread that run
  // alongside it (their clocks restart just after the main lane's first call).
  mlprof::Lane main = synthetic_lane(fns, p, spans * 8 / 10, ts, rng);
  const int64_t main_end = ts;
  main.thread_id = 1;
  main.native_tid = 1001;
  main.thread_name = "MainThread";
  p.lanes.push_back(std::move(main));
  const int64_t first_call = p.lanes[0].events.front().ts_ns;
  ts = first_call + 500;
  mlprof::Lane task = synthetic_lane(fns, p, spans / 10, ts, rng);
  task.thread_id = 1;
  task.native_tid = 1001;
  task.thread_name = "MainThread";
  task.task = 1;
  task.parent_lane = 0;
  task.parent_call = 0;
  p.lanes.push_back(std::move(task));
  ts = first_call + 700;
  mlprof::Lane worker = synthetic_lane(fns, p, spans - spans * 8 / 10 - spans / 10, ts, rng);
  worker.thread_id = 2;
  worker.native_tid = 1002;
  worker.thread_name = "Worker";
  worker.parent_lane = 0;
  worker.parent_call = 0;
  p.lanes.push_back(std::move(worker));
  p.captured_depth = 14;
  p.end_ns = std::max(main_end, ts) + 1000;
  p.meta = {{"engine", "synthetic"}, {"pid", "4242"}, {"host", "bench"}};
  mlprof::build_tree(p);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t target = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const mlprof::Profile p = synthetic_profile(target);
  size_t generators = 0, segments = p.segments.size();
  for (const mlprof::Span& s : p.spans) generators += (s.flags & mlprof::kSpanGenerator) != 0;
  std::printf(
      "profile: %zu spans in %zu lanes, max depth %d, %zu generators (%zu segments), %zu I/O "
      "summaries\n",
      p.spans.size(), p.lanes.size(), p.max_depth(), generators, segments, p.io.size());

  // Every format save() writes, through the same dispatch.
  using mlprof::ExportFormat;
  for (const ExportFormat f :
       {ExportFormat::kJson, ExportFormat::kJsonGz, ExportFormat::kChromeTrace,
        ExportFormat::kPprof, ExportFormat::kSpeedscope, ExportFormat::kFolded,
        ExportFormat::kHtml}) {
    size_t bytes = 0;
    const double ms = median_ms([&] { bytes = mlprof::export_profile(p, f).size(); }, runs);
    std::printf("%-16s median %8.1f ms of %d runs, %8.1f MB\n", mlprof::format_name(f), ms, runs,
                static_cast<double>(bytes) / 1e6);
  }
  return 0;
}
