#pragma once
// The rapidjson writer the JSON outputs share (the profile document, the
// speedscope export, the HTML report's data). Private to userspace/core.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string_view>

namespace mlprof::json_write {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

// A string of any length, embedded NULs included (rapidjson's String(const
// char*) would stop at the first).
inline void write_string(JsonWriter& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

}  // namespace mlprof::json_write
