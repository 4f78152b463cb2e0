// bench_probes: what a USDT probe site costs with no tracer attached, in the
// shape the extension uses (pyext/probes.h): an inline load of the probe's
// semaphore and a branch, with the argument set-up and the probe itself in
// an out-of-line cold function. Measured next to the same loop without the
// site (the floor), in the same run; median of rounds.
//
//   ./build/bench/bench_probes [--iterations N] [--rounds R] [--wait-attached S]
//
// --wait-attached S: wait until a tracer is attached to span_enter (bpftrace,
// mlprof-ebpf), then measure the site while every hit fires (use a smaller N:
// an attached hit is a uprobe trap, microseconds).

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define MLPROF_USDT_DEFINE_SEMAPHORES
#include "mlprof_usdt.h"

namespace {

using Clock = std::chrono::steady_clock;

// Keeps `v` and everything before it: the loop's body cannot be folded away.
inline void keep(uint64_t v) { asm volatile("" : : "r"(v) : "memory"); }

// As pyext/probes.h's fire_*: the arguments are computed only here.
[[gnu::cold, gnu::noinline]] void fire_span_enter(uint64_t session, uint32_t index) {
  static const char* const kName = "bench_span";
  MLPROF_USDT_SPAN_ENTER(session, 0, index, 1, 0, 1, 0, kName, "bench_probes", __FILE__, __LINE__,
                         nullptr);
}
[[gnu::cold, gnu::noinline]] void fire_span_exit(uint64_t session, uint32_t index) {
  MLPROF_USDT_SPAN_EXIT(session, 0, index, 0);
}

// ns per iteration of the floor: the loop alone.
double floor_loop(uint64_t n) {
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) keep(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
         static_cast<double>(n);
}

// ns per iteration with one site (span_enter's gate).
double one_site(uint64_t n) {
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    if (MLPROF_USDT_ENABLED(span_enter)) fire_span_enter(7, static_cast<uint32_t>(i));
    keep(i);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
         static_cast<double>(n);
}

// ns per iteration with a span's two sites (enter and exit), as a call pays.
double two_sites(uint64_t n) {
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    if (MLPROF_USDT_ENABLED(span_enter)) fire_span_enter(7, static_cast<uint32_t>(i));
    keep(i);
    if (MLPROF_USDT_ENABLED(span_exit)) fire_span_exit(7, static_cast<uint32_t>(i));
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
         static_cast<double>(n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint64_t parse_count(const char* flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !*s || *end || s[0] == '-' || v == 0) {
    fprintf(stderr, "bench_probes: %s: not a positive count: %s\n", flag, s);
    exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t n = 100'000'000;
  int rounds = 15;
  double wait_attached = 0;
  static const option longs[] = {{"iterations", required_argument, nullptr, 'n'},
                                 {"rounds", required_argument, nullptr, 'r'},
                                 {"wait-attached", required_argument, nullptr, 'w'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    if (c == 'n')
      n = parse_count("--iterations", optarg);
    else if (c == 'r')
      rounds = static_cast<int>(parse_count("--rounds", optarg));
    else if (c == 'w')
      wait_attached = atof(optarg);
    else {
      fprintf(stderr, "usage: bench_probes [--iterations N] [--rounds R] [--wait-attached S]\n");
      return 2;
    }
  }
  printf("pid %d\n", getpid());
  fflush(stdout);
  if (wait_attached > 0) {
    const auto t0 = Clock::now();
    while (!MLPROF_USDT_ENABLED(span_enter)) {
      if (std::chrono::duration<double>(Clock::now() - t0).count() > wait_attached) {
        fprintf(stderr, "bench_probes: no tracer attached to span_enter within %.1f s\n",
                wait_attached);
        return 1;
      }
      usleep(1000);
    }
  }
  const bool attached = MLPROF_USDT_ENABLED(span_enter);
  std::vector<double> f, one, two;
  for (int r = 0; r < rounds; ++r) {  // interleaved: drift hits all three alike
    f.push_back(floor_loop(n));
    one.push_back(one_site(n));
    two.push_back(two_sites(n));
  }
  const double mf = median(f), m1 = median(one), m2 = median(two);
  printf("probe sites, %s, ns per iteration (median of %d rounds x %llu):\n",
         attached ? "tracer ATTACHED (every hit fires)" : "no tracer attached", rounds,
         static_cast<unsigned long long>(n));
  printf("  floor (loop alone)            %8.3f\n", mf);
  printf("  one site (span_enter)         %8.3f   (+%.3f per site)\n", m1, m1 - mf);
  printf("  two sites (enter + exit)      %8.3f   (+%.3f per site)\n", m2, (m2 - mf) / 2);
  return 0;
}
