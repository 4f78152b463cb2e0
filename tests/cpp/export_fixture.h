#pragma once
// A profile for the exporter tests with one of each thing an exporter maps:
// a thread's main lane, an asyncio task lane and a worker thread lane hung
// under its root, a generator resumed under another caller, I/O summaries, a
// profile_span label, an exception. Times are chosen so that every span's
// self time is known (see the comments).

#include <utility>

#include "model/tree.h"
#include "profile_builder.h"

namespace mlprof::test {

// Session 1'000 .. 21'000 ns. Lane 0 (thread MainThread, tid 4242):
//   predict      2'001 .. 20'000  active 17'999, self 11'999
//     preprocess 3'000 ..  4'500  self 1'500 (I/O: df -> ndarray)
//     produce    5'000 .. 10'000  generator: runs 5'000-6'000, 7'500-8'000
//                                  (inside consume), 9'500-10'000; active 2'000
//     consume    7'000 ..  9'000  self 2'000 (produce is not its child)
//     my label   11'000 .. 11'500 labelled call of `fail`, exception; self 500
// Lane 1 (thread MainThread, task 1), under predict:  fetch 12'000 .. 15'000
// Lane 2 (thread Worker, tid 5000), under predict:    work  12'500 .. 16'000
inline Profile export_profile_fixture() {
  Profile p;
  const uint32_t predict =
      p.functions.add("predict", "app.model", "/app/model.py", 10, FunctionKind::kPython, true);
  const uint32_t preprocess =
      p.functions.add("preprocess", "app.model", "/app/model.py", 20, FunctionKind::kPython, true);
  const uint32_t produce =
      p.functions.add("produce", "app.model", "/app/model.py", 30, FunctionKind::kPython, true);
  const uint32_t consume =
      p.functions.add("consume", "app.model", "/app/model.py", 40, FunctionKind::kPython, true);
  const uint32_t fail =
      p.functions.add("fail", "app.model", "/app/model.py", 50, FunctionKind::kPython, true);
  const uint32_t fetch =
      p.functions.add("fetch", "app.io", "/app/io.py", 5, FunctionKind::kPython, true);
  const uint32_t work =
      p.functions.add("work", "app.pool", "/app/pool.py", 7, FunctionKind::kPython, true);
  const uint32_t my_label = p.functions.strings().intern("my label");
  p.start_ns = 1'000;
  p.end_ns = 21'000;
  p.captured_depth = 3;
  p.meta = {{"pid", "777"},
            {"host", "box"},
            {"engine", "test"},
            {"start_unix_ns", "1700000000000000000"}};
  // clang-format off
  Lane main = make_lane({
      call(2'001, predict),        // 0
      call(3'000, preprocess),     // 1
      ret(4'500),
      call(5'000, produce),        // 3
      suspend(6'000, 3),
      call(7'000, consume),        // 5
      resume(7'500, 3),
      suspend(8'000, 3),
      ret(9'000),
      resume(9'500, 3),
      ret(10'000),
      label(my_label),
      call(11'000, fail),          // 12
      ret(11'500, kEvException),
      ret(20'000),
  });
  // clang-format on
  main.native_tid = 4242;
  IOSummary df;
  df.type_name = "pandas.core.frame.DataFrame";
  df.has_shape = true;
  df.shape = {1000, 50};
  df.dtype = "float64";
  df.size_bytes = 409'600;
  IOSummary arr;
  arr.type_name = "numpy.ndarray";
  arr.has_shape = true;
  arr.shape = {1000, 50};
  main.io.push_back({1, IORole::kArgument, "df", df});
  main.io.push_back({1, IORole::kReturn, "", arr});
  p.lanes.push_back(std::move(main));

  p.lanes.push_back(make_lane({call(12'000, fetch), ret(15'000)}, "MainThread", 1, 0, 0));
  Lane worker = make_lane({call(12'500, work), ret(16'000)}, "Worker", 0, 0, 0);
  worker.thread_id = 2;
  worker.native_tid = 5000;
  p.lanes.push_back(std::move(worker));
  build_tree(p);
  return p;
}

// Three overlapping sessions of one thread, each a `predict` as long as a
// time can be: a hostile document whose per-stack sums pass int64.
inline Profile int64_overflow_fixture() {
  Profile p;
  const uint32_t predict = user_fn(p, "predict");
  for (int i = 0; i < 3; ++i) p.lanes.push_back(make_lane({call(0, predict), ret(kMaxTimeNs)}));
  build_tree(p);
  return p;
}

}  // namespace mlprof::test
