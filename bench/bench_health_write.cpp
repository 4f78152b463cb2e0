// The agent's health file (--health-file, agent/health.h): CPU and wall time
// of one write (temporary file and rename), as the agent does it once a
// second. deploy/README.md, "Resources", cites it for tmpfs and a disk.
//   bench_health_write FILE [N]   (FILE on the filesystem to measure; default N 20000)

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "agent/health.h"

namespace {

double cpu_us() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mlprof::agent;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_health_write FILE [N]\n");
    return 2;
  }
  const int n = argc > 2 ? std::atoi(argv[2]) : 20000;
  HealthFile f(argv[1]);
  int64_t t = health_clock_ns();
  if (auto r = f.start(t); !r) {
    std::fprintf(stderr, "bench_health_write: %s\n", r.error().message.c_str());
    return 1;
  }
  HealthState d;  // a continuous agent's delivery figures
  d.has_sink = true;
  d.sink = "/var/lib/mlprof/profiles";
  d.delivered = 41;
  f.set_delivery([&] { return d; });
  const double c0 = cpu_us();
  const auto w0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    t += HealthFile::kIntervalNs;  // every beat is due: each one writes
    f.beat(t);
  }
  const auto w1 = std::chrono::steady_clock::now();
  const double c1 = cpu_us();
  std::printf("%s: %d writes, %.1f us wall and %.1f us CPU each\n", argv[1], n,
              std::chrono::duration<double, std::micro>(w1 - w0).count() / n, (c1 - c0) / n);
  return 0;
}
