#pragma once
// The JSON half of the imports (core only): parse with the error an import
// gives for text cut off or not JSON.

#include <rapidjson/document.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/json_member.h"
#include "util/result.h"

namespace mlprof::import_detail {

// Parses `data` into `doc`; an Error naming `format` when it is not JSON or ends early.
std::optional<Error> parse_json(std::string_view data, const char* format,
                                rapidjson::Document& doc);

// A time or duration in the input's unit as nanoseconds; nullopt when it is
// not finite or past +-2^62 ns (146 years), so that a start plus a duration
// stays in range.
std::optional<int64_t> to_ns(double value, double ns_per_unit);

}  // namespace mlprof::import_detail
