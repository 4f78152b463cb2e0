#include "agent/sink_sqlite.h"

#include <time.h>

#include "agent/store_sqlite.h"
#include "core/file_io.h"
#include "core/json_read.h"

namespace mlprof::agent {

namespace {

int64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class SqliteSink final : public Sink {
 public:
  SqliteSink(std::string target, std::unique_ptr<SqliteStore> store)
      : target_(std::move(target)), store_(std::move(store)) {}

  Delivery deliver(const SpoolItem& item) override {
    auto data = read_file(item.path);
    if (!data) return {DeliveryStatus::kReject, "the spooled document cannot be read: " + data.error().message};
    auto profile = read_json_document(data.value());
    if (!profile) return {DeliveryStatus::kReject, "the spooled document is not a profile: " + profile.error().message};
    if (!store_) {
      auto opened = SqliteStore::open(target_);
      if (!opened) return {DeliveryStatus::kRetry, "cannot open the store: " + opened.error().message};
      store_ = std::move(opened.value());
    }
    SourceInfo info;
    info.type = "ebpf";
    info.labels = item.labels;
    info.labels[kItemKeyLabel] = item.key;
    info.added_unix_ns = unix_now_ns();
    auto added = store_->add_once(profile.value(), info, kItemKeyLabel);
    if (!added) {
      // A read-only or full file, a lock held past the busy timeout: the
      // connection is opened afresh for the next try.
      store_.reset();
      return {DeliveryStatus::kRetry, added.error().message};
    }
    const std::string id = "source " + std::to_string(added.value().source_id);
    return {DeliveryStatus::kDelivered, added.value().added ? id : id + " (already there)"};
  }

  std::string describe() const override { return target_; }

 private:
  std::string target_;
  std::unique_ptr<SqliteStore> store_;  // null: reopened at the next delivery
};

}  // namespace

Result<std::unique_ptr<Sink>> open_sqlite_sink(const std::string& target) {
  auto opened = SqliteStore::open(target);
  std::unique_ptr<SqliteStore> store;
  if (opened) {
    store = std::move(opened.value());
  } else if (opened.error().kind != Error::Kind::kIo) {
    return opened.error();  // another version, not a store: no retry makes it one
  }
  return std::unique_ptr<Sink>(std::make_unique<SqliteSink>(target, std::move(store)));
}

}  // namespace mlprof::agent
