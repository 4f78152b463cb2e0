#pragma once
// The core's StoreDriver (store/store.h) over a Python object with
// execute(sql, params), executemany(sql, rows) and query(sql, params) -> list
// of tuples (mlflow_profiler/store.py's drivers): the extension never links
// libsqlite3 (two SQLite copies in one process break each other's file
// locks), so Python's sqlite3 or psycopg runs the SQL the core writes. Call
// with the GIL held.

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "store/store.h"
#include "store/store_copy.h"

namespace py = pybind11;

namespace mlprof {

inline py::tuple to_tuple(const SqlRow& row) {
  py::tuple out(row.size());
  for (size_t i = 0; i < row.size(); ++i) {
    const SqlValue& v = row[i];
    if (const auto* n = std::get_if<int64_t>(&v)) {
      out[i] = py::int_(*n);
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      out[i] = py::str(*s);
    } else {
      out[i] = py::none();
    }
  }
  return out;
}

inline SqlValue from_python(const py::handle& v) {
  if (v.is_none()) return {};
  if (py::isinstance<py::bool_>(v)) return int64_t{v.cast<bool>() ? 1 : 0};
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  throw StoreFailure(std::string("the store returned a ") + Py_TYPE(v.ptr())->tp_name +
                     ", not an int, a str or None");
}

class PyDriver final : public StoreDriver {
 public:
  PyDriver(py::object driver, Dialect dialect) : driver_(std::move(driver)), dialect_(dialect) {}
  Dialect dialect() const override { return dialect_; }
  void execute(const std::string& sql, const SqlRow& params) override {
    driver_.attr("execute")(sql, to_tuple(params));
  }
  void execute_many(const std::string& sql, const std::vector<SqlRow>& rows) override {
    // A driver with copy_text (PostgreSQL) takes many rows as one COPY
    // text, made here (store/store_copy.h): a Python tuple and a write_row
    // call a row cost more than the server's work. It returns False for a
    // statement COPY cannot run.
    if (rows.size() >= kCopyMinRows && py::hasattr(driver_, "copy_text") &&
        driver_.attr("copy_text")(sql, py::bytes(copy_text(rows))).cast<bool>()) {
      return;
    }
    py::list batch(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) batch[i] = to_tuple(rows[i]);
    driver_.attr("executemany")(sql, batch);
  }
  std::vector<SqlRow> query(const std::string& sql, const SqlRow& params) override {
    std::vector<SqlRow> out;
    for (const py::handle row : driver_.attr("query")(sql, to_tuple(params))) {
      SqlRow r;
      for (const py::handle v : row) r.push_back(from_python(v));
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  py::object driver_;
  Dialect dialect_;
};

inline Dialect dialect_of(const std::string& name) {
  if (name == "sqlite") return Dialect::kSqlite;
  if (name == "postgres") return Dialect::kPostgres;
  throw py::value_error("dialect must be 'sqlite' or 'postgres', got '" + name + "'");
}

}  // namespace mlprof
