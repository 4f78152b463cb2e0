// The directory sink's retention (agent/sink_dir.h) on real files: the
// agent's files kept within a total size and an age, oldest first, counted;
// every other file of the directory left alone and not counted; the names
// Continuous gives its items recognised; and the sinks' identities (sink.h).

#include "agent/sink_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "agent/continuous.h"
#include "agent/sink.h"
#include "agent/sink_mlflow.h"
#include "agent/spool.h"
#include "agent/store_postgres.h"
#include "profile_builder.h"
#include "temp_dir.h"
#include "util/file_io.h"

namespace mlprof::agent {
namespace {

using test::TempDir;

constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kDay = 86'400 * kS;

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kS + ts.tv_nsec;
}

// A key as Continuous makes them (node, workload, period start, run, rotation).
std::string key_of(int n) {
  return "node-1_pid-812_20261128T0530" + std::to_string(10 + n) + "Z_5f3a9c.1";
}

// Sizes of the regular files directly in `dir`, by name: the oracle.
std::map<std::string, uint64_t> sizes(const std::string& dir) {
  std::map<std::string, uint64_t> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().filename()] = e.file_size();
  }
  return out;
}

uint64_t agent_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& [name, size] : sizes(dir)) total += is_item_file_name(name) ? size : 0;
  return total;
}

void write(const std::string& path, size_t bytes) {
  ASSERT_TRUE(write_file_atomic(path, std::string(bytes, 'x')));
}

// Sets a file's modification time `age_ns` before now.
void age(const std::string& path, int64_t age_ns) {
  const int64_t t = now_ns() - age_ns;
  const timespec times[2] = {{t / kS, t % kS}, {t / kS, t % kS}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

// One spooled item of `bytes` bytes under `key`.
SpoolItem spooled(Spool& spool, const std::string& key, size_t bytes) {
  SpoolItem it;
  it.key = key;
  EXPECT_TRUE(spool.put(it, std::string(bytes, 'd')));
  return spool.items().back();
}

TEST(DirectorySink, KeepsTheAgentsFilesWithinTheByteBoundOldestFirstAndCountsWhatItRemoves) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/profiles";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  // Files that are not the agent's: never removed, never counted.
  write(dir + "/notes.json.gz", 5000);
  write(dir + "/node-1_pid-812_20261128T053000Z.json.gz",
        5000);  // no run: not a name the agent gives
  write(dir + "/README", 10);
  auto spool = std::move(Spool::open(tmp.path() + "/spool").value());
  auto sink = open_directory_sink(dir, {3000, 0});
  for (int i = 0; i < 6; ++i) {
    const Delivery d = sink->deliver(spooled(*spool, key_of(i), 1000));
    ASSERT_EQ(d.status, DeliveryStatus::kDelivered) << d.detail;
    EXPECT_LE(agent_bytes(dir), 3000u) << "after item " << i;
  }
  const auto on_disk = sizes(dir);
  std::vector<std::string> kept;
  for (const auto& [name, size] : on_disk) {
    if (is_item_file_name(name)) kept.push_back(name);
  }
  EXPECT_EQ(kept, (std::vector<std::string>{item_file_name(key_of(3)), item_file_name(key_of(4)),
                                            item_file_name(key_of(5))}));
  EXPECT_EQ(on_disk.at("notes.json.gz"), 5000u);
  EXPECT_EQ(on_disk.at("node-1_pid-812_20261128T053000Z.json.gz"), 5000u);
  EXPECT_EQ(on_disk.at("README"), 10u);
  const RetentionStats r = sink->retention().value();
  EXPECT_EQ(r.files, 3u);
  EXPECT_EQ(r.bytes, 3000u);
  EXPECT_EQ(r.pruned_files, 3u);
  EXPECT_EQ(r.pruned_bytes, 3000u);
  EXPECT_EQ(retention_text(r), "directory 0.0 MB in 3 files (bound 0.0 MB), pruned 3 (0.0 MB)");

  // Delivered again (a crash before the spool removed it): one file, no
  // room taken twice, nothing else removed.
  EXPECT_EQ(sink->deliver(spooled(*spool, key_of(5), 1000)).status, DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->retention()->pruned_files, 3u);
  EXPECT_EQ(sink->retention()->bytes, 3000u);
}

TEST(DirectorySink, AnItemLargerThanTheBoundIsRejectedAndNothingIsRemovedForIt) {
  TempDir tmp;
  auto spool = std::move(Spool::open(tmp.path() + "/spool").value());
  const std::string dir = tmp.path() + "/profiles";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  auto sink = open_directory_sink(dir, {3000, 0});
  ASSERT_EQ(sink->deliver(spooled(*spool, key_of(0), 2000)).status, DeliveryStatus::kDelivered);
  const Delivery d = sink->deliver(spooled(*spool, key_of(1), 3001));
  EXPECT_EQ(d.status, DeliveryStatus::kReject);
  EXPECT_NE(d.detail.find("larger than the directory's bound (--sink-max-mb"), std::string::npos)
      << d.detail;
  EXPECT_EQ(sizes(dir), (std::map<std::string, uint64_t>{{item_file_name(key_of(0)), 2000}}));
  EXPECT_EQ(sink->retention()->pruned_files, 0u);
}

TEST(DirectorySink, FilesPastTheAgeAreRemovedAtOpenAndAtEachRotationOthersKept) {
  TempDir tmp;
  const std::string dir = tmp.path();
  // A previous run's files: 10 days, 3 days and 1 hour old; and a user's old file.
  write(dir + "/" + item_file_name(key_of(0)), 100);
  write(dir + "/" + item_file_name(key_of(1)), 200);
  write(dir + "/" + item_file_name(key_of(2)), 300);
  write(dir + "/mine.json.gz", 50);
  age(dir + "/" + item_file_name(key_of(0)), 10 * kDay);
  age(dir + "/" + item_file_name(key_of(1)), 3 * kDay);
  age(dir + "/" + item_file_name(key_of(2)), 3600 * kS);
  age(dir + "/mine.json.gz", 30 * kDay);
  // A crash's temporary of an item file (an hour and more old), and a fresh one.
  write(dir + "/." + item_file_name(key_of(3)) + ".tmp-99-abc", 70);
  age(dir + "/." + item_file_name(key_of(3)) + ".tmp-99-abc", 2 * 3600 * kS);
  write(dir + "/." + item_file_name(key_of(4)) + ".tmp-99-abd", 80);

  auto sink = open_directory_sink(dir, {0, 7 * kDay});
  EXPECT_EQ(sizes(dir),
            (std::map<std::string, uint64_t>{{item_file_name(key_of(1)), 200},
                                             {item_file_name(key_of(2)), 300},
                                             {"." + item_file_name(key_of(4)) + ".tmp-99-abd", 80},
                                             {"mine.json.gz", 50}}));
  RetentionStats r = sink->retention().value();
  EXPECT_EQ(r.pruned_files, 2u);  // the 10-day file and the stale temporary
  EXPECT_EQ(r.pruned_bytes, 170u);
  EXPECT_EQ(r.files, 2u);
  EXPECT_EQ(r.bytes, 500u);

  // Four days on (the rotation's clock): the 3-day file is 7 days old too.
  sink->maintain(now_ns() + 4 * kDay + kS);
  EXPECT_EQ(sizes(dir).count(item_file_name(key_of(1))), 0u);
  EXPECT_EQ(sizes(dir).count(item_file_name(key_of(2))), 1u);
  EXPECT_EQ(sizes(dir).count("mine.json.gz"), 1u);
  r = sink->retention().value();
  EXPECT_EQ(r.pruned_files, 4u);  // and the temporary, an hour old on that clock
  EXPECT_EQ(r.files, 1u);
  EXPECT_EQ(retention_text(r), "directory 0.0 MB in 1 file (bound 7d), pruned 4 (0.0 MB)");
}

TEST(DirectorySink, EachRotationCountsAgainFilesRemovedOrAddedByHand) {
  TempDir tmp;
  const std::string dir = tmp.path();
  auto spool = std::move(Spool::open(dir + "/spool").value());
  auto sink = open_directory_sink(dir, {uint64_t{1} << 20, 0});
  ASSERT_EQ(sink->deliver(spooled(*spool, key_of(0), 1000)).status, DeliveryStatus::kDelivered);
  ASSERT_EQ(sink->deliver(spooled(*spool, key_of(1), 1000)).status, DeliveryStatus::kDelivered);
  ASSERT_EQ(::unlink((dir + "/" + item_file_name(key_of(0))).c_str()), 0);
  write(dir + "/" + item_file_name(key_of(7)), 4000);  // another agent's, same directory
  sink->maintain(now_ns());
  EXPECT_EQ(sink->retention()->files, 2u);
  EXPECT_EQ(sink->retention()->bytes, 5000u);
  EXPECT_EQ(sink->retention()->pruned_files, 0u);
}

TEST(DirectorySink, ADirectoryThatAppearsLaterIsListedAtTheFirstDelivery) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/later";
  auto spool = std::move(Spool::open(tmp.path() + "/spool").value());
  auto sink = open_directory_sink(dir, {2500, 0});
  EXPECT_EQ(sink->retention()->last_error, "");  // not there yet is the delivery's to say
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  write(dir + "/" + item_file_name(key_of(0)), 2000);  // there before the agent's first item
  ASSERT_EQ(sink->deliver(spooled(*spool, key_of(1), 1000)).status, DeliveryStatus::kDelivered);
  EXPECT_EQ(agent_bytes(dir), 1000u);
  EXPECT_EQ(sink->retention()->pruned_files, 1u);
}

TEST(DirectorySink, TheNamesTheAgentGivesItsItemsAndNoOthers) {
  EXPECT_TRUE(is_item_file_name("node-1_pid-812_20261128T053000Z_5f3a9c.1.json.gz"));
  EXPECT_TRUE(is_item_file_name(
      "ip-10-0-3-7.ec2.internal_ml-scorer-6c5d8-model_20261128T053000Z_18f.12.json.gz"));
  for (const char* other :
       {"notes.json.gz", "node-1_pid-812_20261128T053000Z.json.gz",
        "node-1_pid-812_20261128T053000Z_5f3a9c.1.json", "a_b_c_20261128T053000Z_5f.1.json.gz",
        "node-1_pid-812_2026112T0530000Z_5f3a9c.1.json.gz",
        "node_pid_20261128T053000Z_xyz.1.json.gz", "node_pid_20261128T053000Z_5f.json.gz",
        "_pid_20261128T053000Z_5f.1.json.gz", ".node_pid_20261128T053000Z_5f.1.json.gz.tmp-1-2"}) {
    EXPECT_FALSE(is_item_file_name(other)) << other;
  }
}

// The keys Continuous makes, through item_file_name, are names retention
// recognises: for a process and for a pod with characters a key replaces.
TEST(DirectorySink, EveryKeyTheRotationMakesIsAnItemFileName) {
  TempDir tmp;
  auto spool = std::move(Spool::open(tmp.path()).value());
  class Quiet : public Sink {
   public:
    Delivery deliver(const SpoolItem&) override { return {DeliveryStatus::kRetry, "no"}; }
    std::string describe() const override { return "quiet"; }
  } sink;
  std::FILE* out = std::tmpfile();
  ContinuousOptions o;
  o.node = "ip-10-0-3-7.ec2.internal";
  const int64_t t0 = 1'800'000'000 * kS;
  Continuous c(o, *spool, sink, out, t0);
  for (const auto& [pod, container] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {"scorer_6c5d8", "model:v2"}, {"éé", "x/y"}}) {
    Profile p;
    const uint32_t f = test::user_fn(p, "predict");
    p.lanes.push_back(test::make_lane({test::call(100, f), test::ret(200)}));
    p.start_ns = 100;
    p.end_ns = 200;
    p.meta["pid"] = "812";
    if (!pod.empty()) {
      p.meta["namespace"] = "ml_team";
      p.meta["pod"] = pod;
      p.meta["container"] = container;
    }
    build_tree(p);
    c.add(std::move(p));
  }
  c.finish(t0 + 30 * kS);
  std::fclose(out);
  ASSERT_EQ(spool->items().size(), 3u);
  for (const SpoolItem& it : spool->items())
    EXPECT_TRUE(is_item_file_name(item_file_name(it.key))) << it.key;
}

TEST(SinkIdentity, OneSinkSpelledAnyWayHasOneIdentityAndNoPassword) {
  const std::string cwd = std::filesystem::current_path();
  auto id = [](const std::string& url) { return open_sink(url).value()->identity(); };
  TempDir tmp;
  const std::string d = tmp.path();
  EXPECT_EQ(id(d), "dir:" + d);
  EXPECT_EQ(id(d + "/"), "dir:" + d);
  EXPECT_EQ(id("file://" + d), "dir:" + d);
  EXPECT_EQ(id(d + "/./x/../"), "dir:" + d);
  EXPECT_EQ(id("relative/dir"), "dir:" + cwd + "/relative/dir");
  EXPECT_NE(id(d + "/a"), id(d + "/b"));
  EXPECT_EQ(id("sqlite:///" + d + "/p.db"), "sqlite:" + d + "/p.db");
  EXPECT_EQ(id(d + "/p.db"), "sqlite:" + d + "/p.db");
  EXPECT_EQ(id("http://bob:secret@MLflow.example:80/prefix/?experiment=fleet"),
            "mlflow:http://mlflow.example:80/prefix?experiment=fleet");
  EXPECT_EQ(id("http://mlflow.example/prefix"),
            "mlflow:http://mlflow.example:80/prefix?experiment=mlprof-ebpf");
  EXPECT_NE(id("http://mlflow.example/?experiment=a"), id("http://mlflow.example/?experiment=b"));
  // PostgreSQL: libpq's reading of the URL, no server asked.
  EXPECT_EQ(postgres_identity("postgresql://prof:secret@DB.example/profiles"),
            "postgresql://prof@db.example:5432/profiles");
  EXPECT_EQ(postgres_identity("postgresql://prof@db.example:5432/profiles?sslmode=require"),
            "postgresql://prof@db.example:5432/profiles");
  EXPECT_EQ(postgres_identity("postgres://prof@db.example:5433"),
            "postgresql://prof@db.example:5433/prof");
}

}  // namespace
}  // namespace mlprof::agent
