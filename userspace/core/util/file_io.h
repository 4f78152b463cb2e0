#pragma once
// Files: gzip (zlib) and atomic writes. Reading a profile back is json_read.h.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mlprof {

// gzip member (RFC 1952) at zlib level 1: on a 1M-span document it is
// 6x faster than the default level for a file 16% larger.
std::string gzip_compress(std::string_view data);
// Inflates a gzip stream; kTruncated if it ends early, kCorrupt if it is not gzip
// or fails its CRC, kUnsupported if it inflates past `max_out` bytes.
Result<std::string> gzip_decompress(std::string_view data, size_t max_out = SIZE_MAX);
// The most a file read as a profile (load(), an import) may inflate to:
// 100 times its size, or 64 MiB if that is more. Our own documents inflate
// about 5x; deflate allows 1032x, so a 1 MB file could become 1 GB.
size_t gzip_input_limit(size_t compressed_size);
bool is_gzip(std::string_view data);  // starts with the gzip magic bytes

// Writes `data` to `path` through a temporary file in the same directory,
// fsync and rename(2). On failure the temporary file is removed and `path`
// is untouched; the Error names the path and the errno.
Result<Ok> write_file_atomic(const std::string& path, std::string_view data);

// write_file_atomic for many files with one flush: add() writes each to its
// temporary file, commit() makes each durable, renames it into place and
// flushes each directory once (on a virtio disk, 2.4 interrupts per file
// instead of 7 in batches of 16: bench/fsync_batch.py). Each file succeeds or
// fails alone; the destructor removes the temporaries of files never committed.
//
// Durability::kDeferred (the background writer) skips both flushes: each file
// is still whole before its rename (a killed process never leaves a partial
// file under the final name), and its data is submitted to the disk before
// the rename, but surviving a power loss waits for the filesystem's next
// commit or for sync_filesystem_of() (bench/RESULTS.md: a journal commit
// per fsync is most of the writer's disk interrupts).
enum class Durability { kEachCommit, kDeferred };
class AtomicWriteBatch {
 public:
  explicit AtomicWriteBatch(Durability durability = Durability::kEachCommit)
      : durability_(durability) {}
  AtomicWriteBatch(const AtomicWriteBatch&) = delete;
  AtomicWriteBatch& operator=(const AtomicWriteBatch&) = delete;
  ~AtomicWriteBatch();
  // Returns the file's index in commit()'s results.
  size_t add(const std::string& path, std::string_view data);
  size_t size() const { return entries_.size(); }
  // One result per add(), in order; the batch is empty afterwards.
  std::vector<Result<Ok>> commit();

 private:
  struct Entry {
    std::string path, dir, tmp;
    int fd;
    Result<Ok> status;
  };
  Result<Ok> stage(Entry& e, std::string_view data);
  Result<Ok> publish(Entry& e) const;
  static void discard(Entry& e);  // closes and removes what is left of a file
  Durability durability_;
  std::vector<Entry> entries_;
};

// syncfs(2) of the filesystem holding directory `dir`: every file written
// there so far is durable when it returns. Returns 0 or the errno.
int sync_filesystem_of(const std::string& dir);
// The whole file (to EOF: /proc files report size 0), or its first
// max_bytes for a file that is not trusted to be small (cut there).
Result<std::string> read_file(const std::string& path, size_t max_bytes = SIZE_MAX);
// pread(2) of exactly `size` bytes at `offset`, retried on EINTR and short
// reads; false at EOF or an error.
bool pread_all(int fd, void* buf, size_t size, uint64_t offset);

}  // namespace mlprof
