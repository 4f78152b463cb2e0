#pragma once
// --sink sqlite:///PATH (or PATH.db, PATH.sqlite): each item added to a
// SQLite profile store (docs/store.md) as one source of type ebpf, labelled
// with the item's labels and its key (kItemKeyLabel), through the agent's
// own libsqlite3 store (store_sqlite.h). An item whose key a source already
// carries is not added again.

#include <memory>
#include <string>

#include "agent/sink.h"
#include "util/result.h"

namespace mlprof::agent {

// Opens (creating it if need be) the store now, so a store of another
// version or a file that is not a store is an error at start. A store that
// cannot be opened for another reason (its directory not there, read-only,
// a full disk) is not: deliveries reopen it and are retried.
Result<std::unique_ptr<Sink>> open_sqlite_sink(const std::string& target);

}  // namespace mlprof::agent
