#include "agent/store_writer.h"

#include <utility>

#include "agent/clock.h"

namespace mlprof::agent {

StoreWriter::StoreWriter(SqliteStore& store, SourceInfo info, size_t capacity)
    : store_(store), info_(std::move(info)), capacity_(capacity == 0 ? 1 : capacity) {}

StoreWriter::~StoreWriter() { finish(); }

bool StoreWriter::submit(std::shared_ptr<const Profile> session) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ >= capacity_) {
    ++stats_.dropped;
    return false;
  }
  if (!thread_.joinable()) {
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }
  queue_.push_back(std::move(session));
  ++pending_;
  wake_.notify_one();
  return true;
}

void StoreWriter::add(const Profile& profile) {
  finish();  // the thread is gone: the store is this thread's alone
  add_locked_out(profile);
}

void StoreWriter::finish() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_ == 0; });
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StoreWriter::run() {
  for (;;) {
    std::shared_ptr<const Profile> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_, and nothing left
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    add_locked_out(*next);
    next.reset();
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) idle_.notify_all();
  }
}

void StoreWriter::add_locked_out(const Profile& profile) {
  SourceInfo info = info_;
  info.added_unix_ns = unix_now_ns();
  auto added = store_.add(profile, info);  // one transaction; waits on a locked store
  std::lock_guard<std::mutex> lock(mu_);
  if (!added) {
    if (stats_.failed++ == 0) stats_.first_error = added.error().message;
    return;
  }
  if (stats_.added++ == 0) stats_.first_source = added.value();
  stats_.last_source = added.value();
}

StoreWriterStats StoreWriter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::optional<std::string> StoreWriter::take_first_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.failed == 0 || failure_said_) return std::nullopt;
  failure_said_ = true;
  return stats_.first_error;
}

}  // namespace mlprof::agent
