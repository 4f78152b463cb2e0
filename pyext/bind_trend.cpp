// A call path's history over releases (analysis/trend.h, analysis/changepoints.h)
// for mlflow_profiler.analysis.trend: _core.path_trend.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "analysis/trend.h"
#include "bindings.h"

namespace py = pybind11;

namespace mlprof {

namespace {

py::dict comparison_dict(const RunComparison& c) {
  py::dict d;
  const bool both = c.runs_a > 0 && c.runs_b > 0;
  d["runs_before"] = c.runs_a;
  d["runs_after"] = c.runs_b;
  d["change"] = both ? py::object(py::float_(c.change)) : py::object(py::none());
  d["ci"] = both && std::isfinite(c.ci_lo) && std::isfinite(c.ci_hi)
                ? py::object(py::make_tuple(c.ci_lo, c.ci_hi))
                : py::object(py::none());
  return d;
}

}  // namespace

void bind_trend(py::module_& m) {
  m.def(
      "path_trend",
      [](const std::vector<py::object>& values, const std::vector<size_t>& group_of,
         size_t last_group, size_t tests, double threshold, double alpha, uint32_t permutations,
         uint32_t stop_after, double confidence, uint64_t seed) {
        if (values.size() != group_of.size())
          throw py::value_error("values and group_of differ in length");
        if (!(alpha > 0 && alpha < 1)) throw py::value_error("alpha must be in (0, 1)");
        if (!(confidence > 0 && confidence < 1))
          throw py::value_error("confidence must be in (0, 1)");
        if (permutations < 1) throw py::value_error("permutations must be >= 1");
        for (size_t i = 1; i < group_of.size(); ++i) {
          if (group_of[i] < group_of[i - 1])
            throw py::value_error("group_of must be non-decreasing");
        }
        std::vector<double> v;
        v.reserve(values.size());
        for (const py::object& x : values) {
          v.push_back(x.is_none() ? std::numeric_limits<double>::quiet_NaN() : x.cast<double>());
        }
        ChangePointOptions o;
        o.alpha = alpha;
        o.permutations = permutations;
        o.stop_after = stop_after;
        o.confidence = confidence;
        o.seed = seed;
        PathTrend t;
        without_gil([&] { t = path_trend(v, group_of, last_group, tests, threshold, o); });
        py::list points;
        for (const ChangePoint& cp : t.points) {
          py::dict d = comparison_dict(cp.change);
          d["group"] = cp.group;
          d["run"] = cp.run;
          d["statistic"] = cp.statistic;
          d["p_value"] = cp.p_value;
          d["permutations"] = cp.permutations;
          points.append(d);
        }
        py::dict out;
        out["change_points"] = points;
        out["minor"] = t.minor;
        if (t.has_latest) {
          py::dict latest = comparison_dict(t.latest);
          latest["group"] = t.latest_group;
          latest["verdict"] = verdict_name(t.verdict);
          latest["min_p_value"] = t.min_p_value;
          latest["runs_needed"] = t.runs_needed;
          out["latest"] = latest;
        } else {
          out["latest"] = py::none();
        }
        return out;
      },
      py::arg("values"), py::arg("group_of"), py::arg("last_group"), py::arg("tests"),
      py::arg("threshold"), py::arg("alpha") = 0.05, py::arg("permutations") = 999,
      py::arg("stop_after") = 10, py::arg("confidence") = 0.95, py::arg("seed") = 0,
      "One call path's history: per run its value (ns, None: none), group_of its release "
      "(non-decreasing). "
      "Returns {'change_points': [...], 'minor': n, 'latest': {...} or None}: E-divisive change "
      "points tested "
      "by permutation at alpha / tests (analysis/changepoints.h), those within +-threshold dropped "
      "(minor counts "
      "them), each with the change (B/A - 1, Hodges-Lehmann) and its interval (None: too few "
      "runs), and the "
      "verdict on release last_group (analysis/trend.h).");
  m.def("min_split_p_value", &min_split_p_value, py::arg("before"), py::arg("after"),
        "1 / C(before + after, after): the smallest p-value a permutation test of that split can "
        "reach.");
}

}  // namespace mlprof
