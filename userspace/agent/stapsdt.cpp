// The ELF .note.stapsdt reader (stapsdt.h).
//
// Hand-read through <elf.h>: one section of one file. libbpf reads the same
// notes again when it attaches; taking libelf in here only to find a section
// would add a link dependency to the targets library and its tests.

#include "agent/stapsdt.h"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "util/file_io.h"

namespace mlprof::agent {

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

}  // namespace mlprof::agent
