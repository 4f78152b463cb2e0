#pragma once
// --sink postgresql://...: the continuous agent's items added to a
// PostgreSQL profile store (docs/store.md), one source per item.

#include <memory>
#include <string>

#include "agent/sink.h"
#include "core/result.h"

namespace mlprof::agent {

// Opens the store at `url` (a libpq connection URI). A store of another
// version is an error here; a server that is down is not (deliver retries).
Result<std::unique_ptr<Sink>> open_postgres_sink(const std::string& url);

}  // namespace mlprof::agent
