#pragma once
// Internal to the profile document reader (json_read.cpp, json_read_sections.cpp):
// checked, typed access to a parsed document's values and tables, with
// messages that say where a bad value sits; and the entry the text-level
// reader hands the parsed tree to. Not part of the API.

#include <rapidjson/document.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/json_member.h"
#include "formats/json_stream.h"
#include "model/profile_check.h"
#include "model/tree.h"
#include "util/result.h"

namespace mlprof::json_read_detail {

using rapidjson::Value;

// The hint every "not a profile document" error ends with.
inline constexpr const char* kWhatLoadReads =
    "(mlflow_profiler.load reads the .json and .json.gz files that save() writes; the other "
    "formats are exports for other tools)";

// Where a value sits in the document, for messages: "spans[12].parent",
// "meta.start_ns". Built only when something is wrong.
struct Where {
  const char* section;
  int64_t index = -1;  // row or element, -1 for none
  const char* field = nullptr;

  std::string str() const {
    std::string s = section;
    if (index >= 0) s += "[" + std::to_string(index) + "]";
    if (field != nullptr) s += std::string(".") + field;
    return s;
  }
};

inline const char* type_name(const Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType:
      return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType:
      return "a boolean";
    case rapidjson::kObjectType:
      return "an object";
    case rapidjson::kArrayType:
      return "an array";
    case rapidjson::kStringType:
      return "a string";
    case rapidjson::kNumberType:
      return v.IsInt64() || v.IsUint64() ? "an integer" : "a number";
  }
  return "a value";
}

// The column of each field a table needs, from its "<table>_fields" header.
// Columns are looked up by name, so a writer may add columns or reorder them.
struct Columns {
  std::vector<int> at;  // at[k]: column of the k-th requested field
  size_t width = 0;     // cells per row
};

// Typed access to a document tree: the first problem found is kept as the
// error (fail), and every accessor returns false (or nullptr) from then on.
class DocumentAccess {
 public:
  // `spans`: the "spans" rows when parse_document kept them out of the DOM.
  DocumentAccess(const Value& root, SpanRows& spans) : root_(root), spans_(spans) {}

 protected:
  // -- errors ------------------------------------------------------------------

  bool fail(const Where& w, const std::string& what) {
    error_ = Error{Error::Kind::kCorrupt, 0, "corrupt profile document: " + w.str() + ": " + what};
    return false;
  }
  bool fail(const ProfileDefect& d) {
    error_ = Error{Error::Kind::kCorrupt, 0, "corrupt profile document: " + d.str()};
    return false;
  }
  bool fail_type(const Where& w, const Value& v, const char* expected) {
    return fail(w, std::string("expected ") + expected + ", found " + type_name(v));
  }
  Error take_error() { return std::move(error_); }

  // -- typed access ---------------------------------------------------------------

  const Value* required(const Value& obj, const Where& w) {
    const Value* v = member(obj, w.field);
    if (v == nullptr) fail(w, "missing");
    return v;
  }
  // A field named *_ns is a time or a duration: within +-kMaxTimeNs, so
  // that the views' differences of two cannot overflow.
  bool get(const Value& v, const Where& w, int64_t& out) {
    if (!v.IsInt64()) return fail_type(w, v, "an integer");
    out = v.GetInt64();
    const std::string_view field = w.field != nullptr ? w.field : "";
    if (field.ends_with("_ns") && !is_time(out)) return fail(w, "is out of range (|t| >= 2^62 ns)");
    return true;
  }
  bool get(const Value& v, const Where& w, uint64_t& out) {
    if (!v.IsUint64()) return fail_type(w, v, "a non-negative integer");
    out = v.GetUint64();
    return true;
  }
  bool get(const Value& v, const Where& w, int32_t& out) {
    if (!v.IsInt()) return fail_type(w, v, "a 32-bit integer");
    out = v.GetInt();
    return true;
  }
  bool get(const Value& v, const Where& w, uint32_t& out) {
    if (!v.IsUint()) return fail_type(w, v, "a non-negative 32-bit integer");
    out = v.GetUint();
    return true;
  }
  bool get(const Value& v, const Where& w, bool& out) {
    if (!v.IsBool()) return fail_type(w, v, "true or false");
    out = v.GetBool();
    return true;
  }
  bool get(const Value& v, const Where& w, std::string& out) {
    if (!v.IsString()) return fail_type(w, v, "a string");
    out.assign(v.GetString(), v.GetStringLength());
    return true;
  }
  // null reads as the "absent" value the writer turned into null.
  bool get_optional(const Value& v, const Where& w, std::string& out) {
    if (v.IsNull()) {
      out.clear();
      return true;
    }
    return get(v, w, out);
  }
  bool get_optional(const Value& v, const Where& w, int64_t& out) {
    if (v.IsNull()) {
      out = -1;
      return true;
    }
    if (!v.IsInt64() || v.GetInt64() < 0) return fail_type(w, v, "a non-negative integer or null");
    out = v.GetInt64();
    return true;
  }
  template <typename T>
  bool get_field(const Value& obj, const Where& w, T& out) {
    const Value* v = required(obj, w);
    return v != nullptr && get(*v, w, out);
  }
  // A field that may be left out: `out` keeps its value then.
  template <typename T>
  bool get_absent_ok(const Value& obj, const Where& w, T& out) {
    const Value* v = member(obj, w.field);
    return v == nullptr || get(*v, w, out);
  }
  // An id into a table of `size` entries.
  bool get_id(const Value& v, const Where& w, size_t size, const char* table, uint32_t& out) {
    if (!get(v, w, out)) return false;
    if (out >= size) {
      return fail(w, "id " + std::to_string(out) + " is out of range (" + table + " has " +
                         std::to_string(size) + " entries)");
    }
    return true;
  }

  const Value* table(const char* key) {
    const Value* v = required(root_, Where{"document", -1, key});
    if (v != nullptr && !v->IsArray()) {
      fail_type(Where{key}, *v, "an array");
      return nullptr;
    }
    return v;
  }
  bool columns(const char* fields_key, std::initializer_list<const char*> names, Columns& out) {
    const Value* fields = table(fields_key);
    if (fields == nullptr) return false;
    out.width = fields->Size();
    for (const char* name : names) {
      int found = -1;
      for (rapidjson::SizeType i = 0; i < fields->Size(); ++i) {
        const Value& f = (*fields)[i];
        if (f.IsString() && std::strcmp(f.GetString(), name) == 0) found = static_cast<int>(i);
      }
      if (found < 0) return fail(Where{fields_key}, std::string("no \"") + name + "\" column");
      out.at.push_back(found);
    }
    return true;
  }
  // Row `i` of a table: an array of exactly `cols.width` cells.
  const Value* row(const Value& rows, const char* section, rapidjson::SizeType i,
                   const Columns& cols) {
    const Value& r = rows[i];
    if (!r.IsArray()) {
      fail_type(Where{section, i}, r, "an array (one row)");
      return nullptr;
    }
    if (r.Size() != cols.width) {
      fail(Where{section, i}, "has " + std::to_string(r.Size()) + " cells, the header names " +
                                  std::to_string(cols.width));
      return nullptr;
    }
    return &r;
  }

  // Row `i` of the streamed spans table, with row()'s checks and messages.
  const Value* streamed(rapidjson::SizeType i, const Columns& cols, rapidjson::Document& out) {
    if (i == spans_.bad_row()) {
      if (!spans_.bad_row_is_array()) {
        fail_type(Where{"spans", i}, spans_.bad_row_type(), "an array (one row)");
      } else {
        fail(Where{"spans", i}, "has " + std::to_string(spans_.bad_row_cells()) +
                                    " cells, the header names " + std::to_string(cols.width));
      }
      return nullptr;
    }
    spans_.next_row(out, out.GetAllocator());
    return &out;
  }

  const Value& root_;
  SpanRows& spans_;
  Error error_;
};

// Reads a parsed document tree into a Profile (json_read_sections.cpp).
// `spans`: the "spans" rows when parse_document kept them out of the DOM.
Result<Profile> read_document(const Value& root, SpanRows& spans);

}  // namespace mlprof::json_read_detail
