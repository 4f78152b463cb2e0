#include "agent/health.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "agent/clock.h"
#include "agent/options.h"
#include "agent/sink.h"
#include "agent/spool.h"
#include "util/file_io.h"

namespace mlprof::agent {

namespace {

constexpr const char* kHeader = "mlprof-ebpf health 1";

// Values stay on their line.
std::string one_line(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ns) / 1e9);
  return buf;
}

bool parse_i64(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  out = v;
  return true;
}

std::string utc(int64_t unix_ns) {
  const time_t t = static_cast<time_t>(unix_ns / 1'000'000'000);
  tm parts{};
  gmtime_r(&t, &parts);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return buf;
}

// The delivery part of a verdict's line: "; sink S: 3 delivered, last 4.0 s ago, 0 waiting".
std::string delivery_text(const HealthState& s, int64_t now_ns) {
  if (!s.has_sink) return {};
  std::string t = "; sink " + s.sink + ": " + std::to_string(s.delivered) + " delivered";
  if (s.last_delivered_ns > 0) t += ", the last " + seconds(now_ns - s.last_delivered_ns) + " ago";
  t += ", " + std::to_string(s.pending) + " waiting";
  if (s.sink_call_since_ns > 0)
    t += ", a call in flight for " + seconds(now_ns - s.sink_call_since_ns);
  if (!s.last_error.empty()) t += "; retrying: " + s.last_error;
  return t;
}

// The health file's text through core's read_file, cut a little past 64 KiB
// (then not a health file; parse_health says so). The error's message is
// strerror alone: the probe's line names the file itself.
Result<std::string> read_small_file(const std::string& path) {
  auto text = read_file(path, (64u << 10) + 1);
  if (!text)
    return Error{Error::Kind::kIo, text.error().errnum, std::strerror(text.error().errnum)};
  return text;
}

}  // namespace

int64_t health_clock_ns() { return now_ns(); }

std::string format_health(const HealthState& s) {
  std::string t = std::string(kHeader) + "\n";
  auto put = [&t](const char* key, const std::string& value) {
    t += key;
    t += '=';
    t += value;
    t += '\n';
  };
  put("pid", std::to_string(s.pid));
  put("started_ns", std::to_string(s.started_ns));
  put("ready", s.ready ? "1" : "0");
  put("stopping", s.stopping ? "1" : "0");
  put("loop_ns", std::to_string(s.loop_ns));
  if (s.has_sink) {
    put("sink", one_line(s.sink));
    put("sink_call_since_ns", std::to_string(s.sink_call_since_ns));
    put("last_delivered_ns", std::to_string(s.last_delivered_ns));
    put("delivered", std::to_string(s.delivered));
    put("pending", std::to_string(s.pending));
    put("failures", std::to_string(s.failures));
    put("last_error", one_line(s.last_error));
  }
  put("written_unix_ns", std::to_string(s.written_unix_ns));
  put("written", utc(s.written_unix_ns));  // for a person; not read back
  return t;
}

Result<HealthState> parse_health(std::string_view text) {
  auto corrupt = [](const std::string& why) {
    return Error{Error::Kind::kCorrupt, 0, "not an mlprof-ebpf health file (" + why + ")"};
  };
  const size_t first_end = text.find('\n');
  if (text.substr(0, first_end) != kHeader) {
    if (text.starts_with("mlprof-ebpf health ")) {
      return Error{Error::Kind::kVersion, 0,
                   "the health file is of another version (" +
                       std::string(text.substr(0, first_end)) +
                       "): probe with the agent's own binary"};
    }
    return corrupt(text.empty() ? "empty" : "no '" + std::string(kHeader) + "' line");
  }
  std::map<std::string, std::string> kv;
  size_t pos = first_end == std::string_view::npos ? text.size() : first_end + 1;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    const size_t eq = line.find('=');
    if (eq != std::string_view::npos) kv[std::string(line.substr(0, eq))] = line.substr(eq + 1);
    pos = end + 1;
  }
  HealthState s;
  auto num = [&](const char* key, int64_t& out, bool required) -> bool {
    const auto it = kv.find(key);
    if (it == kv.end()) return !required;
    return parse_i64(it->second, out);
  };
  int64_t ready = 0, stopping = 0, delivered = 0, pending = 0, failures = 0;
  if (!num("pid", s.pid, true) || !num("started_ns", s.started_ns, true) ||
      !num("loop_ns", s.loop_ns, true) || !num("ready", ready, true) ||
      !num("stopping", stopping, false) || !num("written_unix_ns", s.written_unix_ns, false)) {
    return corrupt("pid, started_ns, loop_ns or ready missing or not a number");
  }
  s.ready = ready == 1;
  s.stopping = stopping == 1;
  if (const auto it = kv.find("sink"); it != kv.end()) {
    s.has_sink = true;
    s.sink = it->second;
    if (!num("sink_call_since_ns", s.sink_call_since_ns, true) ||
        !num("last_delivered_ns", s.last_delivered_ns, true) ||
        !num("delivered", delivered, true) || !num("pending", pending, true) ||
        !num("failures", failures, true)) {
      return corrupt("a delivery figure missing or not a number");
    }
    s.delivered = static_cast<uint64_t>(delivered);
    s.pending = static_cast<uint64_t>(pending);
    s.failures = static_cast<uint64_t>(failures);
    if (const auto e = kv.find("last_error"); e != kv.end()) s.last_error = e->second;
  }
  return s;
}

HealthVerdict judge_health(const HealthState& s, int64_t now_ns, bool readiness,
                           const HealthLimits& limits) {
  // A file of an earlier boot (a hostPath kept over a reboot) has times
  // ahead of this boot's clock: it says nothing about the agent now.
  constexpr int64_t kSlackNs = 5'000'000'000;
  if (s.loop_ns > now_ns + kSlackNs || s.started_ns > now_ns + kSlackNs) {
    return {false,
            "the health file's times are ahead of this machine's monotonic clock (a file "
            "of an earlier boot, or of another machine): the agent has not written it "
            "since it started"};
  }
  const int64_t gap = now_ns - s.loop_ns;
  if (gap > limits.max_loop_gap_ns) {
    if (!s.ready) {
      return {false, "stuck starting: no progress for " + seconds(gap) +
                         " since the start (limit " + seconds(limits.max_loop_gap_ns) +
                         "): loading the BPF programs or the first scan for targets hangs"};
    }
    return {false, "stuck: the main loop last drained the ring buffer " + seconds(gap) +
                       " ago (limit " + seconds(limits.max_loop_gap_ns) +
                       "): the agent is hung (pid " + std::to_string(s.pid) +
                       "; its threads' kernel stacks: /proc/" + std::to_string(s.pid) +
                       "/task/*/stack); a restart resumes from the spool"};
  }
  if (s.has_sink && s.sink_call_since_ns > 0 &&
      now_ns - s.sink_call_since_ns > limits.max_sink_call_ns) {
    return {false, "stuck: a call to the sink " + s.sink + " has been in flight for " +
                       seconds(now_ns - s.sink_call_since_ns) + " (limit " +
                       seconds(limits.max_sink_call_ns) +
                       "): the sink is wedged (a server that accepted the call and never "
                       "answers, a hung mount); a restart connects afresh and the spool keeps " +
                       std::to_string(s.pending) + " items"};
  }
  if (readiness && s.stopping) {
    return {false, "not ready: stopping (flushing the last period to the sink)"};
  }
  if (readiness && !s.ready) {
    return {false, "not ready: loading the BPF programs and looking for targets (started " +
                       seconds(now_ns - s.started_ns) + " ago)"};
  }
  std::string line = readiness ? "ready" : (s.ready ? "live" : "live, starting");
  if (s.stopping) line += ", stopping";
  line += ": the ring drained " + seconds(gap) + " ago" + delivery_text(s, now_ns);
  return {true, line};
}

Result<Ok> HealthFile::start(int64_t now_ns) {
  state_.pid = ::getpid();
  state_.started_ns = now_ns;
  state_.loop_ns = now_ns;
  return write(now_ns);
}

void HealthFile::set_ready(int64_t now_ns) {
  state_.ready = true;
  state_.loop_ns = now_ns;
  (void)write(now_ns);
}

void HealthFile::set_stopping(int64_t now_ns) {
  state_.stopping = true;
  state_.loop_ns = now_ns;
  (void)write(now_ns);
}

void HealthFile::beat(int64_t now_ns) {
  state_.loop_ns = now_ns;
  if (due(now_ns)) (void)write(now_ns);
}

Result<Ok> HealthFile::write(int64_t now_ns) {
  // Marked written even when it fails: a broken mount is retried a second
  // later, not on every pass. A file that stops changing fails the probe,
  // which is the point.
  written_ns_ = now_ns;
  state_.written_unix_ns = unix_now_ns();
  if (progress_) {
    const HealthState d = progress_();
    state_.has_sink = d.has_sink;
    state_.sink = d.sink;
    state_.sink_call_since_ns = d.sink_call_since_ns;
    state_.last_delivered_ns = d.last_delivered_ns;
    state_.delivered = d.delivered;
    state_.pending = d.pending;
    state_.failures = d.failures;
    state_.last_error = d.last_error;
  }
  const std::string text = format_health(state_);
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Error{Error::Kind::kIo, errno, "cannot write " + tmp + ": " + std::strerror(errno)};
  }
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()) || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int e = n != static_cast<ssize_t>(text.size()) ? (n < 0 ? write_errno : ENOSPC) : errno;
    ::unlink(tmp.c_str());
    return Error{Error::Kind::kIo, e, "cannot write " + path_ + ": " + std::strerror(e)};
  }
  return Ok{};
}

HealthState delivery_progress(const Spool& spool, const Sink& sink) {
  const SpoolStats st = spool.stats();
  HealthState s;
  s.has_sink = true;
  s.sink = sink.describe();
  s.sink_call_since_ns = st.call_since_ms * 1'000'000;  // the spool's clock is CLOCK_MONOTONIC too
  s.last_delivered_ns = st.last_delivered_ms * 1'000'000;
  s.delivered = st.delivered;
  s.pending = st.pending;
  s.failures = st.failures;
  s.last_error = st.last_error;
  return s;
}

bool is_health_probe(int argc, char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--health") == 0 || std::strncmp(argv[i], "--health=", 9) == 0)
      return true;
  }
  return false;
}

int health_main(int argc, char* const* argv) {
  auto usage_error = [](const std::string& line) {
    std::fprintf(stderr, "mlprof-ebpf: %s\n", line.c_str());
    return 2;
  };
  std::string file;
  bool readiness = false;
  HealthLimits limits;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i], value;
    const size_t eq = word.find('=');
    const bool inline_value = word.starts_with("--") && eq != std::string::npos;
    if (inline_value) {
      value = word.substr(eq + 1);
      word = word.substr(0, eq);
    }
    auto take_value = [&]() -> bool {
      if (inline_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    if (word == "--health") {
      if (!take_value() || value.empty())
        return usage_error(
            "--health needs the agent's health file, e.g. --health /run/mlprof/health");
      file = value;
    } else if (word == "--ready" && !inline_value) {
      readiness = true;
    } else if (word == "--max-loop-gap" || word == "--max-sink-call") {
      std::optional<int64_t> ns;
      if (take_value()) ns = parse_duration_ns(value);
      if (!ns)
        return usage_error(word + " '" + value + "' is not a duration: e.g. " + word + " 60s");
      (word == "--max-loop-gap" ? limits.max_loop_gap_ns : limits.max_sink_call_ns) = *ns;
    } else {
      return usage_error(
          "the health probe takes --health FILE [--ready] [--max-loop-gap D] "
          "[--max-sink-call D], not '" +
          std::string(argv[i]) + "'");
    }
  }
  auto text = read_small_file(file);
  if (!text) {
    std::fprintf(stderr,
                 "mlprof-ebpf: no health file %s (%s): the agent has not started yet, or runs "
                 "without --health-file %s\n",
                 file.c_str(), text.error().message.c_str(), file.c_str());
    return 1;
  }
  auto state = parse_health(text.value());
  if (!state) {
    std::fprintf(stderr, "mlprof-ebpf: %s: %s\n", file.c_str(), state.error().message.c_str());
    return 1;
  }
  const HealthVerdict v = judge_health(state.value(), health_clock_ns(), readiness, limits);
  std::fprintf(v.ok ? stdout : stderr, "mlprof-ebpf: %s\n", v.line.c_str());
  return v.ok ? 0 : 1;
}

}  // namespace mlprof::agent
