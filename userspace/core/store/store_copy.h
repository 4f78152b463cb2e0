#pragma once
// PostgreSQL's COPY for the store's bulk inserts: a batch of a plain INSERT's
// rows (core store_write.cpp's Inserter) sent as one COPY FROM STDIN in text
// format instead of a statement a row. Both PostgreSQL drivers use it: the
// extension's (pyext/py_driver.h, through psycopg) and the agent's libpq one
// (agent/store_postgres.h).

#include <string>
#include <vector>

#include "store/store.h"

namespace mlprof {

// Batches smaller than this go as statements: COPY's round trips cost more.
inline constexpr size_t kCopyMinRows = 64;

// The rows in COPY's text format: tab-separated, a row a line, NULL as \N;
// backslash, tab, newline and carriage return escaped.
std::string copy_text(const std::vector<SqlRow>& rows);

// "COPY t (a, b) FROM STDIN" for "INSERT INTO t (a, b) VALUES (?, ?)";
// "" for any other statement (ON CONFLICT, RETURNING ...), which COPY
// cannot run.
std::string copy_statement(const std::string& insert_sql);

}  // namespace mlprof
