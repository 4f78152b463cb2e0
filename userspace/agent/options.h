#pragma once
// The command line of mlprof-ebpf.

namespace mlprof::agent {}  // namespace mlprof::agent
