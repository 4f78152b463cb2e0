#include "util/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>

namespace mlprof {

namespace {

// zlib counts in uInt (32 bits): feed larger buffers in pieces.
constexpr size_t kZlibChunk = size_t{1} << 30;
// gzip_input_limit's: a compressed input may inflate to this many times its
// size, or to the floor if that is more.
constexpr size_t kGzipInputFactor = 100, kGzipInputFloor = size_t{64} << 20;
constexpr int kGzipWindow = 15 + 16;  // 32K window, gzip wrapper (not zlib, not raw)

Error io_error(int errnum, const std::string& what, const std::string& path) {
  return Error{Error::Kind::kIo, errnum, what + " '" + path + "': " + std::strerror(errnum)};
}

// Closes a file descriptor on scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports close(2)'s errno (0 on success): on NFS and some
  // other filesystems a write error shows up only here.
  int close_now() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const size_t n = std::min(data.size(), size_t{1} << 30);
    const ssize_t w = ::write(fd, data.data(), n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return 0;
}

// "dir/.name.tmp-<pid>-<random>": hidden, in the target's directory (rename(2)
// is atomic only within one filesystem), and unique across processes and threads
// (the pid, and a counter mixed with a per-process seed). No thread_local
// generator: a 2.5 KB mt19937_64 in TLS kept the extension's TLS out of
// glibc's static surplus, making every thread_local access a call.
std::string temp_name(const std::string& dir, const std::string& base) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  uint64_t x = seed + counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL;  // splitmix64's step and mix
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp-%d-%llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(x));
  return dir + "/." + base + suffix;
}

}  // namespace

std::string gzip_compress(std::string_view data) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::bad_alloc();  // the only way deflateInit2 fails with valid arguments
  }
  std::string out;
  out.resize(deflateBound(&zs, static_cast<uLong>(std::min(data.size(), kZlibChunk))) + 64);
  size_t produced = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0 && !data.empty()) {
      const size_t n = std::min(data.size(), kZlibChunk);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      zs.avail_in = static_cast<uInt>(n);
      data.remove_prefix(n);
    }
    if (produced == out.size()) out.resize(out.size() * 2);
    const size_t room = std::min(out.size() - produced, kZlibChunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(room);
    rc = deflate(&zs, data.empty() ? Z_FINISH : Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_ERROR) {
      deflateEnd(&zs);
      throw std::logic_error("gzip_compress: deflate stream error");
    }
  }
  deflateEnd(&zs);
  out.resize(produced);
  return out;
}

size_t gzip_input_limit(size_t compressed_size) {
  return compressed_size > SIZE_MAX / kGzipInputFactor
             ? SIZE_MAX
             : std::max(kGzipInputFloor, compressed_size * kGzipInputFactor);
}

Result<std::string> gzip_decompress(std::string_view data, size_t max_out) {
  if (!is_gzip(data)) {
    return Error{Error::Kind::kCorrupt, 0, "not gzip data (no gzip magic bytes 1f 8b)"};
  }
  z_stream zs{};
  if (inflateInit2(&zs, kGzipWindow) != Z_OK) throw std::bad_alloc();
  const size_t compressed = data.size();
  std::string out;
  out.resize(std::min(std::max<size_t>(data.size() * 4, 4096), max_out));
  size_t produced = 0;
  Result<std::string> result = Error{};
  for (;;) {
    if (produced == max_out) {
      result = Error{
          Error::Kind::kUnsupported, 0,
          "its " + std::to_string(compressed) + " bytes of gzip inflate to more than " +
              std::to_string(max_out) + " bytes, the limit for a compressed input of that size (" +
              std::to_string(kGzipInputFactor) + " times, at least " +
              std::to_string(kGzipInputFloor >> 20) + " MiB): gunzip it to read it whole"};
      break;
    }
    if (zs.avail_in == 0 && !data.empty()) {
      const size_t n = std::min(data.size(), kZlibChunk);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      zs.avail_in = static_cast<uInt>(n);
      data.remove_prefix(n);
    }
    if (produced == out.size()) out.resize(std::min(out.size() * 2, max_out));
    const size_t room = std::min(out.size() - produced, kZlibChunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // gzip allows several members one after another (cat a.gz b.gz).
      if (zs.avail_in == 0 && data.empty()) {
        out.resize(produced);
        result = std::move(out);
        break;
      }
      // Whatever follows must be another member: inflate rejects a bad header.
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && data.empty()) {
      result = Error{Error::Kind::kTruncated, 0,
                     "the gzip stream ends early (the file is cut off after " +
                         std::to_string(zs.total_in) + " bytes)"};
      break;
    }
    if (rc == Z_BUF_ERROR) continue;  // output full: grow and go on
    if (rc == Z_MEM_ERROR) {
      inflateEnd(&zs);
      throw std::bad_alloc();
    }
    result = Error{
        Error::Kind::kCorrupt, 0,
        std::string("the gzip data is corrupt (") + (zs.msg ? zs.msg : "inflate failed") + ")"};
    break;
  }
  inflateEnd(&zs);
  return result;
}

bool is_gzip(std::string_view data) {
  return data.size() >= 2 && data[0] == '\x1f' && data[1] == '\x8b';
}

AtomicWriteBatch::~AtomicWriteBatch() {
  for (Entry& e : entries_) discard(e);
}

void AtomicWriteBatch::discard(Entry& e) {
  if (e.fd >= 0) ::close(e.fd);
  e.fd = -1;
  if (!e.tmp.empty()) ::unlink(e.tmp.c_str());
  e.tmp.clear();
}

size_t AtomicWriteBatch::add(const std::string& path, std::string_view data) {
  entries_.push_back(Entry{path, "", "", -1, Ok{}});
  Entry& e = entries_.back();
  e.status = stage(e, data);
  if (!e.status.ok()) discard(e);
  return entries_.size() - 1;
}

Result<Ok> AtomicWriteBatch::stage(Entry& e, std::string_view data) {
  const std::string& path = e.path;
  if (path.empty())
    return Error{Error::Kind::kIo, ENOENT, "cannot write a file with an empty path"};
  const size_t slash = path.rfind('/');
  e.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return io_error(EISDIR, "cannot write", path);

  // A new file gets 0644 less the umask, like any file a program creates
  // (mkstemp's 0600 would surprise whoever reads the profile next); a file
  // being replaced keeps its permission bits.
  bool replacing = false;
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0) {
    if (S_ISDIR(existing.st_mode)) return io_error(EISDIR, "cannot write", path);
    replacing = S_ISREG(existing.st_mode);
  }
  for (int attempt = 0; e.fd < 0; ++attempt) {
    e.tmp = temp_name(e.dir, base);
    e.fd = ::open(e.tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (e.fd < 0 && (errno != EEXIST || attempt == 100)) {
      const int err = errno;
      e.tmp.clear();
      return io_error(err, "cannot create a temporary file next to", path);
    }
  }
  if (replacing && ::fchmod(e.fd, existing.st_mode & 0777) != 0) {
    return io_error(errno, "cannot set permissions on", path);
  }
  if (const int err = write_all(e.fd, data)) return io_error(err, "cannot write", path);
  // Submits the data to the disk now, without waiting, so the flushes in
  // commit() find every file's blocks already on their way.
  ::sync_file_range(e.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  return Ok{};
}

std::vector<Result<Ok>> AtomicWriteBatch::commit() {
  std::vector<Result<Ok>> out;
  out.reserve(entries_.size());
  std::vector<std::string> dirs;
  for (Entry& e : entries_) {
    if (e.status.ok()) e.status = publish(e);
    discard(e);  // what a failed publish left: its temporary file
    if (durability_ == Durability::kEachCommit && e.status.ok() &&
        std::find(dirs.begin(), dirs.end(), e.dir) == dirs.end()) {
      dirs.push_back(e.dir);
    }
  }
  // Persist the renames, once per directory. Filesystems that cannot fsync
  // a directory say EINVAL; nothing more can be done there.
  for (const std::string& dir : dirs) {
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) continue;
    FdGuard dir_fd(dfd);
    if (::fsync(dfd) == 0 || errno == EINVAL) continue;
    const int err = errno;
    for (Entry& e : entries_) {
      if (e.status.ok() && e.dir == dir)
        e.status = io_error(err, "wrote, but cannot flush the directory of", e.path);
    }
  }
  for (Entry& e : entries_) out.push_back(std::move(e.status));
  entries_.clear();
  return out;
}

Result<Ok> AtomicWriteBatch::publish(Entry& e) const {
  // The data must be on disk before the rename makes it visible: otherwise a
  // power loss can leave an empty or partial file under the final name.
  // Deferred: stage() submitted it; ext4's default ordered mode writes it
  // before the commit that carries the rename.
  const int fd = e.fd;
  e.fd = -1;
  FdGuard file(fd);
  if (durability_ == Durability::kEachCommit && ::fsync(fd) != 0)
    return io_error(errno, "cannot flush", e.path);
  if (const int err = file.close_now()) return io_error(err, "cannot write", e.path);
  if (::rename(e.tmp.c_str(), e.path.c_str()) != 0)
    return io_error(errno, "cannot replace", e.path);
  e.tmp.clear();
  return Ok{};
}

Result<Ok> write_file_atomic(const std::string& path, std::string_view data) {
  AtomicWriteBatch batch;
  batch.add(path, data);
  return std::move(batch.commit().front());
}

int sync_filesystem_of(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno;
  FdGuard guard(dfd);
  return ::syncfs(dfd) == 0 ? 0 : errno;
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(errno, "cannot open", path);
  FdGuard file(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error(errno, "cannot read", path);
  if (S_ISDIR(st.st_mode)) return io_error(EISDIR, "cannot read", path);
  std::string out;
  // st_size is a hint (0 for /proc and pipes): read to EOF either way.
  out.resize(std::min(st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 65536, max_bytes));
  size_t got = 0;
  while (got < max_bytes) {
    if (got == out.size()) out.resize(std::min(out.size() * 2, max_bytes));
    const ssize_t r = ::read(fd, out.data() + got, std::min(out.size() - got, size_t{1} << 30));
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error(errno, "cannot read", path);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

bool pread_all(int fd, void* buf, size_t size, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace mlprof
