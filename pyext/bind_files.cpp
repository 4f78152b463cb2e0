// Files: export a Profile to bytes, save it atomically, read a profile
// document back; a pprof aggregated from many sources; the HTML page of an
// analysis result. The Profile is immutable once built, so exporting,
// writing and parsing run with the GIL released.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional arguments, labels

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "bindings.h"
#include "formats/export.h"
#include "formats/json_read.h"
#include "formats/pprof_aggregate.h"
#include "util/background_writer.h"
#include "util/file_io.h"

namespace py = pybind11;

namespace mlprof {

namespace {

using ProfilePtr = std::shared_ptr<Profile>;
using SamplesPtr = std::shared_ptr<StackSamples>;

constexpr ExportFormat kAllFormats[] = {ExportFormat::kJson,        ExportFormat::kJsonGz,
                                        ExportFormat::kChromeTrace, ExportFormat::kPprof,
                                        ExportFormat::kSpeedscope,  ExportFormat::kFolded,
                                        ExportFormat::kHtml};

// "'json', 'json_gz', ..." for messages.
std::string format_names() {
  std::string out;
  for (const ExportFormat f : kAllFormats) {
    if (!out.empty()) out += ", ";
    out += "'" + std::string(format_name(f)) + "'";
  }
  return out;
}

ExportFormat format_by_name(const std::string& name) {
  if (const auto f = format_from_name(name)) return *f;
  throw py::value_error("unknown format '" + name + "': the formats are " + format_names());
}

// OSError(errno, strerror, path): Python picks the subclass from errno
// (FileNotFoundError, PermissionError ...), as open() does.
[[noreturn]] void raise_os_error(int errnum, const std::string& path) {
  const py::object exc = py::handle(PyExc_OSError)(errnum, std::strerror(errnum), path);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

const char* kind_name(Error::Kind kind) {
  switch (kind) {
    case Error::Kind::kTruncated:
      return "truncated";
    case Error::Kind::kVersion:
      return "version";
    case Error::Kind::kIo:
      return "io";
    case Error::Kind::kCorrupt:
    case Error::Kind::kUnsupported:
      break;
  }
  return "corrupt";
}

// mlflow_profiler.ProfileLoadError(message, kind, path), defined in _files.py.
[[noreturn]] void raise_load_error(const Error& e, const std::optional<std::string>& path) {
  const py::object cls = py::module_::import("mlflow_profiler._files").attr("ProfileLoadError");
  // An I/O error's message already names the path; say it once.
  const std::string detail =
      e.kind == Error::Kind::kIo && e.errnum != 0 ? std::strerror(e.errnum) : e.message;
  const std::string message =
      path ? "cannot load '" + *path + "': " + detail : "cannot load the profile: " + detail;
  py::object exc =
      cls(message, kind_name(e.kind), path ? py::object(py::str(*path)) : py::object(py::none()));
  if (e.kind == Error::Kind::kIo && e.errnum != 0 && path) {
    exc.attr("errno") = e.errnum;
    // `raise ... from OSError(...)`: the OS's own account stays visible.
    py::object cause = py::handle(PyExc_OSError)(e.errnum, std::strerror(e.errnum), *path);
    PyException_SetCause(exc.ptr(), cause.release().ptr());
  }
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

py::bytes export_bytes(const ProfilePtr& p, const std::string& name) {
  const ExportFormat format = format_by_name(name);
  std::string data;
  without_gil([&] { data = export_profile(*p, format); });
  return py::bytes(data);
}

void save(const ProfilePtr& p, const std::string& path, const std::optional<std::string>& name) {
  std::optional<ExportFormat> format;
  if (name) {
    format = format_by_name(*name);
  } else {
    format = format_for_path(path);
    if (!format) {
      throw py::value_error("cannot tell the file format of '" + path +
                            "' from its extension: the known extensions are " + known_extensions() +
                            "; for another name, pass format= one of " + format_names());
    }
  }
  std::optional<Result<Ok>> written;
  without_gil([&] { written = save_profile(*p, path, *format); });
  if (!written->ok()) raise_os_error(written->error().errnum, path);
}

bool write_in_background_py(const ProfilePtr& p, const std::string& path, size_t capacity) {
  const std::optional<ExportFormat> format = format_for_path(path);
  if (!format)
    throw py::value_error("cannot tell the file format of '" + path + "' from its extension");
  return write_in_background(p, path, *format, capacity);
}

bool flush_background_writes_py(double timeout_s) {
  return without_gil([&] { return flush_background_writes(timeout_s); });
}

py::dict background_writer_stats_py() {
  const WriterStats s = background_writer_stats();
  py::dict out;
  out["submitted"] = s.submitted;
  out["written"] = s.written;
  out["dropped"] = s.dropped;
  out["failed"] = s.failed;
  out["queued"] = s.queued;
  out["batches"] = s.batches;
  out["sync_failures"] = s.sync_failures;
  out["last_error"] = s.last_error;
  return out;
}

ProfilePtr load_profile(const std::string& path) {
  std::optional<Result<std::string>> data;
  std::optional<Result<Profile>> profile;
  without_gil([&] {
    data = read_file(path);
    if (data->ok()) profile = read_json_document(data->value());
  });
  if (!data->ok()) {
    const Error& e = data->error();
    if (e.errnum == ENOENT) raise_os_error(e.errnum, path);
    raise_load_error(e, path);
  }
  if (!profile->ok()) raise_load_error(profile->error(), path);
  return std::make_shared<Profile>(std::move(profile->value()));
}

ProfilePtr loads_profile(const py::object& data) {
  std::string_view bytes;
  std::string utf8;
  if (py::isinstance<py::bytes>(data)) {
    char* buffer = nullptr;
    Py_ssize_t size = 0;
    if (PyBytes_AsStringAndSize(data.ptr(), &buffer, &size) != 0) throw py::error_already_set();
    bytes = std::string_view(buffer, static_cast<size_t>(size));
  } else if (py::isinstance<py::str>(data)) {
    utf8 = data.cast<std::string>();
    bytes = utf8;
  } else {
    throw py::type_error(
        std::string("loads_profile takes the bytes (or str) of a profile document, not ") +
        Py_TYPE(data.ptr())->tp_name);
  }
  std::optional<Result<Profile>> profile;
  // `data` stays referenced by the caller and bytes are immutable.
  without_gil([&] { profile = read_json_document(bytes); });
  if (!profile->ok()) raise_load_error(profile->error(), std::nullopt);
  return std::make_shared<Profile>(std::move(profile->value()));
}

// The aggregate is mutable and unlocked: its methods keep the GIL, so two
// Python threads never run them at once.
void bind_pprof_aggregate(py::module_& m) {
  py::class_<PprofAggregate>(
      m, "PprofAggregate",
      "One pprof aggregated from many sources, added one at a time "
      "(formats/pprof_aggregate.h): equal call paths with equal labels become one "
      "sample whose values are summed; the sample types are the union.")
      .def(py::init<>())
      .def(
          "add_profile",
          [](PprofAggregate& a, const ProfilePtr& p, const PprofAggregate::Labels& labels) {
            a.add(*p, labels);
          },
          py::arg("profile"), py::arg("labels") = PprofAggregate::Labels{},
          "Adds a span profile: per call path, calls and self wall time (off_cpu, runq with kernel "
          "data); `labels` [(key, value)] go on each of its samples.")
      .def(
          "add_samples",
          [](PprofAggregate& a, const SamplesPtr& s, const PprofAggregate::Labels& labels) {
            a.add(*s, labels);
          },
          py::arg("samples"), py::arg("labels") = PprofAggregate::Labels{},
          "Adds sampled stacks (StackSamples) with their own value types.")
      .def("add_comment", &PprofAggregate::add_comment, py::arg("comment"),
           "A line for `go tool pprof -comments`.")
      .def_property_readonly("sources", &PprofAggregate::sources)
      .def_property_readonly("samples", &PprofAggregate::samples,
                             "Distinct samples: paths times label sets.")
      .def_property_readonly("sample_types", &PprofAggregate::sample_types,
                             "[(type, unit)], in order.")
      .def("total", &PprofAggregate::total, py::arg("type"), py::arg("unit"),
           "The sum of one sample type over every sample (0 if absent).")
      .def(
          "to_bytes", [](const PprofAggregate& a) { return py::bytes(a.to_pprof()); },
          "The gzip-compressed profile.proto.")
      .def(
          "save",
          [](const PprofAggregate& a, const std::string& path) {
            const Result<Ok> written = write_file_atomic(path, a.to_pprof());
            if (!written.ok()) raise_os_error(written.error().errnum, path);
          },
          py::arg("path"), "Writes to_bytes() to `path` atomically; OSError if writing fails.");
}

}  // namespace

void bind_files(py::module_& m) {
  bind_pprof_aggregate(m);
  m.def("analysis_html", &to_html_analysis, py::arg("payload"),
        "The self-contained HTML page of an analysis result (`mlprof top`/`diff --html`): the "
        "payload JSON (a title, facts, columns and rows) in the report's template and CSS. "
        "ValueError if the payload is not a JSON object.");
  m.def(
      "write_file",
      [](const std::string& path, const py::bytes& data) {
        const std::string bytes = data;
        Result<Ok> written = Ok{};
        without_gil([&] { written = write_file_atomic(path, bytes); });
        if (!written.ok()) raise_os_error(written.error().errnum, path);
      },
      py::arg("path"), py::arg("data"),
      "Writes `data` to `path` as every output is written (util/file_io.h): atomically (a "
      "temporary file "
      "and a rename), a new file 0644 less the umask, a replaced one keeping its mode; OSError if "
      "it fails.");
  m.def("export_bytes", &export_bytes, py::arg("profile"), py::arg("format"),
        "The file contents of `profile` in `format` ('json', 'json_gz', 'chrome_trace', 'pprof', "
        "'speedscope', 'folded', 'html').");
  m.def("save", &save, py::arg("profile"), py::arg("path"), py::arg("format") = py::none(),
        "Writes `profile` to `path` atomically; the format follows the extension unless named. "
        "ValueError for an unknown extension or format, OSError (with errno and path) if writing "
        "fails.");
  m.def("write_in_background", &write_in_background_py, py::arg("profile"), py::arg("path"),
        py::arg("capacity"),
        "Queues `profile` for an atomic save to `path` (format from the extension) on the "
        "process's writer thread (SCHED_IDLE, no GIL); False, counted as dropped, when `capacity` "
        "writes are already queued. Never blocks.");
  m.def("flush_background_writes", &flush_background_writes_py, py::arg("timeout_s"),
        "Waits until the writer thread has written (or failed) everything queued, then makes it "
        "durable (one syncfs per filesystem written to); False if `timeout_s` (< 0: no limit) "
        "passed before the queue drained.");
  m.def("background_writer_stats", &background_writer_stats_py,
        "The writer thread's counts: submitted, written, dropped, failed, queued, batches, "
        "sync_failures (flushes whose syncfs failed), last_error.");
  m.def("background_writer_failures", &background_writer_failures,
        "background_writer_stats()['failed'] + ['sync_failures'], cheaply (read per submitted "
        "profile).");
  m.def("load_profile", &load_profile, py::arg("path"),
        "Reads a profile document (.json or .json.gz). FileNotFoundError if it does not exist; "
        "mlflow_profiler.ProfileLoadError (kind 'truncated', 'corrupt', 'version' or 'io') "
        "otherwise.");
  m.def("loads_profile", &loads_profile, py::arg("data"),
        "Reads a profile document from bytes (plain or gzip-compressed); ProfileLoadError if it is "
        "not one.");
  m.def("known_extensions", &known_extensions,
        "The file extensions save() knows, in a readable list.");
}

}  // namespace mlprof
