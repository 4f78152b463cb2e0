// The BoltDB reader (boltdb.h).
//
// Podman 4 keeps its containers in a BoltDB file (libpod's bolt_state.go).
// No maintained C or C++ reader exists; the format is small and frozen
// (go.etcd.io/bbolt: page.go, bucket.go, db.go), so it is read here:
// two meta pages, branch and leaf pages, buckets inline or on their own pages.

#include "agent/boltdb.h"

#include <cstdint>
#include <cstring>
#include <utility>

namespace mlprof::agent {

namespace {

constexpr uint32_t kBoltMagic = 0xED0CDAED;
constexpr uint16_t kBranchPage = 0x01;
constexpr uint16_t kLeafPage = 0x02;
constexpr uint32_t kBucketLeafFlag = 0x01;
constexpr size_t kPageHeader = 16;  // id u64, flags u16, count u16, overflow u32

template <typename T>
bool load(std::string_view data, size_t at, T& out) {
  if (at > data.size() || data.size() - at < sizeof(T)) return false;
  std::memcpy(&out, data.data() + at, sizeof(T));
  return true;
}

class BoltReader {
 public:
  explicit BoltReader(std::string_view db) : db_(db) {}

  Result<Ok> open() {
    // Meta pages 0 and 1; the page size is in the meta itself, so page 1 is
    // looked for at that size. The newest valid meta (by txid) wins.
    uint64_t best_txid = 0;
    bool found = false;
    for (int i = 0; i < 2; ++i) {
      const size_t at = i == 0 ? 0 : page_size_guess();
      if (at == 0 && i == 1) break;
      uint32_t magic = 0, version = 0, psize = 0;
      uint64_t root = 0, txid = 0, checksum = 0;
      if (!load(db_, at + kPageHeader, magic) || magic != kBoltMagic) continue;
      load(db_, at + kPageHeader + 4, version);
      load(db_, at + kPageHeader + 8, psize);
      load(db_, at + kPageHeader + 16, root);
      load(db_, at + kPageHeader + 48, txid);
      load(db_, at + kPageHeader + 56, checksum);
      if (version != 2 || psize < 512 || psize > (1u << 20)) continue;
      if (fnv1a(db_.substr(at + kPageHeader, 56)) != checksum) continue;
      if (!found || txid > best_txid) {
        found = true;
        best_txid = txid;
        page_size_ = psize;
        root_ = root;
      }
    }
    if (!found) return Error{Error::Kind::kCorrupt, 0, "not a BoltDB file (no valid meta page)"};
    return Ok{};
  }

  // Entries of the bucket at `path` (root when empty).
  Result<std::vector<BoltEntry>> bucket(const std::vector<std::string>& path) {
    std::string_view inline_page;
    uint64_t root = root_;
    for (const std::string& name : path) {
      std::vector<BoltEntry> raw;
      std::vector<std::string_view> values;
      size_t pages = page_count();
      if (!walk(root, inline_page, 0, pages, raw, &values)) return corrupt();
      bool found = false;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i].key != name) continue;
        if (!raw[i].is_bucket || values[i].size() < 16) return corrupt();
        load(values[i], 0, root);
        inline_page = root == 0 ? values[i].substr(16) : std::string_view();
        found = true;
        break;
      }
      if (!found) return Error{Error::Kind::kCorrupt, 0, "no bucket '" + name + "'"};
    }
    std::vector<BoltEntry> out;
    size_t pages = page_count();
    if (!walk(root, inline_page, 0, pages, out, nullptr)) return corrupt();
    return out;
  }

 private:
  static Error corrupt() {
    return Error{Error::Kind::kCorrupt, 0,
                 "a BoltDB page is out of bounds (file changed while read?)"};
  }

  size_t page_size_guess() const {
    uint32_t psize = 0;
    load(db_, kPageHeader + 8, psize);
    if (psize >= 512 && psize <= (1u << 20)) return psize;
    return 4096;
  }

  static uint64_t fnv1a(std::string_view bytes) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ull;
    }
    return h;
  }

  std::string_view page(uint64_t id) const {
    const uint64_t at = id * page_size_;
    if (page_size_ == 0 || at >= db_.size() || id > db_.size()) return {};
    uint32_t overflow = 0;
    if (!load(db_, at + 12, overflow)) return {};
    const uint64_t len = (static_cast<uint64_t>(overflow) + 1) * page_size_;
    if (len > db_.size() - at) return {};
    return db_.substr(at, len);
  }

  // Pages in the file, plus the inline page: what one walk of a tree visits
  // at most.
  size_t page_count() const { return db_.size() / page_size_ + 1; }

  // Appends the leaf entries under page `id` (or the inline page) in key order.
  // `pages` counts down the pages it may visit: branch pages that share a
  // child in a damaged file would otherwise make the walk exponential.
  bool walk(uint64_t id, std::string_view inline_page, int depth, size_t& pages,
            std::vector<BoltEntry>& out, std::vector<std::string_view>* values) const {
    if (depth > 32) return false;  // a cycle in a damaged file
    if (pages == 0) return false;
    --pages;
    const std::string_view p = id == 0 ? inline_page : page(id);
    uint16_t flags = 0, count = 0;
    if (!load(p, 8, flags) || !load(p, 10, count)) return false;
    if (flags & kBranchPage) {
      for (uint16_t i = 0; i < count; ++i) {
        const size_t elem = kPageHeader + size_t{i} * 16;
        uint64_t child = 0;
        if (!load(p, elem + 8, child) || child == 0) return false;
        if (!walk(child, {}, depth + 1, pages, out, values)) return false;
      }
      return true;
    }
    if (!(flags & kLeafPage)) return false;
    for (uint16_t i = 0; i < count; ++i) {
      const size_t elem = kPageHeader + size_t{i} * 16;
      uint32_t eflags = 0, pos = 0, ksize = 0, vsize = 0;
      if (!load(p, elem, eflags) || !load(p, elem + 4, pos) || !load(p, elem + 8, ksize) ||
          !load(p, elem + 12, vsize)) {
        return false;
      }
      const uint64_t kat = elem + static_cast<uint64_t>(pos);
      if (kat + ksize + vsize > p.size()) return false;
      BoltEntry e;
      e.key.assign(p.data() + kat, ksize);
      const std::string_view value = p.substr(kat + ksize, vsize);
      e.is_bucket = (eflags & kBucketLeafFlag) != 0;
      if (!e.is_bucket) e.value.assign(value);
      out.push_back(std::move(e));
      if (values != nullptr) values->push_back(value);
    }
    return true;
  }

  std::string_view db_;
  uint32_t page_size_ = 0;
  uint64_t root_ = 0;
};

}  // namespace

Result<std::vector<BoltEntry>> read_bolt_bucket(std::string_view db,
                                                const std::vector<std::string>& bucket) {
  BoltReader reader(db);
  if (auto r = reader.open(); !r) return r.error();
  return reader.bucket(bucket);
}

}  // namespace mlprof::agent
