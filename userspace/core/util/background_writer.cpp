#include "util/background_writer.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "util/file_io.h"

namespace mlprof {
namespace {

struct Job {
  std::shared_ptr<const Profile> profile;
  std::string path;
  ExportFormat format;
};

// The writer takes what is queued, at most this many, and commits them as
// one AtomicWriteBatch. A batch holds one open file per profile until its
// commit: 16 at most, so the writer never takes many descriptors from the
// process it serves.
constexpr size_t kMaxBatch = 16;

// A submit does not wake the writer while profiles keep coming: a wake-up is
// a futex call plus an interrupt to the CPU the writer sleeps on, which cost
// the request thread more than the write did (bench/RESULTS.md). The writer
// polls the queue every kPollPeriod instead, and sleeps until woken only
// after kIdlePolls polls found nothing. A full batch or a flush wakes it at
// once. The period bounds what a kill without a drain loses; SIGTERM drains
// (the extension's handler: uvicorn re-raises SIGTERM, so atexit never runs).
constexpr std::chrono::milliseconds kPollPeriod{50};
constexpr int kIdlePolls = 20;

struct Writer {
  std::mutex mu;
  std::condition_variable work;  // a job arrived
  std::condition_variable idle;  // the queue drained
  std::deque<Job> jobs;
  WriterStats stats;  // stats.queued: waiting plus those being written
  // Directories written to since the last flush: flush_background_writes
  // syncs their filesystems (the batches themselves defer durability).
  std::vector<std::string> unsynced;
  bool polling = false;  // the writer looks at the queue by itself: a submit need not wake it
  int flushers = 0;      // threads in flush_background_writes: the writer must not wait for a poll
};

// Writes one gathered batch; returns each job's error message ("" if written)
// and appends the directory of each file written to `dirs`.
std::vector<std::string> write_batch(std::deque<Job>& jobs, std::vector<std::string>* dirs) {
  std::vector<std::string> errors(jobs.size());
  std::vector<size_t> index;  // job -> batch entry, or npos
  std::vector<std::filesystem::path> parents;
  // No flush per batch: a profile is whole under its name at once, and
  // durable at the filesystem's next commit or at flush (file_io.h).
  AtomicWriteBatch batch(Durability::kDeferred);
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    parents.push_back(std::filesystem::path(job.path).parent_path());
    // A batch usually shares one directory: create it once.
    if (!parents.back().empty() && (i == 0 || parents.back() != parents[i - 1])) {
      std::error_code ec;
      std::filesystem::create_directories(parents.back(), ec);  // add() reports a failure
    }
    try {
      const std::string bytes = export_profile(*job.profile, job.format);
      job.profile.reset();  // freed here, not under the lock
      index.push_back(batch.add(job.path, bytes));
    } catch (const std::exception& e) {  // out of memory: this profile fails, the thread goes on
      errors[i] = std::string("cannot export '") + job.path + "': " + e.what();
      index.push_back(static_cast<size_t>(-1));
    }
  }
  std::vector<Result<Ok>> done = batch.commit();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (index[i] == static_cast<size_t>(-1)) continue;
    if (done[index[i]].ok()) {
      dirs->push_back(parents[i].empty() ? "." : parents[i].string());
    } else {
      errors[i] = done[index[i]].error().message;
    }
  }
  return errors;
}

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
  int empty_polls = 0;
  for (;;) {
    if (w->polling) {
      w->work.wait_for(lock, kPollPeriod, [w] {
        return (w->flushers > 0 && !w->jobs.empty()) || w->jobs.size() >= kMaxBatch;
      });
      if (w->jobs.empty()) {
        if (++empty_polls >= kIdlePolls) w->polling = false;
        continue;
      }
    } else {
      w->work.wait(lock, [w] { return !w->jobs.empty(); });
      w->polling = true;
    }
    empty_polls = 0;
    const size_t n = std::min(w->jobs.size(), kMaxBatch);
    std::deque<Job> jobs(std::make_move_iterator(w->jobs.begin()),
                         std::make_move_iterator(w->jobs.begin() + n));
    w->jobs.erase(w->jobs.begin(), w->jobs.begin() + n);
    lock.unlock();
    std::vector<std::string> dirs;
    const std::vector<std::string> errors = write_batch(jobs, &dirs);
    jobs.clear();  // the profiles not yet freed, outside the lock
    lock.lock();
    for (std::string& dir : dirs) {
      if (std::find(w->unsynced.begin(), w->unsynced.end(), dir) == w->unsynced.end()) {
        w->unsynced.push_back(std::move(dir));
      }
    }
    ++w->stats.batches;
    for (const std::string& error : errors) {
      --w->stats.queued;
      if (error.empty()) {
        ++w->stats.written;
      } else {
        ++w->stats.failed;
        w->stats.last_error = error;
      }
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

bool write_in_background(std::shared_ptr<const Profile> profile, std::string path,
                         ExportFormat format, size_t capacity) {
  Writer* w = writer();
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->stats.queued >= capacity) {
      ++w->stats.dropped;
      return false;
    }
    w->jobs.push_back(Job{std::move(profile), std::move(path), format});
    ++w->stats.submitted;
    ++w->stats.queued;
    wake = !w->polling || w->jobs.size() >= kMaxBatch;
  }
  if (wake) w->work.notify_one();
  return true;
}

bool flush_background_writes(double timeout_s) {
  Writer* w = started();
  if (!w) return true;
  std::unique_lock<std::mutex> lock(w->mu);
  auto drained = [w] { return w->stats.queued == 0; };
  ++w->flushers;
  w->work.notify_one();  // not a poll period later
  bool done = true;
  if (timeout_s < 0) {
    w->idle.wait(lock, drained);
  } else {
    done = w->idle.wait_for(lock, std::chrono::duration<double>(timeout_s), drained);
  }
  --w->flushers;
  if (!done) return false;
  // Durable now: one syncfs per filesystem written to (cheaper than an fsync
  // per file, and flush is rare: shutdown, a test, the user's own call).
  std::vector<std::string> dirs;
  dirs.swap(w->unsynced);
  lock.unlock();
  std::vector<std::string> failed;
  for (const std::string& dir : dirs) {
    if (const int err = sync_filesystem_of(dir)) {
      failed.push_back("cannot flush the filesystem of '" + dir + "': " + std::strerror(err));
    }
  }
  if (!failed.empty()) {
    lock.lock();
    w->stats.sync_failures += failed.size();
    w->stats.last_error = failed.back();
  }
  return true;
}

uint64_t background_writer_failures() {
  Writer* w = started();
  if (!w) return 0;
  std::lock_guard<std::mutex> lock(w->mu);
  return w->stats.failed + w->stats.sync_failures;
}

WriterStats background_writer_stats() {
  Writer* w = started();
  if (!w) return WriterStats{};
  std::lock_guard<std::mutex> lock(w->mu);
  return w->stats;
}

}  // namespace mlprof
