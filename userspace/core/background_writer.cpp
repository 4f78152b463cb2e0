#include "core/background_writer.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

namespace mlprof {
namespace {

struct Job {
  std::shared_ptr<const Profile> profile;
  std::string path;
  ExportFormat format;
};

struct Writer {
  std::mutex mu;
  std::condition_variable work;  // a job arrived
  std::condition_variable idle;  // the queue drained
  std::deque<Job> jobs;
  WriterStats stats;  // stats.queued: waiting plus the one being written
};

// Never destroyed: the detached thread may outlive static destruction at exit.
Writer* g_writer = nullptr;
pid_t g_owner = 0;
std::mutex g_start_mu;

void run(Writer* w) {
  pthread_setname_np(pthread_self(), "mlprof-writer");
  // Below every request thread: SCHED_IDLE, so any waking thread of normal
  // policy (a request, the load balancer's proxy) preempts it at once, which
  // nice 19 alone does not promise. Unprivileged is fine: a thread may always
  // lower its own priority. Nice 19 as well, for kernels without SCHED_IDLE.
  // It never holds a lock a request thread waits on while it writes, so no
  // priority inversion.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  sched_param idle{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  std::unique_lock<std::mutex> lock(w->mu);
  for (;;) {
    w->work.wait(lock, [w] { return !w->jobs.empty(); });
    Job job = std::move(w->jobs.front());
    w->jobs.pop_front();
    lock.unlock();
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(job.path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // save reports a failure
    Result<Ok> done = save_profile(*job.profile, job.path, job.format);
    job.profile.reset();  // freed here, not under the lock
    lock.lock();
    --w->stats.queued;
    if (done.ok()) {
      ++w->stats.written;
    } else {
      ++w->stats.failed;
      w->stats.last_error = done.error().message;
    }
    if (w->stats.queued == 0) w->idle.notify_all();
  }
}

Writer* writer() {
  std::lock_guard<std::mutex> guard(g_start_mu);
  const pid_t pid = getpid();
  if (!g_writer || g_owner != pid) {
    // First use, or a forked child: the parent's thread does not exist here
    // and its mutexes may be held forever; start afresh (the old one leaks).
    g_writer = new Writer();
    g_owner = pid;
    std::thread(run, g_writer).detach();
  }
  return g_writer;
}

// The writer of this process if it was started, else null.
Writer* started() {
  std::lock_guard<std::mutex> guard(g_start_mu);
  return g_writer && g_owner == getpid() ? g_writer : nullptr;
}

}  // namespace

bool write_in_background(std::shared_ptr<const Profile> profile, std::string path, ExportFormat format,
                         size_t capacity) {
  Writer* w = writer();
  {
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->stats.queued >= capacity) {
      ++w->stats.dropped;
      return false;
    }
    w->jobs.push_back(Job{std::move(profile), std::move(path), format});
    ++w->stats.submitted;
    ++w->stats.queued;
  }
  w->work.notify_one();
  return true;
}

bool flush_background_writes(double timeout_s) {
  Writer* w = started();
  if (!w) return true;
  std::unique_lock<std::mutex> lock(w->mu);
  auto drained = [w] { return w->stats.queued == 0; };
  if (timeout_s < 0) {
    w->idle.wait(lock, drained);
    return true;
  }
  return w->idle.wait_for(lock, std::chrono::duration<double>(timeout_s), drained);
}

WriterStats background_writer_stats() {
  Writer* w = started();
  if (!w) return WriterStats{};
  std::lock_guard<std::mutex> lock(w->mu);
  return w->stats;
}

}  // namespace mlprof
