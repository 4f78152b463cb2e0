// mlprof-usdt-storm: a synthetic source of the extension's USDT probes
// (bpf/mlprof_usdt.h), with no Python. Each thread runs sessions in a tight
// loop: session_begin, lane_begin, N x (span_enter, span_exit), session_end,
// gated by the semaphores exactly as the extension's sites are. The agent's
// throughput test and benchmark attach to it
// (docs/decisions/0026-throughput-from-a-synthetic-source.md: "Throughput is measured with a
// synthetic source").
//
//   mlprof-usdt-storm [--sessions N] [--spans-per-session M] [--threads T]
//                     [--seconds S] [--sleep-us U] [--wait-attached S]
//                     [--body-version V] [--rate R]
//
// Prints its pid first (for --pid), then one line of figures at the end:
//   sites: probe sites executed; hits: sites whose probe fired (a tracer was
//   attached); ns_per_site: the threads' busy time per site (sleeps excluded).
// The events it fires rebuild as the extension's would: lane 0 of each
// session, span i is kCall at index 2i (kReturn at 2i + 1), depth 0.
//
// It carries session_spans too (contract v2), so a v2 tracer attaches that:
// each session is then session_begin and one session_spans whose body holds
// the session's 2N events (written as the extension writes them: one 16-byte
// record per event, stamped with CLOCK_MONOTONIC), and lane_begin is not
// fired for lane 0, as in the extension. `events` in the figures counts the
// span events delivered either way (2 per span).

#include <getopt.h>
#include <pthread.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define MLPROF_USDT_DEFINE_SEMAPHORES  // this binary owns its semaphores
#include "mlprof_usdt.h"

namespace {

struct Options {
  uint64_t sessions = 1000;  // per thread; 0: until --seconds
  uint64_t spans_per_session = 100;
  unsigned threads = 1;
  double seconds = 0;        // 0: no time limit
  unsigned sleep_us = 0;     // between sessions
  double rate = 0;           // sessions per second, all threads together; 0: as fast as it can
  double wait_attached = 0;  // wait up to this long for a tracer before starting
  uint32_t body_version = MLPROF_USDT_VERSION;  // session_spans bodies claim this contract version
};

std::atomic<uint64_t> g_next_session{1};
constexpr int kLine = __LINE__;  // the "line" span_enter reports

struct Counts {
  uint64_t sessions = 0, sites = 0, hits = 0, events = 0;
  int64_t busy_ns = 0;
};

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Contract v2: the session as one body (mlprof_usdt.h), and one hit.
void fire_session_spans(uint32_t version, uint64_t session, uint64_t spans, uint64_t ident,
                        const char* thread_name, const std::vector<int64_t>& stamps) {
  thread_local std::string body;
  const uint64_t max_events =
      (MLPROF_SPANS_MAX_BYTES - sizeof(mlprof_spans_head) - sizeof(mlprof_spans_lane)) /
      sizeof(mlprof_spans_event);
  const uint64_t n = std::min<uint64_t>(2 * spans, max_events & ~uint64_t{1});
  body.assign(
      sizeof(mlprof_spans_head) + sizeof(mlprof_spans_lane) + n * sizeof(mlprof_spans_event), '\0');
  auto* head = reinterpret_cast<mlprof_spans_head*>(body.data());
  head->version = version;
  head->lanes = 1;
  head->session = session;
  head->start_ns = stamps.front();
  head->end_ns = stamps.back();
  head->ceiling = -1;
  auto* lane = reinterpret_cast<mlprof_spans_lane*>(head + 1);
  lane->parent_lane = MLPROF_NO_PARENT_LANE;
  lane->thread_ident = ident;
  lane->native_tid = static_cast<uint64_t>(gettid());
  lane->events = static_cast<uint32_t>(n);
  lane->truncated = n < 2 * spans;
  snprintf(lane->thread_name, sizeof lane->thread_name, "%s", thread_name);
  auto* ev = reinterpret_cast<mlprof_spans_event*>(lane + 1);
  for (uint64_t i = 0; i < n; ++i) {
    ev[i].ts_ns = stamps[1 + i];
    ev[i].id = i % 2 ? 0 : 1;
    ev[i].kind = i % 2 ? 2 : 1;  // kReturn : kCall
  }
  static const mlprof_spans_name name = {1,
                                         0,
                                         kLine,
                                         reinterpret_cast<uintptr_t>("storm_span"),
                                         reinterpret_cast<uintptr_t>("usdt_storm"),
                                         reinterpret_cast<uintptr_t>(__FILE__)};
  // In registers, not %fs-relative (thread_local): libbpf reads no such operand.
  const char* body_at = body.data();
  uint64_t body_bytes = body.size();
  asm volatile("" : "+r"(body_at), "+r"(body_bytes));
  MLPROF_USDT_SESSION_SPANS(session, body_at, body_bytes, &name, 1, 1);
}

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// The extension's pattern: a load and a branch, and the probe (with its
// argument set-up) only behind it. A hit is counted only when it fired.
void run_thread(const Options& o, unsigned index, Clock::time_point deadline, bool timed,
                Counts* out) {
  char thread_name[MLPROF_THREAD_NAME_LEN];
  snprintf(thread_name, sizeof thread_name, "storm-%u", index);
  const auto ident = static_cast<uint64_t>(pthread_self());
  Counts c;
  std::vector<int64_t> stamps;  // v2: the session's start, its events' times, its end
  // --rate: each thread's sessions start on a fixed schedule (absolute
  // deadlines), so a slow session or a late wake-up does not lower the rate.
  const int64_t every_ns = o.rate > 0 ? static_cast<int64_t>(1e9 * o.threads / o.rate) : 0;
  int64_t next_ns = monotonic_ns();
  for (uint64_t s = 0; o.sessions == 0 || s < o.sessions; ++s) {
    if (every_ns > 0) {
      const timespec at{static_cast<time_t>(next_ns / 1'000'000'000),
                        static_cast<long>(next_ns % 1'000'000'000)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr);
      next_ns += every_ns;
    }
    if (timed && Clock::now() >= deadline) break;
    const auto t0 = Clock::now();
    const uint64_t session = g_next_session.fetch_add(1, std::memory_order_relaxed);
    const bool v2 = MLPROF_USDT_ENABLED(session_spans);
    if (MLPROF_USDT_ENABLED(session_begin)) {
      MLPROF_USDT_SESSION_BEGIN(session, -1, 0, 0, 0);
      ++c.hits;
    }
    if (v2) {
      // What in-process capture records: a stamp per event, in memory.
      stamps.resize(2 * o.spans_per_session + 2);
      for (int64_t& t : stamps) t = monotonic_ns();
      fire_session_spans(o.body_version, session, o.spans_per_session, ident, thread_name, stamps);
      ++c.hits;
      c.events += 2 * o.spans_per_session;
      c.busy_ns += ns_since(t0);
      c.sites += 2;
      ++c.sessions;
      if (o.sleep_us) usleep(o.sleep_us);
      continue;
    }
    if (MLPROF_USDT_ENABLED(lane_begin)) {
      MLPROF_USDT_LANE_BEGIN(session, 0, MLPROF_NO_PARENT_LANE, 0, 0, ident, thread_name);
      ++c.hits;
    }
    for (uint64_t i = 0; i < o.spans_per_session; ++i) {
      const auto call = static_cast<uint32_t>(2 * i);
      if (MLPROF_USDT_ENABLED(span_enter)) {
        MLPROF_USDT_SPAN_ENTER(session, 0, call, 1, 0, 0, 0, "storm_span", "usdt_storm", __FILE__,
                               kLine, nullptr);
        ++c.hits;
      }
      if (MLPROF_USDT_ENABLED(span_exit)) {
        MLPROF_USDT_SPAN_EXIT(session, 0, call, 0);
        ++c.hits;
        c.events += 2;
      }
    }
    if (MLPROF_USDT_ENABLED(session_end)) {
      MLPROF_USDT_SESSION_END(session, 0);
      ++c.hits;
    }
    c.busy_ns += ns_since(t0);
    c.sites += 3 + 2 * o.spans_per_session;
    ++c.sessions;
    if (o.sleep_us) usleep(o.sleep_us);
  }
  *out = c;
}

[[noreturn]] void usage(const char* why) {
  if (why) fprintf(stderr, "mlprof-usdt-storm: %s\n", why);
  fprintf(stderr,
          "usage: mlprof-usdt-storm [--sessions N] [--spans-per-session M] [--threads T]\n"
          "                         [--seconds S] [--sleep-us U] [--wait-attached S]\n"
          "  --sessions N           sessions per thread (default 1000; 0: until --seconds)\n"
          "  --spans-per-session M  span_enter/span_exit pairs per session (default 100)\n"
          "  --threads T            threads firing at once (default 1)\n"
          "  --seconds S            stop after S seconds (default: no limit)\n"
          "  --sleep-us U           sleep U microseconds between sessions (default 0)\n"
          "  --rate R               R sessions per second in all, on a fixed schedule (default: no "
          "pacing)\n"
          "  --wait-attached S      wait up to S seconds for a tracer on every probe first\n"
          "  --body-version V       session_spans bodies say contract version V (default: this "
          "build's;\n"
          "                         another one plays an extension newer than the agent)\n");
  exit(2);
}

// Whole strings only: "10x" or "" is a usage error, not 10 or 0.
uint64_t parse_u64(const char* flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end || !*s || s[0] == '-')
    usage((std::string(flag) + ": not a count: " + s).c_str());
  return v;
}

double parse_seconds(const char* flag, const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (!end || *end || !*s || !(v >= 0))
    usage((std::string(flag) + ": not a number of seconds: " + s).c_str());
  return v;
}

// getopt_long (libc): the parser every tool here uses; no need for a library.
Options parse(int argc, char** argv) {
  static const option longs[] = {{"sessions", required_argument, nullptr, 's'},
                                 {"spans-per-session", required_argument, nullptr, 'm'},
                                 {"threads", required_argument, nullptr, 't'},
                                 {"seconds", required_argument, nullptr, 'd'},
                                 {"sleep-us", required_argument, nullptr, 'u'},
                                 {"wait-attached", required_argument, nullptr, 'w'},
                                 {"body-version", required_argument, nullptr, 'v'},
                                 {"rate", required_argument, nullptr, 'r'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  Options o;
  int c;
  while ((c = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    switch (c) {
      case 's':
        o.sessions = parse_u64("--sessions", optarg);
        break;
      case 'm':
        o.spans_per_session = parse_u64("--spans-per-session", optarg);
        break;
      case 't':
        o.threads = static_cast<unsigned>(parse_u64("--threads", optarg));
        break;
      case 'd':
        o.seconds = parse_seconds("--seconds", optarg);
        break;
      case 'u':
        o.sleep_us = static_cast<unsigned>(parse_u64("--sleep-us", optarg));
        break;
      case 'w':
        o.wait_attached = parse_seconds("--wait-attached", optarg);
        break;
      case 'v':
        o.body_version = static_cast<uint32_t>(parse_u64("--body-version", optarg));
        break;
      case 'r':
        o.rate = parse_seconds("--rate", optarg);  // a non-negative number
        break;
      case 'h':
        usage(nullptr);
      default:
        usage("unknown option");
    }
  }
  if (optind < argc) usage((std::string("unexpected argument: ") + argv[optind]).c_str());
  if (o.threads == 0 || o.threads > 1024) usage("--threads: 1 to 1024");
  if (o.sessions == 0 && o.seconds == 0) usage("--sessions 0 runs until --seconds: give --seconds");
  return o;
}

}  // namespace

// The agent attaches all eight probes of the contract to a process, so the
// storm carries the three it never fires too.
[[gnu::used, gnu::noinline]] void unreached_sites(uint64_t session) {
  if (MLPROF_USDT_ENABLED(span_suspend)) MLPROF_USDT_SPAN_SUSPEND(session, 0, 0);
  if (MLPROF_USDT_ENABLED(span_resume)) MLPROF_USDT_SPAN_RESUME(session, 0, 0);
  if (MLPROF_USDT_ENABLED(span_io)) MLPROF_USDT_SPAN_IO(session, 0, 0, 0, "", "");
}

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  printf("pid %d\n", getpid());
  fflush(stdout);
  if (o.wait_attached > 0) {
    const auto t0 = Clock::now();
    // A tracer attaches probe by probe: start only when every probe fired
    // here is on, or the first sessions miss the probes attached last. A
    // semaphore is set before the tracer links that probe's program, so a
    // caller that needs every hit counted holds this process stopped until
    // the tracer says it is attached (tests/python/test_usdt.py does).
    // v2 (session_spans): session_begin, lane_begin, session_spans.
    while (!(MLPROF_USDT_ENABLED(session_spans)
                 ? MLPROF_USDT_ENABLED(session_begin) && MLPROF_USDT_ENABLED(lane_begin)
                 : MLPROF_USDT_ENABLED(session_begin) && MLPROF_USDT_ENABLED(lane_begin) &&
                       MLPROF_USDT_ENABLED(span_enter) && MLPROF_USDT_ENABLED(span_exit) &&
                       MLPROF_USDT_ENABLED(session_end))) {
      if (ns_since(t0) > static_cast<int64_t>(o.wait_attached * 1e9)) {
        fprintf(stderr, "mlprof-usdt-storm: no tracer attached to all its probes within %.1f s\n",
                o.wait_attached);
        return 1;
      }
      usleep(1000);
    }
  }
  const bool timed = o.seconds > 0;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::nanoseconds(static_cast<int64_t>(o.seconds * 1e9));
  std::vector<Counts> counts(o.threads);
  std::vector<std::thread> threads;
  threads.reserve(o.threads);
  for (unsigned i = 0; i < o.threads; ++i) {
    threads.emplace_back(run_thread, std::cref(o), i, deadline, timed, &counts[i]);
  }
  for (auto& t : threads) t.join();
  const double wall = static_cast<double>(ns_since(start)) / 1e9;
  Counts total;
  for (const Counts& c : counts) {
    total.sessions += c.sessions;
    total.sites += c.sites;
    total.hits += c.hits;
    total.events += c.events;
    total.busy_ns += c.busy_ns;
  }
  const double per_site =
      total.sites ? static_cast<double>(total.busy_ns) / static_cast<double>(total.sites) : 0;
  printf(
      "threads=%u sessions=%llu sites=%llu hits=%llu seconds=%.3f ns_per_site=%.1f "
      "hits_per_second=%.0f events=%llu events_per_second=%.0f\n",
      o.threads, static_cast<unsigned long long>(total.sessions),
      static_cast<unsigned long long>(total.sites), static_cast<unsigned long long>(total.hits),
      wall, per_site, wall > 0 ? static_cast<double>(total.hits) / wall : 0.0,
      static_cast<unsigned long long>(total.events),
      wall > 0 ? static_cast<double>(total.events) / wall : 0.0);
  return 0;
}
