#pragma once
// What a store sink (SQLite, PostgreSQL) adds for one spooled item: its
// document read back, and the source it becomes. One place, so both store
// sinks reject the same items and label sources the same way.

#include <utility>

#include "agent/clock.h"
#include "agent/sink.h"
#include "formats/json_read.h"
#include "store/store.h"
#include "util/file_io.h"

namespace mlprof::agent {

struct StoreItem {
  Profile profile;
  SourceInfo info;  // type ebpf, the item's labels and its key (kItemKeyLabel), stamped now
};

// The item as a store adds it; an error (its message says why) is an item
// that can never be added: the sink rejects it.
inline Result<StoreItem> store_item(const SpoolItem& item) {
  auto data = read_file(item.path);
  if (!data)
    return Error{data.error().kind, 0,
                 "the spooled document cannot be read: " + data.error().message};
  auto profile = read_json_document(data.value());
  if (!profile)
    return Error{profile.error().kind, 0,
                 "the spooled document is not a profile: " + profile.error().message};
  StoreItem out;
  out.profile = std::move(profile.value());
  out.info.type = "ebpf";
  out.info.labels = item.labels;
  out.info.labels[kItemKeyLabel] = item.key;
  out.info.added_unix_ns = unix_now_ns();
  return out;
}

}  // namespace mlprof::agent
