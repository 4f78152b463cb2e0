#pragma once
// Internal to the kernel join (sched.cpp, sched_self.cpp): the keys both
// the attribution and the self figures group by. Not part of the API.

#include <cstdint>
#include <tuple>
#include <utility>

#include "analysis/sched.h"
#include "model/tree.h"

namespace mlprof::sched_detail {

using ThreadKey = std::pair<uint32_t, uint64_t>;  // (pid, tid)

// A wait reason: (syscall, state, futex object).
using WaitKey = std::tuple<int32_t, char, WaitObject>;

// The thread a span runs on: its lane's (pid, native_tid); (0, 0) unknown.
ThreadKey span_thread(const Profile& profile, int32_t s);

}  // namespace mlprof::sched_detail
