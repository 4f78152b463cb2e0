// The profile store (store/store.h) driven through a Python connection: the
// extension never links libsqlite3 (two SQLite copies in one process break
// each other's file locks), so Python's sqlite3 or psycopg runs the SQL the
// core writes. The driver object has execute(sql, params),
// executemany(sql, rows) and query(sql, params) -> list of tuples
// (mlflow_profiler/store.py).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "formats/import.h"
#include "py_driver.h"
#include "store/store.h"
#include "store/store_paths.h"
#include "util/file_io.h"

namespace py = pybind11;

namespace mlprof {

namespace {

using ProfilePtr = std::shared_ptr<Profile>;
using SamplesPtr = std::shared_ptr<StackSamples>;

const char* kind_name(Error::Kind kind) {
  switch (kind) {
    case Error::Kind::kVersion:
      return "version";
    case Error::Kind::kCorrupt:
      return "corrupt";
    case Error::Kind::kTruncated:
      return "truncated";
    case Error::Kind::kUnsupported:
      return "missing";
    default:
      return "io";
  }
}

// (kind, message) for an Error, None for success: store.py raises StoreError.
py::object error_tuple(const Error& e) { return py::make_tuple(kind_name(e.kind), e.message); }

}  // namespace

void bind_store(py::module_& m) {
  m.def(
      "store_schema",
      [](const std::string& dialect, const std::string& version) {
        return schema_statements(dialect_of(dialect), version);
      },
      py::arg("dialect"), py::arg("version") = "",
      "The store's CREATE statements for 'sqlite' or 'postgres' (docs/store.md); with a version "
      "('2.3'), what "
      "that older version created (empty when no step reaches it).");
  m.def(
      "store_prepare",
      [](py::object driver, const std::string& dialect) -> py::object {
        PyDriver d(std::move(driver), dialect_of(dialect));
        const Result<Ok> r = prepare_store(d);
        return r.ok() ? py::object(py::none()) : error_tuple(r.error());
      },
      py::arg("driver"), py::arg("dialect"),
      "Creates the schema in an empty database or checks an existing store's version: None, or "
      "(kind, message).");
  m.def(
      "store_migrate",
      [](py::object driver, const std::string& dialect) -> py::object {
        PyDriver d(std::move(driver), dialect_of(dialect));
        const auto r = migrate_store(d);
        if (!r.ok()) return error_tuple(r.error());
        py::dict out;
        out["from"] = r.value().first;
        out["to"] = r.value().second;
        return out;
      },
      py::arg("driver"), py::arg("dialect"),
      "Migrates the store to this build's schema version (inside the caller's write transaction): "
      "{'from', 'to'}, or (kind, message).");
  m.def(
      "store_add",
      [](py::object driver, const std::string& dialect, const ProfilePtr& profile,
         const std::string& source_type, const std::string& uri,
         const std::map<std::string, std::string>& labels, int64_t added_unix_ns,
         const std::string& tool, const std::string& content_hash) {
        PyDriver d(std::move(driver), dialect_of(dialect));
        SourceInfo info{source_type, uri, labels, added_unix_ns, tool, content_hash};
        return add_profile(d, *profile, info);
      },
      py::arg("driver"), py::arg("dialect"), py::arg("profile"), py::arg("source_type"),
      py::arg("uri"), py::arg("labels"), py::arg("added_unix_ns"), py::arg("tool") = "",
      py::arg("content_hash") = "",
      "Adds the profile as one source (inside the caller's write transaction); returns its "
      "source_id.");
  m.def(
      "store_read",
      [](py::object driver, const std::string& dialect, int64_t source_id) -> py::object {
        PyDriver d(std::move(driver), dialect_of(dialect));
        Result<Profile> r = read_source(d, source_id);
        if (!r.ok()) return error_tuple(r.error());
        return py::cast(std::make_shared<Profile>(std::move(r.value())));
      },
      py::arg("driver"), py::arg("dialect"), py::arg("source_id"),
      "The profile of one source, or (kind, message).");
  py::class_<StackSamples, SamplesPtr>(m, "StackSamples",
                                       "Sampled stacks (model/stack_samples.h): an import of "
                                       "pprof, py-spy, speedscope or folded stacks.")
      .def_property_readonly(
          "sample_count", &StackSamples::sample_count,
          "The samples these stand for: a pre-aggregated sample (folded, pprof) counts as its "
          "count; len(stacks()) is the rows.")
      .def_property_readonly("value_types", [](const StackSamples& s) { return s.value_types; })
      .def(
          "weights",
          [](const StackSamples& s) {
            std::vector<uint64_t> out;
            const int counted = s.count_type();
            for (const auto& x : s.samples) out.push_back(StackSamples::weight(x, counted));
            return out;
          },
          "The samples each row of stacks() stands for: its count, or 1.")
      .def_property_readonly("threads",
                             [](const StackSamples& s) {
                               std::vector<std::string> out;
                               for (const auto& t : s.threads) out.push_back(t.name);
                               return out;
                             })
      .def_property_readonly("meta", [](const StackSamples& s) { return s.meta; })
      .def(
          "stacks",
          [](const StackSamples& s) {
            // [(thread name, [frame names root first], [values])] for the CLI and tests.
            py::list out;
            const auto& strings = s.functions.strings();
            for (const auto& sample : s.samples) {
              py::list frames;
              for (const auto& f : sample.frames)
                frames.append(strings.get(s.functions.get(f.function).name));
              out.append(py::make_tuple(s.threads.at(sample.thread).name, frames, sample.values));
            }
            return out;
          },
          "Every sample: (thread, frame names root first, values).");
  m.def(
      "import_profile",
      [](const py::bytes& data) -> py::object {
        std::string raw = data;
        std::optional<Result<Imported>> r;
        without_gil([&] { r = import_profile(raw); });
        if (!r->ok()) return error_tuple(r->error());
        if (auto* p = std::get_if<Profile>(&r->value()))
          return py::cast(std::make_shared<Profile>(std::move(*p)));
        return py::cast(
            std::make_shared<StackSamples>(std::move(std::get<StackSamples>(r->value()))));
      },
      py::arg("data"),
      "Another tool's profile (Chrome trace, speedscope, pprof, folded stacks; gzip or not): a "
      "Profile, "
      "StackSamples, or (kind, message).");
  m.def(
      "detect_input",
      [](const py::bytes& data) {
        std::string raw = data;
        if (is_gzip(raw)) {
          Result<std::string> r = gzip_decompress(raw, gzip_input_limit(raw.size()));
          if (!r.ok()) return std::string("unknown");
          raw = std::move(r.value());
        }
        return std::string(input_format_name(detect_input(raw)));
      },
      py::arg("data"),
      "'document', 'chrome-trace', 'speedscope', 'pprof', 'folded' or 'unknown', by content.");
  m.def(
      "store_add_samples",
      [](py::object driver, const std::string& dialect, const SamplesPtr& samples,
         const std::string& source_type, const std::string& uri,
         const std::map<std::string, std::string>& labels, int64_t added_unix_ns,
         const std::string& tool, const std::string& content_hash) {
        PyDriver d(std::move(driver), dialect_of(dialect));
        SourceInfo info{source_type, uri, labels, added_unix_ns, tool, content_hash};
        return add_stack_samples(d, *samples, info);
      },
      py::arg("driver"), py::arg("dialect"), py::arg("samples"), py::arg("source_type"),
      py::arg("uri"), py::arg("labels"), py::arg("added_unix_ns"), py::arg("tool") = "",
      py::arg("content_hash") = "", "Adds sampled stacks as one source; returns its source_id.");
  m.def(
      "store_remove",
      [](py::object driver, const std::string& dialect,
         const std::vector<int64_t>& source_ids) -> py::object {
        PyDriver d(std::move(driver), dialect_of(dialect));
        const Result<int64_t> r = remove_sources(d, source_ids);
        if (!r.ok()) return error_tuple(r.error());
        return py::int_(r.value());
      },
      py::arg("driver"), py::arg("dialect"), py::arg("source_ids"),
      "Deletes the sources and their rows (inside the caller's write transaction): the samples "
      "deleted, or "
      "(kind, message).");
  m.def(
      "store_read_stacks",
      [](py::object driver, const std::string& dialect, int64_t source_id) -> py::object {
        PyDriver d(std::move(driver), dialect_of(dialect));
        Result<StackSamples> r = read_stack_source(d, source_id);
        if (!r.ok()) return error_tuple(r.error());
        return py::cast(std::make_shared<StackSamples>(std::move(r.value())));
      },
      py::arg("driver"), py::arg("dialect"), py::arg("source_id"),
      "The sampled stacks of one source, or (kind, message).");
  m.def(
      "store_stack_paths",
      [](py::object driver, const std::string& dialect, const std::vector<int64_t>& stack_ids) {
        PyDriver d(std::move(driver), dialect_of(dialect));
        StorePaths stacks;
        stacks.load(d);
        py::dict out;
        for (const int64_t id : stack_ids) out[py::int_(id)] = stacks.names(id);
        return out;
      },
      py::arg("driver"), py::arg("dialect"), py::arg("stack_ids"),
      "{stack id: its call path's names from the root} (store/store_paths.h's rule); a damaged "
      "store raises StoreError.");
  // The core refuses with StoreFailure the rows a damaged store holds
  // (reading) or lacks (writing, id_counters): the API raises
  // StoreError(kind="corrupt") for it, as for SQLite's own refusals.
  // Looked up when it fires: mlflow_profiler.store imports _core.
  // By value: pybind11's translator type is void (*)(std::exception_ptr).
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StoreFailure& e) {
      const std::string message = std::string("the store is damaged: ") + e.what();
      try {
        py::object error = py::module_::import("mlflow_profiler.store").attr("StoreError");
        py::object raised = error(message, "corrupt");
        PyErr_SetObject(error.ptr(), raised.ptr());
      } catch (py::error_already_set&) {  // the package is not importable: still an error
        PyErr_SetString(PyExc_RuntimeError, message.c_str());
      }
    }
  });
}

}  // namespace mlprof
