// The store's SQL facts that Python needs, from their one definition in the
// core (store/store.h, store/store_copy.h), so that mlflow_profiler/store.py
// writes none of them again: the key prefix of a source's labels, whether a
// database holds a store and its version, and the COPY statement that runs
// a plain INSERT's rows on PostgreSQL.

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "bindings.h"
#include "py_driver.h"
#include "store/store.h"
#include "store/store_copy.h"

namespace py = pybind11;

namespace mlprof {

void bind_store_sql(py::module_& m) {
  // "label.": source_labels keeps the labels a source was added with as
  // label.KEY (store/store.h kLabelPrefix).
  m.attr("STORE_LABEL_PREFIX") = std::string(kLabelPrefix);
  m.def(
      "store_present",
      [](py::object driver, const std::string& dialect) {
        PyDriver d(std::move(driver), dialect_of(dialect));
        return store_present(d);
      },
      py::arg("driver"), py::arg("dialect"),
      "Whether the database has a store's meta table (read-only: nothing is created).");
  m.def(
      "store_version",
      [](py::object driver, const std::string& dialect) {
        PyDriver d(std::move(driver), dialect_of(dialect));
        return store_version(d);
      },
      py::arg("driver"), py::arg("dialect"),
      "The store's meta version as stored ('2.6'); '' when there is none.");
  m.def("store_copy_statement", &copy_statement, py::arg("insert_sql"),
        "'COPY t (a, b) FROM STDIN' for a plain 'INSERT INTO t (a, b) VALUES (?, ?)'; '' for any "
        "other "
        "statement, which COPY cannot run (store/store_copy.h).");
}

}  // namespace mlprof
