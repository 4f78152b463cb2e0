#pragma once
// --sink postgresql://...: each item added to a PostgreSQL profile store
// (docs/store.md) as one source of type ebpf, labelled with the item's
// labels and its key (kItemKeyLabel), through the agent's own libpq driver
// (store_postgres.h). An item whose key a source already carries is not
// added again. A server that is down, or a connection lost, is a retry: the
// next delivery connects afresh.

#include <memory>
#include <string>

#include "agent/sink.h"
#include "util/result.h"

namespace mlprof::agent {

// Connects now when it can, so a store of another version (or a database
// that is not a store) is an error at start; a malformed URL is one too. A
// server that cannot be reached is not: deliveries retry.
Result<std::unique_ptr<Sink>> open_postgres_sink(const std::string& url);

}  // namespace mlprof::agent
