#pragma once
// Bindings split by topic; module.cpp calls each once.

#include <pybind11/pybind11.h>

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "engine.h"
#include "model/summary.h"

namespace mlprof {

// fn() run without the GIL, as under pybind11's gil_scoped_release, but the
// GIL is taken back in this frame, not in a destructor. At interpreter exit
// 3.11 to 3.13 end a daemon thread that takes the GIL with pthread_exit, a
// forced unwind: out of gil_scoped_release's noexcept destructor it aborted
// the process (std::terminate: a daemon thread saving a profile when the
// program exited). From here it unwinds the thread, as CPython means it to;
// an exception of fn() is held until the GIL is back.
template <typename Fn>
auto without_gil(Fn&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  PyThreadState* ts = PyEval_SaveThread();
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
  try {
    if constexpr (std::is_void_v<R>) {
      fn();
    } else {
      result.emplace(fn());
    }
  } catch (abi::__forced_unwind&) {
    throw;  // the thread cancelled: it ends without the GIL
  } catch (...) {
    error = std::current_exception();
  }
  PyEval_RestoreThread(ts);
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<R>) return std::move(*result);
}

void bind_io(pybind11::module_& m);     // bind_io.cpp: summarize, register_summarizer support
void bind_files(pybind11::module_& m);  // bind_files.cpp: export, save, load
void bind_path_stats(
    pybind11::module_& m);  // bind_path_stats.cpp: call-path statistics (ProfileCollector)
void bind_run_values(
    pybind11::module_& m);             // bind_run_values.cpp: per-run values and the release gate
void bind_edit(pybind11::module_& m);  // bind_edit.cpp: edited profiles (span processors)
void bind_store(
    pybind11::module_& m);  // bind_store.cpp: the profile store through a Python connection
void bind_store_sql(
    pybind11::module_& m);  // bind_store_sql.cpp: the store's label prefix and COPY text
void bind_analysis(pybind11::module_& m);  // bind_analysis.cpp: bubbles and fan-outs
void bind_trend(
    pybind11::module_& m);  // bind_trend.cpp: change points over releases (mlprof trend)
void bind_function_stats(
    pybind11::module_& m);  // bind_function_stats.cpp: time per function (top --by function)
void bind_session(pybind11::module_& m);  // bind_session.cpp: ProfileSession.__enter__/__exit__ in
                                          // C (after Engine)

// The Python IOSummary (mlflow_profiler._summaries) for s: a new reference, or null
// with an exception set. Absent values ("" / -1) become None. The other way
// is summarize::from_python (summarize.h).
PyObject* io_summary_object(const IOSummary& s);

// An Engine's options from Engine()'s arguments (the codes borrowed: the
// Engine, or the EngineTemplate, takes its references). Throws
// py::type_error / py::value_error on a bad argument.
EngineOptions engine_options(int depth, size_t max_events, bool all_threads, bool capture_c_calls,
                             bool capture_io, int io_depth, const pybind11::list& transparent_codes,
                             const pybind11::list& fold_parents, const pybind11::list& fold_codes,
                             int values);

// Engine()'s constructor, its arguments and their defaults, for a class made
// from EngineOptions (Engine, EngineTemplate): defined once for both.
template <typename T, typename Class>
Class& def_engine_init(Class& cls) {
  namespace py = pybind11;
  return cls.def(py::init([](int depth, size_t max_events, bool all_threads, bool capture_c_calls,
                             bool capture_io, int io_depth, const py::list& transparent_codes,
                             const py::list& fold_parents, const py::list& fold_codes, int values) {
                   return std::make_unique<T>(engine_options(
                       depth, max_events, all_threads, capture_c_calls, capture_io, io_depth,
                       transparent_codes, fold_parents, fold_codes, values));
                 }),
                 py::arg("depth"), py::arg("max_events"), py::arg("all_threads"),
                 py::arg("capture_c_calls"), py::arg("capture_io") = false,
                 py::arg("io_depth") = -1, py::arg("transparent_codes") = py::list(),
                 py::arg("fold_parents") = py::list(), py::arg("fold_codes") = py::list(),
                 py::arg("values") = 0);
}

// Engine::start, its errors as a Python exception (false: one is set).
bool start_engine(Engine& e, PyObject* session, int levels_above);

}  // namespace mlprof
