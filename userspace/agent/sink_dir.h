#pragma once
// --sink DIR (or file:///DIR): each item's document copied into a directory,
// named by its key (KEY.json.gz), written atomically. A re-delivery writes
// the same name again, so an item is there once however often it is sent.
//
// Retention (--sink-max-mb, --sink-max-age; docs/ebpf.md, "Sinks"): the
// agent's files there (is_item_file_name, never any other file) are kept
// within a total size and an age, the oldest (by modification time)
// removed first: before an item is written, so the directory never holds
// more than the bound, and at each rotation for the age. What was removed
// is counted (Sink::retention()).

#include <cstdint>
#include <memory>
#include <string>

#include "agent/sink.h"

namespace mlprof::agent {

struct DirectoryRetention {
  uint64_t max_bytes = 0;  // the agent's files together, apparent size; 0: no bound
  int64_t max_age_ns = 0;  // since a file was written; 0: no bound
};

// The directory is never created by the agent: a mount that is not there
// yet must not be written under its mount point (on the root filesystem).
// Until it exists, deliveries are retried. An item larger than max_bytes is
// rejected (it could never be kept).
std::unique_ptr<Sink> open_directory_sink(const std::string& dir,
                                          DirectoryRetention retention = {});

// The file name an item gets there: its key with any character outside
// [A-Za-z0-9._-] as '_', then ".json.gz".
std::string item_file_name(const std::string& key);

// Whether `name` is a file the continuous agent writes into a directory
// sink: item_file_name of a key as Continuous makes them,
// NODE_WORKLOAD_YYYYMMDDTHHMMSSZ_RUN.N.json.gz (NODE and WORKLOAD of
// [A-Za-z0-9.-], RUN hexadecimal, N decimal). Retention removes only these.
bool is_item_file_name(const std::string& name);

}  // namespace mlprof::agent
