#pragma once
// The command line of mlprof-ebpf: what to attach to, for how long, and what
// to write. Parsing is pure (no /proc, no kernel), so every error a user can
// type is tested without privileges.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/export.h"
#include "util/result.h"

namespace mlprof::agent {

struct Options {
  // Target selection: exactly one kind (several --pid are one kind).
  std::vector<pid_t> pids;  // --pid N (repeatable)
  std::string container;    // --container NAME|ID
  std::string cgroup;       // --cgroup PATH (cgroup v2)
  bool all = false;         // --all: every process with the extension mapped
  std::string pod;          // --pod NAMESPACE/NAME[/CONTAINER]: a Kubernetes pod by name
  // --host-root DIR: the node's / (Kubernetes names: CRI state, /var/log/pods); "" = /.
  std::string host_root;

  double duration_s = 0;  // --duration S; 0: until SIGINT/SIGTERM
  int depth = -1;         // --depth N: render depth; -1: everything captured
  std::string output;     // -o FILE; "": the summary goes to stdout only
  // --format, or the one -o's extension names; nullopt: text.
  std::optional<ExportFormat> format;
  bool stream = false;  // --stream: print each session as it finishes
  // --store STORE: a SQLite store (path or sqlite:///path) the capture is
  // added to as a source of type ebpf: the whole capture at the end, or with
  // --stream each session as it finishes. "": none.
  std::string store;
  std::map<std::string, std::string>
      labels;  // --label KEY=VALUE (repeatable; needs --store or --sink)
  // --continuous (continuous.h, docs/ebpf.md "Continuous mode"): every
  // --rotate period, each workload's sessions go through the --spool
  // directory to --sink, until SIGTERM (or --duration).
  bool continuous = false;
  std::string sink;                                // --sink URL (sink.h's forms)
  std::string spool = "/var/lib/mlprof/spool";     // --spool DIR
  int64_t rotate_ns = 60'000'000'000;              // --rotate DURATION
  uint64_t spool_max_bytes = uint64_t{256} << 20;  // --spool-max-mb N
  // A directory sink's retention (sink_dir.h): its files together at most
  // --sink-max-mb MiB, none older than --sink-max-age; the oldest go first.
  uint64_t sink_max_bytes = uint64_t{1024} << 20;             // --sink-max-mb N
  int64_t sink_max_age_ns = int64_t{7} * 86'400'000'000'000;  // --sink-max-age D
  // The first of them given on the command line ("" if neither): said to
  // be ignored for a sink that is not a directory (main.cpp, once it is open).
  std::string sink_bound_given;
  int64_t retry_max_ns = 60'000'000'000;  // --retry-max DURATION: the back-off's ceiling
  // --duty-cycle ON/PERIOD: capture on for ON of every PERIOD (wall-clock
  // aligned); 0/0: always on.
  int64_t duty_on_ns = 0, duty_period_ns = 0;
  // --health-file FILE: the status file `mlprof-ebpf --health FILE` probes
  // (health.h); "": none.
  std::string health_file;
  int verbose = 0;        // -v (repeatable): -v agent progress, -vv libbpf too
  size_t ring_bytes = 0;  // --ring-kb (hidden, for tests): 0 = the loader's default
  // --per-span-probes (hidden, for tests): spans through the per-span probes,
  // as on a kernel without bpf_loop.
  bool per_span_probes = false;
  // --inject (inject.h): a --pid CPython 3.14+ that never imported
  // mlflow_profiler loads it through PEP 768 first; --inject-path DIR: the
  // directory holding mlflow_profiler, as the target sees it ("": its sys.path).
  bool inject = false;
  std::string inject_path;
  bool help = false;     // --help: print usage(), exit 0
  bool version = false;  // --version: print the version, exit 0
};

// Parses argv (argv[0] is the program name). Errors are one sentence naming
// the option, what was wrong and what to type instead; Error::kind is
// kUnsupported. --help and --version succeed without a target.
Result<Options> parse_options(int argc, char* const* argv);
// Convenience for tests: {"--pid", "4"} (the program name is added).
Result<Options> parse_options(const std::vector<std::string>& args);

// "90", "90s", "1500ms", "5m", "1h", "7d" -> ns (1 ms to ~30 years); nullopt otherwise.
std::optional<int64_t> parse_duration_ns(const std::string& text);

// The --help text.
std::string usage();
// "mlprof-ebpf 0.1.0"
std::string version_line();

// The text name of a format as --format spells it ("text" for nullopt).
std::string format_label(const std::optional<ExportFormat>& format);

}  // namespace mlprof::agent
