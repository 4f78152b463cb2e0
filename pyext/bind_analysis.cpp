// Analysis over one profile (analysis/bubbles.h) for mlflow_profiler.analysis.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "analysis/bubbles.h"
#include "bindings.h"
#include "views/stack_paths.h"

namespace py = pybind11;

namespace mlprof {

namespace {

py::dict lane_dict(const Profile& p, uint32_t lane) {
  py::dict d;
  d["lane"] = lane;
  d["thread_name"] = p.lanes[lane].thread_name;
  d["task"] = p.lanes[lane].task;
  return d;
}

py::dict bubbles_dict(const std::shared_ptr<Profile>& profile, int64_t min_ns) {
  const Profile& p = *profile;
  BubbleReport r;
  without_gil([&] { r = find_bubbles(p, min_ns); });
  py::dict out;
  out["window_start_ns"] = r.window_start_ns;
  out["window_end_ns"] = r.window_end_ns;
  out["bubble_ns"] = r.bubble_ns;
  out["wait_data"] = r.wait_data;
  py::list bubbles;
  for (const Bubble& b : r.bubbles) {
    py::dict d;
    d["start_ns"] = b.start_ns;
    d["end_ns"] = b.end_ns;
    py::list waiting;
    for (const auto& [lane, span] : b.waiting) {
      py::dict w = lane_dict(p, lane);
      w["span"] = p.display_name(p.spans[span]);
      waiting.append(w);
    }
    d["waiting"] = waiting;
    bubbles.append(d);
  }
  out["bubbles"] = bubbles;
  py::list fan_outs;
  for (const FanOut& f : r.fan_outs) {
    py::dict d;
    d["span"] = p.display_name(p.spans[f.span]);
    d["wall_ns"] = p.spans[f.span].end_ns - p.spans[f.span].start_ns;
    py::list lanes;
    for (size_t i = 0; i < f.lanes.size(); ++i) {
      py::dict l = lane_dict(p, f.lanes[i]);
      l["busy_ns"] = f.busy_ns[i];
      lanes.append(l);
    }
    d["lanes"] = lanes;
    d["utilization"] = f.utilization;
    d["mean_concurrency"] = f.mean_concurrency;
    d["max_concurrency"] = f.max_concurrency;
    fan_outs.append(d);
  }
  out["fan_outs"] = fan_outs;
  return out;
}

}  // namespace

void bind_analysis(py::module_& m) {
  m.def("find_bubbles", &bubbles_dict, py::arg("profile"), py::arg("min_ns"),
        "The idle gaps of a profile's session and the utilization of its fan-outs "
        "(analysis/bubbles.h).");
  py::class_<StackPathTotals>(
      m, "StackPathTotals",
      "Sampled stacks summed per call path, across sources (views/stack_paths.h).")
      .def(py::init<>())
      .def(
          "add",
          [](StackPathTotals& self, const std::shared_ptr<StackSamples>& samples, int depth) {
            if (!samples) throw py::type_error("add() needs StackSamples, got None");
            without_gil([&] { self.add(*samples, depth); });
          },
          py::arg("samples"), py::arg("depth") = -1,
          "Adds every sample of one source; depth >= 0 folds deeper frames into their ancestor at "
          "it.")
      .def(
          "summary",
          [](const StackPathTotals& self) {
            py::dict out;
            out["value_types"] = self.value_types();
            out["sources"] = self.sources();
            out["samples"] = self.samples();
            py::list rows;
            for (const auto& r : self.rows()) {
              py::dict d;
              d["path"] = r.path;
              d["self"] = r.self;
              d["total"] = r.total;
              rows.append(d);
            }
            out["rows"] = rows;
            return out;
          },
          "{'value_types': [(type, unit)], 'sources', 'samples', 'rows': [{'path', 'self', "
          "'total'}]}: "
          "per path its samples' values as the leaf (self) and at or under it (total), per type.");
}

}  // namespace mlprof
