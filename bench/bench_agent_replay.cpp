// The agent's CPU per session without the scheduler's noise (issue 19,
// item 4): records a live target's ring-buffer records for a while, then
// replays them through the agent's own joiner and capture report, as the
// agent does in its default mode, and times that alone (thread CPU time).
//
//   sudo bench_agent_replay --pid PID [--seconds S] [--repeat K] [--save FILE]
//   bench_agent_replay --load FILE [--repeat K]
//
// PID must have loaded mlflow_profiler (sample_rate=0: the agent switches
// capture on). Prints the sessions, the records per session, and the median
// over K replays of the CPU per session, split into the joiner (records to
// Profiles) and the report. A benchmark, not a test (bench/RESULTS.md).

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "agent/bpf_loader.h"
#include "agent/joiner.h"
#include "agent/stall_report.h"
#include "agent/targets.h"

namespace {

int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A live target's records for `seconds`, capture switched on by attaching.
int record(int pid, double seconds, std::vector<std::string>& records, uint64_t& lost) {
  using namespace mlprof::agent;
  std::ifstream maps_file("/proc/" + std::to_string(pid) + "/maps");
  const std::string maps((std::istreambuf_iterator<char>(maps_file)),
                         std::istreambuf_iterator<char>());
  const auto ext = extension_in_maps(maps);
  if (!ext) {
    std::fprintf(stderr, "pid %d has not loaded mlflow_profiler\n", pid);
    return 1;
  }
  auto loader = BpfLoader::open(LoaderOptions{});
  if (!loader) {
    std::fprintf(stderr, "%s\n", loader.error().message.c_str());
    return 1;
  }
  const std::string binary = "/proc/" + std::to_string(pid) + "/root" + *ext;
  if (auto r = loader.value()->attach(pid, binary); !r) {
    std::fprintf(stderr, "attach: %s\n", r.error().message.c_str());
    return 1;
  }
  const int64_t until = mono_ns() + static_cast<int64_t>(seconds * 1e9);
  while (mono_ns() < until) {
    loader.value()->poll(100, [&](const void* data, size_t size) {
      records.emplace_back(static_cast<const char*>(data), size);
    });
  }
  loader.value()->detach(pid);
  loader.value()->poll(0, [&](const void* data, size_t size) {
    records.emplace_back(static_cast<const char*>(data), size);
  });
  lost = loader.value()->stats().lost;
  return 0;
}

// FILE: each record as its 4-byte size, then its bytes.
bool write_records(const std::string& path, const std::vector<std::string>& records) {
  std::ofstream out(path, std::ios::binary);
  for (const std::string& r : records) {
    const auto n = static_cast<uint32_t>(r.size());
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(r.data(), static_cast<std::streamsize>(n));
  }
  return static_cast<bool>(out);
}

bool read_records(const std::string& path, std::vector<std::string>& records) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  uint32_t n = 0;
  while (in.read(reinterpret_cast<char*>(&n), sizeof n)) {
    std::string r(n, '\0');
    if (!in.read(r.data(), n)) return false;
    records.push_back(std::move(r));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mlprof::agent;
  int pid = 0;
  double seconds = 5;
  int repeat = 9;
  std::string save, load;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--pid"))
      pid = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--save"))
      save = argv[i + 1];
    else if (!std::strcmp(argv[i], "--load"))
      load = argv[i + 1];
    else if (!std::strcmp(argv[i], "--seconds"))
      seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeat"))
      repeat = std::atoi(argv[i + 1]);
  }
  std::vector<std::string> records;
  uint64_t lost = 0;
  if (!load.empty()) {
    if (!read_records(load, records)) {
      std::fprintf(stderr, "cannot read %s\n", load.c_str());
      return 1;
    }
  } else if (pid <= 0) {
    std::fprintf(stderr,
                 "usage: bench_agent_replay --pid PID [--seconds S] [--repeat K] [--save FILE]\n"
                 "       bench_agent_replay --load FILE [--repeat K]\n");
    return 2;
  } else if (int rc = record(pid, seconds, records, lost); rc != 0) {
    return rc;
  }
  if (!save.empty() && !write_records(save, records)) {
    std::fprintf(stderr, "cannot write %s\n", save.c_str());
    return 1;
  }

  std::vector<double> join_us, report_us;
  uint64_t sessions = 0;
  for (int k = 0; k < repeat; ++k) {
    Joiner joiner;
    CaptureStallReport report;
    int64_t report_ns = 0;
    // The report's part is timed around its calls (CLOCK_MONOTONIC: a vDSO
    // read, where the thread's CPU clock is a system call per session); the
    // joiner's is the rest (records are not timed one by one: the clock
    // would cost more than some). Sessions are handed out one at a time and
    // their memory reused, as in the agent's default mode.
    auto drain = [&](bool all) {
      if (all) joiner.finish(INT64_MAX / 2);
      joiner.drain_finished(INT64_MAX, [&](mlprof::Profile& p) {
        const int64_t t0 = mono_ns();
        report.add(p);
        report_ns += mono_ns() - t0;
      });
    };
    const int64_t start = thread_cpu_ns();
    for (size_t i = 0; i < records.size(); ++i) {
      joiner.on_record(records[i].data(), records[i].size());
      if ((i & 255) == 255) drain(false);
    }
    drain(true);
    const int64_t join_ns = thread_cpu_ns() - start - report_ns;
    sessions = joiner.stats().sessions_finished;
    if (sessions == 0) break;
    join_us.push_back(static_cast<double>(join_ns) / 1000.0 / static_cast<double>(sessions));
    report_us.push_back(static_cast<double>(report_ns) / 1000.0 / static_cast<double>(sessions));
  }
  if (sessions == 0) {
    std::fprintf(stderr, "no session in %zu records (is capture on in pid %d?)\n", records.size(),
                 pid);
    return 1;
  }
  std::printf("records=%zu lost=%llu sessions=%llu records_per_session=%.2f repeat=%d\n",
              records.size(), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(sessions),
              static_cast<double>(records.size()) / static_cast<double>(sessions), repeat);
  std::printf(
      "us_per_session joiner=%.2f report=%.2f total=%.2f (median of %zu replays; min total %.2f)\n",
      median(join_us), median(report_us), median(join_us) + median(report_us), join_us.size(), [&] {
        double best = 1e18;
        for (size_t i = 0; i < join_us.size(); ++i)
          best = std::min(best, join_us[i] + report_us[i]);
        return best;
      }());
  return 0;
}
