#pragma once
// Bindings split by topic; module.cpp calls each once.

#include <pybind11/pybind11.h>

namespace mlprof {

void bind_io(pybind11::module_& m);     // bind_io.cpp: summarize, register_summarizer support
void bind_files(pybind11::module_& m);  // bind_files.cpp: export, save, load

}  // namespace mlprof
