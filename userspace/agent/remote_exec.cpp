#include "agent/remote_exec.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

#include "agent/procfs.h"
#include "util/file_io.h"

namespace mlprof::agent {

namespace {

// ---- _Py_DebugOffsets, as laid out by each CPython it knows ----------------
// Copies of Include/internal/pycore_debug_offsets.h's struct (every member
// a uint64_t after the 8-byte cookie), to find the members the protocol
// needs. Each static_assert pins the size measured against that version's
// installed header (docs/ebpf.md, "Injecting into a running Python").

// CPython 3.14 (v3.14.7's header).
struct Layout314 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, threads_main, gc, imports_modules, sysdict, builtins,
        ceval_gil, gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder, code_object_generation, tlbc_generation;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk,
        status;
  } thread_state;
  uint64_t interpreter_frame[8];
  uint64_t code_object[11];
  uint64_t pyobject[2];
  uint64_t type_object[4];
  uint64_t tuple_object[3];
  uint64_t list_object[3];
  uint64_t set_object[4];
  uint64_t dict_object[3];
  uint64_t float_object[2];
  uint64_t long_object[3];
  uint64_t bytes_object[3];
  uint64_t unicode_object[4];
  uint64_t gc[2];
  uint64_t gen_object[4];
  uint64_t llist_node[2];
  struct {
    uint64_t eval_breaker, remote_debugger_support, remote_debugging_enabled, debugger_pending_call,
        debugger_script_path, debugger_script_path_size;
  } debugger_support;
};
static_assert(sizeof(Layout314) == 760, "CPython 3.14's sizeof(_Py_DebugOffsets)");
static_assert(offsetof(Layout314, debugger_support) == 712);

// CPython 3.15 (v3.15.0rc2's header): the thread state gains base_frame,
// last_profiled_frame(_seq), holds_gil, gil_requested, current_exception and
// exc_state; err_stackitem and heap_type_object are new; the type, unicode
// and gc blocks grow.
struct Layout315 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, threads_main, gc, imports_modules, sysdict, builtins,
        ceval_gil, gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder, code_object_generation, tlbc_generation;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, base_frame, last_profiled_frame,
        last_profiled_frame_seq, thread_id, native_thread_id, datastack_chunk, status, holds_gil,
        gil_requested, current_exception, exc_state;
  } thread_state;
  uint64_t err_stackitem[1];
  uint64_t interpreter_frame[8];
  uint64_t code_object[11];
  uint64_t pyobject[2];
  uint64_t type_object[6];
  uint64_t heap_type_object[2];
  uint64_t tuple_object[3];
  uint64_t list_object[3];
  uint64_t set_object[4];
  uint64_t dict_object[3];
  uint64_t float_object[2];
  uint64_t long_object[3];
  uint64_t bytes_object[3];
  uint64_t unicode_object[5];
  uint64_t gc[5];
  uint64_t gen_object[4];
  uint64_t llist_node[2];
  struct {
    uint64_t eval_breaker, remote_debugger_support, remote_debugging_enabled, debugger_pending_call,
        debugger_script_path, debugger_script_path_size;
  } debugger_support;
};
static_assert(sizeof(Layout315) == 888, "CPython 3.15's sizeof(_Py_DebugOffsets)");
static_assert(offsetof(Layout315, debugger_support) == 840);

template <typename Layout>
DebugOffsets fields_of(const Layout& l) {
  DebugOffsets o;
  o.version.hex = l.version;
  o.free_threaded = l.free_threaded != 0;
  o.runtime_interpreters_head = l.runtime_state.interpreters_head;
  o.interp_id = l.interpreter_state.id;
  o.interp_next = l.interpreter_state.next;
  o.interp_threads_main = l.interpreter_state.threads_main;
  o.interp_size = l.interpreter_state.size;
  o.interp_remote_debug = l.debugger_support.remote_debugging_enabled;
  o.tstate_eval_breaker = l.debugger_support.eval_breaker;
  o.tstate_debugger_support = l.debugger_support.remote_debugger_support;
  o.tstate_size = l.thread_state.size;
  o.support_pending_call = l.debugger_support.debugger_pending_call;
  o.support_script_path = l.debugger_support.debugger_script_path;
  o.support_script_path_size = l.debugger_support.debugger_script_path_size;
  return o;
}

// Offsets that cannot be a real interpreter's: each field lies inside its
// structure, and the script path buffer is of a sane size.
bool plausible(const DebugOffsets& o) {
  constexpr uint64_t kMaxStruct = 1u << 20;
  if (o.interp_size == 0 || o.interp_size > kMaxStruct || o.tstate_size == 0 ||
      o.tstate_size > kMaxStruct)
    return false;
  if (o.runtime_interpreters_head > kMaxStruct) return false;
  if (o.interp_threads_main + 8 > o.interp_size || o.interp_remote_debug + 4 > o.interp_size ||
      o.interp_id + 8 > o.interp_size || o.interp_next + 8 > o.interp_size)
    return false;
  if (o.tstate_eval_breaker + 8 > o.tstate_size) return false;
  if (o.support_script_path_size < 64 || o.support_script_path_size > 65536) return false;
  const uint64_t support_end =
      std::max(o.support_pending_call + 4, o.support_script_path + o.support_script_path_size);
  return o.tstate_debugger_support + support_end <= o.tstate_size;
}

// ---- ELF -------------------------------------------------------------------

using ReadAt = std::function<bool(uint64_t offset, void* out, size_t size)>;

std::optional<uint64_t> pyruntime_in_elf(const ReadAt& read, uint64_t start) {
  Elf64_Ehdr eh{};
  if (!read(0, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_shoff == 0)
    return std::nullopt;
  uint64_t count = eh.e_shnum, strndx = eh.e_shstrndx;
  if (count == 0 || strndx == SHN_XINDEX) {  // more than 0xff00 sections: in section 0
    Elf64_Shdr first{};
    if (!read(eh.e_shoff, &first, sizeof first)) return std::nullopt;
    if (count == 0) count = first.sh_size;
    if (strndx == SHN_XINDEX) strndx = first.sh_link;
  }
  if (count > 65536 || strndx >= count) return std::nullopt;
  std::vector<Elf64_Shdr> sections(count);
  if (!read(eh.e_shoff, sections.data(), count * sizeof(Elf64_Shdr))) return std::nullopt;
  const Elf64_Shdr& names_hdr = sections[strndx];
  if (names_hdr.sh_size > (16u << 20)) return std::nullopt;
  std::string names(names_hdr.sh_size, '\0');
  if (!read(names_hdr.sh_offset, names.data(), names.size())) return std::nullopt;
  const Elf64_Shdr* runtime = nullptr;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_name < names.size() && std::strcmp(names.c_str() + s.sh_name, ".PyRuntime") == 0) {
      runtime = &s;
      break;
    }
  }
  if (runtime == nullptr) return std::nullopt;
  if (eh.e_phnum == 0 || eh.e_phnum > 4096) return std::nullopt;
  std::vector<Elf64_Phdr> segments(eh.e_phnum);
  if (!read(eh.e_phoff, segments.data(), segments.size() * sizeof(Elf64_Phdr))) return std::nullopt;
  for (const Elf64_Phdr& p : segments) {
    if (p.p_type != PT_LOAD) continue;
    const uint64_t align = p.p_align > 1 ? p.p_align : 1;
    const uint64_t load = p.p_vaddr - p.p_vaddr % align;
    return start + runtime->sh_addr - load;
  }
  return std::nullopt;
}

}  // namespace

std::string PyVersion::text() const {
  char t[48];
  if ((hex & 0xffff) == 0) {  // read from a file name: no micro version
    std::snprintf(t, sizeof t, "%d.%d", major(), minor());
  } else {
    static const char* kLevels[] = {"a", "b", "rc"};
    const bool pre = level() >= 0xA && level() <= 0xC;
    std::snprintf(
        t, sizeof t, "%d.%d.%d%s", major(), minor(), micro(),
        pre ? (std::string(kLevels[level() - 0xA]) + std::to_string(serial())).c_str() : "");
  }
  return t;
}

size_t debug_offsets_read_size() { return std::max(sizeof(Layout314), sizeof(Layout315)); }

Result<DebugOffsets> parse_debug_offsets(std::string_view bytes, RemoteExecError* why) {
  auto refuse = [&](RemoteExecRefusal r, std::string message, PyVersion v = {}) {
    *why = RemoteExecError{r, 0, std::move(message), v};
    return Error{Error::Kind::kUnsupported, 0, why->message};
  };
  if (bytes.size() < 16 || bytes.substr(0, kPyDebugCookie.size()) != kPyDebugCookie)
    return refuse(RemoteExecRefusal::kNoRuntime, "no CPython debug offsets (cookie) at _PyRuntime");
  PyVersion v;
  std::memcpy(&v.hex, bytes.data() + 8, sizeof v.hex);
  if (v.major() != 3)
    return refuse(RemoteExecRefusal::kUnknownVersion,
                  "its interpreter reports version " + v.text() + ", not a CPython 3", v);
  if (v.minor() < 14)
    return refuse(RemoteExecRefusal::kTooOld, "Python " + v.text() + " has no PEP 768", v);
  // Alphas and betas may lay the offsets out differently from the release.
  if (v.level() < 0xC) {
    return refuse(RemoteExecRefusal::kUnknownVersion,
                  "Python " + v.text() +
                      " is a pre-release whose debug offsets this agent does not know (it knows "
                      "3.14 and 3.15 from their release candidates on)",
                  v);
  }
  DebugOffsets o;
  auto take = [&](auto layout) {
    if (bytes.size() < sizeof layout) return false;
    std::memcpy(&layout, bytes.data(), sizeof layout);
    o = fields_of(layout);
    return true;
  };
  if (v.minor() == 14 || v.minor() == 15) {
    if (!(v.minor() == 14 ? take(Layout314{}) : take(Layout315{})))
      return refuse(RemoteExecRefusal::kIo, "the debug offsets were cut short", v);
  } else {
    return refuse(RemoteExecRefusal::kUnknownVersion,
                  "Python " + v.text() +
                      " is newer than this agent knows (3.14 and 3.15): upgrade mlprof-ebpf",
                  v);
  }
  if (!plausible(o)) {
    return refuse(RemoteExecRefusal::kUnknownVersion,
                  "the debug offsets of Python " + v.text() + " do not fit its structures", v);
  }
  return o;
}

std::vector<RuntimeCandidate> runtime_candidates(std::string_view maps) {
  std::vector<RuntimeCandidate> out;
  std::set<std::string> seen;
  while (!maps.empty()) {
    const size_t nl = maps.find('\n');
    std::string_view line = maps.substr(0, nl);
    maps = nl == std::string_view::npos ? std::string_view{} : maps.substr(nl + 1);
    // "start-end perms offset dev inode   path"
    const size_t path_at = line.find('/');
    if (path_at == std::string_view::npos) continue;
    const std::string path = cut_deleted(std::string(line.substr(path_at)));
    const std::string_view base = std::string_view(path).substr(path.rfind('/') + 1);
    if (base.find("python") == std::string_view::npos || seen.count(path) != 0) continue;
    char* end = nullptr;
    const std::string head(line.substr(0, path_at));
    const uint64_t start = std::strtoull(head.c_str(), &end, 16);
    // Fields: range, perms, offset.
    size_t sp1 = head.find(' ');
    size_t sp2 = sp1 == std::string::npos ? sp1 : head.find(' ', sp1 + 1);
    if (sp2 == std::string::npos) continue;
    const uint64_t offset = std::strtoull(head.c_str() + sp2 + 1, nullptr, 16);
    if (offset != 0) continue;
    seen.insert(path);
    out.push_back(RuntimeCandidate{path, start});
  }
  return out;
}

std::optional<uint64_t> pyruntime_address(std::string_view elf, uint64_t start) {
  return pyruntime_in_elf(
      [elf](uint64_t offset, void* out, size_t size) {
        if (offset > elf.size() || size > elf.size() - offset) return false;
        std::memcpy(out, elf.data() + offset, size);
        return true;
      },
      start);
}

std::optional<PyVersion> python_version_in_maps(std::string_view maps) {
  size_t at = 0;
  while ((at = maps.find("python", at)) != std::string_view::npos) {
    at += 6;
    // "python3.11" (libpython3.11.so, bin/python3.11); not "cpython-311" (an extension's tag).
    if (at >= 7 && maps[at - 7] == 'c') continue;
    size_t i = at;
    auto number = [&](int* out) {
      const size_t from = i;
      int n = 0;
      while (i < maps.size() && maps[i] >= '0' && maps[i] <= '9' && i - from < 3)
        n = n * 10 + (maps[i++] - '0');
      *out = n;
      return i > from;
    };
    int major = 0, minor = 0;
    if (!number(&major) || i >= maps.size() || maps[i] != '.') continue;
    ++i;
    if (!number(&minor)) continue;
    PyVersion v;
    v.hex = (static_cast<uint64_t>(major) << 24) | (static_cast<uint64_t>(minor) << 16);
    return v;
  }
  return std::nullopt;
}

// ---- the target process ------------------------------------------------------

RemoteProcess::RemoteProcess(pid_t pid, std::string proc) : pid_(pid), proc_(std::move(proc)) {}

bool RemoteProcess::read(uint64_t address, void* out, size_t size) {
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  const ssize_t n = ::process_vm_readv(pid_, &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(size)) return true;
  if (n >= 0) errno = EFAULT;  // a partial read: the rest is not mapped
  return false;
}

bool RemoteProcess::write(uint64_t address, const void* data, size_t size) {
  iovec local{const_cast<void*>(data), size};
  iovec remote{reinterpret_cast<void*>(address), size};
  const ssize_t n = ::process_vm_writev(pid_, &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(size)) return true;
  if (n >= 0) errno = EFAULT;
  return false;
}

RemoteExecError RemoteProcess::io_error(const std::string& what) const {
  const int e = errno;
  RemoteExecError err;
  err.errnum = e;
  if (e == EPERM || e == EACCES) {
    err.reason = RemoteExecRefusal::kPermission;
    err.message = what + " was refused (" + std::strerror(e) +
                  "): the agent needs CAP_SYS_PTRACE over the target (ptrace access mode "
                  "attach), and no security module (AppArmor, SELinux) may deny it";
  } else {
    err.reason = RemoteExecRefusal::kIo;
    err.message =
        what + " failed: " + std::strerror(e) + (e == ESRCH ? " (the process exited)" : "");
  }
  return err;
}

Result<DebugOffsets> RemoteProcess::debug_offsets(RemoteExecError* why) {
  const std::string dir = proc_ + "/" + std::to_string(pid_);
  auto maps = read_file(dir + "/maps", 64u << 20);
  if (!maps) {
    *why = io_error("reading " + dir + "/maps");
    return Error{Error::Kind::kIo, why->errnum, why->message};
  }
  char link[4096];
  const ssize_t n = ::readlink((dir + "/exe").c_str(), link, sizeof link - 1);
  const std::string exe = n > 0 ? cut_deleted(std::string(link, static_cast<size_t>(n))) : "";

  std::optional<RemoteExecError> first_refusal;
  for (const RuntimeCandidate& c : runtime_candidates(maps.value())) {
    // The executable through /proc/PID/exe (also when replaced on disk);
    // a library through the target's own root (its mount namespace).
    const bool is_exe = c.path == exe;
    // Not a FIFO, nor a symlink out of its root (procfs.h).
    if (!is_exe && !regular_file_in_root(dir, c.path, false)) continue;
    const std::string file = is_exe ? dir + "/exe" : dir + "/root" + c.path;
    RemoteExecError refusal;
    auto parsed = debug_offsets_in(file, c.start, &refusal);
    if (parsed) return parsed;
    if (refusal.reason == RemoteExecRefusal::kPermission) {
      *why = refusal;
      return parsed;
    }
    if (refusal.reason != RemoteExecRefusal::kNoRuntime && !first_refusal) first_refusal = refusal;
  }
  if (first_refusal) {
    *why = *first_refusal;
    return Error{Error::Kind::kUnsupported, 0, why->message};
  }
  // No debug offsets: a Python older than 3.13 is named by its files.
  if (auto v = python_version_in_maps(maps.value()); v && (v->major() < 3 || v->minor() < 14)) {
    *why = RemoteExecError{RemoteExecRefusal::kTooOld, 0, "Python " + v->text() + " has no PEP 768",
                           *v};
  } else {
    *why = RemoteExecError{RemoteExecRefusal::kNoRuntime,
                           0,
                           "no CPython runtime (.PyRuntime) found in the python executable or "
                           "libpython it maps",
                           {}};
  }
  return Error{Error::Kind::kUnsupported, 0, why->message};
}

Result<DebugOffsets> RemoteProcess::debug_offsets_in(const std::string& file, uint64_t start,
                                                     RemoteExecError* why) {
  auto none = [&](std::string message) {
    *why = RemoteExecError{RemoteExecRefusal::kNoRuntime, 0, std::move(message), {}};
    return Error{Error::Kind::kUnsupported, 0, why->message};
  };
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return none(file + ": " + std::strerror(errno));
  auto at = pyruntime_in_elf(
      [fd](uint64_t offset, void* out, size_t size) { return pread_all(fd, out, size, offset); },
      start);
  ::close(fd);
  if (!at) return none(file + " has no .PyRuntime section");
  std::string bytes(debug_offsets_read_size(), '\0');
  if (!read(*at, bytes.data(), bytes.size())) {
    if (errno == EPERM || errno == EACCES || errno == ESRCH) {
      *why = io_error("reading pid " + std::to_string(pid_) + "'s memory");
      return Error{Error::Kind::kIo, why->errnum, why->message};
    }
    return none(file + ": its .PyRuntime is not readable");
  }
  auto parsed = parse_debug_offsets(bytes, why);
  if (parsed) runtime_ = *at;
  return parsed;
}

bool RemoteProcess::locate(const DebugOffsets& o, RemoteExecError* why) {
  main_tstate_ = 0;
  uint64_t interp = 0;
  if (!read_u64(runtime_ + o.runtime_interpreters_head, &interp)) {
    *why = io_error("reading its interpreter");
    return false;
  }
  // The main interpreter: the list's last (each new one goes to the head).
  for (int hops = 0; interp != 0; ++hops) {
    int64_t id = -1;
    if (!read(interp + o.interp_id, &id, sizeof id)) {
      *why = io_error("reading its interpreters");
      return false;
    }
    if (id == 0) break;
    if (hops == 256) {
      *why = {RemoteExecRefusal::kIo, 0, "its list of interpreters does not end", o.version};
      return false;
    }
    if (!read_u64(interp + o.interp_next, &interp)) {
      *why = io_error("reading its interpreters");
      return false;
    }
  }
  if (interp == 0) {
    *why = {RemoteExecRefusal::kNoMainThread, 0,
            "its main interpreter is not running (starting up or shutting down)", o.version};
    return false;
  }
  int32_t enabled = 0;
  if (!read(interp + o.interp_remote_debug, &enabled, sizeof enabled)) {
    *why = io_error("reading its interpreter");
    return false;
  }
  if (enabled != 1) {
    *why = {RemoteExecRefusal::kDisabled, 0, "remote debugging is disabled in it", o.version};
    return false;
  }
  uint64_t tstate = 0;
  if (!read_u64(interp + o.interp_threads_main, &tstate)) {
    *why = io_error("reading its main thread's state");
    return false;
  }
  if (tstate == 0) {
    *why = {RemoteExecRefusal::kNoMainThread, 0, "it has no main thread state", o.version};
    return false;
  }
  int32_t pending = 0;
  const uint64_t pending_at = tstate + o.tstate_debugger_support + o.support_pending_call;
  if (!read(pending_at, &pending, sizeof pending)) {
    *why = io_error("reading its main thread's state");
    return false;
  }
  if (pending == 1) {
    *why = {RemoteExecRefusal::kBusy, 0,
            "another debugger's script is pending in it (sys.remote_exec); try again once it ran",
            o.version};
    return false;
  }
  main_tstate_ = tstate;
  return true;
}

bool RemoteProcess::send(const DebugOffsets& o, const std::string& script_path,
                         RemoteExecError* why) {
  if (main_tstate_ == 0 && !locate(o, why)) return false;
  const uint64_t tstate = main_tstate_;
  if (script_path.size() + 1 > o.support_script_path_size) {
    *why = {RemoteExecRefusal::kPathTooLong, 0,
            "the script path " + script_path + " is longer than its " +
                std::to_string(o.support_script_path_size - 1) + " bytes",
            o.version};
    return false;
  }
  const uint64_t support = tstate + o.tstate_debugger_support;
  // The path, then the flag, then the eval breaker: the interpreter reads
  // them in the opposite order. CPython writes the whole eval_breaker word
  // back; only its low byte (the event bits) is written here, so the
  // instrumentation version in the upper bits can never be set back.
  const int32_t one = 1;
  uint8_t breaker = 0;
  if (!write(support + o.support_script_path, script_path.c_str(), script_path.size() + 1) ||
      !write(support + o.support_pending_call, &one, sizeof one) ||
      !read(tstate + o.tstate_eval_breaker, &breaker, 1)) {
    *why = io_error("writing to its main thread's state");
    return false;
  }
  breaker |= kEvalPleaseStopBit;
  if (!write(tstate + o.tstate_eval_breaker, &breaker, 1)) {
    *why = io_error("writing to its main thread's state");
    return false;
  }
  return true;
}

bool RemoteProcess::pending(const DebugOffsets& o) {
  if (main_tstate_ == 0) return false;
  int32_t pending = 0;
  if (!read(main_tstate_ + o.tstate_debugger_support + o.support_pending_call, &pending,
            sizeof pending))
    return false;
  return pending == 1;
}

bool RemoteProcess::cancel(const DebugOffsets& o) {
  if (!pending(o)) return false;
  const int32_t zero = 0;
  return write(main_tstate_ + o.tstate_debugger_support + o.support_pending_call, &zero,
               sizeof zero);
}

}  // namespace mlprof::agent
