#include "agent/sink_postgres.h"

#include "agent/store_item.h"
#include "agent/store_postgres.h"

namespace mlprof::agent {

namespace {

class PostgresSink final : public Sink {
 public:
  PostgresSink(std::string url, std::unique_ptr<PostgresStore> store)
      : url_(std::move(url)), store_(std::move(store)) {}

  Delivery deliver(const SpoolItem& item) override {
    auto it = store_item(item);
    if (!it) return {DeliveryStatus::kReject, it.error().message};
    const Profile& profile = it.value().profile;
    const SourceInfo& info = it.value().info;
    if (!store_ || !store_->connected()) {
      store_.reset();
      auto opened = PostgresStore::open(url_);
      // Down, refused, another version since: all kept for a later try.
      if (!opened) return {DeliveryStatus::kRetry, opened.error().message};
      store_ = std::move(opened.value());
    }
    auto added = store_->add_once(profile, info, kItemKeyLabel);
    if (!added && !store_->connected()) {
      // The connection was lost while idle (a server restart, an idle
      // timeout): one new connection at once rather than a back-off.
      store_.reset();
      auto reopened = PostgresStore::open(url_);
      if (!reopened) return {DeliveryStatus::kRetry, reopened.error().message};
      store_ = std::move(reopened.value());
      added = store_->add_once(profile, info, kItemKeyLabel);
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
  std::string identity() const override { return postgres_identity(url_); }

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
    return Error{opened.error().kind, 0,
                 postgres_url_for_display(url) + ": " + opened.error().message};
  }
  return std::unique_ptr<Sink>(std::make_unique<PostgresSink>(url, std::move(store)));
}

}  // namespace mlprof::agent
