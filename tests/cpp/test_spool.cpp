// The continuous agent's spool (agent/spool.h) on real files: items written
// atomically and read back by a new Spool (a restart), the bounds dropping
// the oldest, a corrupt item set aside, delivery with retries, a rejected
// item set aside; and the directory and SQLite sinks' re-delivery.

#include "agent/spool.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "agent/sink_dir.h"
#include "agent/sink_sqlite.h"
#include "agent/store_sqlite.h"
#include "formats/export.h"
#include "profile_builder.h"
#include "temp_dir.h"
#include "util/file_io.h"

namespace mlprof::agent {
namespace {

using test::TempDir;

SpoolItem item_of(const std::string& key) {
  SpoolItem it;
  it.key = key;
  it.labels = {{"pod", "scorer"}, {"namespace", "ml"}};
  it.period_start_unix_ns = 1'700'000'000'000'000'000;
  it.period_end_unix_ns = 1'700'000'060'000'000'000;
  it.sessions = 3;
  it.spans = 42;
  return it;
}

std::vector<std::string> keys(const Spool& s) {
  std::vector<std::string> out;
  for (const SpoolItem& it : s.items()) out.push_back(it.key);
  return out;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Records what it was given; fails the first `fail_first` deliveries.
class RecordingSink : public Sink {
 public:
  explicit RecordingSink(int fail_first = 0, DeliveryStatus failure = DeliveryStatus::kRetry)
      : fail_first_(fail_first), failure_(failure) {}
  Delivery deliver(const SpoolItem& item) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++attempts;
    if (fail_first_ > 0) {
      --fail_first_;
      return {failure_, "server down"};
    }
    auto data = read_file(item.path);
    if (!data) return {DeliveryStatus::kReject, "unreadable"};
    delivered.push_back(item.key);
    documents.push_back(data.value());
    return {DeliveryStatus::kDelivered, "ok"};
  }
  std::string describe() const override { return "recording"; }

  std::mutex mu_;
  int attempts = 0;
  std::vector<std::string> delivered, documents;

 private:
  int fail_first_;
  DeliveryStatus failure_;
};

TEST(Spool, PutWritesTheDocumentAndItsMetadataAndANewSpoolResumesThem) {
  TempDir dir;
  const std::string d = dir.path() + "/spool/sub";  // created with its parents
  {
    auto s = Spool::open(d);
    ASSERT_TRUE(s) << s.error().message;
    ASSERT_TRUE(s.value()->put(item_of("a"), "document a"));
    ASSERT_TRUE(s.value()->put(item_of("b"), "document bb"));
    EXPECT_EQ(s.value()->stats().accepted, 2u);
    EXPECT_EQ(s.value()->stats().pending, 2u);
  }
  // Exactly two files per item, no temporaries.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"0000000000000001.item", "0000000000000001.json.gz",
                                             "0000000000000002.item", "0000000000000002.json.gz"}));

  auto again = Spool::open(d);  // a restart
  ASSERT_TRUE(again);
  Spool& s = *again.value();
  EXPECT_EQ(s.stats().resumed, 2u);
  EXPECT_EQ(keys(s), (std::vector<std::string>{"a", "b"}));
  const SpoolItem first = s.items()[0];
  EXPECT_EQ(first.labels.at("pod"), "scorer");
  EXPECT_EQ(first.sessions, 3u);
  EXPECT_EQ(first.spans, 42u);
  EXPECT_EQ(first.period_end_unix_ns, 1'700'000'060'000'000'000);
  EXPECT_EQ(read_file(first.path).value(), "document a");
  // New items number after the resumed ones.
  ASSERT_TRUE(s.put(item_of("c"), "c"));
  EXPECT_EQ(s.items().back().path, d + "/0000000000000003.json.gz");
}

TEST(Spool, ALoneDocumentOrTemporaryFileOfACrashIsRemovedAndACorruptItemSetAside) {
  TempDir dir;
  const std::string d = dir.path();
  {
    auto s = Spool::open(d);
    ASSERT_TRUE(s);
    ASSERT_TRUE(s.value()->put(item_of("good"), "good document"));
    ASSERT_TRUE(s.value()->put(item_of("bad-meta"), "x"));
    ASSERT_TRUE(s.value()->put(item_of("short-doc"), "a longer document"));
  }
  // A crash between the two writes of item 4: its document only.
  ASSERT_TRUE(write_file_atomic(d + "/0000000000000004.json.gz", "never acknowledged"));
  // write_file_atomic's temporary, cut short.
  { std::ofstream(d + "/.0000000000000005.item.tmp-1-abc") << "{\"ver"; }
  // Item 2's metadata cut short, item 3's document shorter than it says.
  { std::ofstream(d + "/0000000000000002.item", std::ios::trunc) << "{\"version\": 1, \"ke"; }
  { std::ofstream(d + "/0000000000000003.json.gz", std::ios::trunc) << "a longer"; }

  auto again = Spool::open(d);
  ASSERT_TRUE(again);
  Spool& s = *again.value();
  EXPECT_EQ(keys(s), (std::vector<std::string>{"good"}));
  EXPECT_EQ(s.stats().corrupt, 2u);
  EXPECT_FALSE(exists(d + "/0000000000000004.json.gz"));
  EXPECT_FALSE(exists(d + "/.0000000000000005.item.tmp-1-abc"));
  EXPECT_TRUE(exists(d + "/corrupt/0000000000000002.item"));
  EXPECT_TRUE(exists(d + "/corrupt/0000000000000003.json.gz"));
  EXPECT_FALSE(exists(d + "/0000000000000002.item"));
  // Sequence numbers go on past everything seen, the lone document's too.
  ASSERT_TRUE(s.put(item_of("next"), "n"));
  EXPECT_EQ(s.items().back().path, d + "/0000000000000005.json.gz");
}

TEST(Spool, OverTheItemBoundTheOldestAreDroppedAndCounted) {
  TempDir dir;
  SpoolLimits limits;
  limits.max_items = 3;
  auto s = Spool::open(dir.path(), limits);
  ASSERT_TRUE(s);
  for (const char* k : {"1", "2", "3", "4", "5"}) ASSERT_TRUE(s.value()->put(item_of(k), "doc"));
  EXPECT_EQ(keys(*s.value()), (std::vector<std::string>{"3", "4", "5"}));
  EXPECT_EQ(s.value()->stats().dropped_bound, 2u);
  EXPECT_FALSE(exists(dir.path() + "/0000000000000001.item"));
  EXPECT_FALSE(exists(dir.path() + "/0000000000000001.json.gz"));
}

TEST(Spool, OverTheByteBoundTheOldestAreDroppedAndAnItemLargerThanTheBoundIsRefused) {
  TempDir dir;
  SpoolLimits limits;
  limits.max_bytes = 2000;
  auto opened = Spool::open(dir.path(), limits);
  ASSERT_TRUE(opened);
  Spool& s = *opened.value();
  const std::string doc(500, 'x');  // with its ~250-byte metadata, 2 fit, not 3
  for (const char* k : {"1", "2", "3"}) ASSERT_TRUE(s.put(item_of(k), doc));
  EXPECT_EQ(keys(s), (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(s.stats().dropped_bound, 1u);
  EXPECT_LE(s.stats().pending_bytes, 2000u);

  auto too_big = s.put(item_of("huge"), std::string(3000, 'y'));
  ASSERT_FALSE(too_big);
  EXPECT_NE(too_big.error().message.find("larger than the spool's bound"), std::string::npos);
  EXPECT_EQ(s.stats().dropped_write, 1u);
  EXPECT_EQ(keys(s), (std::vector<std::string>{"2", "3"}));  // nothing else dropped for it

  // A smaller bound at the next start drops the oldest there.
  limits.max_bytes = 1000;
  auto smaller = Spool::open(dir.path(), limits);
  ASSERT_TRUE(smaller);
  EXPECT_EQ(keys(*smaller.value()), (std::vector<std::string>{"3"}));
  EXPECT_EQ(smaller.value()->stats().dropped_bound, 1u);
}

TEST(Spool, APutThatCannotBeWrittenLeavesNothingAndIsCounted) {
  TempDir dir;
  auto opened = Spool::open(dir.path());
  ASSERT_TRUE(opened);
  ASSERT_TRUE(opened.value()->put(item_of("small"), "ok"));
  // A real write failure, for root too: a file size limit (write(2) fails
  // with EFBIG past it, SIGXFSZ ignored). The document fits, its metadata not.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto previous = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto r = opened.value()->put(item_of("big"), "a document under 64 bytes");
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().errnum, EFBIG) << r.error().message;
  EXPECT_EQ(opened.value()->stats().dropped_write, 1u);
  EXPECT_EQ(keys(*opened.value()), (std::vector<std::string>{"small"}));
  std::vector<std::string> names = dir.files();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"0000000000000001.item", "0000000000000001.json.gz"}));
}

TEST(Spool, DeliveryRemovesAnItemOnlyOnceItsSinkAcknowledgedIt) {
  TempDir dir;
  auto opened = Spool::open(dir.path());
  ASSERT_TRUE(opened);
  Spool& s = *opened.value();
  ASSERT_TRUE(s.put(item_of("a"), "A"));
  ASSERT_TRUE(s.put(item_of("b"), "B"));
  RecordingSink sink(/*fail_first=*/2);
  EXPECT_TRUE(s.deliver_one(sink));  // server down
  EXPECT_TRUE(s.deliver_one(sink));  // still down
  EXPECT_EQ(s.stats().failures, 2u);
  EXPECT_EQ(s.stats().last_error, "server down");
  EXPECT_EQ(keys(s), (std::vector<std::string>{"a", "b"}));  // nothing lost, order kept
  EXPECT_TRUE(s.deliver_one(sink));
  EXPECT_TRUE(s.deliver_one(sink));
  EXPECT_FALSE(s.deliver_one(sink));  // empty
  EXPECT_EQ(sink.delivered, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(sink.documents, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(s.stats().delivered, 2u);
  EXPECT_EQ(s.stats().last_error, "");
  EXPECT_TRUE(dir.files().empty());
}

TEST(Spool, ARejectedItemIsSetAsideAndCountedDropped) {
  TempDir dir;
  auto opened = Spool::open(dir.path());
  ASSERT_TRUE(opened);
  Spool& s = *opened.value();
  ASSERT_TRUE(s.put(item_of("a"), "A"));
  RecordingSink sink(1, DeliveryStatus::kReject);
  EXPECT_TRUE(s.deliver_one(sink));
  EXPECT_EQ(s.stats().rejected, 1u);
  EXPECT_EQ(s.stats().dropped(), 1u);
  EXPECT_EQ(s.stats().pending, 0u);
  EXPECT_TRUE(exists(dir.path() + "/rejected/0000000000000001.item"));
  EXPECT_TRUE(exists(dir.path() + "/rejected/0000000000000001.json.gz"));
}

TEST(Spool, TheThreadRetriesWithBackOffAndFlushCutsTheWait) {
  TempDir dir;
  Backoff backoff;
  backoff.initial_ms = 60'000;  // the thread alone would wait a minute after the first failure
  backoff.max_ms = 60'000;
  auto opened = Spool::open(dir.path(), {}, backoff);
  ASSERT_TRUE(opened);
  Spool& s = *opened.value();
  RecordingSink sink(/*fail_first=*/3);
  s.start(sink);
  ASSERT_TRUE(s.put(item_of("a"), "A"));
  // flush: retries within its deadline instead of the minute's back-off.
  EXPECT_TRUE(s.flush(20'000));
  s.stop();
  EXPECT_EQ(sink.delivered, (std::vector<std::string>{"a"}));
  EXPECT_EQ(sink.attempts, 4);
  EXPECT_EQ(s.stats().failures, 3u);
}

TEST(Spool, BackoffDoublesUpToItsMaximum) {
  Backoff b;
  b.initial_ms = 1000;
  b.max_ms = 60'000;
  EXPECT_EQ(b.ceiling_ms(1), 1000);
  EXPECT_EQ(b.ceiling_ms(2), 2000);
  EXPECT_EQ(b.ceiling_ms(6), 32'000);
  EXPECT_EQ(b.ceiling_ms(7), 60'000);
  EXPECT_EQ(b.ceiling_ms(1000), 60'000);
}

// ---- items of another sink ----------------------------------------------------

// A first run for sink A leaves an item; a run for sink B neither delivers
// it nor waits for it, and names it; a run for A delivers it.
TEST(Spool, AnItemIsDeliveredOnlyToTheSinkItWasWrittenFor) {
  TempDir dir;
  {
    auto a = Spool::open(dir.path(), {}, {}, "sqlite:/tmp/scratch.db");
    ASSERT_TRUE(a);
    ASSERT_TRUE(a.value()->put(item_of("scratch"), std::string(3 << 20, 's')));
    EXPECT_EQ(a.value()->items()[0].sink, "sqlite:/tmp/scratch.db");
  }
  EXPECT_NE(read_file(dir.path() + "/0000000000000001.item")
                .value()
                .find("\"sink\":\"sqlite:/tmp/scratch.db\""),
            std::string::npos);
  {
    auto b = Spool::open(dir.path(), {}, {}, "postgresql://prof@db:5432/profiles");
    ASSERT_TRUE(b);
    Spool& s = *b.value();
    SpoolStats st = s.stats();
    EXPECT_EQ(st.resumed, 0u);
    EXPECT_EQ(st.pending, 0u);
    EXPECT_EQ(st.others, 1u);
    EXPECT_EQ(s.others_text(), "1 item (3.0 MB) for sqlite:/tmp/scratch.db");
    RecordingSink sink;
    EXPECT_FALSE(s.deliver_one(sink));  // nothing of its own
    ASSERT_TRUE(s.put(item_of("prod"), "P"));
    EXPECT_TRUE(s.deliver_one(sink));
    EXPECT_FALSE(s.deliver_one(sink));
    EXPECT_EQ(sink.delivered, (std::vector<std::string>{"prod"}));
    s.start(sink);
    EXPECT_TRUE(s.flush(5'000));  // the other sink's item is not waited for
    s.stop();
    EXPECT_EQ(s.stats().others, 1u);
    EXPECT_TRUE(exists(dir.path() + "/0000000000000001.json.gz"));
  }
  auto a = Spool::open(dir.path(), {}, {}, "sqlite:/tmp/scratch.db");
  ASSERT_TRUE(a);
  EXPECT_EQ(a.value()->stats().resumed, 1u);
  EXPECT_EQ(a.value()->others_text(), "");
  RecordingSink sink;
  EXPECT_TRUE(a.value()->deliver_one(sink));
  EXPECT_EQ(sink.delivered, (std::vector<std::string>{"scratch"}));
}

TEST(Spool, AnItemOfAnOlderAgentRecordsNoSinkAndIsLeftAndNamed) {
  TempDir dir;
  {
    auto s = Spool::open(dir.path());
    ASSERT_TRUE(s);
    ASSERT_TRUE(s.value()->put(item_of("old"), "O"));
  }
  // The metadata an agent before sinks were recorded wrote: no "sink".
  const std::string meta_path = dir.path() + "/0000000000000001.item";
  std::string meta = read_file(meta_path).value();
  const size_t at = meta.find(",\"sink\":\"\"");
  ASSERT_NE(at, std::string::npos) << meta;
  meta.erase(at, std::string(",\"sink\":\"\"").size());
  ASSERT_TRUE(write_file_atomic(meta_path, meta));
  auto s = Spool::open(dir.path(), {}, {}, "dir:/srv/profiles");
  ASSERT_TRUE(s);
  EXPECT_EQ(s.value()->stats().corrupt, 0u);
  EXPECT_EQ(s.value()->stats().others, 1u);
  EXPECT_EQ(s.value()->others_text(), "1 item (0.0 MB) for a sink not recorded (an older agent's)");
}

TEST(Spool, AnotherSinksItemsCountInTheBoundsAndTheOldestGoFirst) {
  TempDir dir;
  SpoolLimits limits;
  limits.max_items = 2;
  {
    auto a = Spool::open(dir.path(), limits, {}, "A");
    ASSERT_TRUE(a);
    ASSERT_TRUE(a.value()->put(item_of("a1"), "1"));
    ASSERT_TRUE(a.value()->put(item_of("a2"), "2"));
  }
  auto b = Spool::open(dir.path(), limits, {}, "B");
  ASSERT_TRUE(b);
  ASSERT_TRUE(b.value()->put(item_of("b1"), "3"));
  EXPECT_EQ(keys(*b.value()), (std::vector<std::string>{"a2", "b1"}));
  EXPECT_EQ(b.value()->stats().dropped_bound, 1u);
}

// ---- corrupt/ and rejected/ -----------------------------------------------------

// Bytes of the regular files under `dir`, its subdirectories too: the oracle.
uint64_t tree_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

size_t files_in(const std::string& dir) {
  if (!exists(dir)) return 0;
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

TEST(Spool, SetAsideItemsAreAtMostAHundredTheNewest) {
  TempDir dir;
  auto opened = Spool::open(dir.path());
  ASSERT_TRUE(opened);
  Spool& s = *opened.value();
  RecordingSink sink(1000, DeliveryStatus::kReject);
  for (int i = 0; i < 105; ++i) {
    ASSERT_TRUE(s.put(item_of("r" + std::to_string(i)), "R"));
    ASSERT_TRUE(s.deliver_one(sink));
  }
  EXPECT_EQ(s.stats().rejected, 105u);
  EXPECT_EQ(s.stats().set_aside, kMaxSetAside);
  EXPECT_EQ(s.stats().set_aside_removed, 5u);
  EXPECT_EQ(files_in(dir.path() + "/rejected"), 2 * kMaxSetAside);
  EXPECT_FALSE(exists(dir.path() + "/rejected/0000000000000005.item"));
  EXPECT_TRUE(exists(dir.path() + "/rejected/0000000000000006.item"));
  EXPECT_EQ(s.stats().set_aside_bytes, tree_bytes(dir.path() + "/rejected"));
}

TEST(Spool, SetAsideItemsCountInTheByteBoundAndGoFirstAtThisRunAndTheNext) {
  TempDir dir;
  SpoolLimits limits;
  limits.max_bytes = 2000;
  const std::string doc(500, 'x');  // with its metadata about 750 bytes: 2 fit, not 3
  {
    auto opened = Spool::open(dir.path(), limits);
    ASSERT_TRUE(opened);
    Spool& s = *opened.value();
    ASSERT_TRUE(s.put(item_of("bad"), doc));
    RecordingSink rejecting(1, DeliveryStatus::kReject);
    ASSERT_TRUE(s.deliver_one(rejecting));
    ASSERT_TRUE(s.put(item_of("a"), doc));
    EXPECT_EQ(s.stats().set_aside, 1u);
    EXPECT_EQ(tree_bytes(dir.path()), s.stats().pending_bytes + s.stats().set_aside_bytes);
    ASSERT_TRUE(s.put(item_of("b"), doc));  // room: the rejected item goes, not "a"
    EXPECT_EQ(keys(s), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(s.stats().dropped_bound, 0u);
    EXPECT_EQ(s.stats().set_aside, 0u);
    EXPECT_EQ(s.stats().set_aside_removed, 1u);
    EXPECT_EQ(files_in(dir.path() + "/rejected"), 0u);
    EXPECT_LE(tree_bytes(dir.path()), 2000u);
  }
  // The next run finds a corrupt item (metadata cut short) and a smaller
  // bound: the corrupt item is set aside and counted, then removed first.
  {
    std::ofstream(dir.path() + "/0000000000000002.item", std::ios::trunc)
        << "{\"version\": 1, \"ke";
  }
  limits.max_bytes = 1000;
  auto again = Spool::open(dir.path(), limits);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.value()->stats().corrupt, 1u);
  EXPECT_EQ(keys(*again.value()), (std::vector<std::string>{"b"}));
  EXPECT_EQ(again.value()->stats().dropped_bound, 0u);
  EXPECT_LE(tree_bytes(dir.path()), 1000u);
  EXPECT_EQ(tree_bytes(dir.path()),
            again.value()->stats().pending_bytes + again.value()->stats().set_aside_bytes);
  // New items are numbered past the set-aside ones too.
  ASSERT_TRUE(again.value()->put(item_of("c"), "c"));
  EXPECT_EQ(again.value()->items().back().path, dir.path() + "/0000000000000004.json.gz");
}

// ---- the sinks' re-delivery --------------------------------------------------

std::string document_of_one_session() {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t score = test::user_fn(p, "score");
  p.lanes.push_back(test::make_lane(
      {test::call(100, predict), test::call(110, score), test::ret(150), test::ret(200)}));
  p.start_ns = 100;
  p.end_ns = 200;
  build_tree(p);
  return export_profile(p, ExportFormat::kJsonGz);
}

TEST(DirectorySink, WritesTheDocumentUnderItsKeyOnceAndRetriesWhileTheDirectoryIsMissing) {
  TempDir dir;
  const std::string target = dir.path() + "/later";
  auto sink = open_directory_sink(target);
  auto opened = Spool::open(dir.path() + "/spool");
  ASSERT_TRUE(opened);
  Spool& s = *opened.value();
  ASSERT_TRUE(s.put(item_of("node1_ml/scorer_20261128T053000Z"), "doc"));
  const SpoolItem item = s.items()[0];
  Delivery d = sink->deliver(item);
  EXPECT_EQ(d.status, DeliveryStatus::kRetry);
  EXPECT_NE(d.detail.find("does not create it"), std::string::npos) << d.detail;
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  EXPECT_EQ(sink->deliver(item).status, DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->deliver(item).status, DeliveryStatus::kDelivered);  // again: the same file
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(target))
    names.push_back(e.path().filename());
  EXPECT_EQ(names, (std::vector<std::string>{"node1_ml_scorer_20261128T053000Z.json.gz"}));
}

TEST(SqliteSink, AnItemDeliveredTwiceIsOneSourceLabelledWithItsKey) {
  TempDir dir;
  const std::string db = dir.path() + "/profiles.db";
  auto sink = open_sqlite_sink("sqlite:///" + db);
  ASSERT_TRUE(sink) << sink.error().message;
  auto opened = Spool::open(dir.path() + "/spool");
  ASSERT_TRUE(opened);
  ASSERT_TRUE(opened.value()->put(item_of("k1"), document_of_one_session()));
  const SpoolItem item = opened.value()->items()[0];
  Delivery first = sink.value()->deliver(item);
  ASSERT_EQ(first.status, DeliveryStatus::kDelivered) << first.detail;
  EXPECT_EQ(first.detail, "source 1");
  Delivery second = sink.value()->deliver(item);  // a crash before the spool removed it
  ASSERT_EQ(second.status, DeliveryStatus::kDelivered) << second.detail;
  EXPECT_EQ(second.detail, "source 1 (already there)");

  auto store = SqliteStore::open(db);
  ASSERT_TRUE(store);
  auto rows = store.value()->query("SELECT source_id, value FROM source_labels WHERE key = ?",
                                   {std::string("label.") + kItemKeyLabel});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(rows[0][1]), "k1");
  auto pods = store.value()->query("SELECT value FROM source_labels WHERE key = 'label.pod'", {});
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(std::get<std::string>(pods[0][0]), "scorer");
}

TEST(SqliteSink, AnUnreadableDocumentIsRejectedAndAStoreOfAnotherVersionFailsAtOpen) {
  TempDir dir;
  auto sink = open_sqlite_sink(dir.path() + "/p.db");
  ASSERT_TRUE(sink);
  auto opened = Spool::open(dir.path() + "/spool");
  ASSERT_TRUE(opened);
  ASSERT_TRUE(opened.value()->put(item_of("k"), "not gzip, not json"));
  EXPECT_EQ(sink.value()->deliver(opened.value()->items()[0]).status, DeliveryStatus::kReject);

  {
    auto store = SqliteStore::open(dir.path() + "/new.db");
    ASSERT_TRUE(store);
    store.value()->execute("UPDATE meta SET value = '9.0' WHERE key = 'version'", {});
  }
  auto newer = open_sqlite_sink(dir.path() + "/new.db");
  ASSERT_FALSE(newer);
  EXPECT_EQ(newer.error().kind, Error::Kind::kVersion);
}

}  // namespace
}  // namespace mlprof::agent
