// Time per function (mlprof top --by function): _core.FunctionStats over
// views/function_stats.h. The core class is not thread-safe, so the bound
// object pairs it with a mutex; the adds of profiles and samples run with
// the GIL released.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "py_driver.h"
#include "views/function_stats.h"

namespace py = pybind11;

namespace mlprof {

namespace {

struct LockedFunctions {
  std::mutex mu;
  FunctionStats stats;
};

// Takes the mutex without holding the GIL meanwhile (another thread may hold
// the mutex and wait for the GIL).
std::unique_lock<std::mutex> take(LockedFunctions& self) {
  std::unique_lock<std::mutex> lock(self.mu, std::defer_lock);
  without_gil([&] { lock.lock(); });
  return lock;
}

py::dict function_dict(const FunctionKey& f) {
  py::dict d;
  d["name"] = f.name;
  d["file"] = f.file;
  d["line"] = f.line;
  return d;
}

}  // namespace

void bind_function_stats(py::module_& m) {
  py::class_<LockedFunctions>(
      m, "FunctionStats",
      "Flat and cumulative time per function, recursion counted once, over span "
      "profiles, store rows and sampled stacks (views/function_stats.h).")
      .def(py::init<>())
      .def(
          "add",
          [](LockedFunctions& self, const std::shared_ptr<Profile>& profile, int depth) {
            if (!profile) throw py::type_error("add() needs a Profile or StackSamples, got None");
            auto lock = take(self);
            without_gil([&] { self.stats.add(*profile, depth); });
          },
          py::arg("profile"), py::arg("depth") = -1,
          "Adds a span profile: per call, its self time on its call path; depth >= 0 leaves out "
          "deeper "
          "spans (their time stays in the span at the cut).")
      .def(
          "add",
          [](LockedFunctions& self, const std::shared_ptr<StackSamples>& samples, int depth) {
            if (!samples) throw py::type_error("add() needs a Profile or StackSamples, got None");
            auto lock = take(self);
            without_gil([&] { self.stats.add(*samples, depth); });
          },
          py::arg("samples"), py::arg("depth") = -1,
          "Adds sampled stacks; depth >= 0 cuts each stack to its first depth + 1 frames.")
      .def(
          "add_store",
          [](LockedFunctions& self, py::object driver, const std::string& dialect,
             const std::vector<int64_t>& source_ids, int depth) -> py::object {
            PyDriver d(std::move(driver), dialect_of(dialect));  // calls Python: the GIL stays held
            auto lock = take(self);
            Result<uint64_t> r = self.stats.add_store(d, source_ids, depth);
            if (!r.ok()) return py::make_tuple("corrupt", r.error().message);
            return py::int_(r.value());
          },
          py::arg("driver"), py::arg("dialect"), py::arg("source_ids"), py::arg("depth") = -1,
          "Adds a store's span sources (store.py's driver), summed per call path by the database; "
          "returns the number of profiles added.")
      .def(
          "summary",
          [](LockedFunctions& self) {
            std::vector<FunctionStats::SpanRow> spans;
            std::vector<FunctionStats::SampledRow> sampled;
            uint64_t profiles = 0, sessions = 0, sources = 0, samples = 0;
            std::vector<std::pair<std::string, std::string>> types;
            {
              auto lock = take(self);
              without_gil([&] {
                spans = self.stats.span_rows();
                sampled = self.stats.sampled_rows();
                profiles = self.stats.profiles();
                sessions = self.stats.sessions();
                sources = self.stats.sampled_sources();
                samples = self.stats.samples();
                types = self.stats.value_types();
              });
            }
            py::dict out;
            out["profiles"] = profiles;
            out["sessions"] = sessions;
            py::list functions;
            for (const auto& r : spans) {
              py::dict d = function_dict(r.function);
              d["calls"] = r.calls;
              d["flat_ns"] = r.flat_ns;
              d["cum_ns"] = r.cum_ns;
              d["flat_waiting_ns"] = r.flat_waiting_ns;
              d["cum_waiting_ns"] = r.cum_waiting_ns;
              functions.append(d);
            }
            out["functions"] = functions;
            py::dict s;
            s["sources"] = sources;
            s["samples"] = samples;
            s["value_types"] = types;
            py::list rows;
            for (const auto& r : sampled) {
              py::dict d = function_dict(r.function);
              d["flat"] = r.flat;
              d["cum"] = r.cum;
              rows.append(d);
            }
            s["functions"] = rows;
            out["sampled"] = s;
            return out;
          },
          "{'profiles', 'sessions', 'functions': [{'name', 'file', 'line', 'calls', 'flat_ns', "
          "'cum_ns', 'flat_waiting_ns', 'cum_waiting_ns'}] (self time is running time), "
          "'sampled': {'sources', 'samples', 'value_types': [(type, unit)], 'functions': [{'name', "
          "'file', "
          "'line', 'flat': [per type], 'cum': [per type]}]}}, functions in first-seen order.");
}

}  // namespace mlprof
