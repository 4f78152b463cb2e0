#pragma once
// Helpers for the core tests: events and lanes written by hand, the way a
// capture hook would write them.

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model/tree.h"

namespace mlprof::test {

inline Event make_event(EventKind kind, int64_t ts, uint32_t id, uint8_t flags) {
  Event e;
  e.kind = kind;
  e.ts_ns = ts;
  e.id = id;
  e.flags = flags;
  return e;
}
inline Event call(int64_t ts, uint32_t function, uint8_t flags = 0) {
  return make_event(EventKind::kCall, ts, function, flags);
}
inline Event ret(int64_t ts, uint8_t flags = 0) {
  return make_event(EventKind::kReturn, ts, 0, flags);
}
inline Event suspend(int64_t ts, uint32_t call_index, uint8_t flags = 0) {
  return make_event(EventKind::kSuspend, ts, call_index, flags);
}
inline Event resume(int64_t ts, uint32_t call_index) {
  return make_event(EventKind::kResume, ts, call_index, 0);
}
inline Event label(uint32_t string_id) { return make_event(EventKind::kLabel, 0, string_id, 0); }

inline Lane make_lane(std::vector<Event> events, std::string thread_name = "MainThread",
                      uint32_t task = 0, int32_t parent_lane = -1, uint32_t parent_call = 0) {
  Lane lane;
  lane.thread_id = 1;
  lane.native_tid = 4242;
  lane.thread_name = std::move(thread_name);
  lane.task = task;
  lane.parent_lane = parent_lane;
  lane.parent_call = parent_call;
  lane.events = std::move(events);
  return lane;
}

// A user-code Python function of module "app.model".
inline uint32_t user_fn(Profile& p, const std::string& name,
                        const std::string& module = "app.model") {
  return p.functions.add(name, module, "/app/model.py", 1, FunctionKind::kPython, true);
}
// A library function (site-packages).
inline uint32_t lib_fn(Profile& p, const std::string& name, const std::string& module) {
  return p.functions.add(name, module, "/venv/lib/python3.12/site-packages/" + module + ".py", 1,
                         FunctionKind::kPython, false);
}
inline uint32_t c_fn(Profile& p, const std::string& name, const std::string& module = "builtins") {
  return p.functions.add(name, module, "", 0, FunctionKind::kC, false);
}

// A random, valid capture of one lane: nested calls up to `max_depth`, user,
// library and C functions, and (optionally) generators suspended at the top
// of the stack and resumed later, some never. Deterministic for a seed.
inline Profile random_profile(uint32_t seed, int calls, int max_depth, bool generators) {
  Profile p;
  const std::vector<uint32_t> fns = {
      user_fn(p, "predict"),
      user_fn(p, "preprocess"),
      user_fn(p, "encode"),
      user_fn(p, "helper", "app.util"),
      lib_fn(p, "StandardScaler.transform", "sklearn.preprocessing._data"),
      lib_fn(p, "check_array", "sklearn.utils.validation"),
      lib_fn(p, "asarray", "numpy"),
      lib_fn(p, "Linear.forward", "torch.nn.modules.linear"),
      c_fn(p, "len"),
      c_fn(p, "isinstance"),
  };
  std::mt19937 rng(seed);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  std::vector<Event> ev;
  std::vector<uint32_t> stack;  // call event indices of running spans
  std::vector<bool> is_generator;
  std::vector<std::vector<uint32_t>> suspended;  // detached segments
  int64_t ts = 1000;
  int made = 0;
  while (made < calls || !stack.empty() || !suspended.empty()) {
    ts += 1 + pick(5000);
    const uint32_t r = pick(100);
    if (made < calls && !suspended.empty() && r < 8) {
      const uint32_t k = pick(static_cast<uint32_t>(suspended.size()));
      ev.push_back(resume(ts, suspended[k].front()));
      stack.insert(stack.end(), suspended[k].begin(), suspended[k].end());
      suspended.erase(suspended.begin() + k);
    } else if (made < calls && !stack.empty() && is_generator[stack.back()] && r < 20) {
      suspended.push_back({stack.back()});
      ev.push_back(suspend(ts, stack.back()));
      stack.pop_back();
    } else if (made < calls &&
               (stack.empty() || (static_cast<int>(stack.size()) <= max_depth && r < 60))) {
      // Roots are user code (fns[0..3]), as a model's predict() would be.
      const uint32_t fn = fns[pick(stack.empty() ? 4u : static_cast<uint32_t>(fns.size()))];
      const bool c = p.functions.get(fn).kind == FunctionKind::kC;
      const auto idx = static_cast<uint32_t>(ev.size());
      ev.push_back(call(ts, fn, c ? kEvCFunction : 0));
      is_generator.resize(ev.size() + 1, false);
      is_generator[idx] = generators && !c && pick(6) == 0;
      stack.push_back(idx);
      ++made;
    } else if (!stack.empty()) {
      ev.push_back(ret(ts, pick(20) == 0 ? kEvException : 0));
      stack.pop_back();
    } else if (!suspended.empty()) {
      // Calls are used up: leave the rest suspended at the end.
      suspended.clear();
    }
    is_generator.resize(ev.size() + 1, false);
  }
  p.start_ns = 0;
  p.end_ns = ts + 100;
  p.lanes.push_back(make_lane(std::move(ev)));
  build_tree(p);
  // A generator resumed under a shallower caller lets its callee go deeper
  // than the stack suggests: the ceiling is whatever was reached.
  p.captured_depth = std::max(max_depth, p.max_depth());
  return p;
}

}  // namespace mlprof::test
