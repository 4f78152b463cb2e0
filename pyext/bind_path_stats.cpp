// Call-path statistics (ProfileCollector): _core.CallPathStats. The core class
// is not thread-safe, so the bound object pairs it with a mutex; add() works
// on the immutable Profile with the GIL released, so threads that are not
// adding keep running Python meanwhile.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "py_driver.h"
#include "store/store_scan.h"
#include "views/path_stats.h"

namespace py = pybind11;

namespace mlprof {

namespace {

struct LockedStats {
  LockedStats(size_t max_paths, bool keep_walls) : stats(max_paths, keep_walls) {}
  std::mutex mu;
  CallPathStats stats;
};

constexpr double kNsPerMs = 1e6;

// The ms figures of one duration kind under `prefix` ("" or "self_"); None
// for min/max/mean/quantiles of a path with no complete call.
void put_durations(py::dict& d, const std::string& prefix, const PathSummary::Durations& t) {
  const auto ms = [&](double ns) -> py::object {
    if (t.count == 0) return py::none();
    return py::float_(ns / kNsPerMs);
  };
  d[py::str(prefix + "mean_ms")] = ms(t.mean_ns);
  d[py::str(prefix + "min_ms")] = ms(static_cast<double>(t.min_ns));
  d[py::str(prefix + "max_ms")] = ms(static_cast<double>(t.max_ns));
  d[py::str(prefix + "p50_ms")] = ms(t.p50_ns);
  d[py::str(prefix + "p95_ms")] = ms(t.p95_ns);
  d[py::str(prefix + "p99_ms")] = ms(t.p99_ns);
  d[py::str(prefix + "total_ms")] = static_cast<double>(t.sum_ns) / kNsPerMs;
}

py::dict summary_dict(const std::vector<PathSummary>& paths, int depth) {
  py::dict out;
  for (const PathSummary& s : paths) {
    const auto path_depth = static_cast<int>(s.path.size()) - 1;
    if (depth >= 0 && path_depth > depth) continue;
    std::string key;
    for (const std::string& name : s.path) key += (key.empty() ? "" : "/") + name;
    // A name holding '/' can make two paths join to one key: the later one
    // gets a suffix rather than overwrite ("path" is the exact list).
    const std::string base = key;
    for (int n = 2; out.contains(py::str(key)); ++n) key = base + " #" + std::to_string(n);
    py::dict d;
    d["path"] = py::cast(s.path);
    d["depth"] = path_depth;
    d["count"] = s.wall.count;
    d["sessions"] = s.sessions;
    d["incomplete"] = s.incomplete;
    put_durations(d, "", s.wall);
    put_durations(d, "self_", s.self);
    // Running vs waiting (views/waiting.h): every complete call has a waiting time.
    put_durations(d, "waiting_", s.waiting);
    // Off-CPU figures only where kernel data (the agent) gave them.
    d["off_cpu_count"] = s.off_cpu.count;
    put_durations(d, "off_cpu_", s.off_cpu);
    if (s.off_cpu.count == 0) d["off_cpu_total_ms"] = py::none();
    // Where the calls' own thread spent its time: sums over 'kernel_calls'.
    d["kernel_calls"] = s.kernel.calls;
    const auto total = [&](uint64_t ns) -> py::object {
      return s.kernel.calls == 0 ? py::object(py::none())
                                 : py::object(py::float_(static_cast<double>(ns) / kNsPerMs));
    };
    d["on_cpu_total_ms"] = total(s.kernel.on_cpu_ns);
    d["blocked_total_ms"] = total(s.kernel.blocked_ns);
    d["runq_total_ms"] = total(s.kernel.runq_ns);
    d["gil_total_ms"] = total(s.kernel.gil_ns);
    if (!s.walls.empty()) d["walls_ns"] = py::cast(s.walls);
    out[py::str(key)] = std::move(d);
  }
  return out;
}

}  // namespace

void bind_path_stats(py::module_& m) {
  py::class_<LockedStats>(m, "CallPathStats",
                          "Statistics per call path over many profiles (views/path_stats.h). "
                          "Thread-safe: calls are serialized by a mutex.")
      .def(py::init([](int64_t max_paths, bool keep_walls) {
             if (max_paths < 1) {
               throw py::value_error("max_paths must be >= 1 (distinct call paths tracked), got " +
                                     std::to_string(max_paths));
             }
             return std::make_unique<LockedStats>(static_cast<size_t>(max_paths), keep_walls);
           }),
           py::arg("max_paths") = static_cast<int64_t>(CallPathStats::kDefaultMaxPaths),
           py::arg("keep_walls") = false)
      .def(
          "add",
          [](LockedStats& self, const std::shared_ptr<Profile>& profile, int depth) {
            if (!profile) throw py::type_error("add() needs a Profile, got None");
            without_gil([&] {
              std::lock_guard<std::mutex> lock(self.mu);
              self.stats.add(*profile, depth);
            });
          },
          py::arg("profile"), py::arg("depth") = -1,
          "Adds one finished profile; depth >= 0 ignores deeper spans (their time stays in "
          "their parent's self time).")
      .def(
          "add_store",
          [](LockedStats& self, py::object driver, const std::string& dialect,
             const std::vector<int64_t>& source_ids, int depth) -> py::object {
            // The driver calls Python: the GIL stays held (each query releases
            // it while the database works).
            PyDriver d(std::move(driver), dialect_of(dialect));
            std::unique_lock<std::mutex> lock(self.mu, std::defer_lock);
            // Never wait for the mutex holding the GIL.
            without_gil([&] { lock.lock(); });
            Result<uint64_t> r = add_store_paths(d, source_ids, depth, self.stats);
            if (!r.ok()) return py::make_tuple("corrupt", r.error().message);
            return py::int_(r.value());
          },
          py::arg("driver"), py::arg("dialect"), py::arg("source_ids"), py::arg("depth") = -1,
          "Adds a store's span sources (store.py's driver), each as one profile, reading rows in "
          "ranges "
          "(store/store_scan.h); returns the number added.")
      .def(
          "summary",
          [](LockedStats& self, int depth) {
            std::vector<PathSummary> paths;
            without_gil([&] {
              std::lock_guard<std::mutex> lock(self.mu);
              paths = self.stats.summary();
            });
            return summary_dict(paths, depth);
          },
          py::arg("depth") = -1,
          "{'a/b': {'path': ['a', 'b'], 'depth': 1, 'count', 'sessions', 'incomplete', "
          "'mean_ms', 'min_ms', 'max_ms', 'p50_ms', 'p95_ms', 'p99_ms', 'total_ms', and the same "
          "with 'self_' (running self time), 'waiting_' (waiting time) and 'off_cpu_' (None "
          "without "
          "kernel data; 'off_cpu_count' its samples), "
          "'kernel_calls' and the own thread's 'on_cpu_total_ms', 'blocked_total_ms', "
          "'runq_total_ms', "
          "'gil_total_ms' over them (None without kernel data), and "
          "'walls_ns' (ascending) when the stats keep walls}}; "
          "depth >= 0 leaves out deeper paths.")
      .def(
          "reset",
          [](LockedStats& self) {
            without_gil([&] {
              std::lock_guard<std::mutex> lock(self.mu);
              self.stats.reset();
            });
          },
          "Forgets every path and count.")
      .def(
          "statistics",
          [](LockedStats& self) {
            uint64_t sessions = 0, session_count = 0, dropped = 0;
            size_t paths = 0, bytes = 0;
            without_gil([&] {
              std::lock_guard<std::mutex> lock(self.mu);
              sessions = self.stats.sessions();
              session_count = self.stats.session_count();
              dropped = self.stats.dropped_paths();
              paths = self.stats.paths();
              bytes = self.stats.memory_bytes();
            });
            py::dict d;
            d["sessions"] = sessions;
            d["session_count"] = session_count;
            d["paths"] = paths;
            d["max_paths"] = self.stats.max_paths();
            d["dropped_paths"] = dropped;
            d["memory_bytes"] = bytes;
            return d;
          },
          "sessions (profiles added), session_count (the predict() sessions they held), paths, "
          "max_paths, dropped_paths and memory_bytes, read together.")
      .def("memory_bytes",
           [](LockedStats& self) {
             return without_gil([&] {
               std::lock_guard<std::mutex> lock(self.mu);
               return self.stats.memory_bytes();
             });
           })
      .def_property_readonly("sessions",
                             [](LockedStats& self) {
                               return without_gil([&] {
                                 std::lock_guard<std::mutex> lock(self.mu);
                                 return self.stats.sessions();
                               });
                             })
      .def_property_readonly("dropped_paths",
                             [](LockedStats& self) {
                               return without_gil([&] {
                                 std::lock_guard<std::mutex> lock(self.mu);
                                 return self.stats.dropped_paths();
                               });
                             })
      .def_property_readonly("paths",
                             [](LockedStats& self) {
                               return without_gil([&] {
                                 std::lock_guard<std::mutex> lock(self.mu);
                                 return self.stats.paths();
                               });
                             })
      .def_property_readonly("max_paths", [](LockedStats& self) { return self.stats.max_paths(); });
}

}  // namespace mlprof
