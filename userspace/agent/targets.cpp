#include "agent/targets.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rapidjson/document.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "util/file_io.h"

namespace mlprof::agent {

namespace {

// ---- small file helpers ---------------------------------------------------

// The whole file, or nullopt. /proc files report size 0, so read to EOF.
std::optional<std::string> read_text(const std::string& path, size_t limit = 64u << 20) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) break;
  }
  ::close(fd);
  return out;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::string cut_deleted(std::string path) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (ends_with(path, kDeleted)) path.resize(path.size() - kDeleted.size());
  return path;
}

std::string short_id(const std::string& id) { return id.substr(0, 12); }

// ---- rapidjson accessors that tolerate missing or mistyped fields ----------

const rapidjson::Value* member(const rapidjson::Value& v, const char* name) {
  if (!v.IsObject()) return nullptr;
  auto it = v.FindMember(name);
  return it == v.MemberEnd() ? nullptr : &it->value;
}
std::string string_member(const rapidjson::Value& v, const char* name) {
  const rapidjson::Value* m = member(v, name);
  return m != nullptr && m->IsString() ? std::string(m->GetString(), m->GetStringLength())
                                       : std::string();
}
int64_t int_member(const rapidjson::Value& v, const char* name) {
  const rapidjson::Value* m = member(v, name);
  return m != nullptr && m->IsInt64() ? m->GetInt64() : 0;
}

bool parse_json(std::string_view text, rapidjson::Document& doc) {
  doc.Parse(text.data(), text.size());
  return !doc.HasParseError();
}

}  // namespace

// ---- parsers --------------------------------------------------------------

std::optional<std::string> extension_in_maps(std::string_view maps) {
  for (std::string_view line : split_lines(maps)) {
    // address perms offset dev inode, then the path (which may hold spaces).
    size_t pos = 0;
    for (int field = 0; field < 5; ++field) {
      pos = line.find_first_not_of(' ', pos);
      if (pos == std::string_view::npos) break;
      pos = line.find(' ', pos);
      if (pos == std::string_view::npos) break;
    }
    if (pos == std::string_view::npos) continue;
    pos = line.find_first_not_of(' ', pos);
    if (pos == std::string_view::npos || line[pos] != '/') continue;
    std::string path = cut_deleted(std::string(line.substr(pos)));
    const size_t slash = path.rfind('/');
    const std::string_view base = std::string_view(path).substr(slash + 1);
    const std::string_view dir = std::string_view(path).substr(0, slash);
    if (starts_with(base, "_core") && (ends_with(base, ".so")) &&
        ends_with(dir, "/mlflow_profiler"))
      return path;
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_v2_path(std::string_view proc_cgroup) {
  for (std::string_view line : split_lines(proc_cgroup)) {
    if (starts_with(line, "0::")) return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::string container_id_in_cgroup(std::string_view cgroup_path) {
  // Deepest component first: runtimes nest helpers below the container
  // ("libpod-<id>.scope/container"), never containers below helpers.
  std::string_view rest = cgroup_path;
  while (!rest.empty()) {
    const size_t slash = rest.rfind('/');
    std::string_view comp = slash == std::string_view::npos ? rest : rest.substr(slash + 1);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(0, slash);
    if (starts_with(comp, "libpod-conmon-") || starts_with(comp, "crio-conmon-")) continue;
    if (ends_with(comp, ".scope")) comp.remove_suffix(6);
    for (std::string_view prefix :
         {"docker-", "libpod-", "cri-containerd-", "crio-", "containerd-", "nerdctl-"}) {
      if (starts_with(comp, prefix)) {
        comp.remove_prefix(prefix.size());
        break;
      }
    }
    if (comp.size() == 64 && is_hex(comp)) return std::string(comp);
  }
  return {};
}

std::string cgroup2_mount_in_mountinfo(std::string_view mountinfo) {
  for (std::string_view line : split_lines(mountinfo)) {
    const size_t sep = line.find(" - ");
    if (sep == std::string_view::npos || !starts_with(line.substr(sep + 3), "cgroup2 ")) continue;
    // Fields: id parent major:minor root mountpoint ...
    size_t pos = 0;
    std::string_view field;
    for (int i = 0; i < 5; ++i) {
      const size_t end = line.find(' ', pos);
      field = line.substr(pos, end - pos);
      pos = end + 1;
    }
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    std::string out;
    for (size_t i = 0; i < field.size(); ++i) {
      if (field[i] == '\\' && i + 3 < field.size()) {
        const std::string oct(field.substr(i + 1, 3));
        out.push_back(static_cast<char>(std::strtol(oct.c_str(), nullptr, 8)));
        i += 3;
      } else {
        out.push_back(field[i]);
      }
    }
    return out;
  }
  return {};
}

// ---- ELF: .note.stapsdt ---------------------------------------------------
// Hand-read through <elf.h>: one section of one file. libbpf reads the same
// notes again when it attaches; taking libelf in here only to find a section
// would add a link dependency to the targets library and its tests.

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Error elf_error(const std::string& path, const std::string& what) {
  return Error{Error::Kind::kCorrupt, 0, path + ": " + what};
}

}  // namespace

Result<bool> has_mlprof_usdt(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) {
    const int e = errno;
    return Error{Error::Kind::kIo, e, path + ": " + std::strerror(e)};
  }
  Elf64_Ehdr eh{};
  if (!pread_all(f.fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return elf_error(path, "not an ELF file");
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return elf_error(path, "not a 64-bit little-endian ELF file");
  }
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Elf64_Shdr)) return false;  // no section table
  uint64_t count = eh.e_shnum;
  uint64_t strndx = eh.e_shstrndx;
  Elf64_Shdr first{};
  if (!pread_all(f.fd, &first, sizeof first, eh.e_shoff))
    return elf_error(path, "section table cut off");
  if (count == 0) count = first.sh_size;  // more than 0xff00 sections
  if (strndx == SHN_XINDEX) strndx = first.sh_link;
  if (count > 65536 || strndx >= count) return elf_error(path, "implausible section table");

  std::vector<Elf64_Shdr> sections(count);
  if (!pread_all(f.fd, sections.data(), count * sizeof(Elf64_Shdr), eh.e_shoff)) {
    return elf_error(path, "section table cut off");
  }
  const Elf64_Shdr& strtab = sections[strndx];
  if (strtab.sh_size > (16u << 20)) return elf_error(path, "implausible section name table");
  std::string names(strtab.sh_size, '\0');
  if (!pread_all(f.fd, names.data(), names.size(), strtab.sh_offset))
    return elf_error(path, "section names cut off");

  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type != SHT_NOTE || s.sh_name >= names.size()) continue;
    if (std::strcmp(names.c_str() + s.sh_name, ".note.stapsdt") != 0) continue;
    if (s.sh_size > (64u << 20)) return elf_error(path, "implausible .note.stapsdt size");
    std::string notes(s.sh_size, '\0');
    if (!pread_all(f.fd, notes.data(), notes.size(), s.sh_offset))
      return elf_error(path, ".note.stapsdt cut off");
    size_t pos = 0;
    auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
    while (pos + sizeof(Elf64_Nhdr) <= notes.size()) {
      Elf64_Nhdr nh{};
      std::memcpy(&nh, notes.data() + pos, sizeof nh);
      const size_t name_at = pos + sizeof nh;
      const size_t desc_at = name_at + align4(nh.n_namesz);
      const size_t next = desc_at + align4(nh.n_descsz);
      if (next > notes.size() || next <= pos) break;
      // desc: pc, base, semaphore (3 x u64), then "provider\0name\0args\0".
      if (nh.n_type == 3 && nh.n_namesz == 8 &&
          std::memcmp(notes.data() + name_at, "stapsdt", 8) == 0 && nh.n_descsz > 24) {
        const std::string_view desc(notes.data() + desc_at + 24, nh.n_descsz - 24);
        const std::string_view provider = desc.substr(0, desc.find('\0'));
        if (provider == "mlprof") return true;
      }
      pos = next;
    }
  }
  return false;
}

// ---- BoltDB (read-only) ---------------------------------------------------
// Podman 4 keeps its containers in a BoltDB file (libpod's bolt_state.go).
// No maintained C or C++ reader exists; the format is small and frozen
// (go.etcd.io/bbolt: page.go, bucket.go, db.go), so it is read here:
// two meta pages, branch and leaf pages, buckets inline or on their own pages.

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
      if (!walk(root, inline_page, 0, raw, &values)) return corrupt();
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
    if (!walk(root, inline_page, 0, out, nullptr)) return corrupt();
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

  // Appends the leaf entries under page `id` (or the inline page) in key order.
  bool walk(uint64_t id, std::string_view inline_page, int depth, std::vector<BoltEntry>& out,
            std::vector<std::string_view>* values) const {
    if (depth > 32) return false;  // a cycle in a damaged file
    const std::string_view p = id == 0 ? inline_page : page(id);
    uint16_t flags = 0, count = 0;
    if (!load(p, 8, flags) || !load(p, 10, count)) return false;
    if (flags & kBranchPage) {
      for (uint16_t i = 0; i < count; ++i) {
        const size_t elem = kPageHeader + size_t{i} * 16;
        uint64_t child = 0;
        if (!load(p, elem + 8, child) || child == 0) return false;
        if (!walk(child, {}, depth + 1, out, values)) return false;
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

// ---- containers -----------------------------------------------------------

std::string Container::describe() const {
  std::string who = runtime.empty() ? std::string("container") : runtime;
  if (name.empty()) return who + " " + short_id(id);
  return name + " (" + who + " " + short_id(id) + ")";
}

namespace {

void add_container(std::vector<Container>& list, Container c) {
  if (c.member_ids.empty()) c.member_ids.push_back(c.id);
  for (Container& have : list) {
    if (have.id != c.id) continue;
    // Same id seen twice (Docker's containers in containerd's "moby"
    // namespace; a Podman container in both its DB and containers/storage):
    // keep the named, richer record.
    if (have.name.empty() && !c.name.empty()) {
      c.cgroup = c.cgroup.empty() ? have.cgroup : c.cgroup;
      have = std::move(c);
    } else if (have.pid == 0) {
      have.pid = c.pid;
    }
    return;
  }
  list.push_back(std::move(c));
}

// Docker: /var/lib/docker/containers/<id>/config.v2.json (moby's container.Container).
void docker_containers(const HostPaths& paths, std::vector<Container>& list) {
  const std::string dir = paths.docker + "/containers";
  for (const std::string& id : list_dir(dir)) {
    auto text = read_text(dir + "/" + id + "/config.v2.json");
    rapidjson::Document doc;
    if (!text || !parse_json(*text, doc) || !doc.IsObject()) continue;
    Container c;
    c.runtime = "docker";
    c.id = string_member(doc, "ID");
    if (c.id.empty()) c.id = id;
    c.name = string_member(doc, "Name");
    if (!c.name.empty() && c.name[0] == '/') c.name.erase(0, 1);
    if (const rapidjson::Value* state = member(doc, "State")) {
      const rapidjson::Value* running = member(*state, "Running");
      c.running = running != nullptr && running->IsBool() && running->GetBool();
      c.pid = static_cast<pid_t>(int_member(*state, "Pid"));
    }
    // Kubernetes through dockershim labels its containers.
    if (const rapidjson::Value* config = member(doc, "Config")) {
      if (const rapidjson::Value* labels = member(*config, "Labels")) {
        const std::string pod = string_member(*labels, "io.kubernetes.pod.name");
        const std::string ns = string_member(*labels, "io.kubernetes.pod.namespace");
        const std::string ctr = string_member(*labels, "io.kubernetes.container.name");
        if (!pod.empty() && !ctr.empty()) {
          c.aliases.push_back(pod + "/" + ctr);
          if (!ns.empty()) c.aliases.push_back(ns + "/" + pod + "/" + ctr);
        }
      }
    }
    add_container(list, std::move(c));
  }
}

// Podman 4: libpod's BoltDB (all-ctrs: id -> name; ctr/<id>/{config,state}:
// JSON with the pod id, the state number and the pid), then the pods.
void podman_bolt_containers(const HostPaths& paths, std::vector<Container>& list) {
  auto db = read_text(paths.podman_db);
  if (!db) return;
  auto all = read_bolt_bucket(*db, {"all-ctrs"});
  if (!all) return;
  std::map<std::string, std::vector<std::string>> pod_members;
  for (const BoltEntry& e : all.value()) {
    Container c;
    c.runtime = "podman";
    c.id = e.key;
    c.name = e.value;
    if (auto ctr = read_bolt_bucket(*db, {"ctr", e.key}); ctr) {
      for (const BoltEntry& f : ctr.value()) {
        rapidjson::Document doc;
        if (f.is_bucket || !parse_json(f.value, doc)) continue;
        if (f.key == "state") {
          // libpod's ContainerStatus: 3 running, 5 paused (define/containerstate.go).
          const int64_t state = int_member(doc, "state");
          c.running = state == 3 || state == 5;
          c.pid = c.running ? static_cast<pid_t>(int_member(doc, "pid")) : 0;
        } else if (f.key == "config") {
          const std::string pod = string_member(doc, "pod");
          if (!pod.empty()) pod_members[pod].push_back(c.id);
        }
      }
    }
    add_container(list, std::move(c));
  }
  if (auto pods = read_bolt_bucket(*db, {"allPods"}); pods) {
    for (const BoltEntry& e : pods.value()) {
      Container pod;
      pod.runtime = "podman pod";
      pod.id = e.key;
      pod.name = e.value;
      pod.member_ids = pod_members[e.key];
      pod.member_ids.push_back(e.key);
      add_container(list, std::move(pod));
    }
  }
}

// containers/storage's list (Podman, Buildah, CRI-O): id and names, kept in
// every Podman version (Podman 5 moved libpod's own state to SQLite).
void podman_storage_containers(const HostPaths& paths, std::vector<Container>& list) {
  auto text = read_text(paths.podman_storage + "/overlay-containers/containers.json");
  rapidjson::Document doc;
  if (!text || !parse_json(*text, doc) || !doc.IsArray()) return;
  for (const rapidjson::Value& v : doc.GetArray()) {
    Container c;
    c.runtime = "podman";
    c.id = string_member(v, "id");
    if (c.id.empty()) continue;
    if (const rapidjson::Value* names = member(v, "names"); names != nullptr && names->IsArray()) {
      for (const rapidjson::Value& n : names->GetArray()) {
        if (!n.IsString()) continue;
        if (c.name.empty())
          c.name = n.GetString();
        else
          c.aliases.emplace_back(n.GetString());
      }
    }
    add_container(list, std::move(c));
  }
}

// containerd: one bundle per task, <root>/io.containerd.runtime.v2.task/<namespace>/<id>/
// with the OCI config.json (Kubernetes' CRI and nerdctl annotate names there) and init.pid.
void containerd_containers(const HostPaths& paths, std::vector<Container>& list) {
  const std::string root = paths.containerd + "/io.containerd.runtime.v2.task";
  std::map<std::string, std::vector<std::string>> pod_members;
  std::vector<Container> pods;
  for (const std::string& ns : list_dir(root)) {
    for (const std::string& id : list_dir(root + "/" + ns)) {
      const std::string bundle = root + "/" + ns + "/" + id;
      auto text = read_text(bundle + "/config.json");
      rapidjson::Document doc;
      if (!text || !parse_json(*text, doc)) continue;
      Container c;
      c.id = id;
      c.runtime = ns == "moby" ? "docker" : "containerd";
      if (auto pid = read_text(bundle + "/init.pid"))
        c.pid = static_cast<pid_t>(std::atoi(pid->c_str()));
      const rapidjson::Value* ann = member(doc, "annotations");
      if (ann != nullptr) {
        const std::string type = string_member(*ann, "io.kubernetes.cri.container-type");
        const std::string pod = string_member(*ann, "io.kubernetes.cri.sandbox-name");
        const std::string pod_ns = string_member(*ann, "io.kubernetes.cri.sandbox-namespace");
        const std::string sandbox = string_member(*ann, "io.kubernetes.cri.sandbox-id");
        if (type == "sandbox") {
          c.runtime = "kubernetes pod";
          c.name = pod;
          if (!pod_ns.empty()) c.aliases.push_back(pod_ns + "/" + pod);
          pods.push_back(std::move(c));
          continue;
        }
        if (type == "container") {
          c.runtime = "kubernetes";
          c.name = string_member(*ann, "io.kubernetes.cri.container-name");
          if (!pod.empty()) c.aliases.push_back(pod + "/" + c.name);
          if (!pod_ns.empty()) c.aliases.push_back(pod_ns + "/" + pod + "/" + c.name);
          if (!sandbox.empty()) pod_members[sandbox].push_back(id);
        }
        if (c.name.empty()) c.name = string_member(*ann, "nerdctl/name");
      }
      add_container(list, std::move(c));
    }
  }
  for (Container& pod : pods) {
    pod.member_ids = pod_members[pod.id];
    pod.member_ids.push_back(pod.id);
    add_container(list, std::move(pod));
  }
}

// The runtime a cgroup path's layout suggests ("" if it does not say).
std::string runtime_of_cgroup(std::string_view path) {
  if (path.find("libpod") != std::string_view::npos) return "podman";
  if (path.find("docker") != std::string_view::npos) return "docker";
  if (path.find("kubepods") != std::string_view::npos) return "kubernetes";
  if (path.find("containerd") != std::string_view::npos) return "containerd";
  if (path.find("crio") != std::string_view::npos) return "cri-o";
  return "";
}

// The cgroup path up to and including the component that names `id`.
std::string cgroup_of_id(const std::string& path, const std::string& id) {
  const size_t at = path.find(id);
  if (at == std::string::npos) return {};
  const size_t end = path.find('/', at);
  return end == std::string::npos ? path : path.substr(0, end);
}

// Any cgroup path of a /proc/PID/cgroup text that names a container: the v2
// line, else a v1 line (Docker on a hybrid host may create v1 cgroups only).
std::pair<std::string, std::string> container_in_proc_cgroup(std::string_view text) {
  if (auto v2 = cgroup_v2_path(text)) {
    std::string id = container_id_in_cgroup(*v2);
    if (!id.empty()) return {id, *v2};
  }
  for (std::string_view line : split_lines(text)) {
    const size_t colon = line.find(':', line.find(':') + 1);
    if (colon == std::string_view::npos) continue;
    std::string id = container_id_in_cgroup(line.substr(colon + 1));
    if (!id.empty()) return {id, ""};
  }
  return {};
}

bool is_pid_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::vector<Container> list_containers(const HostPaths& paths) {
  std::vector<Container> list;
  docker_containers(paths, list);
  podman_bolt_containers(paths, list);
  podman_storage_containers(paths, list);
  containerd_containers(paths, list);
  // Running processes: their cgroup paths name containers the state files
  // may not (a runtime whose files are elsewhere), and give the v2 cgroups.
  for (const std::string& pid : list_dir(paths.proc)) {
    if (!is_pid_name(pid)) continue;
    auto text = read_text(paths.proc + "/" + pid + "/cgroup");
    if (!text) continue;
    auto [id, v2] = container_in_proc_cgroup(*text);
    if (id.empty()) continue;
    bool known = false;
    for (Container& c : list) {
      if (c.id != id) continue;
      known = true;
      if (c.cgroup.empty() && !v2.empty()) c.cgroup = cgroup_of_id(v2, id);
    }
    if (!known) {
      Container c;
      c.id = id;
      c.runtime = runtime_of_cgroup(v2);
      c.cgroup = v2.empty() ? std::string() : cgroup_of_id(v2, id);
      add_container(list, std::move(c));
    }
  }
  return list;
}

Result<Container> resolve_container(const std::string& name_or_id,
                                    const std::vector<Container>& candidates) {
  std::vector<const Container*> matches;
  for (const Container& c : candidates) {
    if (c.name == name_or_id ||
        std::find(c.aliases.begin(), c.aliases.end(), name_or_id) != c.aliases.end()) {
      matches.push_back(&c);
    }
  }
  if (matches.empty()) {
    for (const Container& c : candidates) {
      if (c.id == name_or_id) matches.push_back(&c);
    }
  }
  if (matches.empty() && name_or_id.size() >= 3 && is_hex(name_or_id)) {
    for (const Container& c : candidates) {
      if (starts_with(c.id, name_or_id)) matches.push_back(&c);
    }
  }
  if (matches.size() == 1) return *matches.front();

  auto join = [](const std::vector<const Container*>& list) {
    std::string out;
    for (const Container* c : list) out += (out.empty() ? "" : ", ") + c->describe();
    return out;
  };
  if (matches.size() > 1) {
    return Error{Error::Kind::kUnsupported, 0,
                 "container '" + name_or_id + "' matches " + std::to_string(matches.size()) + ": " +
                     join(matches) + "; give a full name or a longer id"};
  }
  std::vector<const Container*> all;
  for (const Container& c : candidates) all.push_back(&c);
  if (all.empty()) {
    return Error{
        Error::Kind::kUnsupported, 0,
        "container '" + name_or_id +
            "' not found, and no container at all was found (Docker, Podman, containerd state "
            "files, cgroups of running processes): check the name with docker ps / podman ps, "
            "and run as root"};
  }
  const bool unnamed = std::any_of(candidates.begin(), candidates.end(),
                                   [](const Container& c) { return c.name.empty(); });
  return Error{
      Error::Kind::kUnsupported, 0,
      "container '" + name_or_id + "' not found; candidates: " + join(all) +
          (unnamed ? " (a container without a name: its runtime's state files were not readable; "
                     "run as root or add CAP_DAC_READ_SEARCH, or give its id)"
                   : "")};
}

// ---- TargetFinder ---------------------------------------------------------

namespace {

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// From /proc/PID/stat: the state (field 3: 'Z' a zombie, dead but not yet
// reaped, which is gone for us) and the start time (field 22, clock ticks),
// which tells a reused pid from the process that had it.
struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
  uint64_t vsize = 0;  // field 23: changes when the process maps a library
};
std::optional<ProcStat> proc_stat(const std::string& proc, pid_t pid) {
  auto stat = read_text(proc + "/" + std::to_string(pid) + "/stat", 4096);
  if (!stat) return std::nullopt;
  const size_t close = stat->rfind(')');  // comm may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= stat->size()) return std::nullopt;
  ProcStat out;
  out.state = (*stat)[close + 2];
  size_t pos = close + 2;
  for (int field = 3; field < 22 && pos < stat->size(); ++field) {
    pos = stat->find(' ', pos);
    if (pos == std::string::npos) return out;
    ++pos;
  }
  char* end = nullptr;
  out.start_time = std::strtoull(stat->c_str() + pos, &end, 10);
  if (end != nullptr && *end == ' ') out.vsize = std::strtoull(end + 1, nullptr, 10);
  return out;
}

// "/" is level 0, "/a" 1, "/a/b" 2.
int level_of(const std::string& cgroup) {
  return static_cast<int>(
             std::count_if(cgroup.begin(), cgroup.end(), [](char c) { return c == '/'; })) -
         (cgroup == "/" ? 1 : 0);
}

std::string trim_newline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

TargetFinder::TargetFinder(TargetSelection selection, HostPaths paths)
    : selection_(std::move(selection)), paths_(std::move(paths)), pods_(paths_.host_root) {}

Result<std::unique_ptr<TargetFinder>> TargetFinder::create(const TargetSelection& selection,
                                                           const HostPaths& paths) {
  std::unique_ptr<TargetFinder> f(new TargetFinder(selection, paths));
  if (f->paths_.cgroup2.empty()) {
    if (auto mi = read_text(f->paths_.proc + "/self/mountinfo"))
      f->paths_.cgroup2 = cgroup2_mount_in_mountinfo(*mi);
  }
  f->self_mnt_ns_ = inode_of(f->paths_.proc + "/self/ns/mnt");

  auto fail = [](std::string message) {
    return Error{Error::Kind::kUnsupported, 0, std::move(message)};
  };
  for (pid_t pid : selection.pids) {
    struct stat st {};
    if (::stat((f->paths_.proc + "/" + std::to_string(pid)).c_str(), &st) != 0) {
      return fail("no process " + std::to_string(pid) + ": check the pid (ps -p " +
                  std::to_string(pid) + ")");
    }
  }
  if (!selection.cgroup.empty()) {
    if (f->paths_.cgroup2.empty()) {
      return fail(
          "--cgroup needs cgroup v2, and no cgroup2 mount was found: mount it (mount -t cgroup2 "
          "none /sys/fs/cgroup/unified)");
    }
    std::string rel = selection.cgroup;
    if (starts_with(rel, f->paths_.cgroup2 + "/"))
      rel.erase(0, f->paths_.cgroup2.size());
    else if (rel == f->paths_.cgroup2)
      rel = "/";
    if (rel.empty() || rel[0] != '/') rel.insert(0, "/");
    while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
    struct stat st {};
    const std::string dir = f->paths_.cgroup2 + (rel == "/" ? "" : rel);
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail("cgroup '" + selection.cgroup + "' does not exist under the cgroup v2 mount " +
                  f->paths_.cgroup2 +
                  ": give a v2 path as /proc/PID/cgroup shows it on its 0:: line (e.g. "
                  "/libpod_parent/libpod-<id>)");
    }
    f->cgroup_rel_ = rel;
    f->cgroup_id_ = static_cast<uint64_t>(st.st_ino);
    f->cgroup_level_ = level_of(rel);
  }
  if (!selection.container.empty()) {
    auto c = resolve_container(selection.container, list_containers(f->paths_));
    if (!c) return c.error();
    if (!c.value().running) {
      return fail("container " + c.value().describe() + " is not running: start it first");
    }
    f->container_ = c.value();
    if (!c.value().cgroup.empty() && !f->paths_.cgroup2.empty()) {
      f->cgroup_id_ = inode_of(f->paths_.cgroup2 + c.value().cgroup);
      f->cgroup_level_ = level_of(c.value().cgroup);
    }
  }
  if (!selection.pod.empty()) {
    if (auto r = f->check_pod(); !r) return r.error();
  }
  return f;
}

namespace {

// The pod's own cgroup in a /proc/PID/cgroup text (the path down to the
// pod<uid> component, v2 line first), for messages.
std::string pod_cgroup_dir(std::string_view text) {
  std::vector<std::string_view> lines = split_lines(text);
  std::stable_partition(lines.begin(), lines.end(),
                        [](std::string_view l) { return starts_with(l, "0::"); });
  for (std::string_view line : lines) {
    const size_t colon = line.find(':', line.find(':') + 1);
    if (colon == std::string_view::npos) continue;
    const std::string_view path = line.substr(colon + 1);
    for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
      const std::string_view prefix = path.substr(0, end);
      auto pc = pod_cgroup_of_path(prefix);
      if (pc && pc->container_id.empty()) return std::string(prefix);
      if (end == std::string_view::npos) break;
    }
  }
  return {};
}

}  // namespace

Result<Ok> TargetFinder::check_pod() {
  for (std::string_view rest = selection_.pod;;) {
    const size_t slash = rest.find('/');
    pod_sel_.emplace_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  // The pods with processes on this node, by uid: their names and containers.
  struct Seen {
    std::optional<PodNames> names;
    std::set<std::string> containers;
    std::string cgroup;  // the pod's cgroup (v2 path, or a v1 line's)
  };
  std::map<std::string, Seen> pods;
  for (const std::string& name : list_dir(paths_.proc)) {
    if (!is_pid_name(name)) continue;
    auto text = read_text(paths_.proc + "/" + name + "/cgroup", 1 << 16);
    if (!text) continue;
    auto pc = pod_cgroup_in_proc(*text);
    if (!pc) continue;
    Seen& seen = pods[pc->pod_uid];
    auto names = pods_.names(*pc);
    if (names && !names->container.empty()) seen.containers.insert(names->container);
    if (names && !seen.names) seen.names = names;
    if (seen.cgroup.empty()) seen.cgroup = pod_cgroup_dir(*text);
  }
  auto fail = [](std::string message) {
    return Error{Error::Kind::kUnsupported, 0, std::move(message)};
  };
  auto describe_pod = [](const std::string& uid, const Seen& s) {
    std::string out = s.names ? s.names->namespace_ + "/" + s.names->pod
                              : "pod uid " + uid + " (no names: its runtime state and pod log "
                                                   "directory were not found)";
    if (!s.containers.empty()) {
      out += " (";
      bool first = true;
      for (const std::string& c : s.containers) out += (std::exchange(first, false) ? "" : ", ") + c;
      out += ")";
    }
    return out;
  };
  std::vector<const std::pair<const std::string, Seen>*> matches;
  for (const auto& entry : pods) {
    const Seen& s = entry.second;
    if (s.names && s.names->namespace_ == pod_sel_[0] && s.names->pod == pod_sel_[1])
      matches.push_back(&entry);
  }
  const std::string ns_name = pod_sel_[0] + "/" + pod_sel_[1];
  if (matches.empty()) {
    if (pods.empty()) {
      return fail("pod '" + selection_.pod +
                  "' not found: no process on this node runs in a Kubernetes pod (no kubepods "
                  "cgroup in " + paths_.proc +
                  "/*/cgroup); on Kubernetes the agent needs hostPID: true");
    }
    std::string list;
    size_t shown = 0;
    for (const auto& [uid, s] : pods) {
      if (shown++ == 20) {
        list += ", ... (" + std::to_string(pods.size()) + " pods)";
        break;
      }
      list += (list.empty() ? "" : ", ") + describe_pod(uid, s);
    }
    return fail("pod '" + ns_name + "' not found on this node; pods with processes here: " + list);
  }
  if (matches.size() > 1) {
    std::string list;
    for (const auto* m : matches) {
      list += (list.empty() ? "" : ", ") + std::string("uid ") + m->first +
              (m->second.cgroup.empty() ? "" : " (cgroup " + m->second.cgroup + ")");
    }
    return fail("pod '" + ns_name + "' matches " + std::to_string(matches.size()) +
                " pods on this node (a pod recreated while the old one still runs): " + list +
                "; wait for the old one to end, or give one with --cgroup");
  }
  if (pod_sel_.size() > 2) {
    const Seen& s = matches.front()->second;
    if (s.containers.count(pod_sel_[2]) == 0) {
      std::string list;
      for (const std::string& c : s.containers) list += (list.empty() ? "" : ", ") + c;
      return fail("pod " + ns_name + " has no container '" + pod_sel_[2] +
                  "' with processes on this node; its containers: " +
                  (list.empty() ? std::string("none named (no runtime state or log links)") : list));
    }
  }
  return Ok{};
}

bool TargetFinder::same_mount_ns(pid_t pid) const {
  const uint64_t ns = inode_of(paths_.proc + "/" + std::to_string(pid) + "/ns/mnt");
  return ns != 0 && ns == self_mnt_ns_;
}

bool TargetFinder::selected(pid_t pid, const std::string& cgroup_text) {
  if (!selection_.pids.empty()) {
    return std::find(selection_.pids.begin(), selection_.pids.end(), pid) != selection_.pids.end();
  }
  if (selection_.all) return true;
  if (!pod_sel_.empty()) {
    // The cgroup rules most processes out before any names are looked up.
    auto pc = pod_cgroup_in_proc(cgroup_text);
    if (!pc) return false;
    auto n = pods_.names(*pc);
    return n && n->namespace_ == pod_sel_[0] && n->pod == pod_sel_[1] &&
           (pod_sel_.size() < 3 || n->container == pod_sel_[2]);
  }
  if (!cgroup_rel_.empty()) {
    auto v2 = cgroup_v2_path(cgroup_text);
    if (!v2) return false;
    return cgroup_rel_ == "/" || *v2 == cgroup_rel_ || starts_with(*v2, cgroup_rel_ + "/");
  }
  if (container_) {
    const std::string id = container_in_proc_cgroup(cgroup_text).first;
    return !id.empty() && std::find(container_->member_ids.begin(), container_->member_ids.end(),
                                    id) != container_->member_ids.end();
  }
  return false;
}

std::optional<Target> TargetFinder::probe(pid_t pid, const std::string& cgroup_text, bool* settled) {
  *settled = false;
  const std::string dir = paths_.proc + "/" + std::to_string(pid);
  auto host_path = [&](const std::string& path) {
    return same_mount_ns(pid) ? path : dir + "/root" + path;
  };
  Target t;
  t.pid = pid;
  auto maps = read_text(dir + "/maps");
  if (maps) {
    if (auto ext = extension_in_maps(*maps)) {
      t.binary = host_path(*ext);
      t.extension = true;
    }
  }
  if (t.binary.empty()) {
    // The storm and test programs carry the probes in the executable itself.
    struct stat st {};
    if (::stat((dir + "/exe").c_str(), &st) != 0)
      return std::nullopt;  // kernel thread, gone, or no access
    const auto key =
        std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
    auto it = exe_notes_.find(key);
    if (it == exe_notes_.end()) {
      auto notes = has_mlprof_usdt(dir + "/exe");
      if (!notes) return std::nullopt;  // unreadable now: looked at again at the next scan
      it = exe_notes_.emplace(key, notes.value()).first;
    }
    if (!it->second) {
      *settled = maps.has_value();  // no extension mapped, no notes: sure until its mappings change
      return std::nullopt;
    }
    char link[4096];
    const ssize_t n = ::readlink((dir + "/exe").c_str(), link, sizeof link - 1);
    if (n <= 0) return std::nullopt;
    t.binary = host_path(cut_deleted(std::string(link, static_cast<size_t>(n))));
  }
  if (auto comm = read_text(dir + "/comm", 256)) t.comm = trim_newline(*comm);
  if (auto v2 = cgroup_v2_path(cgroup_text); v2 && !paths_.cgroup2.empty()) {
    t.cgroup_id = inode_of(paths_.cgroup2 + (*v2 == "/" ? "" : *v2));
  }
  t.container = container_in_proc_cgroup(cgroup_text).first;
  t.labels = labels_of(cgroup_text);
  return t;
}

std::map<std::string, std::string> TargetFinder::labels_of(const std::string& cgroup_text) {
  std::map<std::string, std::string> labels;
  if (auto pc = pod_cgroup_in_proc(cgroup_text)) {
    labels["pod_uid"] = pc->pod_uid;
    if (!pc->container_id.empty()) labels["container_id"] = pc->container_id;
    if (auto n = pods_.names(*pc)) {
      labels["namespace"] = n->namespace_;
      labels["pod"] = n->pod;
      if (!n->container.empty()) labels["container"] = n->container;
    }
    return labels;
  }
  const std::string id = container_in_proc_cgroup(cgroup_text).first;
  if (id.empty()) return labels;
  labels["container_id"] = id;
  auto it = container_names_.find(id);
  if (it == container_names_.end() && !containers_listed_) {
    containers_listed_ = true;
    for (const Container& c : list_containers(paths_)) container_names_.emplace(c.id, c.name);
    if (container_names_.size() > 16384) container_names_.clear();
    it = container_names_.find(id);
  }
  if (it != container_names_.end() && !it->second.empty()) labels["container"] = it->second;
  return labels;
}

TargetFinder::Changes TargetFinder::rescan() {
  Changes changes;
  pods_.next_pass();
  containers_listed_ = false;
  std::vector<pid_t> candidates;
  if (!selection_.pids.empty()) {
    candidates = selection_.pids;
  } else {
    for (const std::string& name : list_dir(paths_.proc)) {
      if (is_pid_name(name)) candidates.push_back(static_cast<pid_t>(std::atol(name.c_str())));
    }
  }
  std::set<pid_t> seen;
  std::map<pid_t, std::pair<uint64_t, uint64_t>> next_not_targets;
  for (pid_t pid : candidates) {
    const std::string dir = paths_.proc + "/" + std::to_string(pid);
    // --pid and --all select without the cgroup: it is read only for a
    // process probed. The others: the cgroup rules a process out before
    // its stat (and maps) are read.
    const bool by_cgroup = selection_.pids.empty() && !selection_.all;
    std::optional<std::string> cgroup_text;
    if (by_cgroup) {
      cgroup_text = read_text(dir + "/cgroup");
      if (cgroup_text && !selected(pid, *cgroup_text)) continue;
    }
    const auto stat = cgroup_text || !by_cgroup ? proc_stat(paths_.proc, pid) : std::nullopt;
    if ((by_cgroup && !cgroup_text) || !stat || stat->state == 'Z' || stat->state == 'X') {
      if (!selection_.pids.empty()) {
        gone_pids_.insert(pid);
        waiting_pids_.erase(pid);
      }
      continue;
    }
    const uint64_t started = stat->start_time;
    auto have = current_.find(pid);
    if (have != current_.end()) {
      if (start_times_[pid] == started) {
        seen.insert(pid);
        continue;
      }
      // The pid was reused: the old target is gone, the new process is looked at afresh.
      changes.exited.push_back(pid);
      current_.erase(have);
    }
    // A process found not to be a target, whose mappings have not changed
    // since (same start time, same vsize: loading the extension grows it),
    // is not read again: on a node of thousands of processes, --all would
    // otherwise read every maps file every rescan.
    const std::pair<uint64_t, uint64_t> mark{started, stat->vsize};
    if (auto nt = not_targets_.find(pid); nt != not_targets_.end() && nt->second == mark) {
      next_not_targets[pid] = mark;
      continue;
    }
    if (!cgroup_text) cgroup_text = read_text(dir + "/cgroup");
    if (!cgroup_text) {  // gone meanwhile
      if (!selection_.pids.empty()) {
        gone_pids_.insert(pid);
        waiting_pids_.erase(pid);
      }
      continue;
    }
    bool settled = false;
    auto target = probe(pid, *cgroup_text, &settled);
    if (!target) {
      if (!selection_.pids.empty()) waiting_pids_.insert(pid);
      if (settled) next_not_targets[pid] = mark;
      continue;
    }
    waiting_pids_.erase(pid);
    seen.insert(pid);
    start_times_[pid] = started;
    current_[pid] = *target;
    changes.started.push_back(*target);
  }
  for (auto it = current_.begin(); it != current_.end();) {
    if (seen.count(it->first) != 0) {
      ++it;
      continue;
    }
    changes.exited.push_back(it->first);
    start_times_.erase(it->first);
    it = current_.erase(it);
  }
  not_targets_.swap(next_not_targets);  // only processes that still exist
  return changes;
}

bool TargetFinder::pids_all_gone() const {
  if (selection_.pids.empty()) return false;
  return std::all_of(selection_.pids.begin(), selection_.pids.end(),
                     [&](pid_t p) { return gone_pids_.count(p) != 0; });
}

std::vector<pid_t> TargetFinder::waiting_pids() const {
  return std::vector<pid_t>(waiting_pids_.begin(), waiting_pids_.end());
}

std::string TargetFinder::describe() const {
  if (!selection_.pids.empty()) {
    std::string out = selection_.pids.size() == 1 ? "pid" : "pids";
    for (size_t i = 0; i < selection_.pids.size(); ++i)
      out += (i == 0 ? " " : ", ") + std::to_string(selection_.pids[i]);
    return out;
  }
  if (container_) return "container " + container_->describe();
  if (!pod_sel_.empty()) return "pod " + selection_.pod;
  if (!cgroup_rel_.empty()) return "cgroup " + cgroup_rel_;
  return "all processes with mlflow_profiler loaded";
}

}  // namespace mlprof::agent
