// BpfLoader against the real kernel: the CO-RE programs load (tp_btf probed,
// raw_tp forced), attach per pid to usdt_target (a scripted process with the
// mlprof probes), and the ring buffer carries the script's records in order
// with the right fields, plus the scheduler's view of followed threads.
// Root only: without it the tests skip, or fail when MLPROF_REQUIRE_BPF=1
// (CI). Nothing is mocked; the capability tests really drop capabilities.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <linux/types.h>
#include "agent/bpf_loader.h"
#include "mlprof_events.h"

using mlprof::agent::BpfLoader;
using mlprof::agent::LoaderOptions;

namespace {

constexpr const char* kTarget = MLPROF_USDT_TARGET;
constexpr uint64_t kMs = 1000000;

bool bpf_required() {
  const char* v = std::getenv("MLPROF_REQUIRE_BPF");
  return v && std::string(v) == "1";
}

// Skips (or fails under MLPROF_REQUIRE_BPF=1) when not root.
#define REQUIRE_ROOT()                                                                    \
  do {                                                                                    \
    if (geteuid() != 0) {                                                                 \
      if (bpf_required()) FAIL() << "MLPROF_REQUIRE_BPF=1 but not root: cannot load BPF"; \
      GTEST_SKIP() << "needs root to load BPF programs (CI runs it as root)";             \
    }                                                                                     \
  } while (0)

std::unique_ptr<BpfLoader> open_loader(const LoaderOptions& opts = {}) {
  auto r = BpfLoader::open(opts);
  if (!r) {
    ADD_FAILURE() << "BpfLoader::open: " << r.error().message;
    return nullptr;
  }
  return std::move(r.value());
}

// usdt_target as a child process, driven through its stdin/stdout.
class Target {
 public:
  Target() {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      execl(kTarget, kTarget, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    std::string ready = read_line();
    if (std::sscanf(ready.c_str(), "ready pid=%*d tid=%d sem=%lx", &tid_, &sem_addr_) != 2) {
      ADD_FAILURE() << "usdt_target did not start: '" << ready << "'";
    }
  }
  ~Target() {
    if (pid_ <= 0) return;
    send("quit");
    close(to_);
    close(from_);
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      usleep(10000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  pid_t pid() const { return pid_; }
  pid_t tid() const { return tid_; }  // its main thread (== pid)
  bool alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  void send(const std::string& line) {
    std::string l = line + "\n";
    if (write(to_, l.data(), l.size()) < 0) return;
  }
  // One reply line; "" after 10 s or at EOF.
  std::string read_line() {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) return "";
      char chunk[512];
      ssize_t n = read(from_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  std::string command(const std::string& line) {
    send(line);
    return read_line();
  }
  struct Run {
    uint64_t session = 0;
    int tid = 0;
    int child = 0;
  };
  Run run(const std::string& scenario) {
    std::string reply = command("run " + scenario);
    Run r;
    unsigned long long s = 0;
    if (std::sscanf(reply.c_str(), "done %*s session=%llu tid=%d child=%d", &s, &r.tid, &r.child) !=
        3)
      ADD_FAILURE() << "run " << scenario << ": '" << reply << "'";
    r.session = s;
    return r;
  }
  // The 8 semaphores as the target reports them.
  std::vector<unsigned> semaphores() {
    std::istringstream in(command("sem"));
    std::string word;
    in >> word;
    std::vector<unsigned> v;
    unsigned x;
    while (in >> x) v.push_back(x);
    return v;
  }
  // mlprof_span_enter_semaphore read from outside, through /proc/PID/mem.
  int span_enter_semaphore_from_proc() const {
    std::string path = "/proc/" + std::to_string(pid_) + "/mem";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    unsigned short v = 0;
    ssize_t n = pread(fd, &v, sizeof v, static_cast<off_t>(sem_addr_));
    close(fd);
    return n == sizeof v ? v : -1;
  }

 private:
  pid_t pid_ = -1;
  int tid_ = 0;
  unsigned long sem_addr_ = 0;
  int to_ = -1, from_ = -1;
  std::string buf_;
};

// One ring-buffer record, copied out.
struct Rec {
  std::vector<uint8_t> bytes;
  const mlprof_ev_header& h() const {
    return *reinterpret_cast<const mlprof_ev_header*>(bytes.data());
  }
  template <typename T>
  const T& as() const {
    EXPECT_GE(bytes.size(), sizeof(T)) << "record of kind " << h().kind << " too short";
    return *reinterpret_cast<const T*>(bytes.data());
  }
};

// Polls until done(records) or timeout_ms; returns everything received.
std::vector<Rec> collect(BpfLoader& loader,
                         const std::function<bool(const std::vector<Rec>&)>& done,
                         int timeout_ms = 5000) {
  std::vector<Rec> recs;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done(recs) && std::chrono::steady_clock::now() < deadline) {
    loader.poll(50, [&](const void* data, size_t size) {
      const auto* p = static_cast<const uint8_t*>(data);
      recs.push_back(Rec{std::vector<uint8_t>(p, p + size)});
    });
  }
  return recs;
}

// Collects until the SESSION_END of (pid, session).
std::vector<Rec> collect_session(BpfLoader& loader, pid_t pid, uint64_t session,
                                 int timeout_ms = 5000) {
  return collect(
      loader,
      [&](const std::vector<Rec>& recs) {
        return std::any_of(recs.begin(), recs.end(), [&](const Rec& r) {
          return r.h().kind == MLPROF_EV_SESSION_END && r.h().tgid == static_cast<uint32_t>(pid) &&
                 r.as<mlprof_ev_session>().session == session;
        });
      },
      timeout_ms);
}

bool is_usdt_kind(uint16_t k) { return k >= MLPROF_EV_SESSION_BEGIN && k <= MLPROF_EV_NAME; }

std::vector<Rec> only(const std::vector<Rec>& recs, const std::function<bool(const Rec&)>& keep) {
  std::vector<Rec> out;
  for (const Rec& r : recs)
    if (keep(r)) out.push_back(r);
  return out;
}

// The index of the first record of `kind` (for lane/index where it applies), or -1.
int find(const std::vector<Rec>& recs, uint16_t kind,
         const std::function<bool(const Rec&)>& also = nullptr) {
  for (size_t i = 0; i < recs.size(); ++i)
    if (recs[i].h().kind == kind && (!also || also(recs[i]))) return static_cast<int>(i);
  return -1;
}

const char* variant_name(bool raw) { return raw ? "raw_tp" : "tp_btf"; }

// Attached, each semaphore counts the uprobes on its probe's call sites (the
// kernel adds one per site): all 8 must be on.
bool all_on(const std::vector<unsigned>& sems) {
  return sems.size() == 8 &&
         std::all_of(sems.begin(), sems.end(), [](unsigned v) { return v > 0; });
}

// ---- loading ---------------------------------------------------------------

TEST(BpfLoader, LoadsAndPicksTheVariantByProbingTheKernel) {
  REQUIRE_ROOT();
  auto t0 = std::chrono::steady_clock::now();
  auto loader = open_loader();
  auto load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(loader);
  // This kernel has BTF and tp_btf works: the probe must find it.
  EXPECT_STREQ(loader->sched_variant(), "tp_btf");
  std::printf("[   INFO   ] load + sched attach: %.1f ms, variant %s\n", load_ms,
              loader->sched_variant());

  LoaderOptions raw;
  raw.force_raw_tp = true;
  auto forced = open_loader(raw);
  ASSERT_TRUE(forced);
  EXPECT_STREQ(forced->sched_variant(), "raw_tp");
  EXPECT_EQ(forced->stats().lost, 0u);
}

// This kernel has bpf_loop, so session_spans loads; force_per_span loads as
// on a kernel before 5.17 (session_spans left out), and a target still gets
// its sessions, through the per-span probes.
TEST(BpfLoader, WithoutBpfLoopTheSessionsComeThroughThePerSpanProbes) {
  REQUIRE_ROOT();
  auto loader = open_loader();
  ASSERT_TRUE(loader);
  EXPECT_TRUE(loader->session_spans());

  LoaderOptions per_span;
  per_span.force_per_span = true;
  auto forced = open_loader(per_span);
  ASSERT_TRUE(forced);
  EXPECT_FALSE(forced->session_spans());
  Target target;
  ASSERT_GT(target.pid(), 0);
  auto a = forced->attach(target.pid(), kTarget);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(forced->contract(target.pid()), 1);
  auto run = target.run("nested");
  auto recs = collect_session(*forced, target.pid(), run.session);
  EXPECT_EQ(std::count_if(recs.begin(), recs.end(),
                          [](const Rec& r) { return r.h().kind == MLPROF_EV_SPAN_ENTER; }),
            2);
  EXPECT_EQ(forced->stats().lost, 0u);
}

TEST(BpfLoader, RejectsARingThatIsNotAPowerOfTwo) {
  REQUIRE_ROOT();
  LoaderOptions opts;
  opts.ring_bytes = 3 * 4096;
  auto r = BpfLoader::open(opts);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("power of two"), std::string::npos) << r.error().message;
}

// ---- records of a script, per variant -------------------------------------

class Records : public ::testing::TestWithParam<bool> {  // param: force raw_tp
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    LoaderOptions opts;
    opts.force_raw_tp = GetParam();
    loader_ = open_loader(opts);
    ASSERT_TRUE(loader_);
    ASSERT_STREQ(loader_->sched_variant(), variant_name(GetParam()));
    target_ = std::make_unique<Target>();
    ASSERT_GT(target_->pid(), 0);
    auto a = loader_->attach(target_->pid(), kTarget);
    ASSERT_TRUE(a) << a.error().message;
  }
  std::unique_ptr<BpfLoader> loader_;
  std::unique_ptr<Target> target_;
};

TEST_P(Records, ScriptArrivesInOrderWithItsFields) {
  auto run = target_->run("nested");
  auto recs = only(collect_session(*loader_, target_->pid(), run.session),
                   [](const Rec& r) { return is_usdt_kind(r.h().kind); });
  const std::vector<uint16_t> expected = {
      MLPROF_EV_SESSION_BEGIN, MLPROF_EV_LANE_BEGIN,  MLPROF_EV_NAME,      MLPROF_EV_SPAN_ENTER,
      MLPROF_EV_SPAN_IO,       MLPROF_EV_NAME,        MLPROF_EV_NAME,      MLPROF_EV_SPAN_ENTER,
      MLPROF_EV_SPAN_SUSPEND,  MLPROF_EV_SPAN_RESUME, MLPROF_EV_SPAN_EXIT, MLPROF_EV_SPAN_EXIT,
      MLPROF_EV_SPAN_IO,       MLPROF_EV_SESSION_END};
  std::vector<uint16_t> kinds;
  for (const Rec& r : recs) kinds.push_back(r.h().kind);
  ASSERT_EQ(kinds, expected);

  uint64_t prev_ts = 0;
  for (const Rec& r : recs) {
    EXPECT_EQ(r.h().tgid, static_cast<uint32_t>(target_->pid()));
    EXPECT_EQ(r.h().tid, static_cast<uint32_t>(run.tid));
    EXPECT_GE(r.h().ts_ns, prev_ts);
    prev_ts = r.h().ts_ns;
  }
  const auto& begin = recs[0].as<mlprof_ev_session>();
  EXPECT_EQ(begin.session, run.session);
  EXPECT_EQ(begin.ceiling, 3);
  EXPECT_EQ(begin.flags, MLPROF_SESSION_CAPTURE_IO);

  const auto& lane = recs[1].as<mlprof_ev_lane>();
  EXPECT_EQ(lane.session, run.session);
  EXPECT_EQ(lane.lane, 0u);
  EXPECT_EQ(lane.parent_lane, MLPROF_NO_PARENT_LANE);
  EXPECT_NE(lane.thread_ident, 0u);
  EXPECT_STREQ(lane.thread_name, "MainThread");

  const auto& predict = recs[2].as<mlprof_ev_name>();
  EXPECT_EQ(predict.id, 1u);
  EXPECT_EQ(predict.is_label, 0u);
  EXPECT_STREQ(predict.name, "predict");
  EXPECT_STREQ(predict.module, "model");
  EXPECT_STREQ(predict.file, "model.py");
  EXPECT_EQ(predict.line, 10);

  const auto& root = recs[3].as<mlprof_ev_span>();
  EXPECT_EQ(root.session, run.session);
  EXPECT_EQ(root.lane, 0u);
  EXPECT_EQ(root.index, 0u);
  EXPECT_EQ(root.function, 1u);
  EXPECT_EQ(root.label, 0u);
  EXPECT_EQ(root.depth, 0u);

  const auto& arg = recs[4].as<mlprof_ev_io>();
  EXPECT_EQ(arg.index, 0u);
  EXPECT_EQ(arg.role, MLPROF_IO_ARGUMENT);
  EXPECT_STREQ(arg.name, "X");
  EXPECT_STREQ(arg.summary, "DataFrame (2, 3) float64");

  EXPECT_STREQ(recs[5].as<mlprof_ev_name>().name, "transform");
  const auto& label = recs[6].as<mlprof_ev_name>();
  EXPECT_EQ(label.id, 7u);
  EXPECT_EQ(label.is_label, 1u);
  EXPECT_STREQ(label.name, "step");

  const auto& child = recs[7].as<mlprof_ev_span>();
  EXPECT_EQ(child.index, 2u);  // after the root's call and the label
  EXPECT_EQ(child.function, 2u);
  EXPECT_EQ(child.label, 7u);
  EXPECT_EQ(child.depth, 1u);
  EXPECT_EQ(child.flags, MLPROF_SPAN_BLOCK);
  for (int i : {8, 9, 10}) EXPECT_EQ(recs[i].as<mlprof_ev_span>().index, 2u) << "record " << i;
  EXPECT_EQ(recs[11].as<mlprof_ev_span>().index, 0u);
  EXPECT_EQ(recs[11].as<mlprof_ev_span>().flags, MLPROF_SPAN_CHILDREN_DROPPED);
  EXPECT_EQ(recs[12].as<mlprof_ev_io>().role, MLPROF_IO_RETURN);
  EXPECT_STREQ(recs[12].as<mlprof_ev_io>().summary, "ndarray (2,)");
  EXPECT_EQ(recs[13].as<mlprof_ev_session>().flags, 5u);  // calls dropped

  // Names go once per (process, id): the same script again has none.
  auto again = target_->run("nested");
  auto recs2 = only(collect_session(*loader_, target_->pid(), again.session),
                    [](const Rec& r) { return is_usdt_kind(r.h().kind); });
  EXPECT_EQ(recs2.size(), expected.size() - 3);
  EXPECT_EQ(find(recs2, MLPROF_EV_NAME), -1);
  EXPECT_EQ(loader_->stats().lost, 0u);
}

TEST_P(Records, SleepingSpanIsBlockedOffCpuForAbout20Ms) {
  auto run = target_->run("sleep");
  auto recs = collect_session(*loader_, target_->pid(), run.session);
  auto is_sleep_span = [](const Rec& r) { return r.as<mlprof_ev_span>().index == 1; };
  int enter = find(recs, MLPROF_EV_SPAN_ENTER, is_sleep_span);
  int exit = find(recs, MLPROF_EV_SPAN_EXIT, is_sleep_span);
  ASSERT_GE(enter, 0);
  ASSERT_GT(exit, enter);
  const uint64_t t_enter = recs[enter].h().ts_ns, t_exit = recs[exit].h().ts_ns;

  uint64_t off = 0, blocked = 0;
  const mlprof_ev_off_cpu* longest = nullptr;
  for (const Rec& r : recs) {
    if (r.h().kind != MLPROF_EV_OFF_CPU || r.h().tid != static_cast<uint32_t>(run.tid)) continue;
    const auto& o = r.as<mlprof_ev_off_cpu>();
    if (o.start_ns < t_enter || r.h().ts_ns > t_exit) continue;
    off += r.h().ts_ns - o.start_ns;
    if (o.blocked) blocked += r.h().ts_ns - o.start_ns;
    if (!longest || r.h().ts_ns - o.start_ns > longest->h.ts_ns - longest->start_ns) longest = &o;
  }
  ASSERT_NE(longest, nullptr) << "no OFF_CPU record for the sleeping span";
  std::printf(
      "[   INFO   ] %s: off-CPU in the 20 ms sleep span %.2f ms (blocked %.2f ms), span %.2f ms\n",
      variant_name(GetParam()), off / 1e6, blocked / 1e6, (t_exit - t_enter) / 1e6);
  EXPECT_EQ(longest->blocked, 1u);
  EXPECT_NE(longest->prev_state, 0u);  // TASK_INTERRUPTIBLE, not running
  EXPECT_GE(off, 18 * kMs);
  // Never more than the span it lies in (a loaded machine stretches the
  // 20 ms sleep itself: 28.9 ms of a 28.9 ms span was seen under load 4.5).
  EXPECT_LE(off, t_exit - t_enter);
  EXPECT_GE(blocked, 18 * kMs);
  // The wakeup was seen: between the switch-out and the switch-in.
  EXPECT_GT(longest->wake_ns, longest->start_ns);
  EXPECT_LE(longest->wake_ns, longest->h.ts_ns);
  EXPECT_EQ(longest->h.tgid, static_cast<uint32_t>(target_->pid()));
}

TEST_P(Records, ThreadStartedInASpanIsFollowedUntilItExits) {
  auto run = target_->run("thread");
  ASSERT_GT(run.child, 0);
  auto recs = collect_session(*loader_, target_->pid(), run.session);
  const auto child = static_cast<uint32_t>(run.child), main = static_cast<uint32_t>(run.tid);

  int start = find(recs, MLPROF_EV_THREAD_START, [&](const Rec& r) { return r.h().tid == child; });
  ASSERT_GE(start, 0) << "no THREAD_START for the worker";
  const auto& ts = recs[start].as<mlprof_ev_thread>();
  EXPECT_EQ(ts.parent_tid, main);
  EXPECT_EQ(ts.h.tgid, static_cast<uint32_t>(target_->pid()));

  int lane = find(recs, MLPROF_EV_LANE_BEGIN, [&](const Rec& r) { return r.h().tid == child; });
  ASSERT_GT(lane, start);
  EXPECT_EQ(recs[lane].as<mlprof_ev_lane>().lane, 1u);
  EXPECT_EQ(recs[lane].as<mlprof_ev_lane>().parent_call, 1u);
  EXPECT_STREQ(recs[lane].as<mlprof_ev_lane>().thread_name, "worker");

  int exit = find(recs, MLPROF_EV_THREAD_EXIT, [&](const Rec& r) { return r.h().tid == child; });
  ASSERT_GT(exit, lane) << "no THREAD_EXIT for the worker";
  EXPECT_STREQ(recs[exit].as<mlprof_ev_thread>().comm, "worker");
  // The worker's own 5 ms sleep is followed too (a thread started by a
  // followed thread): 5 ms off-CPU. Usually one blocked record; on a loaded
  // machine the worker can be preempted between setting its sleeping state
  // and calling schedule(), stay runnable past the timer, and never block
  // (what one failure in a loaded fresh-clone CI run fits): then the 5 ms
  // are run-queue wait (blocked 0).
  uint64_t worker_off = 0;
  for (const Rec& r : recs)
    if (r.h().kind == MLPROF_EV_OFF_CPU && r.h().tid == child)
      worker_off += r.h().ts_ns - r.as<mlprof_ev_off_cpu>().start_ns;
  EXPECT_GE(worker_off, 4 * kMs)
      << "the worker's 5 ms sleep is not off-CPU time";  // less the switch-out's lag
  // The join blocked the main thread; the worker's exit woke it.
  int join = find(recs, MLPROF_EV_OFF_CPU, [&](const Rec& r) {
    const auto& o = r.as<mlprof_ev_off_cpu>();
    return r.h().tid == main && o.blocked && o.waker_tid == child;
  });
  EXPECT_GE(join, 0) << "no blocked OFF_CPU of the joining thread woken by the worker";
  EXPECT_EQ(loader_->stats().lost, 0u);
}

TEST_P(Records, CpuBoundSpanNeverBlocks) {
  auto run = target_->run("cpu");
  auto recs = collect_session(*loader_, target_->pid(), run.session);
  ASSERT_GE(find(recs, MLPROF_EV_SESSION_END), 0);
  auto busy = [](const Rec& r) { return r.as<mlprof_ev_span>().index == 1; };
  int enter = find(recs, MLPROF_EV_SPAN_ENTER, busy), exit = find(recs, MLPROF_EV_SPAN_EXIT, busy);
  ASSERT_GE(enter, 0);
  ASSERT_GT(exit, enter);
  // Preemptions may happen on a shared machine (blocked 0); a sleep may not.
  for (int i = enter; i < exit; ++i)
    if (recs[i].h().kind == MLPROF_EV_OFF_CPU &&
        recs[i].h().tid == static_cast<uint32_t>(run.tid)) {
      EXPECT_EQ(recs[i].as<mlprof_ev_off_cpu>().blocked, 0u);
      EXPECT_EQ(recs[i].as<mlprof_ev_off_cpu>().wake_ns, recs[i].as<mlprof_ev_off_cpu>().start_ns);
    }
}

TEST_P(Records, ThreadOutsideASessionIsNotFollowed) {
  auto first = target_->run("nested");
  target_->run("sleep_outside");  // 20 ms asleep, no session open
  auto marker = target_->run("nested");
  auto recs = collect_session(*loader_, target_->pid(), marker.session);
  int end = find(recs, MLPROF_EV_SESSION_END,
                 [&](const Rec& r) { return r.as<mlprof_ev_session>().session == first.session; });
  int begin = find(recs, MLPROF_EV_SESSION_BEGIN, [&](const Rec& r) {
    return r.as<mlprof_ev_session>().session == marker.session;
  });
  ASSERT_GE(end, 0);
  ASSERT_GT(begin, end);
  for (int i = end + 1; i < begin; ++i)
    EXPECT_NE(recs[i].h().kind, MLPROF_EV_OFF_CPU) << "scheduler record between sessions";
}

INSTANTIATE_TEST_SUITE_P(Variants, Records, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(variant_name(p.param));
                         });

// ---- attach and detach ------------------------------------------------------

TEST(BpfLoader, DetachLeavesTheTargetRunningWithItsSemaphoresAtZero) {
  REQUIRE_ROOT();
  auto loader = open_loader();
  ASSERT_TRUE(loader);
  Target target;
  EXPECT_EQ(target.semaphores(), std::vector<unsigned>(8, 0));
  ASSERT_TRUE(loader->attach(target.pid(), kTarget));
  EXPECT_TRUE(loader->attached(target.pid()));
  EXPECT_TRUE(loader->attach(target.pid(), kTarget)) << "attaching twice is a no-op";
  auto sems = target.semaphores();
  EXPECT_TRUE(all_on(sems)) << ::testing::PrintToString(sems);
  EXPECT_EQ(target.span_enter_semaphore_from_proc(), static_cast<int>(sems.at(3)));
  EXPECT_GT(target.span_enter_semaphore_from_proc(), 0);
  auto run = target.run("nested");
  ASSERT_FALSE(collect_session(*loader, target.pid(), run.session).empty());

  loader->detach(target.pid());
  EXPECT_FALSE(loader->attached(target.pid()));
  EXPECT_EQ(target.semaphores(), std::vector<unsigned>(8, 0));
  EXPECT_EQ(target.span_enter_semaphore_from_proc(), 0);
  auto after = target.run("nested");  // still answers
  EXPECT_EQ(after.session, run.session + 1);
  auto recs = collect(
      *loader, [](const std::vector<Rec>&) { return false; }, 300);
  EXPECT_TRUE(recs.empty()) << recs.size() << " records after detach";
  EXPECT_TRUE(target.alive());
  loader->detach(target.pid());  // unknown pid now: a no-op

  // Re-attached, the names are sent again (detach forgot them).
  ASSERT_TRUE(loader->attach(target.pid(), kTarget));
  auto again = target.run("nested");
  recs = collect_session(*loader, target.pid(), again.session);
  EXPECT_GE(find(recs, MLPROF_EV_NAME), 0);
}

TEST(BpfLoader, DestroyingTheLoaderLeavesTheTargetRunning) {
  REQUIRE_ROOT();
  Target target;
  {
    auto loader = open_loader();
    ASSERT_TRUE(loader);
    ASSERT_TRUE(loader->attach(target.pid(), kTarget));
    EXPECT_TRUE(all_on(target.semaphores()));
  }
  EXPECT_EQ(target.semaphores(), std::vector<unsigned>(8, 0));
  EXPECT_EQ(target.run("nested").session, 1u);
  EXPECT_TRUE(target.alive());
}

TEST(BpfLoader, AttachIsPerPid) {
  REQUIRE_ROOT();
  auto loader = open_loader();
  ASSERT_TRUE(loader);
  Target traced, other;  // the same binary
  ASSERT_TRUE(loader->attach(traced.pid(), kTarget));
  EXPECT_EQ(other.semaphores(), std::vector<unsigned>(8, 0));
  EXPECT_EQ(other.span_enter_semaphore_from_proc(), 0);
  other.run("nested");
  other.run("sleep");
  auto run = traced.run("nested");
  auto recs = collect_session(*loader, traced.pid(), run.session);
  for (const Rec& r : recs)
    EXPECT_EQ(r.h().tgid, static_cast<uint32_t>(traced.pid())) << "kind " << r.h().kind;
}

TEST(BpfLoader, AttachErrorsNameTheProbeTheFileAndTheCause) {
  REQUIRE_ROOT();
  auto loader = open_loader();
  ASSERT_TRUE(loader);
  Target target;
  auto missing = loader->attach(target.pid(), "/nonexistent/_core.so");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/nonexistent/_core.so"), std::string::npos)
      << missing.error().message;
  EXPECT_NE(missing.error().errnum, 0);
  // A real ELF without the probes: the target's own libc.
  auto no_probes = loader->attach(target.pid(), "/bin/true");
  ASSERT_FALSE(no_probes);
  EXPECT_NE(no_probes.error().message.find("mlprof:session_begin"), std::string::npos)
      << no_probes.error().message;
  EXPECT_FALSE(loader->attached(target.pid()));
  EXPECT_EQ(target.semaphores(), std::vector<unsigned>(8, 0));
}

// ---- the ring buffer --------------------------------------------------------

TEST(BpfLoader, ATinyRingUnderAStormCountsLostRecords) {
  REQUIRE_ROOT();
  LoaderOptions opts;
  opts.ring_bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));  // room for ~80 span records
  auto loader = open_loader(opts);
  ASSERT_TRUE(loader);
  Target target;
  ASSERT_TRUE(loader->attach(target.pid(), kTarget));
  target.run("storm 20000");  // not polled meanwhile
  auto recs = collect(
      *loader, [](const std::vector<Rec>&) { return false; }, 200);
  auto stats = loader->stats();
  std::printf(
      "[   INFO   ] storm of 40000 span records into a %zu-byte ring: %zu received, %llu lost\n",
      opts.ring_bytes, recs.size(), static_cast<unsigned long long>(stats.lost));
  EXPECT_GT(stats.lost, 0u);
  EXPECT_LT(recs.size(), 40000u);
  EXPECT_EQ(stats.records, recs.size());
  EXPECT_GE(recs.size() + stats.lost, 40000u);
}

TEST(BpfLoader, ALostNameRecordIsSentAgain) {
  REQUIRE_ROOT();
  LoaderOptions opts;
  opts.ring_bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  opts.shed_at = 0;  // "nested" must begin in the full ring, for its NAMEs to be lost
  auto loader = open_loader(opts);
  ASSERT_TRUE(loader);
  Target target;
  ASSERT_TRUE(loader->attach(target.pid(), kTarget));
  target.run("storm 2000");  // fills the ring (nobody reads); names 1 and 7 went first
  const uint64_t lost_before = loader->stats().lost;
  target.run("nested");  // its new names (function 2, label 7) find the ring full
  EXPECT_GT(loader->stats().lost, lost_before);
  collect(
      *loader, [](const std::vector<Rec>&) { return false; }, 200);  // drain

  auto again = target.run("nested");
  auto recs = collect_session(*loader, target.pid(), again.session);
  auto name = [&](uint32_t id, uint32_t is_label) {
    return find(recs, MLPROF_EV_NAME, [&](const Rec& r) {
      return r.as<mlprof_ev_name>().id == id && r.as<mlprof_ev_name>().is_label == is_label;
    });
  };
  EXPECT_GE(name(2, 0), 0) << "function 2's lost NAME was not sent again";
  EXPECT_GE(name(7, 1), 0) << "label 7's lost NAME was not sent again";
  EXPECT_EQ(name(1, 0), -1) << "function 1's NAME went through and must not repeat";
  int enter = find(recs, MLPROF_EV_SPAN_ENTER,
                   [](const Rec& r) { return r.as<mlprof_ev_span>().function == 2; });
  EXPECT_LT(name(2, 0), enter) << "a NAME comes before the span that uses it";
}

// A reader that falls behind: past half the ring unread, sessions are shed
// whole at their begin (counted), so no record is lost and every session
// that was begun arrives complete, none of the shed ones' records with it.
TEST(BpfLoader, AReaderThatFallsBehindGetsFewerSessionsEachWhole) {
  REQUIRE_ROOT();
  LoaderOptions opts;
  opts.ring_bytes = 16 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto loader = open_loader(opts);
  ASSERT_TRUE(loader);
  Target target;
  ASSERT_TRUE(loader->attach(target.pid(), kTarget));
  const uint64_t n = 2000;
  target.run("sessions " + std::to_string(n));  // not polled meanwhile
  auto recs = collect(
      *loader, [](const std::vector<Rec>&) { return false; }, 200);
  const auto stats = loader->stats();
  std::set<uint64_t> begun, ended, with_spans;
  for (const Rec& r : recs) {
    if (r.h().kind == MLPROF_EV_SESSION_BEGIN) begun.insert(r.as<mlprof_ev_session>().session);
    if (r.h().kind == MLPROF_EV_SESSION_END) ended.insert(r.as<mlprof_ev_session>().session);
    if (r.h().kind == MLPROF_EV_SPAN_ENTER) with_spans.insert(r.as<mlprof_ev_span>().session);
  }
  std::printf(
      "[   INFO   ] %llu sessions into a %zu-byte ring, unread: %zu captured, %llu shed, %llu "
      "lost\n",
      static_cast<unsigned long long>(n), opts.ring_bytes, begun.size(),
      static_cast<unsigned long long>(stats.shed), static_cast<unsigned long long>(stats.lost));
  EXPECT_EQ(stats.lost, 0u);
  EXPECT_GT(stats.shed, 0u);
  EXPECT_GT(begun.size(), 0u);
  EXPECT_EQ(begun.size() + stats.shed, n);
  EXPECT_EQ(ended, begun);       // each captured session whole
  EXPECT_EQ(with_spans, begun);  // and no record of a shed one
  // Once read, the ring takes sessions again.
  auto again = target.run("nested");
  auto more = collect_session(*loader, target.pid(), again.session);
  EXPECT_GE(find(more, MLPROF_EV_SESSION_BEGIN,
                 [&](const Rec& r) { return r.as<mlprof_ev_session>().session == again.session; }),
            0);
  EXPECT_EQ(loader->stats().shed, stats.shed);
}

TEST(BpfLoader, AStormIntoADefaultRingLosesNothing) {
  REQUIRE_ROOT();
  auto loader = open_loader();
  ASSERT_TRUE(loader);
  Target target;
  ASSERT_TRUE(loader->attach(target.pid(), kTarget));
  const long n = 200000;
  target.send("run storm " + std::to_string(n));
  size_t count = 0;
  bool ended = false;
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::seconds(30);
  while (!ended && std::chrono::steady_clock::now() < deadline)
    loader->poll(50, [&](const void* data, size_t) {
      ++count;
      ended = ended || static_cast<const mlprof_ev_header*>(data)->kind == MLPROF_EV_SESSION_END;
    });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  target.read_line();
  std::printf("[   INFO   ] storm: %zu records in %.3f s (%.0f records/s end to end), lost %llu\n",
              count, secs, count / secs, static_cast<unsigned long long>(loader->stats().lost));
  EXPECT_TRUE(ended);
  EXPECT_EQ(loader->stats().lost, 0u);
  EXPECT_GE(count, static_cast<size_t>(2 * n + 4));
}

// ---- the kernel-side cgroup filter ------------------------------------------

// A cgroup v2 directory made for the test, removed after (its processes gone).
class TempCgroup {
 public:
  explicit TempCgroup(const std::string& name) {
    std::ifstream mounts("/proc/self/mounts");
    std::string dev, dir, type, rest;
    while (mounts >> dev >> dir >> type && std::getline(mounts, rest))
      if (type == "cgroup2") root_ = dir;
    if (root_.empty()) return;
    path_ = root_ + "/" + name;
    if (mkdir(path_.c_str(), 0755) != 0 && errno != EEXIST) path_.clear();
  }
  ~TempCgroup() {
    if (!path_.empty()) rmdir(path_.c_str());
  }
  bool ok() const { return !path_.empty(); }
  // The id bpf_get_current_cgroup_id() reports: the directory's inode.
  uint64_t id() const {
    struct stat st {};
    return stat(path_.c_str(), &st) == 0 ? st.st_ino : 0;
  }
  bool add(pid_t pid) const {
    std::ofstream procs(path_ + "/cgroup.procs");
    procs << pid << std::endl;
    return static_cast<bool>(procs);
  }
  const std::string& path() const { return path_; }

 private:
  std::string root_, path_;
};

TEST(BpfLoader, CgroupFilterKeepsOnlyProcessesInTheCgroup) {
  REQUIRE_ROOT();
  TempCgroup cg("mlprof-test-" + std::to_string(getpid()));
  if (!cg.ok()) {
    if (bpf_required()) FAIL() << "no cgroup v2 mount to create a test cgroup in";
    GTEST_SKIP() << "no cgroup v2 mount";
  }
  for (int level : {1, -1}) {  // level given, and searched in the kernel
    SCOPED_TRACE("cgroup_level " + std::to_string(level));
    LoaderOptions opts;
    opts.cgroup_id = cg.id();
    opts.cgroup_level = level;
    auto loader = open_loader(opts);
    ASSERT_TRUE(loader);
    Target inside, outside;
    ASSERT_TRUE(cg.add(inside.pid())) << cg.path();
    ASSERT_TRUE(loader->attach(inside.pid(), kTarget));
    ASSERT_TRUE(loader->attach(outside.pid(), kTarget));
    outside.run("nested");
    auto run = inside.run("nested");
    auto recs = collect_session(*loader, inside.pid(), run.session);
    EXPECT_GE(find(recs, MLPROF_EV_SESSION_BEGIN), 0);
    for (const Rec& r : recs) EXPECT_EQ(r.h().tgid, static_cast<uint32_t>(inside.pid()));
  }
}

// ---- privileges ---------------------------------------------------------------

// Runs fn in a forked child whose capabilities are cut to `keep` (uid stays
// 0); returns what fn wrote. A real fault: the kernel refuses for real.
std::string in_child_with_caps(const std::vector<int>& keep,
                               const std::function<std::string()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    for (int c : keep) {
      data[c / 32].effective |= 1u << (c % 32);
      data[c / 32].permitted |= 1u << (c % 32);
    }
    std::string out;
    if (syscall(SYS_capset, &hdr, data) != 0)
      out = std::string("capset failed: ") + std::strerror(errno);
    else
      out = fn();
    if (write(fds[1], out.data(), out.size()) < 0) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

// Loads, attaches, runs the sleep script and returns "ok <USDT records>
// <off_cpu seen>" or the first error (in the capability-cut child). Off-CPU
// records are not counted: a loaded machine deschedules the target more than
// once (a CI run saw two).
std::string load_attach_run(Target& target, const std::string& binary) {
  auto r = BpfLoader::open({});
  if (!r) return r.error().message;
  auto a = r.value()->attach(target.pid(), binary);
  if (!a) return a.error().message;
  auto run = target.run("sleep");
  auto recs = collect_session(*r.value(), target.pid(), run.session);
  size_t usdt = 0;
  for (const Rec& rec : recs) usdt += rec.h().kind != MLPROF_EV_OFF_CPU;
  return "ok " + std::to_string(usdt) + " " + std::to_string(find(recs, MLPROF_EV_OFF_CPU) >= 0);
}

TEST(BpfLoader, CapBpfAndCapPerfmonAreEnough) {
  REQUIRE_ROOT();
  Target target;
  std::string out =
      in_child_with_caps({CAP_BPF, CAP_PERFMON}, [&] { return load_attach_run(target, kTarget); });
  EXPECT_EQ(out, "ok 9 1");  // the sleep script: 9 USDT records, and the sleep's OFF_CPU
}

TEST(BpfLoader, ProcRootPathsAlsoNeedCapSysPtrace) {
  REQUIRE_ROOT();
  Target target;
  const std::string via_root = "/proc/" + std::to_string(target.pid()) + "/root" + kTarget;
  std::string out =
      in_child_with_caps({CAP_BPF, CAP_PERFMON}, [&] { return load_attach_run(target, via_root); });
  EXPECT_NE(out.find("CAP_SYS_PTRACE"), std::string::npos) << out;
  out = in_child_with_caps({CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE},
                           [&] { return load_attach_run(target, via_root); });
  EXPECT_EQ(out, "ok 9 1");
}

TEST(BpfLoader, WithoutCapabilitiesTheErrorSaysWhatIsNeeded) {
  REQUIRE_ROOT();
  std::string out = in_child_with_caps({}, [] {
    auto r = BpfLoader::open({});
    return r ? std::string("opened") : r.error().message;
  });
  EXPECT_NE(out, "opened");
  EXPECT_NE(out.find("CAP_BPF"), std::string::npos) << out;
  EXPECT_NE(out.find("CAP_PERFMON"), std::string::npos) << out;
}

}  // namespace
