#pragma once
// --sink DIR (or file:///DIR): each item's document copied into a directory,
// named by its key (KEY.json.gz), written atomically. A re-delivery writes
// the same name again, so an item is there once however often it is sent.

#include <memory>
#include <string>

#include "agent/sink.h"

namespace mlprof::agent {

// The directory is never created by the agent: a mount that is not there
// yet must not be written under its mount point (on the root filesystem).
// Until it exists, deliveries are retried.
std::unique_ptr<Sink> open_directory_sink(const std::string& dir);

// The file name an item gets there: its key with any character outside
// [A-Za-z0-9._-] as '_', then ".json.gz".
std::string item_file_name(const std::string& key);

}  // namespace mlprof::agent
