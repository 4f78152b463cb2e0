#pragma once
// Bindings split by topic; module.cpp calls each once.

#include <pybind11/pybind11.h>

#include "core/io.h"

namespace mlprof {

void bind_io(pybind11::module_& m);     // bind_io.cpp: summarize, register_summarizer support
void bind_files(pybind11::module_& m);  // bind_files.cpp: export, save, load

// An IOSummary as the tuple (type_name, shape | None, dtype | None, length |
// None, size_bytes | None, device | None, repr_short | None): the field order
// of the Python IOSummary dataclass. Absent values are None both ways.
pybind11::tuple io_summary_tuple(const IOSummary& s);
IOSummary io_summary_from_tuple(pybind11::handle t);  // raises TypeError on a bad tuple

}  // namespace mlprof
