// targets.cpp and its parts (procfs, stapsdt, boltdb, containers): the /proc
// and container-state parsers on recorded files (tests/cpp/data, see its
// README for where each file comes from), and TargetFinder against real
// child processes of this test.
#include "agent/targets.h"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/boltdb.h"
#include "agent/procfs.h"
#include "agent/stapsdt.h"

namespace fs = std::filesystem;
using namespace mlprof;
using namespace mlprof::agent;

namespace {

const std::string kData = MLPROF_TEST_DATA;

// Recorded on this machine (README): the Podman containers and their processes.
const std::string kServing1 = "52091b1ad5417b1d7a67ead679bfa84fdf35b7d6b505c3ef78378cc80f7331b6";
const std::string kBatch7 = "1f9518bcdc373f01603fb98197ed72a4168bb503e5f3214093d1dd659d1b0044";
const std::string kWebApp = "0816b91e1d2b04214cfebffddbe7f85c2231fa085d4d97ca4709adc81f402e4d";
const std::string kWebPod = "8c5e0a937cc2abbb1e1d18a6cb7114d86675df21c50d66c41198905d62c55b71";
const std::string kRecordedExtension =
    "/work/main/build-py311/python/mlflow_profiler/_core.cpython-311-x86_64-linux-gnu.so";
// Written after the runtimes' formats (README).
const std::string kDockerServing2 =
    "4059c0fd00c757416e8448633426b154be59261794a9031e0766f6527a0b9053";
const std::string kDockerLegacy =
    "9b2e51c7d0a4f8e3c1b6a5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4";
const std::string kK8sSandbox = "5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1e5ab1";
const std::string kK8sModel = "3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d3d0d";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

HostPaths recorded_host() {
  HostPaths p;
  p.proc = kData + "/proc";
  p.cgroup2 = "/nonexistent-cgroup2";  // the recorded tree has no cgroup directories
  p.docker = kData + "/docker";
  p.podman_db = kData + "/podman/bolt_state.db";
  p.podman_storage = kData + "/podman";
  p.containerd = kData + "/containerd";
  return p;
}

const Container* by_id(const std::vector<Container>& list, const std::string& id) {
  for (const Container& c : list) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

std::vector<pid_t> pids_of(const std::vector<Target>& targets) {
  std::vector<pid_t> out;
  for (const Target& t : targets) out.push_back(t.pid);
  std::sort(out.begin(), out.end());
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/mlprof-targets-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A child process that runs `body` and is killed and reaped at scope exit.
struct Child {
  pid_t pid = -1;
  int ready[2] = {-1, -1};  // child -> parent: "set up"
  int go[2] = {-1, -1};     // parent -> child: "next step"
  template <typename F>
  explicit Child(F body) {
    EXPECT_EQ(::pipe(ready), 0);
    EXPECT_EQ(::pipe(go), 0);
    pid = ::fork();
    if (pid == 0) {
      body(*this);
      for (;;) ::pause();
    }
  }
  void signal_ready() const { (void)!::write(ready[1], "r", 1); }
  void wait_go() const {
    char c;
    (void)!::read(go[0], &c, 1);
  }
  void wait_ready() const {
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
  }
  void send_go() const { (void)!::write(go[1], "g", 1); }
  void kill_and_reap() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~Child() {
    kill_and_reap();
    for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  }
};

// Maps `path` read-only into this process, as the dynamic loader maps the extension.
void map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) _exit(3);
  if (::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) _exit(4);
  ::close(fd);
}

// A copy of an ELF file with one more section, .note.stapsdt, holding one
// stapsdt note of `provider`. The loader ignores sections, so the copy of an
// executable still runs: this is how a program carrying USDT notes looks.
std::string with_stapsdt_note(const std::string& elf, const std::string& provider) {
  std::string out = elf;
  Elf64_Ehdr eh;
  std::memcpy(&eh, out.data(), sizeof eh);
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), out.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  auto pad = [&out](size_t align) {
    while (out.size() % align != 0) out.push_back('\0');
  };
  // The note: "stapsdt\0", then pc, base, semaphore and "provider\0name\0args\0".
  std::string desc(24, '\0');
  desc += provider + '\0' + "session_begin" + '\0' + "8@%rdi" + '\0';
  Elf64_Nhdr nh{8, static_cast<Elf64_Word>(desc.size()), 3};
  std::string note(reinterpret_cast<const char*>(&nh), sizeof nh);
  note += std::string("stapsdt\0", 8) + desc;
  while (note.size() % 4 != 0) note.push_back('\0');
  pad(8);
  const size_t note_at = out.size();
  out += note;
  // A new section-name table: the old one plus ".note.stapsdt".
  const Elf64_Shdr& old_names = sections[eh.e_shstrndx];
  std::string names = elf.substr(old_names.sh_offset, old_names.sh_size);
  const size_t name_at = names.size();
  names += std::string(".note.stapsdt") + '\0';
  const size_t names_at = out.size();
  out += names;
  sections[eh.e_shstrndx].sh_offset = names_at;
  sections[eh.e_shstrndx].sh_size = names.size();
  Elf64_Shdr s{};
  s.sh_name = static_cast<Elf64_Word>(name_at);
  s.sh_type = SHT_NOTE;
  s.sh_offset = note_at;
  s.sh_size = note.size();
  s.sh_addralign = 4;
  sections.push_back(s);
  pad(8);
  eh.e_shoff = out.size();
  eh.e_shnum = static_cast<Elf64_Half>(sections.size());
  out.append(reinterpret_cast<const char*>(sections.data()), sections.size() * sizeof(Elf64_Shdr));
  std::memcpy(out.data(), &eh, sizeof eh);
  return out;
}

void write_file(const fs::path& p, const std::string& data,
                fs::perms perms = fs::perms::owner_read | fs::perms::owner_write) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
  fs::permissions(p, perms);
}

}  // namespace

// ---- parsers of recorded /proc files --------------------------------------

TEST(ExtensionInMaps, FindsTheExtensionOfARecordedContainerizedPython) {
  auto path = extension_in_maps(slurp(kData + "/proc/12446/maps"));
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, kRecordedExtension);
}

TEST(ExtensionInMaps, NothingInAProcessWithoutIt) {
  EXPECT_FALSE(extension_in_maps(slurp(kData + "/proc/12711/maps")).has_value());  // sleep
  EXPECT_FALSE(extension_in_maps("").has_value());
}

TEST(ExtensionInMaps, DeletedFilesSpacesAndLookalikes) {
  const std::string deleted =
      "7f00-7f10 r-xp 00000000 fe:00 42   /srv/app v2/mlflow_profiler/_core.abi3.so (deleted)\n";
  EXPECT_EQ(extension_in_maps(deleted).value_or("-"), "/srv/app v2/mlflow_profiler/_core.abi3.so");
  // Only mlflow_profiler/_core*.so counts: not another package's _core, not a non-.so file.
  EXPECT_FALSE(
      extension_in_maps("7f00-7f10 r-xp 00000000 fe:00 42   /x/numpy/_core.so\n").has_value());
  EXPECT_FALSE(
      extension_in_maps("7f00-7f10 r--p 00000000 fe:00 42   /x/mlflow_profiler/_core.pyi\n")
          .has_value());
  EXPECT_FALSE(extension_in_maps("7f00-7f10 rw-p 00000000 00:00 0    [heap]\n").has_value());
}

TEST(CgroupV2Path, TheZeroLineOfRecordedFiles) {
  EXPECT_EQ(cgroup_v2_path(slurp(kData + "/proc/12446/cgroup")).value_or("-"),
            "/libpod_parent/libpod-" + kServing1);
  EXPECT_EQ(cgroup_v2_path(slurp(kData + "/proc/12711/cgroup")).value_or("-"), "/");
  EXPECT_FALSE(cgroup_v2_path("4:memory:/docker/abc\n1:cpu:/docker/abc\n").has_value());
}

TEST(ContainerIdInCgroup, EveryRuntimeLayout) {
  const std::string id = kDockerServing2;
  EXPECT_EQ(container_id_in_cgroup("/libpod_parent/libpod-" + id), id);  // Podman, cgroupfs
  EXPECT_EQ(container_id_in_cgroup("/machine.slice/libpod-" + id + ".scope/container"),
            id);  // Podman, systemd
  EXPECT_EQ(container_id_in_cgroup("/machine.slice/libpod-conmon-" + id + ".scope"),
            "");                                           // its conmon: not it
  EXPECT_EQ(container_id_in_cgroup("/docker/" + id), id);  // Docker, cgroupfs
  EXPECT_EQ(container_id_in_cgroup("/system.slice/docker-" + id + ".scope"),
            id);  // Docker, systemd
  EXPECT_EQ(container_id_in_cgroup("/kubepods/burstable/pod8f3c/" + id),
            id);  // Kubernetes, cgroupfs
  EXPECT_EQ(container_id_in_cgroup(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f3c.slice/"
                "cri-containerd-" +
                id + ".scope"),
            id);
  EXPECT_EQ(container_id_in_cgroup("/kubepods.slice/kubepods-pod1.slice/crio-" + id + ".scope"),
            id);  // CRI-O
  EXPECT_EQ(container_id_in_cgroup("/nerdctl.slice/nerdctl-" + id + ".scope"), id);
  EXPECT_EQ(container_id_in_cgroup("/user.slice/user-0.slice/session-3.scope"), "");
  EXPECT_EQ(container_id_in_cgroup("/"), "");
  EXPECT_EQ(container_id_in_cgroup("/docker/" + id.substr(0, 63)), "");  // not a full id
  // A container with delegated cgroups (Podman --systemd=always) that makes
  // a sub-cgroup named after another container stays itself.
  EXPECT_EQ(container_id_in_cgroup("/machine.slice/libpod-" + id + ".scope/container/docker-" +
                                   kWebApp + ".scope"),
            id);
  EXPECT_EQ(container_id_in_cgroup("/docker/" + id + "/docker/" + kWebApp), id);
}

TEST(Cgroup2Mount, RecordedHybridLayoutAndEscapes) {
  EXPECT_EQ(cgroup2_mount_in_mountinfo(slurp(kData + "/mountinfo-hybrid")),
            "/sys/fs/cgroup/unified");
  EXPECT_EQ(
      cgroup2_mount_in_mountinfo("30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"),
      "/sys/fs/cgroup");
  EXPECT_EQ(cgroup2_mount_in_mountinfo("30 23 0:27 / /mnt/cg\\040two rw - cgroup2 none rw\n"),
            "/mnt/cg two");
  EXPECT_EQ(
      cgroup2_mount_in_mountinfo("31 23 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"),
      "");
}

// ---- ELF notes -------------------------------------------------------------

TEST(MlprofUsdt, OtherProvidersAndNoNotesAreNotProbes) {
  // Debian's python3.11 carries USDT notes of provider "python" (a real .note.stapsdt).
  auto python = has_mlprof_usdt("/usr/bin/python3.11");
  ASSERT_TRUE(python.ok()) << python.error().message;
  EXPECT_FALSE(python.value());
  auto sleep = has_mlprof_usdt("/bin/sleep");
  ASSERT_TRUE(sleep.ok());
  EXPECT_FALSE(sleep.value());
}

TEST(MlprofUsdt, FindsTheNoteOfAProgramThatCarriesIt) {
  TempDir dir;
  const std::string elf = slurp("/bin/sleep");
  write_file(dir.path / "mine", with_stapsdt_note(elf, "mlprof"));
  write_file(dir.path / "theirs", with_stapsdt_note(elf, "mlprofx"));
  auto mine = has_mlprof_usdt(dir.path / "mine");
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  EXPECT_TRUE(mine.value());
  auto theirs = has_mlprof_usdt(dir.path / "theirs");
  ASSERT_TRUE(theirs.ok());
  EXPECT_FALSE(theirs.value());
}

TEST(MlprofUsdt, ErrorsForFilesThatAreNotElf) {
  TempDir dir;
  write_file(dir.path / "text", "#!/bin/sh\necho hi\n");
  write_file(dir.path / "cut", slurp("/bin/sleep").substr(0, 40));
  EXPECT_EQ(has_mlprof_usdt(dir.path / "text").error().kind, Error::Kind::kCorrupt);
  EXPECT_EQ(has_mlprof_usdt(dir.path / "cut").error().kind, Error::Kind::kCorrupt);
  auto missing = has_mlprof_usdt(dir.path / "missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().errnum, ENOENT);
  // A section table pointing past the end of the file.
  std::string elf = slurp("/bin/sleep");
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  eh.e_shoff = elf.size() + 4096;
  std::memcpy(elf.data(), &eh, sizeof eh);
  write_file(dir.path / "table", elf);
  EXPECT_FALSE(has_mlprof_usdt(dir.path / "table").ok());
}

// ---- a target's root: opened inside it ------------------------------------

// A process's root as a plain directory (a /proc/PID directory's "root"):
// RESOLVE_IN_ROOT treats it as "/" the same way.
TEST(OpenInRoot, AbsoluteSymlinksResolveInTheTargetsRoot) {
  TempDir proc;
  const fs::path root = proc.path / "root";
  write_file(root / "etc" / "passwd", "the target's own\n");
  fs::create_directory_symlink("/etc", root / "tmp");  // its /tmp is its /etc
  const int fd = open_in_root(proc.path, "/tmp", O_PATH | O_DIRECTORY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat got {
  }, want{};
  ASSERT_EQ(::fstat(fd, &got), 0);
  ::close(fd);
  ASSERT_EQ(::stat((root / "etc").c_str(), &want), 0);
  EXPECT_EQ(got.st_ino, want.st_ino);  // not the host's /etc
  errno = 0;
  EXPECT_EQ(open_in_root(proc.path, "/../../../tmp/x", O_RDONLY | O_CREAT), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(open_in_root(proc.path, "/no/such", O_PATH), -1);
  EXPECT_EQ(errno, ENOENT);
}

// What the agent opens through /proc/PID/root for a target (its extension,
// its C library): a FIFO would block the open, an absolute symlink would
// reach a host file. Both are refused; the target's own files are not.
TEST(OpenInRoot, ARegularFileOnlyAndTheOneInTheTargetsRoot) {
  TempDir proc;
  const fs::path root = proc.path / "root";
  write_file(root / "lib" / "_core.so", "ELF");
  write_file(root / "etc" / "passwd", "the target's own\n");
  fs::create_symlink("/etc/passwd", root / "lib" / "evil.so");  // absolute: the host's passwd
  fs::create_symlink("_core.so", root / "lib" / "alias.so");    // relative: its own file
  ASSERT_EQ(::mkfifo((root / "lib" / "fifo.so").c_str(), 0600), 0);
  EXPECT_TRUE(regular_file_in_root(proc.path, "/lib/_core.so", false));
  EXPECT_TRUE(regular_file_in_root(proc.path, "/lib/alias.so", false));
  EXPECT_FALSE(regular_file_in_root(proc.path, "/lib/evil.so", false));
  EXPECT_FALSE(regular_file_in_root(proc.path, "/lib/fifo.so", false));
  EXPECT_FALSE(regular_file_in_root(proc.path, "/lib", false));
  EXPECT_FALSE(regular_file_in_root(proc.path, "/lib/none.so", false));
  EXPECT_TRUE(regular_file_in_root(proc.path, (root / "lib" / "_core.so").string(), true));
  EXPECT_FALSE(regular_file_in_root(proc.path, (root / "lib" / "fifo.so").string(), true));
}

// ---- BoltDB: Podman 4.3's libpod state, recorded ---------------------------

TEST(Bolt, ReadsTheRecordedPodmanState) {
  const std::string db = slurp(kData + "/podman/bolt_state.db");
  auto all = read_bolt_bucket(db, {"all-ctrs"});
  ASSERT_TRUE(all.ok()) << all.error().message;
  std::map<std::string, std::string> names;
  for (const BoltEntry& e : all.value()) names[e.key] = e.value;
  EXPECT_EQ(names.size(), 3u);
  EXPECT_EQ(names[kServing1], "serving-1");
  EXPECT_EQ(names[kBatch7], "batch-7");
  EXPECT_EQ(names[kWebApp], "web-app");

  auto ctr = read_bolt_bucket(db, {"ctr", kServing1});
  ASSERT_TRUE(ctr.ok()) << ctr.error().message;
  bool state = false;
  for (const BoltEntry& e : ctr.value()) {
    if (e.key == "state") state = e.value.find("\"pid\":12446") != std::string::npos;
  }
  EXPECT_TRUE(state);

  auto names_bucket = read_bolt_bucket(db, {"name-registry"});
  ASSERT_TRUE(names_bucket.ok());
  bool found = false;
  for (const BoltEntry& e : names_bucket.value())
    found |= e.key == "serving-1" && e.value == kServing1;
  EXPECT_TRUE(found);
}

TEST(Bolt, DamagedOrForeignFilesAreErrorsNotCrashes) {
  const std::string db = slurp(kData + "/podman/bolt_state.db");
  EXPECT_FALSE(read_bolt_bucket(db, {"no-such-bucket"}).ok());
  EXPECT_FALSE(read_bolt_bucket("", {"all-ctrs"}).ok());
  EXPECT_FALSE(read_bolt_bucket(std::string(8192, 'x'), {"all-ctrs"}).ok());
  // Cut anywhere: an error or a smaller answer, never a read out of bounds (ASan/valgrind would
  // tell).
  for (size_t len : {size_t{4096}, size_t{8192}, size_t{12288}, db.size() / 2, db.size() - 1}) {
    auto r = read_bolt_bucket(std::string_view(db).substr(0, len), {"all-ctrs"});
    if (r.ok()) {
      EXPECT_LE(r.value().size(), 3u);
    }
  }
  // Flip bytes in every page after the metas.
  std::string bad = db;
  for (size_t at = 2 * 4096 + 20; at < bad.size(); at += 4096) bad[at] = static_cast<char>(0xff);
  auto r = read_bolt_bucket(bad, {"all-ctrs"});
  if (r.ok()) {
    EXPECT_LE(r.value().size(), 3u);
  }
  // A meta page whose checksum no longer matches is not used.
  std::string meta = db;
  meta[16 + 48] ^= 1;  // txid of meta 0
  meta[4096 + 16 + 48] ^= 1;
  EXPECT_FALSE(read_bolt_bucket(meta, {"all-ctrs"}).ok());
}

// Branch pages 30 deep, each with both its elements on the next page: a
// DAG a damaged (or crafted) file can hold, 2^30 leaves to a walk that
// follows every element. The walk visits at most the file's pages.
TEST(Bolt, BranchPagesSharingAChildAreCorruptNotExponential) {
  std::string db = slurp(kData + "/podman/bolt_state.db");
  uint32_t psize = 0;
  std::memcpy(&psize, db.data() + 16 + 8, 4);
  ASSERT_EQ(db.size() % psize, 0u);
  const uint64_t first = db.size() / psize;
  constexpr int kLevels = 30;
  for (int level = 0; level <= kLevels; ++level) {
    std::string page(psize, '\0');
    const uint64_t id = first + level, child = id + 1;
    const uint16_t flags = level < kLevels ? 0x01 : 0x02, count = level < kLevels ? 2 : 0;
    std::memcpy(page.data(), &id, 8);
    std::memcpy(page.data() + 8, &flags, 2);
    std::memcpy(page.data() + 10, &count, 2);
    for (int e = 0; e < count; ++e) std::memcpy(page.data() + 16 + 16 * e + 8, &child, 8);
    db += page;
  }
  for (const size_t meta : {size_t{0}, size_t{psize}}) {  // both metas: root, then checksum
    std::memcpy(db.data() + meta + 16 + 16, &first, 8);
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < 56; ++i) {
      h ^= static_cast<unsigned char>(db[meta + 16 + i]);
      h *= 1099511628211ull;
    }
    std::memcpy(db.data() + meta + 16 + 56, &h, 8);
  }
  const auto r = read_bolt_bucket(db, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt) << r.error().message;
}

// ---- containers ------------------------------------------------------------

TEST(ListContainers, EveryRuntimeOfTheRecordedHost) {
  const auto list = list_containers(recorded_host());
  const Container* serving = by_id(list, kServing1);
  ASSERT_NE(serving, nullptr);
  EXPECT_EQ(serving->name, "serving-1");
  EXPECT_EQ(serving->runtime, "podman");
  EXPECT_TRUE(serving->running);
  EXPECT_EQ(serving->pid, 12446);
  EXPECT_EQ(serving->cgroup,
            "/libpod_parent/libpod-" + kServing1);  // from the process's cgroup file

  const Container* batch = by_id(list, kBatch7);
  ASSERT_NE(batch, nullptr);
  EXPECT_FALSE(batch->running);  // created, never started

  const Container* pod = by_id(list, kWebPod);
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(pod->name, "web-pod");
  EXPECT_NE(std::find(pod->member_ids.begin(), pod->member_ids.end(), kWebApp),
            pod->member_ids.end());

  const Container* docker = by_id(list, kDockerServing2);
  ASSERT_NE(docker, nullptr);
  EXPECT_EQ(docker->name,
            "serving-2");  // Docker's name, not the nameless "moby" task of containerd
  EXPECT_EQ(docker->runtime, "docker");
  EXPECT_EQ(docker->pid, 20001);
  EXPECT_EQ(std::count_if(list.begin(), list.end(),
                          [](const Container& c) { return c.id == kDockerServing2; }),
            1);

  const Container* model = by_id(list, kK8sModel);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->name, "model");
  EXPECT_EQ(model->runtime, "kubernetes");
  EXPECT_NE(std::find(model->aliases.begin(), model->aliases.end(), "ml/scorer-6c5d8/model"),
            model->aliases.end());

  // Seen only through a process's cgroup (no state file): id and runtime from the path.
  const Container* unknown =
      by_id(list, "77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa77aa");
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->runtime, "podman");
  EXPECT_EQ(unknown->name, "");
}

TEST(ResolveContainer, NamesIdsPrefixesAndAliases) {
  const auto list = list_containers(recorded_host());
  EXPECT_EQ(resolve_container("serving-1", list).value().id, kServing1);
  EXPECT_EQ(resolve_container(kServing1, list).value().name, "serving-1");
  EXPECT_EQ(resolve_container("52091b1a", list).value().name, "serving-1");
  EXPECT_EQ(resolve_container("serving-2", list).value().id, kDockerServing2);
  EXPECT_EQ(resolve_container("nerd-1", list).value().runtime, "containerd");
  EXPECT_EQ(resolve_container("scorer-6c5d8/model", list).value().id, kK8sModel);
  EXPECT_EQ(resolve_container("ml/scorer-6c5d8/model", list).value().id, kK8sModel);
  EXPECT_EQ(resolve_container("scorer-old/model", list).value().runtime,
            "docker");  // dockershim labels
  auto pod = resolve_container("scorer-6c5d8", list);
  ASSERT_TRUE(pod.ok()) << pod.error().message;
  EXPECT_EQ(pod.value().id, kK8sSandbox);
  EXPECT_EQ(pod.value().member_ids.size(), 3u);  // model, sidecar, the sandbox itself
}

TEST(ResolveContainer, NothingMatchesListsTheCandidatesOnOneLine) {
  const auto list = list_containers(recorded_host());
  auto r = resolve_container("serving-9", list);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_NE(m.find("'serving-9' not found"), std::string::npos) << m;
  EXPECT_NE(m.find("serving-1 (podman 52091b1ad541)"), std::string::npos) << m;
  EXPECT_NE(m.find("serving-2 (docker 4059c0fd00c7)"), std::string::npos) << m;

  // The recorded host has a container known only from its cgroup: the line says why it has no name.
  EXPECT_NE(m.find("run as root or add CAP_DAC_READ_SEARCH"), std::string::npos) << m;
  Container named;
  named.id = kServing1;
  named.name = "serving-1";
  named.runtime = "podman";
  auto only_named = resolve_container("x", {named});
  ASSERT_FALSE(only_named.ok());
  EXPECT_EQ(only_named.error().message.find("CAP_DAC_READ_SEARCH"), std::string::npos);

  auto none = resolve_container("serving-1", {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("no container at all"), std::string::npos)
      << none.error().message;
}

TEST(ResolveContainer, SeveralMatchesAreListed) {
  const auto list = list_containers(recorded_host());
  auto r = resolve_container("9b2e", list);  // two Docker ids start so
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("matches 2"), std::string::npos) << m;
  EXPECT_NE(m.find("legacy-1 (docker 9b2e51c7d0a4)"), std::string::npos) << m;
  EXPECT_NE(m.find("ml-batch (docker 9b2e9f00aa11)"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  // Too short to be an id prefix, and no name: not found rather than everything.
  EXPECT_FALSE(resolve_container("9b", list).ok());
}

// ---- TargetFinder on the recorded host --------------------------------------

TEST(TargetFinder, ContainerByNameFindsItsPythonThroughItsRoot) {
  auto f = TargetFinder::create({{}, "serving-1", "", false}, recorded_host());
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto changes = f.value()->rescan();
  ASSERT_EQ(changes.started.size(), 1u);
  const Target& t = changes.started[0];
  EXPECT_EQ(t.pid, 12446);
  EXPECT_TRUE(t.extension);
  EXPECT_EQ(t.container, kServing1);
  EXPECT_EQ(t.comm, "python");
  // Another mount namespace (no ns link recorded: assumed so): through /proc/PID/root.
  EXPECT_EQ(t.binary, kData + "/proc/12446/root" + kRecordedExtension);
  EXPECT_EQ(f.value()->describe(), "container serving-1 (podman 52091b1ad541)");
  // Nothing changes on the next scan.
  auto again = f.value()->rescan();
  EXPECT_TRUE(again.started.empty());
  EXPECT_TRUE(again.exited.empty());
}

TEST(TargetFinder, PodsV1OnlyCgroupsAndNerdctl) {
  auto pod = TargetFinder::create({{}, "scorer-6c5d8", "", false}, recorded_host());
  ASSERT_TRUE(pod.ok()) << pod.error().message;
  // The sidecar (envoy) and the pause process have no extension.
  EXPECT_EQ(pids_of(pod.value()->rescan().started), std::vector<pid_t>{20010});

  auto podman_pod = TargetFinder::create({{}, "web-pod", "", false}, recorded_host());
  ASSERT_TRUE(podman_pod.ok()) << podman_pod.error().message;
  EXPECT_EQ(pids_of(podman_pod.value()->rescan().started), std::vector<pid_t>{16019});

  // Docker with v1 cgroups only on a hybrid host (its 0:: line names containerd's service).
  auto legacy = TargetFinder::create({{}, "legacy-1", "", false}, recorded_host());
  ASSERT_TRUE(legacy.ok()) << legacy.error().message;
  EXPECT_EQ(pids_of(legacy.value()->rescan().started), std::vector<pid_t>{20002});
  EXPECT_EQ(legacy.value()->cgroup_id(), 0u);  // no v2 cgroup of its own: the pid filter only
  EXPECT_EQ(legacy.value()->cgroup_level(), -1);

  auto nerd = TargetFinder::create({{}, "nerd-1", "", false}, recorded_host());
  ASSERT_TRUE(nerd.ok()) << nerd.error().message;
  EXPECT_EQ(pids_of(nerd.value()->rescan().started), std::vector<pid_t>{20020});
}

TEST(TargetFinder, StoppedOrUnknownContainersAreOneLineErrors) {
  auto stopped = TargetFinder::create({{}, "batch-7", "", false}, recorded_host());
  ASSERT_FALSE(stopped.ok());
  EXPECT_NE(stopped.error().message.find("batch-7 (podman 1f9518bcdc37) is not running"),
            std::string::npos)
      << stopped.error().message;
  auto unknown = TargetFinder::create({{}, "no-such", "", false}, recorded_host());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("candidates:"), std::string::npos);
}

TEST(TargetFinder, AllFindsEveryProcessWithTheExtension) {
  auto f = TargetFinder::create({{}, "", "", true}, recorded_host());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(pids_of(f.value()->rescan().started),
            (std::vector<pid_t>{12446, 12636, 16019, 20001, 20002, 20010, 20020, 20030, 20040}));
}

TEST(TargetFinder, CgroupSelectsThatCgroupAndBelow) {
  TempDir cg;
  fs::create_directories(cg.path / "libpod_parent" / ("libpod-" + kServing1));
  fs::create_directories(cg.path / "libpod_parent" / ("libpod-" + kWebApp));
  HostPaths host = recorded_host();
  host.cgroup2 = cg.path;
  struct stat st {};
  ASSERT_EQ(::stat((cg.path / "libpod_parent").c_str(), &st), 0);

  auto parent = TargetFinder::create({{}, "", "/libpod_parent", false}, host);
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  EXPECT_EQ(parent.value()->cgroup_id(), static_cast<uint64_t>(st.st_ino));
  EXPECT_EQ(parent.value()->cgroup_level(), 1);
  EXPECT_EQ(pids_of(parent.value()->rescan().started), (std::vector<pid_t>{12446, 16019}));

  // The same cgroup given as an absolute path under the mount, with a trailing slash.
  auto one = TargetFinder::create(
      {{}, "", (cg.path / "libpod_parent" / ("libpod-" + kServing1)).string() + "/", false}, host);
  ASSERT_TRUE(one.ok()) << one.error().message;
  auto started = one.value()->rescan().started;
  ASSERT_EQ(pids_of(started), std::vector<pid_t>{12446});
  EXPECT_EQ(one.value()->cgroup_level(), 2);
  ASSERT_EQ(::stat((cg.path / "libpod_parent" / ("libpod-" + kServing1)).c_str(), &st), 0);
  EXPECT_EQ(started[0].cgroup_id, static_cast<uint64_t>(st.st_ino));

  auto missing = TargetFinder::create({{}, "", "/libpod_parent/nope", false}, host);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("does not exist under the cgroup v2 mount"),
            std::string::npos);
}

// ---- TargetFinder on real processes -----------------------------------------

TEST(TargetFinder, RealProcessThatLoadsTheExtensionLaterThenExits) {
  TempDir dir;
  const fs::path ext =
      dir.path / "site" / "mlflow_profiler" / "_core.cpython-311-x86_64-linux-gnu.so";
  write_file(ext, slurp("/bin/sleep"));  // any file: mapping it is what the scan sees
  Child child([&](Child& self) {
    self.signal_ready();
    self.wait_go();
    map_file(ext);
    self.signal_ready();
  });
  child.wait_ready();

  auto f = TargetFinder::create({{child.pid}, "", "", false});
  ASSERT_TRUE(f.ok()) << f.error().message;
  // Running, but no extension yet: waiting, not a target.
  auto first = f.value()->rescan();
  EXPECT_TRUE(first.started.empty());
  EXPECT_EQ(f.value()->waiting_pids(), std::vector<pid_t>{child.pid});
  EXPECT_FALSE(f.value()->pids_all_gone());

  child.send_go();
  child.wait_ready();
  auto second = f.value()->rescan();
  ASSERT_EQ(second.started.size(), 1u);
  EXPECT_EQ(second.started[0].pid, child.pid);
  EXPECT_EQ(second.started[0].binary, ext.string());  // same mount namespace: the plain path
  EXPECT_TRUE(f.value()->waiting_pids().empty());
  // Its cgroup v2 id: the inode of its cgroup directory (the kernel's cgroup id).
  const std::string mount = cgroup2_mount_in_mountinfo(slurp("/proc/self/mountinfo"));
  const std::string v2 =
      cgroup_v2_path(slurp("/proc/" + std::to_string(child.pid) + "/cgroup")).value_or("");
  struct stat st {};
  ASSERT_EQ(::stat((mount + v2).c_str(), &st), 0) << mount << v2;
  EXPECT_EQ(second.started[0].cgroup_id, static_cast<uint64_t>(st.st_ino));

  // Killed and not reaped yet: a zombie is gone for the agent (its parent may never wait).
  const pid_t gone = second.started[0].pid;
  ::kill(gone, SIGKILL);
  for (int i = 0; i < 200 && slurp("/proc/" + std::to_string(gone) + "/stat").find(") Z ") ==
                                 std::string::npos;
       ++i) {
    ::usleep(5000);
  }
  ASSERT_NE(slurp("/proc/" + std::to_string(gone) + "/stat").find(") Z "), std::string::npos);
  auto third = f.value()->rescan();
  EXPECT_EQ(third.exited, std::vector<pid_t>{gone});
  EXPECT_TRUE(f.value()->current().empty());
  EXPECT_TRUE(f.value()->pids_all_gone());
  child.kill_and_reap();
}

TEST(TargetFinder, RealProgramCarryingTheNotesInItsExecutable) {
  TempDir dir;
  write_file(dir.path / "storm", with_stapsdt_note(slurp("/bin/sleep"), "mlprof"),
             fs::perms::owner_all);
  write_file(dir.path / "plain", slurp("/bin/sleep"), fs::perms::owner_all);
  const pid_t storm = ::fork();
  if (storm == 0) {
    ::execl((dir.path / "storm").c_str(), "storm", "30", nullptr);
    _exit(127);
  }
  const pid_t plain = ::fork();
  if (plain == 0) {
    ::execl((dir.path / "plain").c_str(), "plain", "30", nullptr);
    _exit(127);
  }
  // Until exec has happened the children still run this test binary.
  for (int i = 0; i < 200; ++i) {
    std::error_code ec;
    if (fs::read_symlink("/proc/" + std::to_string(storm) + "/exe", ec) == dir.path / "storm" &&
        fs::read_symlink("/proc/" + std::to_string(plain) + "/exe", ec) == dir.path / "plain") {
      break;
    }
    ::usleep(10000);
  }
  auto f = TargetFinder::create({{storm, plain}, "", "", false});
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto changes = f.value()->rescan();
  ASSERT_EQ(changes.started.size(), 1u);
  EXPECT_EQ(changes.started[0].pid, storm);
  EXPECT_EQ(changes.started[0].binary, (dir.path / "storm").string());
  EXPECT_FALSE(changes.started[0].extension);
  EXPECT_EQ(changes.started[0].comm, "storm");
  EXPECT_EQ(f.value()->waiting_pids(), std::vector<pid_t>{plain});
  for (pid_t p : {storm, plain}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

TEST(TargetFinder, NoSuchPidIsAnErrorNamingTheFix) {
  // Past pid_max: a pid no process can have.
  auto f = TargetFinder::create({{0x3ffffff0}, "", "", false});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("no process 1073741808"), std::string::npos)
      << f.error().message;
}
