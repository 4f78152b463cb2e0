#include "agent/sink_postgres.h"

#include <time.h>

#include "agent/store_postgres.h"
#include "core/file_io.h"
#include "core/json_read.h"

namespace mlprof::agent {

namespace {

int64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class PostgresSink final : public Sink {
 public:
  PostgresSink(std::string url, std::unique_ptr<PostgresStore> store)
      : url_(std::move(url)), store_(std::move(store)) {}

  Delivery deliver(const SpoolItem& item) override {
    auto data = read_file(item.path);
    if (!data) return {DeliveryStatus::kReject, "the spooled document cannot be read: " + data.error().message};
    auto profile = read_json_document(data.value());
    if (!profile) return {DeliveryStatus::kReject, "the spooled document is not a profile: " + profile.error().message};
    if (!store_ || !store_->connected()) {
      store_.reset();
      auto opened = PostgresStore::open(url_);
      // Down, refused, another version since: all kept for a later try.
      if (!opened) return {DeliveryStatus::kRetry, opened.error().message};
      store_ = std::move(opened.value());
    }
    SourceInfo info;
    info.type = "ebpf";
    info.labels = item.labels;
    info.labels[kItemKeyLabel] = item.key;
    info.added_unix_ns = unix_now_ns();
    auto added = store_->add_once(profile.value(), info, kItemKeyLabel);
    if (!added && !store_->connected()) {
      // The connection was lost while idle (a server restart, an idle
      // timeout): one new connection at once rather than a back-off.
      store_.reset();
      auto reopened = PostgresStore::open(url_);
      if (!reopened) return {DeliveryStatus::kRetry, reopened.error().message};
      store_ = std::move(reopened.value());
      added = store_->add_once(profile.value(), info, kItemKeyLabel);
    }
    if (!added) {
      // The connection lost mid-add, a server error: rolled back, retried on
      // a new connection.
      store_.reset();
      return {DeliveryStatus::kRetry, added.error().message};
    }
    const std::string id = "source " + std::to_string(added.value().source_id);
    return {DeliveryStatus::kDelivered, added.value().added ? id : id + " (already there)"};
  }

  std::string describe() const override { return postgres_url_for_display(url_); }

 private:
  std::string url_;
  std::unique_ptr<PostgresStore> store_;  // null: connected at the next delivery
};

}  // namespace

Result<std::unique_ptr<Sink>> open_postgres_sink(const std::string& url) {
  auto opened = PostgresStore::open(url);
  std::unique_ptr<PostgresStore> store;
  if (opened) {
    store = std::move(opened.value());
  } else if (opened.error().kind != Error::Kind::kIo) {
    // Not a URL, another version, not a store: no retry makes it one.
    return Error{opened.error().kind, 0, postgres_url_for_display(url) + ": " + opened.error().message};
  }
  return std::unique_ptr<Sink>(std::make_unique<PostgresSink>(url, std::move(store)));
}

}  // namespace mlprof::agent
