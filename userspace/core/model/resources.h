#pragma once
// Resources and their slots (docs/design/analysis.md: process = resource, thread =
// concurrent slot). A span may name the resource it uses (profile_span's and
// profile_block's `resource=`, kEvResource): an LLM endpoint, a database, a
// host. Each such span is a call to it, in flight for its wall time. The
// Chrome trace and the HTML report draw each resource as a process with one
// thread per slot in use; these figures are computed once, here.

#include <cstdint>
#include <string>
#include <vector>

#include "model/tree.h"

namespace mlprof {

struct ResourceCall {
  int32_t span = -1;
  uint32_t slot = 0;     // 1-based: the lowest slot free when the call started
  int64_t start_ns = 0;  // in flight from here to end_ns (the span's wall time)
  int64_t end_ns = 0;
  // Queued: from the first time the call's asyncio task suspended to the
  // call's start (what a semaphore, a pool or a rate limiter held it for),
  // when the call is the task's first call to this resource and the task
  // suspended before it. queued_from_ns == start_ns: not queued.
  int64_t queued_from_ns = 0;
};

// Calls in flight and queued from ts_ns on, until the next sample.
struct ResourceSample {
  int64_t ts_ns = 0;
  uint32_t in_flight = 0;
  uint32_t queued = 0;
};

struct Resource {
  uint32_t name = 0;                // string id
  std::vector<ResourceCall> calls;  // by start
  uint32_t slots = 0;               // slots used: the peak in flight
  uint32_t peak_queued = 0;
  std::vector<ResourceSample> samples;  // at each change
};

// The resources named by the profile's spans, in order of first call. A call
// inside a call to the same resource (a retry under a labelled request) is
// part of the outer one.
std::vector<Resource> resource_view(const Profile& p);

}  // namespace mlprof
