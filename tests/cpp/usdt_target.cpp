// usdt_target: a tiny process with the mlprof USDT probes (bpf/mlprof_usdt.h)
// that runs scripted sessions on command, for test_bpf_loader.cpp. It fires
// the probes the way the extension does (only while a tracer holds the
// semaphore), so records reaching a test also prove the semaphores work.
//
// Protocol, one line each way:
//   start             -> "ready pid=P tid=T sem=0xADDR" (sem: &mlprof_span_enter_semaphore)
//   "run SCENARIO [N]"-> "done SCENARIO session=S tid=T child=C"
//   "sem"             -> "sem V1 ... V8" (the 8 semaphores, in contract order)
//   "quit" or EOF     -> exits 0
// Scenarios (each one session, except sleep_outside):
//   nested        spans 2 deep with a label, I/O summaries, a suspend/resume
//   sleep         a span that sleeps 20 ms
//   thread        a span that starts a thread (its own lane and span) and joins it
//   cpu           a span that spins on the CPU for 30 ms
//   storm N       N spans (enter + exit) under the root, as fast as possible
//   sleep_outside a 20 ms sleep outside any session

#define MLPROF_USDT_DEFINE_SEMAPHORES
#include "mlprof_usdt.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

uint64_t g_session = 0;  // serial, as the extension numbers sessions

pid_t current_tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
  }
}

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

struct Function {
  unsigned id;
  const char* name;
  const char* module;
  const char* file;
  long line;
};
constexpr Function kPredict{1, "predict", "model", "model.py", 10};
constexpr Function kTransform{2, "transform", "model", "model.py", 20};
constexpr Function kSleep{3, "sleep", "time", "", 0};
constexpr Function kSpawn{4, "spawn", "model", "model.py", 30};
constexpr Function kWork{5, "work", "model", "model.py", 40};
constexpr Function kBusy{6, "busy", "model", "model.py", 50};
constexpr Function kTick{7, "tick", "model", "model.py", 60};
constexpr unsigned kStepLabel = 7;

// The probe sites: a load and a branch unless a tracer is attached.
void session_begin(uint64_t session, long long ceiling, uint64_t flags) {
  if (MLPROF_USDT_ENABLED(session_begin)) MLPROF_USDT_SESSION_BEGIN(session, ceiling, flags, 0, 0);
}
void session_end(uint64_t session, uint64_t dropped) {
  if (MLPROF_USDT_ENABLED(session_end)) MLPROF_USDT_SESSION_END(session, dropped);
}

// One lane of a session, in the thread that runs it.
class Lane {
 public:
  Lane(uint64_t session, unsigned lane, unsigned parent_lane, unsigned parent_call,
       const char* thread_name)
      : session_(session), lane_(lane) {
    if (MLPROF_USDT_ENABLED(lane_begin))
      MLPROF_USDT_LANE_BEGIN(session_, lane_, parent_lane, parent_call, 0u,
                             static_cast<unsigned long long>(pthread_self()), thread_name);
  }
  unsigned enter(const Function& f, unsigned depth, unsigned flags = 0, unsigned label_id = 0,
                 const char* label = nullptr) {
    // The contract's index is the call's position among all the lane's
    // events: a label is an event before its call; exits, suspends and
    // resumes are events too.
    if (label_id) ++next_;
    unsigned index = next_++;
    if (MLPROF_USDT_ENABLED(span_enter))
      MLPROF_USDT_SPAN_ENTER(session_, lane_, index, f.id, label_id, depth, flags, f.name, f.module,
                             f.file, f.line, label);
    return index;
  }
  void exit(unsigned index, unsigned flags = 0) {
    ++next_;
    if (MLPROF_USDT_ENABLED(span_exit)) MLPROF_USDT_SPAN_EXIT(session_, lane_, index, flags);
  }
  void suspend(unsigned index) {
    ++next_;
    if (MLPROF_USDT_ENABLED(span_suspend)) MLPROF_USDT_SPAN_SUSPEND(session_, lane_, index);
  }
  void resume(unsigned index) {
    ++next_;
    if (MLPROF_USDT_ENABLED(span_resume)) MLPROF_USDT_SPAN_RESUME(session_, lane_, index);
  }
  void io(unsigned index, unsigned role, const char* name, const char* summary) {
    if (MLPROF_USDT_ENABLED(span_io))
      MLPROF_USDT_SPAN_IO(session_, lane_, index, role, name, summary);
  }

 private:
  uint64_t session_;
  unsigned lane_;
  unsigned next_ = 0;
};

struct Outcome {
  uint64_t session = 0;
  pid_t child = 0;
};

Outcome run_nested() {
  Outcome o{++g_session};
  session_begin(o.session, 3, MLPROF_SESSION_CAPTURE_IO);
  Lane lane(o.session, 0, MLPROF_NO_PARENT_LANE, 0, "MainThread");
  unsigned root = lane.enter(kPredict, 0);
  lane.io(root, MLPROF_IO_ARGUMENT, "X", "DataFrame (2, 3) float64");
  unsigned child = lane.enter(kTransform, 1, MLPROF_SPAN_BLOCK, kStepLabel, "step");
  lane.suspend(child);
  lane.resume(child);
  lane.exit(child);
  lane.exit(root, MLPROF_SPAN_CHILDREN_DROPPED);
  lane.io(root, MLPROF_IO_RETURN, "", "ndarray (2,)");
  session_end(o.session, 5);
  return o;
}

Outcome run_sleep() {
  Outcome o{++g_session};
  session_begin(o.session, -1, 0);
  Lane lane(o.session, 0, MLPROF_NO_PARENT_LANE, 0, "MainThread");
  unsigned root = lane.enter(kPredict, 0);
  unsigned s = lane.enter(kSleep, 1);
  sleep_ms(20);
  lane.exit(s);
  lane.exit(root);
  session_end(o.session, 0);
  return o;
}

Outcome run_thread() {
  Outcome o{++g_session};
  session_begin(o.session, -1, MLPROF_SESSION_ALL_THREADS);
  Lane lane(o.session, 0, MLPROF_NO_PARENT_LANE, 0, "MainThread");
  unsigned root = lane.enter(kPredict, 0);
  unsigned spawn = lane.enter(kSpawn, 1);
  pid_t child_tid = 0;
  std::thread worker([&] {
    child_tid = current_tid();
    pthread_setname_np(pthread_self(), "worker");
    Lane wl(o.session, 1, 0, spawn, "worker");
    unsigned w = wl.enter(kWork, 0);
    sleep_ms(5);
    wl.exit(w);
  });
  worker.join();  // blocks until the worker exits: its exit wakes this thread
  lane.exit(spawn);
  lane.exit(root);
  session_end(o.session, 0);
  o.child = child_tid;
  return o;
}

Outcome run_cpu() {
  Outcome o{++g_session};
  session_begin(o.session, -1, 0);
  Lane lane(o.session, 0, MLPROF_NO_PARENT_LANE, 0, "MainThread");
  unsigned root = lane.enter(kPredict, 0);
  unsigned b = lane.enter(kBusy, 1);
  volatile uint64_t sink = 0;
  const uint64_t until = now_ns() + 30000000ull;
  while (now_ns() < until) sink = sink + 1;
  lane.exit(b);
  lane.exit(root);
  session_end(o.session, 0);
  return o;
}

Outcome run_storm(long n) {
  Outcome o{++g_session};
  session_begin(o.session, -1, 0);
  Lane lane(o.session, 0, MLPROF_NO_PARENT_LANE, 0, "MainThread");
  unsigned root = lane.enter(kPredict, 0);
  for (long i = 0; i < n; ++i) lane.exit(lane.enter(kTick, 1));
  lane.exit(root);
  session_end(o.session, 0);
  return o;
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("ready pid=%d tid=%d sem=%p\n", getpid(), current_tid(),
              static_cast<const void*>(const_cast<unsigned short*>(&mlprof_span_enter_semaphore)));
  char line[256];
  while (std::fgets(line, sizeof line, stdin)) {
    line[std::strcspn(line, "\r\n")] = '\0';
    char scenario[64] = "";
    long n = 0;
    if (std::strcmp(line, "quit") == 0) break;
    if (std::strcmp(line, "sem") == 0) {
      std::printf("sem %u %u %u %u %u %u %u %u\n", mlprof_session_begin_semaphore,
                  mlprof_session_end_semaphore, mlprof_lane_begin_semaphore,
                  mlprof_span_enter_semaphore, mlprof_span_exit_semaphore,
                  mlprof_span_suspend_semaphore, mlprof_span_resume_semaphore,
                  mlprof_span_io_semaphore);
      continue;
    }
    if (std::sscanf(line, "run %63s %ld", scenario, &n) < 1) {
      std::printf("error unknown command '%s'\n", line);
      continue;
    }
    const std::string s = scenario;
    Outcome o;
    if (s == "nested") {
      o = run_nested();
    } else if (s == "sleep") {
      o = run_sleep();
    } else if (s == "thread") {
      o = run_thread();
    } else if (s == "cpu") {
      o = run_cpu();
    } else if (s == "storm") {
      o = run_storm(n > 0 ? n : 1000);
    } else if (s == "sessions") {  // n nested sessions back to back; the last one's outcome
      for (long i = 0; i < (n > 0 ? n : 1); ++i) o = run_nested();
    } else if (s == "sleep_outside") {
      sleep_ms(20);
    } else {
      std::printf("error unknown scenario '%s'\n", scenario);
      continue;
    }
    std::printf("done %s session=%llu tid=%d child=%d\n", scenario,
                static_cast<unsigned long long>(o.session), current_tid(), o.child);
  }
  return 0;
}
