#include "agent/options.h"

#include <getopt.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>

#ifndef MLPROF_VERSION  // pyproject.toml's version, passed by CMake
                        // (userspace/agent/CMakeLists.txt)
#error "MLPROF_VERSION: build through CMake, which reads it from pyproject.toml"
#endif

namespace mlprof::agent {

namespace {

// glibc's getopt_long parses; we word the errors (opterr = 0), since its own
// messages say neither the fix nor print through our one-line error path.
enum LongOnly : int {
  kPid = 1000,
  kContainer,
  kCgroup,
  kAll,
  kDuration,
  kDepth,
  kFormat,
  kStream,
  kStore,
  kLabel,
  kHelp,
  kVersion,
  kRingKb,
  kPerSpanProbes,
  kInject,
  kInjectPath,
  kContinuous,
  kSink,
  kSpool,
  kRotate,
  kSpoolMaxMb,
  kSinkMaxMb,
  kSinkMaxAge,
  kDutyCycle,
  kRetryMax,
  kPod,
  kHostRoot,
  kHealthFile,
};

constexpr option kLongOptions[] = {
    {"pid", required_argument, nullptr, kPid},
    {"container", required_argument, nullptr, kContainer},
    {"cgroup", required_argument, nullptr, kCgroup},
    {"all", no_argument, nullptr, kAll},
    {"duration", required_argument, nullptr, kDuration},
    {"depth", required_argument, nullptr, kDepth},
    {"output", required_argument, nullptr, 'o'},
    {"format", required_argument, nullptr, kFormat},
    {"stream", no_argument, nullptr, kStream},
    {"store", required_argument, nullptr, kStore},
    {"label", required_argument, nullptr, kLabel},
    {"verbose", no_argument, nullptr, 'v'},
    {"help", no_argument, nullptr, kHelp},
    {"version", no_argument, nullptr, kVersion},
    {"ring-kb", required_argument, nullptr, kRingKb},  // hidden: tests of lost events
    {"per-span-probes", no_argument, nullptr,
     kPerSpanProbes},  // hidden: tests of the pre-5.17 delivery
    {"inject", no_argument, nullptr, kInject},
    {"inject-path", required_argument, nullptr, kInjectPath},
    {"continuous", no_argument, nullptr, kContinuous},
    {"sink", required_argument, nullptr, kSink},
    {"spool", required_argument, nullptr, kSpool},
    {"rotate", required_argument, nullptr, kRotate},
    {"spool-max-mb", required_argument, nullptr, kSpoolMaxMb},
    {"sink-max-mb", required_argument, nullptr, kSinkMaxMb},
    {"sink-max-age", required_argument, nullptr, kSinkMaxAge},
    {"duty-cycle", required_argument, nullptr, kDutyCycle},
    {"retry-max", required_argument, nullptr, kRetryMax},
    {"pod", required_argument, nullptr, kPod},
    {"host-root", required_argument, nullptr, kHostRoot},
    {"health-file", required_argument, nullptr, kHealthFile},
    {nullptr, 0, nullptr, 0},
};

Error usage_error(std::string message) {
  return Error{Error::Kind::kUnsupported, 0, std::move(message)};
}

// A whole decimal integer in [lo, hi]; nullopt for "", "12x", "0x10", overflow.
std::optional<long long> parse_integer(std::string_view text, long long lo, long long hi) {
  if (text.empty()) return std::nullopt;
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

// --format names: the core's names plus the short ones the usage shows.
// False for an unknown name; out stays nullopt for "text".
bool parse_format(std::string_view name, std::optional<ExportFormat>& out) {
  out.reset();
  if (name == "text") return true;
  if (name == "chrome") {
    out = ExportFormat::kChromeTrace;
    return true;
  }
  out = format_from_name(name);
  return out.has_value();
}

// The option as the user typed it, for messages ("--pid", "-o").
std::string option_name(int c) {
  if (c == 'o') return "-o";
  if (c == 'v') return "-v";
  for (const option& o : kLongOptions) {
    if (o.name != nullptr && o.val == c) return std::string("--") + o.name;
  }
  return "?";
}

// What parse_options tracks besides the Options themselves.
struct Parse {
  Options opts;
  bool format_given = false;
  std::optional<ExportFormat> format;
  std::string continuous_only;  // the first option given that needs --continuous
  void needs_continuous(const char* name) {
    if (continuous_only.empty()) continuous_only = name;
  }
};

// The options that choose targets. False: c is not one of them.
Result<bool> target_option(int c, const std::string& arg, Options& opts) {
  switch (c) {
    case kPid: {
      auto pid = parse_integer(arg, 1, 0x3fffffff);
      if (!pid) {
        return usage_error("--pid '" + arg +
                           "' is not a process id: give a positive number, e.g. --pid 4242");
      }
      opts.pids.push_back(static_cast<pid_t>(*pid));
      break;
    }
    case kContainer:
      if (arg.empty())
        return usage_error("--container needs a container name or id, e.g. --container serving-1");
      if (!opts.container.empty()) {
        return usage_error("--container given twice ('" + opts.container + "', '" + arg +
                           "'): one container per agent; run one agent per container or use --all");
      }
      opts.container = arg;
      break;
    case kCgroup:
      if (arg.empty())
        return usage_error(
            "--cgroup needs a cgroup v2 path, e.g. --cgroup /libpod_parent/libpod-<id>");
      if (!opts.cgroup.empty()) {
        return usage_error("--cgroup given twice: give the common parent cgroup once instead");
      }
      opts.cgroup = arg;
      break;
    case kAll:
      opts.all = true;
      break;
    case kPod: {
      // NAMESPACE/NAME[/CONTAINER]: each part a non-empty name without '/'.
      size_t parts = 1;
      bool empty_part = arg.empty() || arg.front() == '/' || arg.back() == '/' ||
                        arg.find("//") != std::string::npos;
      for (char ch : arg) parts += ch == '/' ? 1 : 0;
      if (empty_part || parts < 2 || parts > 3) {
        return usage_error("--pod '" + arg +
                           "' is not NAMESPACE/NAME or NAMESPACE/NAME/CONTAINER: e.g. --pod "
                           "ml/scorer-6c5d8 or --pod ml/scorer-6c5d8/model");
      }
      if (!opts.pod.empty()) {
        return usage_error("--pod given twice ('" + opts.pod + "', '" + arg +
                           "'): one pod per agent; run one agent per pod or use --all");
      }
      opts.pod = arg;
      break;
    }
    case kHostRoot:
      if (arg.empty() || arg.front() != '/') {
        return usage_error("--host-root '" + arg +
                           "' must be an absolute directory: where the node's / is mounted, "
                           "e.g. --host-root /host");
      }
      opts.host_root = arg;
      break;
    case kHealthFile:
      if (arg.empty()) {
        return usage_error(
            "--health-file needs a file name, e.g. --health-file /run/mlprof/health");
      }
      opts.health_file = arg;
      break;
    default:
      return false;
  }
  return true;
}

// The options of one capture: its length and depth, the agent's own
// switches, and --inject. False: c is not one of them.
Result<bool> capture_option(int c, const std::string& arg, Parse& p) {
  Options& opts = p.opts;
  switch (c) {
    case kDuration: {
      char* end = nullptr;
      errno = 0;
      const double d = std::strtod(arg.c_str(), &end);
      if (arg.empty() || errno != 0 || end != arg.c_str() + arg.size() || !std::isfinite(d) ||
          d <= 0) {
        return usage_error(
            "--duration '" + arg +
            "' is not a positive number of seconds: e.g. --duration 30 or --duration 0.5 "
            "(leave it out to run until Ctrl-C)");
      }
      opts.duration_s = d;
      break;
    }
    case kDepth: {
      auto depth = parse_integer(arg, -1, 1 << 20);
      if (!depth) {
        return usage_error(
            "--depth '" + arg +
            "' is not a depth: give 0 (the roots only), 1, 2 ... or -1 for everything captured");
      }
      opts.depth = static_cast<int>(*depth);
      break;
    }
    case 'v':
      ++opts.verbose;
      break;
    case 'h':
    case kHelp:
      opts.help = true;
      break;
    case kVersion:
      opts.version = true;
      break;
    case kRingKb: {
      auto kb = parse_integer(arg, 4, 1 << 20);
      if (!kb || (*kb & (*kb - 1)) != 0) {
        return usage_error("--ring-kb '" + arg +
                           "' must be a power of two from 4 to 1048576 (KiB)");
      }
      opts.ring_bytes = static_cast<size_t>(*kb) * 1024;
      break;
    }
    case kPerSpanProbes:
      opts.per_span_probes = true;
      break;
    case kInject:
      opts.inject = true;
      break;
    case kInjectPath:
      if (arg.empty() || arg.front() != '/') {
        return usage_error("--inject-path '" + arg +
                           "' must be an absolute directory, as the target process sees it, "
                           "holding mlflow_profiler: e.g. --inject-path /opt/mlprof/site-packages");
      }
      opts.inject_path = arg;
      break;
    default:
      return false;
  }
  return true;
}

// Where one capture goes: its file, format, stream and store. False: c is
// not one of them.
Result<bool> output_option(int c, const std::string& arg, Parse& p) {
  Options& opts = p.opts;
  switch (c) {
    case 'o':
      if (arg.empty()) return usage_error("-o needs a file name, e.g. -o predict.trace.json");
      opts.output = arg;
      break;
    case kFormat: {
      if (!parse_format(arg, p.format)) {
        return usage_error("--format '" + arg +
                           "' is not a format: use text, json, chrome, pprof or speedscope "
                           "(also json_gz, folded, html)");
      }
      p.format_given = true;
      break;
    }
    case kStream:
      opts.stream = true;
      break;
    case kStore:
      if (arg.empty()) return usage_error("--store needs a SQLite file, e.g. --store profiles.db");
      if (!opts.store.empty()) {
        return usage_error(
            "--store given twice ('" + opts.store + "', '" + arg +
            "'): the agent adds to one store; merge stores later with `mlprof combine`");
      }
      if (arg.starts_with("postgresql://") || arg.starts_with("postgres://")) {
        return usage_error(
            "--store '" + arg +
            "': the agent writes SQLite stores only; for PostgreSQL write -o FILE.json "
            "and run `mlprof add URL FILE.json`");
      }
      opts.store = arg;
      break;
    case kLabel: {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) {
        return usage_error("--label takes KEY=VALUE, got '" + arg + "': e.g. --label model=fraud");
      }
      opts.labels[arg.substr(0, eq)] = arg.substr(eq + 1);
      break;
    }
    default:
      return false;
  }
  return true;
}

// --duty-cycle ON/PERIOD, both durations, ON shorter than PERIOD.
Result<Ok> parse_duty_cycle(const std::string& arg, Options& opts) {
  const size_t slash = arg.find('/');
  auto on = slash == std::string::npos ? std::nullopt : parse_duration_ns(arg.substr(0, slash));
  auto period =
      slash == std::string::npos ? std::nullopt : parse_duration_ns(arg.substr(slash + 1));
  if (!on || !period || *on >= *period) {
    return usage_error("--duty-cycle '" + arg +
                       "' is not ON/PERIOD with ON shorter than PERIOD: e.g. --duty-cycle 10s/60s "
                       "(capture on for 10 s of every minute)");
  }
  opts.duty_on_ns = *on;
  opts.duty_period_ns = *period;
  return Ok{};
}

// The continuous agent's options. False: c is not one of them.
Result<bool> continuous_option(int c, const std::string& arg, Parse& p) {
  Options& opts = p.opts;
  switch (c) {
    case kContinuous:
      opts.continuous = true;
      break;
    case kSink:
      if (arg.empty()) {
        return usage_error(
            "--sink needs a URL: a directory, sqlite:///PATH, postgresql://... or "
            "http://MLFLOW:5000");
      }
      opts.sink = arg;
      break;
    case kSpool:
      if (arg.empty())
        return usage_error("--spool needs a directory, e.g. --spool /var/lib/mlprof/spool");
      opts.spool = arg;
      break;
    case kRotate: {
      auto ns = parse_duration_ns(arg);
      if (!ns || *ns < 1'000'000'000) {
        return usage_error("--rotate '" + arg +
                           "' is not a period of at least 1 s: e.g. --rotate 60s or --rotate 5m");
      }
      opts.rotate_ns = *ns;
      p.needs_continuous("--rotate");
      break;
    }
    case kSpoolMaxMb: {
      auto mb = parse_integer(arg, 1, 1 << 20);
      if (!mb)
        return usage_error("--spool-max-mb '" + arg +
                           "' is not a size in MiB: e.g. --spool-max-mb 256");
      opts.spool_max_bytes = static_cast<uint64_t>(*mb) << 20;
      p.needs_continuous("--spool-max-mb");
      break;
    }
    case kSinkMaxMb: {
      auto mb = parse_integer(arg, 1, 1 << 30);
      if (!mb)
        return usage_error("--sink-max-mb '" + arg +
                           "' is not a size in MiB: e.g. --sink-max-mb 1024");
      opts.sink_max_bytes = static_cast<uint64_t>(*mb) << 20;
      if (opts.sink_bound_given.empty()) opts.sink_bound_given = "--sink-max-mb";
      p.needs_continuous("--sink-max-mb");
      break;
    }
    case kSinkMaxAge: {
      auto ns = parse_duration_ns(arg);
      if (!ns || *ns < 1'000'000'000) {
        return usage_error("--sink-max-age '" + arg +
                           "' is not an age of at least 1 s: e.g. --sink-max-age 7d");
      }
      opts.sink_max_age_ns = *ns;
      if (opts.sink_bound_given.empty()) opts.sink_bound_given = "--sink-max-age";
      p.needs_continuous("--sink-max-age");
      break;
    }
    case kRetryMax: {
      auto ns = parse_duration_ns(arg);
      if (!ns)
        return usage_error("--retry-max '" + arg + "' is not a duration: e.g. --retry-max 60s");
      opts.retry_max_ns = *ns;
      p.needs_continuous("--retry-max");
      break;
    }
    case kDutyCycle:
      if (auto ok = parse_duty_cycle(arg, opts); !ok) return ok.error();
      break;
    default:
      return false;
  }
  return true;
}

// getopt's ':' (a value missing) and '?' (an unknown option or a flag given a value).
Error getopt_error(int c, int prev, int argc, char* const* argv) {
  if (c == ':') return usage_error(option_name(optopt) + " needs a value: see mlprof-ebpf --help");
  // optopt: the letter of an unknown short option; 0 for an unknown long one,
  // which is then the word getopt just stepped over.
  if (optopt >= kPid || optopt == 'v') {  // "--stream=yes": a flag given a value
    return usage_error(option_name(optopt) + " takes no value: see mlprof-ebpf --help");
  }
  if (optopt != 0) {
    return usage_error("unknown option '-" + std::string(1, static_cast<char>(optopt)) +
                       "': see mlprof-ebpf --help");
  }
  return usage_error("unknown option '" + std::string(prev < argc ? argv[prev] : "?") +
                     "': see mlprof-ebpf --help for the options");
}

// The options that only make sense together, and the one target kind.
Result<Ok> check_combination(Parse& p) {
  const Options& opts = p.opts;
  if (!opts.sink.empty() || opts.spool != Options{}.spool) {
    p.needs_continuous(opts.sink.empty() ? "--spool" : "--sink");
  }
  if (!opts.continuous && !p.continuous_only.empty()) {
    return usage_error(p.continuous_only +
                       " belongs to the continuous agent: give --continuous --sink URL too");
  }
  if (opts.continuous) {
    if (opts.sink.empty()) {
      return usage_error(
          "--continuous needs --sink URL: a directory, sqlite:///PATH, postgresql://... or "
          "http://MLFLOW:5000");
    }
    if (!opts.output.empty() || !opts.store.empty() || opts.stream || p.format_given) {
      return usage_error(
          "--continuous delivers to --sink every --rotate period: -o, --format, --store and "
          "--stream are for a single capture");
    }
  }
  if (!opts.inject_path.empty() && !opts.inject) {
    return usage_error(
        "--inject-path says where --inject finds mlflow_profiler: give --inject too");
  }
  if (opts.inject && opts.pids.empty()) {
    return usage_error(
        "--inject loads mlflow_profiler into the processes --pid names (PEP 768, "
        "one interpreter at a time): give --pid N");
  }
  if (!opts.labels.empty() && opts.store.empty() && !opts.continuous) {
    return usage_error(
        "--label labels the sources the agent adds to a store: give --store FILE too (or "
        "--continuous --sink URL)");
  }

  const int kinds = (opts.pids.empty() ? 0 : 1) + (opts.container.empty() ? 0 : 1) +
                    (opts.cgroup.empty() ? 0 : 1) + (opts.all ? 1 : 0) + (opts.pod.empty() ? 0 : 1);
  if (kinds == 0) {
    return usage_error(
        "no target: give --pid N, --container NAME|ID, --cgroup PATH or --all (or --pod "
        "NAMESPACE/NAME)");
  }
  if (kinds > 1) {
    return usage_error(
        "--pid, --container, --pod, --cgroup and --all choose targets in different ways: "
        "give one of them");
  }
  return Ok{};
}

}  // namespace

Result<Options> parse_options(int argc, char* const* argv) {
  Parse p;
  // getopt keeps global state: optind = 0 makes glibc start over (tests parse many times).
  optind = 0;
  opterr = 0;
  for (;;) {
    const int prev = optind == 0 ? 1 : optind;  // optind 0: starting over (argv[0] is the program)
    const int c = getopt_long(argc, argv, "+:o:vh", kLongOptions, nullptr);
    if (c == -1) break;
    if (c == ':' || c == '?') return getopt_error(c, prev, argc, argv);
    const std::string arg = optarg != nullptr ? optarg : "";
    auto handled = target_option(c, arg, p.opts);
    if (handled && !handled.value()) handled = capture_option(c, arg, p);
    if (handled && !handled.value()) handled = output_option(c, arg, p);
    if (handled && !handled.value()) handled = continuous_option(c, arg, p);
    if (!handled) return handled.error();
    if (!handled.value()) return getopt_error('?', prev, argc, argv);
  }
  if (optind < argc) {
    return usage_error("unexpected argument '" + std::string(argv[optind]) +
                       "': targets are chosen with --pid, --container, --pod, --cgroup or --all");
  }
  if (p.opts.help || p.opts.version) return p.opts;
  if (auto ok = check_combination(p); !ok) return ok.error();
  if (p.format_given) {
    p.opts.format = p.format;
  } else if (!p.opts.output.empty()) {
    p.opts.format = format_for_path(p.opts.output);  // nullopt: a text file
  }
  if (p.opts.output.empty() && p.opts.format &&
      (*p.opts.format == ExportFormat::kPprof || *p.opts.format == ExportFormat::kJsonGz)) {
    return usage_error("--format " + format_label(p.opts.format) +
                       " is gzip-compressed binary: write it to a file with -o FILE");
  }
  return p.opts;
}

Result<Options> parse_options(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  words.reserve(args.size() + 1);
  words.emplace_back("mlprof-ebpf");
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(words.size() + 1);
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return parse_options(static_cast<int>(words.size()), argv.data());
}

std::string usage() {
  return R"(usage: mlprof-ebpf TARGET [--duration S] [-o FILE] [--format F] [--depth N] [--stream]
                   [--store STORE [--label KEY=VALUE]...] [-v]
       mlprof-ebpf TARGET --continuous --sink URL [--rotate D] [--spool DIR] [--duty-cycle ON/P]
                   [--label KEY=VALUE]...

Profiles the predict() calls of Python processes that use mlflow_profiler
from outside, with eBPF: the same span tree as in-process profiling, plus
on-CPU, off-CPU (blocked) and run-queue time per span. Needs root, or
CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE; not as uid 0, --container by name
also needs CAP_DAC_READ_SEARCH (docs/ebpf.md, "Privileges").

TARGET (one kind):
  --pid N              a process (repeatable)
    --inject           first load mlflow_profiler into it, live, if it never imported it:
                       CPython 3.14+ (PEP 768; docs/ebpf.md, "Injecting into a running Python")
    --inject-path DIR  where it finds mlflow_profiler, as the target sees it (default: its
                       own sys.path); a build for the target's Python version
  --container NAME|ID  a Docker, Podman or containerd container (name, id or id prefix)
  --cgroup PATH        every process in a cgroup v2 and below it
  --all                every process that has the extension loaded
  --pod NS/NAME[/CONTAINER]  a Kubernetes pod's processes (or one container's), by name,
                       from the node's cgroups, CRI state and /var/log/pods (no API server)

  --host-root DIR      where the node's / is mounted (default /): the CRI runtimes' state
                       and /var/log/pods are read under it (a DaemonSet mounting / at /host)

  --duration S         stop after S seconds (default: at Ctrl-C / SIGTERM)
  -o FILE              write the profile to FILE atomically (format from the extension:
                       .json .json.gz .trace.json .pb.gz .speedscope.json .folded .html)
  --format F           text, json, chrome, pprof, speedscope (also json_gz, folded, html)
  --depth N            render depth of the text output (default: everything captured)
  --stream             print each session's tree as it finishes
  --store STORE        add the capture to a profile store (a SQLite file, or sqlite:///path;
                       created if need be) as one source of type ebpf when the agent stops;
                       with --stream, each session as it finishes (docs/store.md)
  --label KEY=VALUE    a label on those sources (repeatable): model, version, run_id ...
  --continuous         the node agent: until SIGTERM, every --rotate period each workload's
                       sessions (a pod's container, else a process) become one profile
                       (.json.gz) delivered to --sink through an on-disk spool; one summary
                       line per period on stdout (docs/ebpf.md, "Continuous mode")
  --sink URL           DIR, sqlite:///PATH (or PATH.db), postgresql://..., http(s)://MLFLOW
  --rotate D           the period (default 60s; 90, 90s, 5m, 1h)
  --spool DIR          where items wait for the sink (default /var/lib/mlprof/spool)
  --spool-max-mb N     the spool's bound (default 256); the oldest items go first
  --sink-max-mb N      a directory sink's bound on the agent's files there (default 1024 MiB)
  --sink-max-age D     ... and on their age (default 7d); the oldest go first, counted
  --retry-max D        the longest wait between deliveries to a sink that is down (default
                       60s; from 1s, doubling, with jitter)
  --duty-cycle ON/P    capture only for ON of every P (e.g. 10s/60s): the targets are
                       detached, and pay nothing, the rest of the time
  --health-file FILE   keep a status file for `--health` (a kubelet exec probe): the main
                       loop's last pass, readiness, the delivery thread's progress
  -v                   progress on stderr (-vv: libbpf's messages too)
  --help, --version

       mlprof-ebpf --health FILE [--ready] [--max-loop-gap D] [--max-sink-call D]
The probe: one line; exit 0 when the agent writing FILE is live (its loop
drained the ring within D, default 60s; no call to its sink in flight longer
than D, default 300s) or, with --ready, also has its programs loaded and the
first scan done; 1 when not; 2 usage (docs/ebpf.md, "Health").

Exit status: 0 all captured; 1 runtime error (also: the store cannot be
opened, an add to it failed, -o's directory is not writable); 2 usage error;
3 no privilege or kernel support; 4 no target found; 5 events were lost
(output written); 6 no session captured; 7 a --pid target is not Python or
did not load mlflow_profiler in 30 s, or --inject could not load it; 8 the
host's pids are not visible (a container without hostPID / --pid=host).
docs/ebpf.md, "Exit status".
)";
}

std::optional<int64_t> parse_duration_ns(const std::string& text) {
  size_t unit_at = text.size();
  while (unit_at > 0 && std::isalpha(static_cast<unsigned char>(text[unit_at - 1]))) --unit_at;
  const std::string number = text.substr(0, unit_at), unit = text.substr(unit_at);
  if (number.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(number.c_str(), &end);
  if (errno != 0 || end != number.c_str() + number.size() || !(v > 0)) return std::nullopt;
  double scale;
  if (unit.empty() || unit == "s") {
    scale = 1e9;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "m") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else if (unit == "d") {
    scale = 86400e9;
  } else {
    return std::nullopt;
  }
  const double ns = v * scale;
  if (!(ns >= 1e6 && ns <= 1e18)) return std::nullopt;
  return static_cast<int64_t>(ns);
}

std::string version_line() { return std::string("mlprof-ebpf ") + MLPROF_VERSION; }

std::string format_label(const std::optional<ExportFormat>& format) {
  if (!format) return "text";
  if (*format == ExportFormat::kChromeTrace) return "chrome";
  return format_name(*format);
}

}  // namespace mlprof::agent
