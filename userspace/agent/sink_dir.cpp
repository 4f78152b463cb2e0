#include "agent/sink_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/file_io.h"

namespace mlprof::agent {

namespace {

class DirectorySink final : public Sink {
 public:
  explicit DirectorySink(std::string dir) : dir_(std::move(dir)) {}

  Delivery deliver(const SpoolItem& item) override {
    struct stat st {};
    if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      const int e = errno;
      return {DeliveryStatus::kRetry, "the directory " + dir_ + " is not there (" +
                                          (e == 0 ? std::string("not a directory") : std::strerror(e)) +
                                          "): the agent does not create it"};
    }
    auto data = read_file(item.path);
    if (!data) return {DeliveryStatus::kReject, "the spooled document cannot be read: " + data.error().message};
    const std::string to = dir_ + "/" + item_file_name(item.key);
    if (auto w = write_file_atomic(to, data.value()); !w) {
      return {DeliveryStatus::kRetry, w.error().message};  // ENOSPC, EROFS, EACCES: all may pass
    }
    return {DeliveryStatus::kDelivered, to};
  }

  std::string describe() const override { return dir_; }

 private:
  std::string dir_;
};

}  // namespace

std::string item_file_name(const std::string& key) {
  std::string name = key;
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (name.empty() || name[0] == '.') name.insert(name.begin(), '_');
  return name + ".json.gz";
}

std::unique_ptr<Sink> open_directory_sink(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return std::make_unique<DirectorySink>(d);
}

}  // namespace mlprof::agent
