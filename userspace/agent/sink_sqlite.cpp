#include "agent/sink_sqlite.h"

#include "agent/store_item.h"
#include "agent/store_sqlite.h"

namespace mlprof::agent {

namespace {

class SqliteSink final : public Sink {
 public:
  SqliteSink(std::string target, std::unique_ptr<SqliteStore> store)
      : target_(std::move(target)), store_(std::move(store)) {}

  Delivery deliver(const SpoolItem& item) override {
    auto it = store_item(item);
    if (!it) return {DeliveryStatus::kReject, it.error().message};
    const Profile& profile = it.value().profile;
    const SourceInfo& info = it.value().info;
    if (!store_) {
      auto opened = SqliteStore::open(target_);
      if (!opened)
        return {DeliveryStatus::kRetry, "cannot open the store: " + opened.error().message};
      store_ = std::move(opened.value());
    }
    auto added = store_->add_once(profile, info, kItemKeyLabel);
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
  std::string identity() const override {
    return "sqlite:" + absolute_path(sqlite_store_path(target_));
  }

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
