#pragma once
// What the agent prints: the stall report (spans whose wall time is most
// off-CPU or in the run queue) and the text summary of many sessions.

#include <string>
#include <vector>

#include "core/tree.h"

namespace mlprof::agent {}  // namespace mlprof::agent
