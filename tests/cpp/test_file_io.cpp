#include "util/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace mlprof {
namespace {

std::string sample_text(size_t n, uint32_t seed = 1) {
  // Repetitive like a profile document, with some noise so it does not
  // compress to nothing.
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(n);
  while (s.size() < n) {
    s += "[3,17,0,1,4," + std::to_string(rng() % 100000) + ",\"predict\"],";
  }
  s.resize(n);
  return s;
}

using test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// gzip(1) reads what we write: a real consumer, not our own inflater.
TEST(Gzip, SystemGunzipReadsIt) {
  if (std::system("command -v gzip >/dev/null 2>&1") != 0) GTEST_SKIP() << "gzip(1) not installed";
  TempDir dir;
  const std::string text = sample_text(300'000);
  const std::string gz = gzip_compress(text);
  EXPECT_LT(gz.size(), text.size() / 3);
  const std::string path = dir.path() + "/doc.json.gz";
  ASSERT_TRUE(write_file_atomic(path, gz).ok());
  ASSERT_EQ(std::system(("gzip -t " + path).c_str()), 0);
  ASSERT_EQ(std::system(("gzip -dkf " + path).c_str()), 0);
  EXPECT_EQ(slurp(dir.path() + "/doc.json"), text);
}

TEST(Gzip, ReadsWhatSystemGzipWrote) {
  if (std::system("command -v gzip >/dev/null 2>&1") != 0) GTEST_SKIP() << "gzip(1) not installed";
  TempDir dir;
  const std::string text = sample_text(50'000, 7);
  const std::string path = dir.path() + "/in.txt";
  ASSERT_TRUE(write_file_atomic(path, text).ok());
  ASSERT_EQ(std::system(("gzip -9 " + path).c_str()), 0);
  const Result<std::string> gz = read_file(path + ".gz");
  ASSERT_TRUE(gz.ok()) << gz.error().message;
  const Result<std::string> back = gzip_decompress(gz.value());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), text);
}

TEST(Gzip, RoundTripsEmptyAndBinary) {
  std::string binary;
  for (int i = 0; i < 5000; ++i) binary.push_back(static_cast<char>(i * 7919 % 256));
  for (const std::string& s : {std::string(), std::string("x"), binary}) {
    const std::string gz = gzip_compress(s);
    EXPECT_TRUE(is_gzip(gz));
    const Result<std::string> back = gzip_decompress(gz);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back.value(), s);
  }
}

TEST(Gzip, ConcatenatedMembersAreOneStream) {
  const std::string a = sample_text(1000, 1), b = sample_text(2000, 2);
  const Result<std::string> back = gzip_decompress(gzip_compress(a) + gzip_compress(b));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), a + b);
}

TEST(Gzip, EveryTruncationIsTruncated) {
  const std::string gz = gzip_compress(sample_text(20'000));
  for (size_t n = 2; n < gz.size(); n += 1 + n / 50) {
    const Result<std::string> r = gzip_decompress(std::string_view(gz).substr(0, n));
    ASSERT_FALSE(r.ok()) << "cut at " << n;
    EXPECT_EQ(r.error().kind, Error::Kind::kTruncated)
        << "cut at " << n << ": " << r.error().message;
  }
}

TEST(Gzip, CorruptionIsCorruptNeverCrash) {
  const std::string text = sample_text(20'000);
  const std::string gz = gzip_compress(text);
  std::mt19937 rng(3);
  int detected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bad = gz;
    bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    const Result<std::string> r = gzip_decompress(bad);
    if (!r.ok()) {
      ++detected;
      EXPECT_NE(r.error().kind, Error::Kind::kIo);
      EXPECT_FALSE(r.error().message.empty());
    } else {
      // Flips in header fields gzip does not check (mtime, OS) are harmless;
      // a flip in the data must be caught by the CRC, never returned.
      EXPECT_EQ(r.value(), text);
    }
  }
  EXPECT_GT(detected, 1500);
}

TEST(Gzip, NotGzipAndTrailingGarbage) {
  EXPECT_EQ(gzip_decompress("{\"meta\": 1}").error().kind, Error::Kind::kCorrupt);
  EXPECT_EQ(gzip_decompress("").error().kind, Error::Kind::kCorrupt);
  const Result<std::string> r = gzip_decompress(gzip_compress("abc") + "garbage!");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt);
}

TEST(WriteFileAtomic, WritesReplacesAndLeavesNoTemp) {
  TempDir dir;
  const std::string path = dir.path() + "/profile.json";
  ASSERT_TRUE(write_file_atomic(path, "first").ok());
  EXPECT_EQ(slurp(path), "first");
  const std::string big = sample_text(3'000'000);
  ASSERT_TRUE(write_file_atomic(path, big).ok());
  EXPECT_EQ(slurp(path), big);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"profile.json"});
}

TEST(WriteFileAtomic, NewFileIs0644UnderTheUmask) {
  TempDir dir;
  const mode_t old = ::umask(022);
  const std::string a = dir.path() + "/a.json";
  ASSERT_TRUE(write_file_atomic(a, "x").ok());
  ::umask(027);
  const std::string b = dir.path() + "/b.json";
  ASSERT_TRUE(write_file_atomic(b, "x").ok());
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::stat(b.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(WriteFileAtomic, ReplacedFileKeepsItsMode) {
  TempDir dir;
  const std::string path = dir.path() + "/p.json";
  ASSERT_TRUE(write_file_atomic(path, "one").ok());
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  ASSERT_TRUE(write_file_atomic(path, "two").ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(slurp(path), "two");
}

TEST(WriteFileAtomic, RelativePathWritesInTheWorkingDirectory) {
  TempDir dir;
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  const Result<Ok> r = write_file_atomic("rel.json", "data");
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(slurp(dir.path() + "/rel.json"), "data");
}

TEST(WriteFileAtomic, MissingDirectoryIsAnIoErrorNamingThePath) {
  const std::string path = "/nonexistent-mlprof-dir/x/profile.json";
  const Result<Ok> r = write_file_atomic(path, "data");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kIo);
  EXPECT_EQ(r.error().errnum, ENOENT);
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
}

TEST(WriteFileAtomic, ADirectoryAtThePathIsRefusedAndKept) {
  TempDir dir;
  const std::string sub = dir.path() + "/out.json";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  const Result<Ok> r = write_file_atomic(sub, "data");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().errnum, EISDIR);
  struct stat st {};
  ASSERT_EQ(::stat(sub.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ::rmdir(sub.c_str());
  EXPECT_TRUE(dir.files().empty());
}

// Both durabilities publish the same files and report the same failures;
// they differ only in the flushes the kernel is asked for (strace-checked in
// tests/python/test_autoprofile.py).
void commits_every_file_and_reports_each_failure_alone(Durability durability) {
  TempDir dir;
  ASSERT_EQ(::mkdir((dir.path() + "/sub").c_str(), 0755), 0);
  AtomicWriteBatch batch(durability);
  EXPECT_EQ(batch.add(dir.path() + "/a.json", "A"), 0u);
  EXPECT_EQ(batch.add(dir.path() + "/missing/b.json", "B"), 1u);
  EXPECT_EQ(batch.add(dir.path() + "/sub", "C"), 2u);  // a directory stands there
  EXPECT_EQ(batch.add(dir.path() + "/sub/d.json", "D"), 3u);
  const std::string big = sample_text(2'000'000);
  EXPECT_EQ(batch.add(dir.path() + "/e.json", big), 4u);
  std::vector<Result<Ok>> done = batch.commit();
  ASSERT_EQ(done.size(), 5u);
  EXPECT_TRUE(done[0].ok());
  ASSERT_FALSE(done[1].ok());
  EXPECT_EQ(done[1].error().errnum, ENOENT);
  EXPECT_NE(done[1].error().message.find("missing/b.json"), std::string::npos)
      << done[1].error().message;
  ASSERT_FALSE(done[2].ok());
  EXPECT_EQ(done[2].error().errnum, EISDIR);
  EXPECT_TRUE(done[3].ok());
  EXPECT_TRUE(done[4].ok());
  EXPECT_EQ(slurp(dir.path() + "/a.json"), "A");
  EXPECT_EQ(slurp(dir.path() + "/sub/d.json"), "D");
  EXPECT_EQ(slurp(dir.path() + "/e.json"), big);
  std::vector<std::string> files = dir.files();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"a.json", "e.json", "sub"}));  // no temporaries left
  EXPECT_EQ(batch.size(), 0u);
}

TEST(AtomicWriteBatch, CommitsEveryFileAndReportsEachFailureAlone) {
  commits_every_file_and_reports_each_failure_alone(Durability::kEachCommit);
}

TEST(AtomicWriteBatch, DeferredCommitsEveryFileAndReportsEachFailureAlone) {
  commits_every_file_and_reports_each_failure_alone(Durability::kDeferred);
}

TEST(SyncFilesystemOf, SyncsAnExistingDirectoryAndReportsAMissingOne) {
  TempDir dir;
  EXPECT_EQ(sync_filesystem_of(dir.path()), 0);
  EXPECT_EQ(sync_filesystem_of(dir.path() + "/missing"), ENOENT);
}

TEST(AtomicWriteBatch, FilesNeverCommittedLeaveNothingBehind) {
  TempDir dir;
  {
    AtomicWriteBatch batch;
    batch.add(dir.path() + "/a.json", "A");
    batch.add(dir.path() + "/b.json", sample_text(100'000));
    EXPECT_EQ(dir.files().size(), 2u);  // the two temporaries
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(ReadFile, ReadsBytesAndReportsErrno) {
  TempDir dir;
  std::string bytes = sample_text(100'000);
  bytes[10] = '\0';  // binary-safe
  const std::string path = dir.path() + "/f.bin";
  ASSERT_TRUE(write_file_atomic(path, bytes).ok());
  const Result<std::string> r = read_file(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), bytes);

  const Result<std::string> missing = read_file(dir.path() + "/nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, Error::Kind::kIo);
  EXPECT_EQ(missing.error().errnum, ENOENT);
  EXPECT_NE(missing.error().message.find("nope.json"), std::string::npos);

  const Result<std::string> directory = read_file(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().errnum, EISDIR);
}

TEST(ReadFile, ReadsFilesThatReportNoSize) {
  // /proc files stat as size 0: read_file must read to EOF, not trust st_size.
  const Result<std::string> r = read_file("/proc/self/status");
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r.value().find("Name:"), std::string::npos);
}

}  // namespace
}  // namespace mlprof
