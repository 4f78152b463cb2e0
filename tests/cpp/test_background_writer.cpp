#include "util/background_writer.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "formats/json_read.h"
#include "model/tree.h"
#include "profile_builder.h"
#include "temp_dir.h"
#include "util/file_io.h"

namespace mlprof {
namespace {

// The writer is process-wide, so every expectation is on the change in its
// counters across one test.
WriterStats delta(const WriterStats& before, const WriterStats& after) {
  WriterStats d;
  d.submitted = after.submitted - before.submitted;
  d.written = after.written - before.written;
  d.dropped = after.dropped - before.dropped;
  d.failed = after.failed - before.failed;
  d.queued = after.queued;
  d.batches = after.batches - before.batches;
  d.last_error = after.last_error;
  return d;
}

using test::TempDir;

std::shared_ptr<const Profile> sample() {
  Profile p = test::random_profile(7, 40, 4, false);
  build_tree(p);
  return std::make_shared<const Profile>(std::move(p));
}

// Queues `count` JSON writes to dir/p<i>.json; false if one was refused.
bool submit(const std::shared_ptr<const Profile>& profile, const std::string& dir, int count,
            size_t capacity) {
  for (int i = 0; i < count; ++i) {
    if (!write_in_background(profile, dir + "/p" + std::to_string(i) + ".json", ExportFormat::kJson,
                             capacity)) {
      return false;
    }
  }
  return true;
}

TEST(BackgroundWriter, WritesLoadableFilesIntoADirectoryItCreates) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/made/by/writer";
  const WriterStats before = background_writer_stats();
  auto profile = sample();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(write_in_background(profile, dir + "/p" + std::to_string(i) + ".json.gz",
                                    ExportFormat::kJsonGz, 64));
  }
  ASSERT_TRUE(flush_background_writes(30));
  const WriterStats d = delta(before, background_writer_stats());
  EXPECT_EQ(d.submitted, 3u);
  EXPECT_EQ(d.written, 3u);
  EXPECT_EQ(d.failed, 0u);
  EXPECT_EQ(d.queued, 0u);
  for (int i = 0; i < 3; ++i) {
    Result<std::string> raw = read_file(dir + "/p" + std::to_string(i) + ".json.gz");
    ASSERT_TRUE(raw.ok()) << raw.error().message;
    Result<std::string> text = gzip_decompress(raw.value());
    ASSERT_TRUE(text.ok());
    Result<Profile> back = read_json_document(text.value());
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_GT(profile->spans.size(), 10u);
    ASSERT_EQ(back.value().spans.size(), profile->spans.size());
    EXPECT_EQ(back.value().spans.back().end_ns, profile->spans.back().end_ns);
  }
}

// Milliseconds until the writer has written `count` more than `before` (30 s at most).
long wait_written(const WriterStats& before, uint64_t count) {
  const auto start = std::chrono::steady_clock::now();
  auto waited = std::chrono::milliseconds(0);
  while (delta(before, background_writer_stats()).written < count &&
         waited < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
  }
  return waited.count();
}

TEST(BackgroundWriter, WritesSoonWithoutWaitingForAFlush) {
  // Nothing waits for more profiles to gather beyond one poll (50 ms): a
  // process killed without a drain loses only what was queued since.
  TempDir tmp;
  const WriterStats before = background_writer_stats();
  ASSERT_TRUE(submit(sample(), tmp.path(), 2, 64));
  EXPECT_LT(wait_written(before, 2), 900);
  EXPECT_EQ(delta(before, background_writer_stats()).written, 2u);
  std::vector<std::string> files = tmp.files();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"p0.json", "p1.json"}));
}

TEST(BackgroundWriter, AWriterAsleepAfterAnIdleSecondIsWokenByTheNextProfile) {
  // After 20 empty polls the writer stops polling; the next submit must wake it.
  TempDir tmp;
  ASSERT_TRUE(submit(sample(), tmp.path() + "/a", 1, 64));
  ASSERT_TRUE(flush_background_writes(30));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const WriterStats before = background_writer_stats();
  ASSERT_TRUE(submit(sample(), tmp.path() + "/b", 1, 64));
  EXPECT_LT(wait_written(before, 1), 900);
  EXPECT_EQ(delta(before, background_writer_stats()).written, 1u);
}

TEST(BackgroundWriter, ABatchHoldsAtMost16Files) {
  TempDir tmp;
  const WriterStats before = background_writer_stats();
  auto profile = sample();
  ASSERT_TRUE(submit(profile, tmp.path(), 40, 1000));
  ASSERT_TRUE(flush_background_writes(30));
  const WriterStats d = delta(before, background_writer_stats());
  EXPECT_EQ(d.written, 40u);
  EXPECT_GE(d.batches, 3u);  // 16 + 16 + 8: one open file per profile in a batch, 16 at most
  EXPECT_EQ(tmp.files().size(), 40u);
}

TEST(BackgroundWriter, AFailedWriteIsCountedWithItsReason) {
  TempDir tmp;
  const std::string file = tmp.path() + "/not-a-directory";
  std::ofstream(file) << "x";  // a file where the writer needs a directory
  const WriterStats before = background_writer_stats();
  ASSERT_TRUE(write_in_background(sample(), file + "/p.json.gz", ExportFormat::kJsonGz, 64));
  ASSERT_TRUE(flush_background_writes(30));
  const WriterStats d = delta(before, background_writer_stats());
  EXPECT_EQ(d.failed, 1u);
  EXPECT_EQ(d.written, 0u);
  EXPECT_NE(d.last_error.find("not-a-directory"), std::string::npos) << d.last_error;
}

TEST(BackgroundWriter, AFullQueueDropsAndCountsWithoutBlocking) {
  TempDir tmp;
  const std::string dir = tmp.path();
  const WriterStats before = background_writer_stats();
  // Capacity 0: nothing is ever accepted.
  EXPECT_FALSE(write_in_background(sample(), dir + "/p.json.gz", ExportFormat::kJsonGz, 0));
  const WriterStats d = delta(before, background_writer_stats());
  EXPECT_EQ(d.dropped, 1u);
  EXPECT_EQ(d.submitted, 0u);
  ASSERT_TRUE(flush_background_writes(30));
}

TEST(BackgroundWriter, RunsUnderSchedIdleAndLeavesTheCallerAlone) {
  TempDir tmp;
  ASSERT_TRUE(write_in_background(sample(), tmp.path() + "/p.json", ExportFormat::kJson, 64));
  ASSERT_TRUE(flush_background_writes(30));
  pid_t writer = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      if (std::getline(comm, name) && name == "mlprof-writer") writer = std::atoi(e->d_name);
    }
    ::closedir(d);
  }
  ASSERT_NE(writer, 0) << "no thread named mlprof-writer";
  EXPECT_EQ(sched_getscheduler(writer), SCHED_IDLE);
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(writer)), 19);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

}  // namespace
}  // namespace mlprof
