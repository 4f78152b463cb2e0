#include "agent/sink_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "agent/clock.h"
#include "util/file_io.h"

namespace mlprof::agent {

namespace {

constexpr const char* kSuffix = ".json.gz";
// A write cut short by a crash leaves write_file_atomic's ".NAME.tmp-..."
// behind; one this old is nobody's write in progress.
constexpr int64_t kStaleTemporaryNs = int64_t{3600} * 1'000'000'000;

bool all_of(const std::string& s, size_t from, size_t to, bool (*ok)(char)) {
  if (from >= to) return false;
  for (size_t i = from; i < to; ++i) {
    if (!ok(s[i])) return false;
  }
  return true;
}

bool slug_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-';
}
bool digit(char c) { return c >= '0' && c <= '9'; }
bool hex(char c) { return digit(c) || (c >= 'a' && c <= 'f'); }

// ".NAME.tmp-PID-HEX" of an item file NAME: the item's name, else "".
std::string temporary_of(const std::string& name) {
  if (name.size() < 2 || name[0] != '.') return {};
  const size_t tmp = name.rfind(".tmp-");
  if (tmp == std::string::npos) return {};
  const std::string item = name.substr(1, tmp - 1);
  return is_item_file_name(item) ? item : std::string();
}

class DirectorySink final : public Sink {
 public:
  DirectorySink(std::string dir, DirectoryRetention retention)
      : dir_(std::move(dir)), retention_(retention) {
    std::lock_guard<std::mutex> lock(mu_);
    if (scan_locked(unix_now_ns())) {
      prune_locked(unix_now_ns(), 0);
    } else {
      stats_.last_error.clear();  // not there yet: deliver() says so
    }
  }

  Delivery deliver(const SpoolItem& item) override {
    struct stat st {};
    if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      const int e = errno;
      return {DeliveryStatus::kRetry,
              "the directory " + dir_ + " is not there (" +
                  (e == 0 ? std::string("not a directory") : std::strerror(e)) +
                  "): the agent does not create it"};
    }
    auto data = read_file(item.path);
    if (!data)
      return {DeliveryStatus::kReject,
              "the spooled document cannot be read: " + data.error().message};
    const uint64_t size = data.value().size();
    if (retention_.max_bytes > 0 && size > retention_.max_bytes) {
      return {DeliveryStatus::kReject,
              "the item's document (" + std::to_string(size) +
                  " bytes) is larger than the directory's bound (--sink-max-mb, " +
                  std::to_string(retention_.max_bytes) + " bytes)"};
    }
    const std::string name = item_file_name(item.key);
    const std::string to = dir_ + "/" + name;
    const int64_t now = unix_now_ns();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!scanned_ && !scan_locked(now)) {
        return {DeliveryStatus::kRetry, "cannot list " + dir_ + ": " + stats_.last_error};
      }
      // Room first: the new file (and its temporary) never takes the
      // directory past the bound, even for a moment. A re-delivery replaces
      // its own file, whose size is freed by the rename.
      forget_locked(name);
      if (!prune_locked(now, size)) {
        return {DeliveryStatus::kRetry, "cannot make room in " + dir_ + ": " + stats_.last_error};
      }
    }
    // Written without the lock (the rotation's maintain() does not wait for
    // the disk); only this thread writes, so the room made stays free.
    if (auto w = write_file_atomic(to, data.value()); !w) {
      return {DeliveryStatus::kRetry, w.error().message};  // ENOSPC, EROFS, EACCES: all may pass
    }
    std::lock_guard<std::mutex> lock(mu_);
    forget_locked(name);  // a listing in between may have found it already
    files_.push_back({now, name, size});
    bytes_ += size;
    return {DeliveryStatus::kDelivered, to};
  }

  std::string describe() const override { return dir_; }
  std::string identity() const override { return "dir:" + absolute_path(dir_); }

  void maintain(int64_t now_unix_ns) override {
    std::lock_guard<std::mutex> lock(mu_);
    // Listed again: files removed or added by hand since are counted right.
    if (scan_locked(now_unix_ns)) prune_locked(now_unix_ns, 0);
  }

  std::optional<RetentionStats> retention() const override {
    std::lock_guard<std::mutex> lock(mu_);
    RetentionStats r = stats_;
    r.max_bytes = retention_.max_bytes;
    r.max_age_ns = retention_.max_age_ns;
    r.files = files_.size();
    r.bytes = bytes_;
    return r;
  }

 private:
  struct File {
    int64_t mtime_ns = 0;
    std::string name;
    uint64_t bytes = 0;
  };

  // Lists the agent's files (and removes stale temporaries of them). False
  // when the directory cannot be listed (not there yet: nothing to keep).
  bool scan_locked(int64_t now) {
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) {
      stats_.last_error = dir_ + ": " + std::strerror(errno);
      return false;
    }
    std::vector<File> found;
    while (dirent* ent = ::readdir(d)) {
      const std::string name = ent->d_name;
      const bool item = is_item_file_name(name);
      if (!item && temporary_of(name).empty()) continue;
      struct stat st {};
      if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode))
        continue;
      const int64_t mtime =
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      if (item) {
        found.push_back({mtime, name, static_cast<uint64_t>(st.st_size)});
      } else if (now - mtime > kStaleTemporaryNs && ::unlinkat(::dirfd(d), name.c_str(), 0) == 0) {
        ++stats_.pruned_files;
        stats_.pruned_bytes += static_cast<uint64_t>(st.st_size);
      }
    }
    ::closedir(d);
    // Oldest first; the name orders files of one instant (a key's period and run).
    std::sort(found.begin(), found.end(), [](const File& a, const File& b) {
      return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
    });
    files_ = std::move(found);
    bytes_ = 0;
    for (const File& f : files_) bytes_ += f.bytes;
    scanned_ = true;
    return true;
  }

  void forget_locked(const std::string& name) {
    auto it =
        std::find_if(files_.begin(), files_.end(), [&](const File& f) { return f.name == name; });
    if (it == files_.end()) return;
    bytes_ -= std::min(bytes_, it->bytes);
    files_.erase(it);
  }

  // Removes the oldest files until `incoming` more bytes fit and none is
  // past the age. False when a removal failed with room still short.
  bool prune_locked(int64_t now, uint64_t incoming) {
    while (!files_.empty()) {
      const File& oldest = files_.front();
      const bool over_bytes = retention_.max_bytes > 0 && bytes_ + incoming > retention_.max_bytes;
      const bool too_old =
          retention_.max_age_ns > 0 && now - oldest.mtime_ns > retention_.max_age_ns;
      if (!over_bytes && !too_old) break;
      if (::unlink((dir_ + "/" + oldest.name).c_str()) == 0) {
        ++stats_.pruned_files;
        stats_.pruned_bytes += oldest.bytes;
      } else if (errno != ENOENT) {  // gone already (by hand): just not counted
        stats_.last_error = oldest.name + ": " + std::strerror(errno);
        return !over_bytes;
      }
      bytes_ -= std::min(bytes_, oldest.bytes);
      files_.erase(files_.begin());
    }
    stats_.last_error.clear();
    return true;
  }

  const std::string dir_;
  const DirectoryRetention retention_;
  mutable std::mutex mu_;  // deliver() runs on the spool's thread, maintain() on the rotation's
  bool scanned_ = false;
  std::vector<File> files_;  // the agent's files there, oldest first
  uint64_t bytes_ = 0;
  RetentionStats stats_;  // pruned_*, last_error
};

}  // namespace

std::string item_file_name(const std::string& key) {
  std::string name = key;
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (name.empty() || name[0] == '.') name.insert(name.begin(), '_');
  return name + ".json.gz";
}

bool is_item_file_name(const std::string& name) {
  const size_t n = std::strlen(kSuffix);
  if (name.size() <= n || !name.ends_with(kSuffix)) return false;
  const std::string key = name.substr(0, name.size() - n);
  // NODE _ WORKLOAD _ YYYYMMDDTHHMMSSZ _ RUN.N: exactly three '_'.
  const size_t a = key.find('_');
  const size_t b = a == std::string::npos ? a : key.find('_', a + 1);
  const size_t c = b == std::string::npos ? b : key.find('_', b + 1);
  if (c == std::string::npos || key.find('_', c + 1) != std::string::npos) return false;
  if (!all_of(key, 0, a, slug_char) || !all_of(key, a + 1, b, slug_char)) return false;
  const std::string when = key.substr(b + 1, c - b - 1);
  if (when.size() != 16 || when[8] != 'T' || when[15] != 'Z' || !all_of(when, 0, 8, digit) ||
      !all_of(when, 9, 15, digit)) {
    return false;
  }
  const size_t dot = key.find('.', c + 1);
  return dot != std::string::npos && all_of(key, c + 1, dot, hex) &&
         all_of(key, dot + 1, key.size(), digit);
}

std::unique_ptr<Sink> open_directory_sink(const std::string& dir, DirectoryRetention retention) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return std::make_unique<DirectorySink>(d, retention);
}

}  // namespace mlprof::agent
