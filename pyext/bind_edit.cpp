// Edited copies of a profile (views/edit.h), for span processors
// (mlflow_profiler._processors). The arguments are converted with the GIL
// held; the copy is made with it released.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "summarize.h"
#include "views/edit.h"

namespace py = pybind11;

namespace mlprof {

namespace {

using ProfilePtr = std::shared_ptr<Profile>;

// (role, name, IOSummary), the form Profile.io_of returns.
SpanIO io_row(const py::handle& item, int32_t span) {
  if (!py::isinstance<py::tuple>(item) || py::len(item) != 3) {
    throw py::type_error("edit_profile: the I/O rows of span " + std::to_string(span) +
                         " must be (role, name, IOSummary) tuples, not " +
                         std::string(Py_TYPE(item.ptr())->tp_name));
  }
  const auto t = py::reinterpret_borrow<py::tuple>(item);
  const int role = t[0].cast<int>();
  if (role != static_cast<int>(IORole::kArgument) && role != static_cast<int>(IORole::kReturn)) {
    throw py::value_error("edit_profile: an I/O row of span " + std::to_string(span) +
                          " has role " + std::to_string(role) +
                          " (0 is an argument, 1 the return value)");
  }
  SpanIO row;
  row.span = span;
  row.role = static_cast<IORole>(role);
  row.name = t[1].cast<std::string>();
  std::string why;
  if (!summarize::from_python(t[2].ptr(), &row.summary, &why)) {
    PyErr_Clear();  // a failed attribute read may leave its own error behind
    throw py::type_error("edit_profile: an I/O row of span " + std::to_string(span) +
                         " is not a valid IOSummary: " + why);
  }
  return row;
}

ProfilePtr edit(const ProfilePtr& p, const std::map<int32_t, std::string>& labels,
                const py::dict& io, const std::vector<int32_t>& drop,
                const std::map<std::string, std::string>& meta) {
  ProfileEdits edits;
  edits.labels = labels;
  edits.drop = drop;
  edits.meta = meta;
  for (const auto& [key, rows] : io) {
    const auto span = key.cast<int32_t>();
    std::vector<SpanIO>& out = edits.io[span];
    for (const py::handle row : rows.cast<py::list>()) out.push_back(io_row(row, span));
  }
  std::optional<Result<Profile>> result;
  // Without the GIL: the Profile is immutable once built.
  without_gil([&] { result = edit_profile(*p, edits); });
  if (!result->ok()) {
    const Error& e = result->error();
    if (e.kind == Error::Kind::kUnsupported) throw py::index_error(e.message);
    throw py::value_error(e.message);
  }
  return std::make_shared<Profile>(std::move(result->value()));
}

}  // namespace

void bind_edit(py::module_& m) {
  m.def("edit_profile", &edit, py::arg("profile"), py::arg("labels"), py::arg("io"),
        py::arg("drop"), py::arg("meta") = std::map<std::string, std::string>{},
        "A copy of `profile` with spans relabelled ({span: label}; '' shows the function's "
        "name), their I/O summaries replaced ({span: [(role, name, IOSummary), ...]}, role 0 an "
        "argument, 1 the return value; [] leaves none) and `drop` spans removed with their "
        "subtrees; `meta` entries are set on the copy. Span indices are the input's; nothing a "
        "removed span or a replaced label held remains. IndexError for an index outside the "
        "profile.");
}

}  // namespace mlprof
