#pragma once
// A read-only reader of BoltDB files, enough for Podman 4's libpod state
// (bolt_state.db): the keys and values of one bucket, from a copy of the
// file in memory. Container discovery (containers.h) is its one user.

#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mlprof::agent {

// Keys and values of one bucket of a BoltDB file (Podman 4's libpod state),
// read-only from a copy in memory. `bucket` is the path of nested bucket
// names from the root. Sub-buckets are listed with value "" and is_bucket.
struct BoltEntry {
  std::string key;
  std::string value;
  bool is_bucket = false;
};
Result<std::vector<BoltEntry>> read_bolt_bucket(std::string_view db,
                                                const std::vector<std::string>& bucket);

}  // namespace mlprof::agent
