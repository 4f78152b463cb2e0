// store_writer.cpp: --stream's adds on their own thread, against a real
// SQLite file that another connection holds locked.
#include "agent/store_writer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "agent_session.h"
#include "temp_dir.h"

namespace mlprof::agent {
namespace {

using test::agent_session;
constexpr int64_t kMs = test::kMs;

std::unique_ptr<SqliteStore> open_ok(const std::string& target) {
  auto r = SqliteStore::open(target);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r.value()) : nullptr;
}

SourceInfo labelled(const std::string& model) {
  SourceInfo info;
  info.type = "ebpf";
  info.labels = {{"model", model}};
  return info;
}

std::shared_ptr<const Profile> shared_session(int i) {
  return std::make_shared<const Profile>(agent_session(100 + i, i * 200 * kMs));
}

int64_t count(SqliteStore& s, const std::string& sql) {
  return std::get<int64_t>(s.query(sql, {}).at(0).at(0));
}

TEST(StoreWriter, SubmitsNeverWaitForALockedStoreAndAreAddedInOrderOnceItIsFree) {
  test::TempDir dir;
  auto store = open_ok(dir.path() + "/s.db");
  auto other = open_ok(dir.path() + "/s.db");
  ASSERT_TRUE(store && other);
  // Another process's writer holds the store. A submit that waited for it
  // would wait here for good (this thread releases it only afterwards),
  // then fail as "database is locked" after the 30 s busy timeout.
  other->execute("BEGIN IMMEDIATE", {});
  StoreWriter writer(*store, labelled("m"));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(writer.submit(shared_session(i)));
  other->execute("COMMIT", {});
  writer.finish();
  const StoreWriterStats st = writer.stats();
  EXPECT_EQ(st.added, 3u);
  EXPECT_EQ(st.failed, 0u);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_EQ(st.first_source, 1);
  EXPECT_EQ(st.last_source, 3);
  // In submission order: source n is session n's process.
  EXPECT_EQ(
      count(*store, "SELECT count(*) FROM sources WHERE source_type = 'ebpf' AND model_name = 'm'"),
      3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(
        store->query("SELECT pid FROM sources WHERE source_id = ?", {int64_t{i + 1}}).at(0).at(0),
        SqlValue{int64_t{100 + i}});
  }
  EXPECT_GT(count(*store, "SELECT min(added_unix_ns) FROM sources"), 0);
}

TEST(StoreWriter, AFullQueueDropsAndCountsWhatItCannotHold) {
  test::TempDir dir;
  auto store = open_ok(dir.path() + "/s.db");
  auto other = open_ok(dir.path() + "/s.db");
  ASSERT_TRUE(store && other);
  other->execute("BEGIN IMMEDIATE", {});
  StoreWriter writer(*store, labelled("m"), 2);
  // Capacity counts the session being added too, so exactly two get in.
  EXPECT_TRUE(writer.submit(shared_session(0)));
  EXPECT_TRUE(writer.submit(shared_session(1)));
  EXPECT_FALSE(writer.submit(shared_session(2)));
  EXPECT_FALSE(writer.submit(shared_session(3)));
  other->execute("COMMIT", {});
  writer.finish();
  EXPECT_EQ(writer.stats().added, 2u);
  EXPECT_EQ(writer.stats().dropped, 2u);
  // Room again once added.
  EXPECT_TRUE(writer.submit(shared_session(4)));
  writer.finish();
  EXPECT_EQ(writer.stats().added, 3u);
  EXPECT_EQ(count(*store, "SELECT count(*) FROM sources"), 3);
}

TEST(StoreWriter, AFailureIsTakenOnceAndTheNextAddsGoOn) {
  test::TempDir dir;
  auto store = open_ok(dir.path() + "/s.db");
  ASSERT_TRUE(store);
  // A real failure of the first add only: its pid's spans are refused.
  store->execute(
      "CREATE TRIGGER refuse BEFORE INSERT ON sessions WHEN NEW.pid = 100 BEGIN SELECT "
      "RAISE(ABORT, 'disk quota'); "
      "END",
      {});
  StoreWriter writer(*store, labelled("m"));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(writer.submit(shared_session(i)));
  writer.finish();
  const StoreWriterStats st = writer.stats();
  EXPECT_EQ(st.failed, 1u);
  EXPECT_EQ(st.added, 2u);
  EXPECT_NE(st.first_error.find("disk quota"), std::string::npos) << st.first_error;
  auto said = writer.take_first_failure();
  ASSERT_TRUE(said.has_value());
  EXPECT_EQ(*said, st.first_error);
  EXPECT_FALSE(writer.take_first_failure().has_value());
  EXPECT_EQ(count(*store, "SELECT count(*) FROM sources WHERE pid = 100"), 0);
  // add() runs on this thread, after what was submitted.
  writer.add(agent_session(200, 0));
  EXPECT_EQ(writer.stats().added, 3u);
  EXPECT_EQ(writer.stats().last_source, count(*store, "SELECT max(source_id) FROM sources"));
}

}  // namespace
}  // namespace mlprof::agent
