#pragma once
// Reads a profile document (docs/format.md) back into a Profile: versions 1
// and 2, plain or gzip-compressed. Never returns a partial Profile.

#include <string_view>

#include "model/tree.h"
#include "util/result.h"

namespace mlprof {

// Errors: kTruncated (the text or gzip stream ends early), kCorrupt (not JSON,
// not a profile document, or a field out of range: a span's parent after it,
// an unknown function id ...), kVersion (meta.version newer than
// kDocumentVersion, or not a number). Messages say which and what to do.
Result<Profile> read_json_document(std::string_view data);

}  // namespace mlprof
