#pragma once
// What the store's own sources share (store.cpp: lifecycle, store_write.cpp:
// adding, store_read.cpp: reading back): reading a column, and which
// version a store is. A writer leaves a store of an older minor version in
// that version's format, and a reader reads it, so both ask. Private to
// those files: callers use store.h.

#include <cstdint>
#include <string>
#include <variant>

#include "store/store.h"

namespace mlprof::store_detail {

inline int64_t as_int(const SqlValue& v) { return sql_int(v); }
inline std::string as_text(const SqlValue& v) { return sql_text(v); }
inline bool is_null(const SqlValue& v) { return std::holds_alternative<std::monostate>(v); }

// Whether the store is version 2.`at_least` or later (store.cpp says what
// each minor version added).
bool has_2_(StoreDriver& d, int at_least);  // NOLINT(readability-identifier-naming): has_2_2 and on
inline bool has_2_2(StoreDriver& d) { return has_2_(d, 2); }

// The table of the stored values (docs/design/store.md's sample_values is a view of it
// since 2.4; before, the table itself).
inline std::string values_table(bool v2_4) { return v2_4 ? "sample_value_rows" : "sample_values"; }

}  // namespace mlprof::store_detail
