#pragma once
// What the native benchmarks share: hand-made events, a table of 300
// functions over user, library and C modules, and a median timer.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "model/tree.h"

namespace mlprof::bench {

inline Event make(EventKind kind, int64_t ts, uint32_t id, uint8_t flags = 0) {
  Event e;
  e.kind = kind;
  e.ts_ns = ts;
  e.id = id;
  e.flags = flags;
  return e;
}

// 300 functions of p: every 6th a C function ("builtins"), a third user code.
inline std::vector<uint32_t> add_functions(Profile& p) {
  static const char* const modules[] = {"app.model",
                                        "app.features",
                                        "sklearn.preprocessing._data",
                                        "numpy.core.fromnumeric",
                                        "torch.nn.modules.linear",
                                        "builtins"};
  std::vector<uint32_t> fns;
  for (int i = 0; i < 300; ++i) {
    const int m = i % 6;
    const bool user = m < 2;
    const std::string file =
        user ? "/app/model.py"
             : "/venv/lib/python3.12/site-packages/" + std::string(modules[m]) + ".py";
    fns.push_back(p.functions.add("function_" + std::to_string(i), modules[m], file, i,
                                  m == 5 ? FunctionKind::kC : FunctionKind::kPython, user));
  }
  return fns;
}

// Median wall time of `runs` calls of f, in milliseconds.
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

}  // namespace mlprof::bench
