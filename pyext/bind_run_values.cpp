// Per-run call-path values and the release gate on them (mlprof diff,
// mlprof trend): _core.RunPathValues and _core.gate_runs.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "analysis/run_compare.h"
#include "analysis/run_values.h"
#include "bindings.h"
#include "py_driver.h"

namespace py = pybind11;

namespace mlprof {

namespace {

RunPathValues::Statistic statistic_of(const std::string& s) {
  if (s == "mean") return RunPathValues::Statistic::kMean;
  if (s == "p50") return RunPathValues::Statistic::kP50;
  if (s == "p95") return RunPathValues::Statistic::kP95;
  throw py::value_error("statistic must be mean, p50 or p95, got " + s);
}

RunPathValues::Quantity quantity_of(const std::string& s) {
  if (s == "wall") return RunPathValues::Quantity::kWall;
  if (s == "cpu") return RunPathValues::Quantity::kCpu;
  if (s == "waiting") return RunPathValues::Quantity::kWaiting;
  throw py::value_error("quantity must be wall, cpu or waiting, got " + s);
}

py::object finite_or_none(double v) {
  return std::isfinite(v) ? py::object(py::float_(v)) : py::object(py::none());
}

}  // namespace

void bind_run_values(py::module_& m) {
  py::class_<RunPathValues>(
      m, "RunPathValues",
      "Per run (a group of profiles) and call path, the path's time per root call "
      "(analysis/run_values.h). Not thread-safe.")
      .def(py::init([](int64_t max_paths) {
             if (max_paths < 1)
               throw py::value_error("max_paths must be >= 1, got " + std::to_string(max_paths));
             return std::make_unique<RunPathValues>(static_cast<size_t>(max_paths));
           }),
           py::arg("max_paths") = static_cast<int64_t>(CallPathStats::kDefaultMaxPaths))
      .def("run", &RunPathValues::run, py::arg("key"),
           "The index of the run named key, made if new.")
      .def("runs", &RunPathValues::runs, "The runs' keys, in the order made.")
      .def(
          "add",
          [](RunPathValues& self, const std::shared_ptr<Profile>& profile, size_t run, int depth) {
            if (!profile) throw py::type_error("add() needs a Profile, got None");
            if (run >= self.runs().size()) throw py::index_error("no run " + std::to_string(run));
            without_gil([&] { self.add(*profile, run, depth); });
          },
          py::arg("profile"), py::arg("run"), py::arg("depth") = -1,
          "Adds a finished profile to a run.")
      .def(
          "add_store",
          [](RunPathValues& self, py::object driver, const std::string& dialect,
             const std::vector<int64_t>& ids, const std::vector<size_t>& run_of,
             int depth) -> py::object {
            if (ids.size() != run_of.size())
              throw py::value_error("source_ids and run_of differ in length");
            for (const size_t r : run_of) {
              if (r >= self.runs().size()) throw py::index_error("no run " + std::to_string(r));
            }
            PyDriver d(std::move(driver), dialect_of(dialect));  // calls Python: the GIL stays held
            Result<uint64_t> r = self.add_store(d, ids, run_of, depth);
            if (!r.ok()) return py::make_tuple("corrupt", r.error().message);
            return py::int_(r.value());
          },
          py::arg("driver"), py::arg("dialect"), py::arg("source_ids"), py::arg("run_of"),
          py::arg("depth") = -1,
          "Adds a store's span sources, source_ids[i] to run run_of[i]; returns the number added.")
      .def(
          "values",
          [](const RunPathValues& self, const std::string& statistic, const std::string& quantity) {
            std::vector<RunPathValues::PathRuns> paths;
            {
              const auto s = statistic_of(statistic);
              const auto q = quantity_of(quantity);
              without_gil([&] { paths = self.values(s, q); });
            }
            py::list out;
            for (const auto& p : paths) {
              py::list values;
              for (const double v : p.values) values.append(finite_or_none(v));
              out.append(py::make_tuple(p.path, values, p.calls));
            }
            return out;
          },
          py::arg("statistic") = "mean", py::arg("quantity") = "wall",
          "[(path, per-run value in ns or None, per-run calls)], parents first: the statistic "
          "(mean, p50, p95) "
          "over each run's root calls of the path's time (wall, cpu or waiting) per root call.")
      .def("root_calls", &RunPathValues::root_calls, "Per run, its complete root calls.")
      .def("dropped", &RunPathValues::dropped,
           "Calls left out (past the path cap, or under no complete root call).");

  m.def(
      "gate_runs",
      [](const std::vector<std::pair<std::vector<double>, std::vector<double>>>& sides,
         const std::vector<bool>& gated, double threshold, double confidence) {
        if (!(confidence > 0 && confidence < 1))
          throw py::value_error("confidence must be in (0, 1)");
        std::vector<PathGate> gates;
        without_gil([&] { gates = gate_paths(sides, gated, threshold, confidence); });
        py::list out;
        for (const PathGate& g : gates) {
          const RunComparison& c = g.comparison;
          py::dict d;
          const bool both = c.runs_a > 0 && c.runs_b > 0;
          d["change"] = both ? py::object(py::float_(c.change)) : py::object(py::none());
          d["ci"] = both && std::isfinite(c.ci_lo) && std::isfinite(c.ci_hi)
                        ? py::object(py::make_tuple(c.ci_lo, c.ci_hi))
                        : py::object(py::none());
          d["p_greater"] = c.p_greater;
          d["p_less"] = c.p_less;
          d["holm_greater"] = g.holm_greater;
          d["holm_less"] = g.holm_less;
          d["exact"] = c.exact;
          d["gated"] = g.gated;
          d["verdict"] =
              g.gated ? py::object(py::str(verdict_name(g.verdict))) : py::object(py::none());
          d["runs_needed"] = g.runs_needed;
          out.append(d);
        }
        return out;
      },
      py::arg("sides"), py::arg("gated"), py::arg("threshold"), py::arg("confidence") = 0.95,
      "Per path (A's per-run values, B's): the change B/A - 1 (Hodges-Lehmann), its "
      "distribution-free "
      "interval (None: too few runs), one-sided Mann-Whitney p-values, Holm-adjusted over the "
      "gated paths, and "
      "the gated paths' verdict (regression, improvement, pass, inconclusive) with the runs a side "
      "an "
      "inconclusive one needs (analysis/run_compare.h).");
}

}  // namespace mlprof
