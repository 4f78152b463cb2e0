#pragma once
// What only the kernel sees, joined to the span tree (the eBPF agent fills
// it; an in-process profile leaves it empty): per-thread off-CPU intervals,
// thread lifetimes, and per-span on-CPU / off-CPU / run-queue figures.
// (Filled by the issue 5 core work; see ARCHITECTURE.md "The agent".)

namespace mlprof {}  // namespace mlprof
