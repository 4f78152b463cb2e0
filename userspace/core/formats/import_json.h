#pragma once
// The JSON half of the imports (core only): parse with the error an import
// gives for text cut off or not JSON.

#include <rapidjson/document.h>

#include <optional>
#include <string_view>

#include "util/result.h"

namespace mlprof::import_detail {

// Parses `data` into `doc`; an Error naming `format` when it is not JSON or ends early.
std::optional<Error> parse_json(std::string_view data, const char* format,
                                rapidjson::Document& doc);

}  // namespace mlprof::import_detail
