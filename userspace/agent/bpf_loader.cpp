// BpfLoader: the skeleton of bpf/mlprof.bpf.c, its links and its ring buffer,
// each owned by RAII. Lifecycle as in bpf_loader.h: open, configure, load,
// attach the scheduler programs, attach pids, poll, destroy.

#include "agent/bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/procfs.h"
#include "mlprof.skel.h"  // C: its _Bool is GNU C++'s (CMakeLists.txt, mlprof_agent_bpf)
#include "util/file_io.h"

namespace mlprof::agent {
namespace {

constexpr const char* kBtfPath = "/sys/kernel/btf/vmlinux";

// ---- libbpf's messages --------------------------------------------------
// Silent unless verbose, but the last warning is kept: it is often the only
// place that says why a load or an attach failed (the verifier's verdict,
// "failed to find USDT ...").
std::mutex g_print_mu;
bool g_verbose = false;
std::string g_last_warning;

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, args);
  std::lock_guard<std::mutex> lock(g_print_mu);
  if (g_verbose) fputs(buf, stderr);
  if (level == LIBBPF_WARN && buf[0] != '\0' && buf[0] != ' ' && buf[0] != '\t' &&
      std::strncmp(buf, "-- ", 3) != 0) {
    g_last_warning = buf;
    while (!g_last_warning.empty() &&
           (g_last_warning.back() == '\n' || g_last_warning.back() == ' '))
      g_last_warning.pop_back();
  }
  return 0;
}

void install_print(bool verbose) {
  {
    std::lock_guard<std::mutex> lock(g_print_mu);
    g_verbose = verbose;
    g_last_warning.clear();
  }
  libbpf_set_print(libbpf_print);
}

std::string take_last_warning() {
  std::lock_guard<std::mutex> lock(g_print_mu);
  std::string w;
  w.swap(g_last_warning);
  if (w.size() > 300) w = w.substr(0, 300) + "...";
  return w.empty() ? std::string() : " (libbpf: " + w + ")";
}

bool permission_errno(int e) { return e == EPERM || e == EACCES; }

// The fix for a refused bpf()/perf_event_open(): what the agent needs
// (measured on 6.18 with setpriv, bpf/README.md): CAP_BPF and CAP_PERFMON
// load, attach and read; no CAP_SYS_RESOURCE (BPF memory is charged to the
// cgroup since 5.11) and no CAP_SYS_ADMIN.
const char* privilege_fix() {
  return "run mlprof-ebpf as root, or grant it CAP_BPF and CAP_PERFMON "
         "(e.g. sudo setcap cap_bpf,cap_perfmon+ep mlprof-ebpf; on kernels before 5.8, "
         "CAP_SYS_ADMIN)";
}

// Opening /proc/PID/root/... (a containerized target) or /proc/PID/maps of a
// process with other credentials is a ptrace-read access check.
const char* proc_fix() {
  return "reading a target through /proc/PID/root needs CAP_SYS_PTRACE unless the agent has the "
         "target's uid and all of its capabilities (run as root, or add cap_sys_ptrace)";
}

Error error(Error::Kind kind, int errnum, std::string message) {
  Error e;
  e.kind = kind;
  e.errnum = errnum;
  e.message = std::move(message);
  return e;
}

Error load_error(const std::string& what, int e) {
  std::string msg = what + " failed: " + std::strerror(e);
  if (permission_errno(e)) msg += "; " + std::string(privilege_fix());
  return error(Error::Kind::kIo, e, msg + take_last_warning());
}

// ---- kernel probes -------------------------------------------------------

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

struct BtfDeleter {
  void operator()(btf* b) const { btf__free(b); }
};
using BtfPtr = std::unique_ptr<btf, BtfDeleter>;

// The kernel's lockdown mode: "none", "integrity", "confidentiality", or ""
// when the kernel has no lockdown (or securityfs is not mounted).
std::string lockdown_mode() {
  const Result<std::string> read = read_file("/sys/kernel/security/lockdown");
  const std::string all = read ? read.value() : "";
  const size_t open = all.find('['), close = all.find(']');
  return open == std::string::npos || close < open ? "" : all.substr(open + 1, close - open - 1);
}

// 1: the kernel has BPF ring buffers; 0: it does not (it refuses the map
// type with EINVAL); -errno: it could not tell (EPERM: no capability).
// Not libbpf_probe_bpf_map_type: it says 0 for EPERM too.
int probe_ringbuf() {
  const int fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, nullptr, 0, 0,
                                static_cast<__u32>(sysconf(_SC_PAGESIZE)), nullptr);
  if (fd >= 0) {
    close(fd);
    return 1;
  }
  return errno == EINVAL ? 0 : -errno;
}

// A real probe (bpftool feature probe misreports tracing programs here):
// load a two-instruction tp_btf program for sched_switch and attach it for
// an instant. 0, or the negative errno that refused it.
int probe_tp_btf(const btf* vmlinux) {
  int id = btf__find_by_name_kind(vmlinux, "btf_trace_sched_switch", BTF_KIND_TYPEDEF);
  if (id < 0) return -ENOENT;
  bpf_insn insns[2] = {};
  insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K;  // r0 = 0
  insns[0].dst_reg = BPF_REG_0;
  insns[1].code = BPF_JMP | BPF_EXIT;
  bpf_prog_load_opts opts{};
  opts.sz = sizeof(opts);
  opts.expected_attach_type = BPF_TRACE_RAW_TP;
  opts.attach_btf_id = static_cast<__u32>(id);
  Fd prog(bpf_prog_load(BPF_PROG_TYPE_TRACING, "mlprof_probe", "GPL", insns, 2, &opts));
  if (prog.fd < 0) return -errno;
  Fd link(bpf_raw_tracepoint_open(nullptr, prog.fd));
  if (link.fd < 0) return -errno;
  return 0;
}

// The sched_switch tracepoint's prototype has prev_state (5 parameters with
// the hidden __data) since 5.18: core_fixes.bpf.h says why the BPF side asks.
bool sched_switch_has_prev_state(const btf* vmlinux) {
  int id = btf__find_by_name_kind(vmlinux, "btf_trace_sched_switch", BTF_KIND_TYPEDEF);
  if (id < 0) return false;
  const btf_type* t = btf__type_by_id(vmlinux, btf__type_by_id(vmlinux, id)->type);
  if (!t || !btf_is_ptr(t)) return false;
  t = btf__type_by_id(vmlinux, t->type);
  return t && btf_is_func_proto(t) && btf_vlen(t) >= 5;
}

// ---- map layouts the loader edits on detach ------------------------------
// Mirrors of mlprof.bpf.c's keys and values; open() checks the sizes against
// the loaded maps, so a drift fails loudly instead of purging garbage.
struct SessionKey {
  uint64_t pstart, session;
  uint32_t tgid, pad;
};
struct SeenKey {
  uint64_t pstart;
  uint32_t tgid, id, is_label, pad;
};
struct ThreadState {
  uint64_t pstart, session, off_start, wake_ns;
  uint32_t tgid, flags, waker_tid, waker_tgid, prev_state, blocked;
  int32_t syscall;
  uint32_t waker_kind;
  char waker_comm[16];
  uint64_t futex_addr, sem_addr;
  uint32_t wait_object, pad;
  uint64_t run_delay_out;
};

// Deletes every entry of map `fd` for which doomed(key, value) is true.
template <typename Key, typename Value, typename Pred>
void purge(int fd, Pred doomed) {
  std::vector<Key> victims;
  Key key{}, next{};
  Key* prev = nullptr;
  Value value{};
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, &value) == 0 && doomed(next, value)) victims.push_back(next);
    key = next;
    prev = &key;
  }
  for (const Key& k : victims) bpf_map_delete_elem(fd, &k);
}

struct SkelDeleter {
  void operator()(mlprof_bpf* s) const { mlprof_bpf__destroy(s); }
};
struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
struct RingDeleter {
  void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

}  // namespace

struct BpfLoader::Impl {
  // Destroyed bottom to top: ring buffer and links before the skeleton.
  std::unique_ptr<mlprof_bpf, SkelDeleter> skel;
  std::vector<Link> sched_links;
  std::map<pid_t, std::vector<Link>> pid_links;
  std::map<pid_t, int> contract;  // the USDT contract version each pid was attached with
  std::unique_ptr<ring_buffer, RingDeleter> ring;
  const char* variant = "";
  bool session_spans = true;  // mlprof_session_spans loaded (bpf_loop)
  uint64_t records = 0;
  const std::function<void(const void*, size_t)>* on_record = nullptr;
  std::exception_ptr callback_error;
  // Records handed over in this poll(). libbpf's ring_buffer__poll returns
  // only once the reader has caught up with the producers: a target that
  // produces as fast as the agent reads kept it there for good, so the
  // agent never collected a finished session (its memory grew with every
  // one, bench/RESULTS.md) nor saw SIGTERM. A poll now stops after
  // kMaxRecordsPerPoll records.
  static constexpr uint64_t kMaxRecordsPerPoll = 1 << 16;
  static constexpr int kBudgetSpent = -EXFULL;  // on_sample's "stop here", not an error
  uint64_t taken = 0;

  static int on_sample(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    ++self->records;
    if (!self->on_record) return 0;
    try {
      (*self->on_record)(data, size);
    } catch (...) {
      // Not through libbpf's C frames: stop this poll, rethrow after it.
      self->callback_error = std::current_exception();
      return -ECANCELED;
    }
    // libbpf has consumed this record before the callback: stopping loses nothing.
    return ++self->taken >= kMaxRecordsPerPoll ? kBudgetSpent : 0;
  }

  struct Usdt {
    bpf_program* prog;
    const char* name;
  };
  // In attach order, session_begin last (attach() puts the lock uprobes just
  // before it): its semaphore starts an autoprofiled process's sessions.
  // Contract v2 (mlprof_usdt.h): the session's boundaries as they happen
  // (threads to follow) and its spans in one hit at its end.
  std::vector<Usdt> usdt_programs_v2() const {
    auto& p = skel->progs;
    return {{p.mlprof_lane_begin, "lane_begin"},
            {p.mlprof_session_spans, "session_spans"},
            {p.mlprof_session_begin, "session_begin"}};
  }
  // Contract v1: a probe per span (an extension without session_spans).
  std::vector<Usdt> usdt_programs() const {
    auto& p = skel->progs;
    return {{p.mlprof_session_end, "session_end"},   {p.mlprof_lane_begin, "lane_begin"},
            {p.mlprof_span_enter, "span_enter"},     {p.mlprof_span_exit, "span_exit"},
            {p.mlprof_span_suspend, "span_suspend"}, {p.mlprof_span_resume, "span_resume"},
            {p.mlprof_span_io, "span_io"},           {p.mlprof_session_begin, "session_begin"}};
  }
};

BpfLoader::BpfLoader() : impl_(std::make_unique<Impl>()) {}

BpfLoader::~BpfLoader() {
  if (!impl_) return;
  impl_->ring.reset();
  impl_->pid_links.clear();  // the targets' semaphores go back to 0
  impl_->sched_links.clear();
  impl_->skel.reset();
}

namespace {

// open()'s first step: the ring size and what the kernel must have (BTF,
// reads of kernel memory, a ring buffer), each refusal named before the
// verifier would give a bare EINVAL. Returns the kernel's BTF.
Result<BtfPtr> check_kernel(const LoaderOptions& opts) {
  const long page = sysconf(_SC_PAGESIZE);
  if (opts.ring_bytes < static_cast<size_t>(page) || (opts.ring_bytes & (opts.ring_bytes - 1)) != 0)
    return error(Error::Kind::kUnsupported, EINVAL,
                 "ring buffer size " + std::to_string(opts.ring_bytes) +
                     " is not a power of two of at least one page (" + std::to_string(page) +
                     " bytes)");
  if (access(kBtfPath, R_OK) != 0) {
    int e = errno;
    return error(
        Error::Kind::kUnsupported, e,
        std::string("the kernel has no BTF (") + kBtfPath + ": " + std::strerror(e) +
            "); mlprof-ebpf's CO-RE programs need a kernel built with CONFIG_DEBUG_INFO_BTF=y");
  }
  BtfPtr vmlinux(btf__load_vmlinux_btf());
  if (!vmlinux) {
    int e = errno;
    return error(
        Error::Kind::kUnsupported, e,
        std::string("reading the kernel's BTF (") + kBtfPath + ") failed: " + std::strerror(e));
  }

  // Lockdown's confidentiality mode takes bpf_probe_read_kernel away, which
  // every scheduler program uses: the verifier would refuse them with a bare
  // EINVAL. (integrity, the default where lockdown is on, leaves it.)
  if (lockdown_mode() == "confidentiality")
    return error(
        Error::Kind::kUnsupported, ENOTSUP,  // not EPERM: that says seccomp (main.cpp)
        "kernel lockdown is in confidentiality mode (/sys/kernel/security/lockdown): BPF may not "
        "read kernel memory (bpf_probe_read_kernel), which the scheduler programs need; boot with "
        "lockdown=integrity or none");
  // The ring buffer (5.8) has no fallback: named here, before the verifier
  // refuses the object with a bare EINVAL.
  if (const int ring = probe_ringbuf(); ring == 0) {
    return error(Error::Kind::kUnsupported, ENOTSUP,
                 "this kernel has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF, Linux 5.8+): "
                 "mlprof-ebpf needs Linux 5.8 or newer");
  } else if (ring < 0 && permission_errno(-ring)) {
    return load_error("creating a BPF ring buffer", -ring);
  }
  return vmlinux;
}

// open()'s scheduler step: the programs of the loaded variant and the
// interrupt-context ones, attached; their links go to `links`.
Result<Ok> attach_sched_programs(mlprof_bpf& skel, std::span<bpf_program* const> variant,
                                 std::vector<Link>& links) {
  // The interrupt-context programs (waker kinds) are raw_tp in both variants.
  // Exits before entries: an entry seen without its exit (a callback running
  // while the pair was being attached) would leave its CPU's count up for
  // good, and every later wakeup there labelled an interrupt's; an exit
  // without its entry is ignored.
  bpf_program* const irq_progs[] = {
      skel.progs.hrtimer_expire_exit_raw,  skel.progs.timer_expire_exit_raw,
      skel.progs.softirq_exit_raw,         skel.progs.irq_handler_exit_raw,
      skel.progs.hrtimer_expire_entry_raw, skel.progs.timer_expire_entry_raw,
      skel.progs.softirq_entry_raw,        skel.progs.irq_handler_entry_raw};
  std::vector<bpf_program*> sched_progs(std::begin(irq_progs), std::end(irq_progs));
  for (bpf_program* p : variant) sched_progs.push_back(p);
  for (bpf_program* p : sched_progs) {
    bpf_link* link = bpf_program__attach(p);
    if (!link)
      return load_error(std::string("attaching ") + bpf_program__name(p) + " (" +
                            bpf_program__section_name(p) + ")",
                        errno);
    links.emplace_back(link);
  }
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<BpfLoader>> BpfLoader::open(const LoaderOptions& opts) {
  install_print(opts.verbose);
  auto kernel = check_kernel(opts);
  if (!kernel) return kernel.error();
  const BtfPtr vmlinux = std::move(kernel.value());

  std::unique_ptr<BpfLoader> self(new BpfLoader());
  Impl& impl = *self->impl_;

  bool use_btf = false;
  if (!opts.force_raw_tp) {
    int probe = probe_tp_btf(vmlinux.get());
    if (permission_errno(-probe)) return load_error("loading a probe BPF program", -probe);
    use_btf = probe == 0;
  }
  impl.variant = use_btf ? "tp_btf" : "raw_tp";

  impl.skel.reset(mlprof_bpf__open());
  if (!impl.skel) return load_error("opening the BPF object", errno);
  mlprof_bpf& skel = *impl.skel;
  skel.rodata->filter_cgroup_id = opts.cgroup_id;
  skel.rodata->filter_cgroup_level = opts.cgroup_level;
  skel.rodata->sched_switch_has_prev_state = sched_switch_has_prev_state(vmlinux.get());
  // Batched wakeups (mlprof.bpf.c): the reader is woken when 1/16 of the ring
  // waits, at a session's end, or by its own poll timeout.
  skel.rodata->wakeup_bytes = opts.ring_bytes / 16;
  skel.rodata->shed_bytes = opts.shed_at > 0
                                ? static_cast<uint64_t>(static_cast<double>(opts.ring_bytes) *
                                                        std::min(opts.shed_at, 1.0))
                                : 0;
  if (int err = bpf_map__set_max_entries(skel.maps.events, static_cast<__u32>(opts.ring_bytes));
      err)
    return load_error("sizing the ring buffer", -err);

  bpf_program* const btf_progs[] = {
      skel.progs.sched_switch_btf,       skel.progs.sched_waking_btf,
      skel.progs.sched_wakeup_btf,       skel.progs.sched_wakeup_new_btf,
      skel.progs.sched_process_fork_btf, skel.progs.sched_process_exit_btf};
  bpf_program* const raw_progs[] = {
      skel.progs.sched_switch_raw,       skel.progs.sched_waking_raw,
      skel.progs.sched_wakeup_raw,       skel.progs.sched_wakeup_new_raw,
      skel.progs.sched_process_fork_raw, skel.progs.sched_process_exit_raw};
  for (bpf_program* p : btf_progs) bpf_program__set_autoload(p, use_btf);
  for (bpf_program* p : raw_progs) bpf_program__set_autoload(p, !use_btf);
  // session_spans reads the body in bpf_loop callbacks (5.17+); the
  // verifier rejects the whole object without it. Without it, the spans come
  // through the per-span probes, which every extension fires.
  impl.session_spans = !opts.force_per_span &&
                       libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_loop, nullptr) > 0;
  bpf_program__set_autoload(skel.progs.mlprof_session_spans, impl.session_spans);

  if (int err = mlprof_bpf__load(&skel); err)
    return load_error(std::string("loading the BPF programs (") + impl.variant + ")", -err);

  if (bpf_map__key_size(skel.maps.sessions) != sizeof(SessionKey) ||
      bpf_map__key_size(skel.maps.seen_ids) != sizeof(SeenKey) ||
      bpf_map__value_size(skel.maps.followed) != sizeof(ThreadState))
    return error(
        Error::Kind::kCorrupt, 0,
        "internal: bpf_loader.cpp's map layouts differ from mlprof.bpf.c's (rebuild both)");

  if (auto attached =
          attach_sched_programs(skel, use_btf ? btf_progs : raw_progs, impl.sched_links);
      !attached)
    return attached.error();

  impl.ring.reset(
      ring_buffer__new(bpf_map__fd(skel.maps.events), &Impl::on_sample, &impl, nullptr));
  if (!impl.ring) return load_error("opening the ring buffer", errno);
  return self;
}

namespace {

// The C libraries a process maps that may hold sem_wait: libc.so.6 (glibc
// 2.34+), libpthread.so.0 (before), musl's libc; as paths the agent can open
// (under /proc/PID/root when `binary` is, a container's own).
std::vector<std::string> c_libraries(pid_t pid, const std::string& binary) {
  std::vector<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid);
  auto maps = read_text(dir + "/maps");  // 64 MiB at most (procfs.h)
  if (!maps) return out;
  const std::string root = dir + "/root";
  const bool through_root = binary.starts_with(root + "/");
  size_t at = 0;
  while (at < maps.value().size()) {
    size_t end = maps.value().find('\n', at);
    if (end == std::string::npos) end = maps.value().size();
    const std::string_view line(maps.value().data() + at, end - at);
    at = end + 1;
    const size_t slash = line.find('/');
    if (slash == std::string_view::npos) continue;
    const std::string_view path = line.substr(slash);
    const std::string_view base = path.substr(path.rfind('/') + 1);
    if (!base.starts_with("libc.so") && !base.starts_with("libpthread.so") &&
        !base.starts_with("libc.musl") && !base.starts_with("ld-musl"))
      continue;
    std::string full = (through_root ? root : "") + std::string(path);
    if (std::find(out.begin(), out.end(), full) != out.end()) continue;
    if (regular_file_in_root(dir, std::string(path), !through_root)) out.push_back(std::move(full));
  }
  return out;
}

// Lock waits (mlprof.bpf.c, "locks"): sem_wait, sem_timedwait and
// sem_clockwait of the process's C library, entry and return, for this pid
// only. A library without one of them (sem_clockwait is glibc 2.30+) is
// passed over; a failure costs the lock label, never the capture.
void attach_locks(mlprof_bpf& skel, pid_t pid, const std::string& binary,
                  std::vector<Link>& links) {
  static const char* const kFunctions[] = {"sem_wait", "sem_timedwait", "sem_clockwait"};
  for (const std::string& lib : c_libraries(pid, binary)) {
    for (const char* fn : kFunctions) {
      for (bool ret : {false, true}) {
        LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .func_name = fn);
        bpf_link* link = bpf_program__attach_uprobe_opts(
            ret ? skel.progs.mlprof_sem_wait_return : skel.progs.mlprof_sem_wait, pid, lib.c_str(),
            0, &opts);
        if (!link) {
          take_last_warning();  // "failed to find symbol": not this library's
          break;
        }
        links.emplace_back(link);
      }
    }
  }
}

}  // namespace

Result<Ok> BpfLoader::attach(pid_t pid, const std::string& binary) {
  if (attached(pid)) return Ok{};
  std::vector<Link> links;
  // session_spans first: an extension that has it speaks v2, one without it
  // (ENOENT: no such note in the file) v1, and gets the per-span probes.
  int version = impl_->session_spans ? 2 : 1;
  bool spans_attached = false;
  if (!impl_->session_spans) {
    // per-span probes on this kernel, whatever the extension's version
  } else if (bpf_link* link =
                 bpf_program__attach_usdt(impl_->skel->progs.mlprof_session_spans, pid,
                                          binary.c_str(), "mlprof", "session_spans", nullptr)) {
    links.emplace_back(link);
    spans_attached = true;
  } else if (errno == ENOENT) {
    version = 1;
    take_last_warning();  // libbpf's "unable to find USDT" is the answer, not a failure
  }
  const auto programs = version == 2 ? impl_->usdt_programs_v2() : impl_->usdt_programs();
  for (const Impl::Usdt& u : programs) {
    if (spans_attached && std::string_view(u.name) == "session_spans") continue;  // attached above
    // Everything else before session_begin: once its semaphore is set, an
    // autoprofiled process (sample_rate 0: --inject) starts sessions, and a
    // uprobe registered in the target while one is open can cost it a
    // scheduler event (seen on 6.18: a switch-in the sched_switch program
    // never ran for), so its off-CPU time. With session_begin first, the
    // first session began while the rest was still attaching.
    if (std::string_view(u.name) == "session_begin") attach_locks(*impl_->skel, pid, binary, links);
    // (not attached for another reason: tried again below, for its message)
    bpf_link* link =
        bpf_program__attach_usdt(u.prog, pid, binary.c_str(), "mlprof", u.name, nullptr);
    if (!link) {
      int e = errno;
      // The first probe tried missing: the file has none, named by the
      // contract's first, session_begin (attached last, see above).
      const char* probe = e == ENOENT && links.empty() ? "session_begin" : u.name;
      std::string msg = "attaching USDT probe mlprof:" + std::string(probe) + " of " + binary +
                        " in pid " + std::to_string(pid) + " failed: " + std::strerror(e);
      if (permission_errno(e) && binary.starts_with("/proc/"))
        msg += "; " + std::string(proc_fix());
      else if (permission_errno(e))
        msg += "; " + std::string(privilege_fix());
      else if (e == ENOENT)
        msg +=
            "; the file is missing or has no mlprof USDT probes (is it the mlflow_profiler "
            "extension, "
            "built with probes?)";
      else if (e == ESRCH)
        msg += "; the process has exited";
      return error(Error::Kind::kIo, e,
                   msg + take_last_warning());  // `links` detaches what was attached
    }
    links.emplace_back(link);
  }
  impl_->pid_links.emplace(pid, std::move(links));
  impl_->contract[pid] = version;
  return Ok{};
}

int BpfLoader::contract(pid_t pid) const {
  auto it = impl_->contract.find(pid);
  return it == impl_->contract.end() ? 0 : it->second;
}

void BpfLoader::detach(pid_t pid) {
  auto it = impl_->pid_links.find(pid);
  if (it == impl_->pid_links.end()) return;
  // Uprobes removed, the last attached first: session_begin, whose semaphore
  // starts an autoprofiled process's sessions, goes down before the lock
  // uprobes, each of which waits for an RCU grace period as it is removed.
  // (Removed first to last, session_begin's stayed up for the whole detach:
  // past the duty cycle's off edge on 6.18.) The kernel puts the semaphores back.
  std::vector<Link>& links = it->second;
  while (!links.empty()) links.pop_back();
  impl_->pid_links.erase(it);
  impl_->contract.erase(pid);
  // Forget the process's threads, sessions and sent names: a later attach
  // starts clean (names are sent again), and no scheduler records keep
  // coming for a process that left the target set.
  const auto tgid = static_cast<uint32_t>(pid);
  mlprof_bpf& skel = *impl_->skel;
  purge<uint32_t, ThreadState>(
      bpf_map__fd(skel.maps.followed),
      [&](const uint32_t&, const ThreadState& v) { return v.tgid == tgid; });
  purge<SessionKey, uint32_t>(bpf_map__fd(skel.maps.sessions),
                              [&](const SessionKey& k, const uint32_t&) { return k.tgid == tgid; });
  purge<SeenKey, uint8_t>(bpf_map__fd(skel.maps.seen_ids),
                          [&](const SeenKey& k, const uint8_t&) { return k.tgid == tgid; });
}

bool BpfLoader::attached(pid_t pid) const { return impl_->pid_links.count(pid) != 0; }

int BpfLoader::poll(int timeout_ms,
                    const std::function<void(const void* data, size_t size)>& on_record) {
  impl_->on_record = &on_record;
  impl_->callback_error = nullptr;
  impl_->taken = 0;
  int n = ring_buffer__poll(impl_->ring.get(), timeout_ms);
  // The programs wake the reader only every 1/16 of the ring (bpf/README.md):
  // records below that mark are read here, or a process that exits
  // mid-session would leave its last records unread.
  if (n == 0) n = ring_buffer__consume(impl_->ring.get());
  if (n == Impl::kBudgetSpent)
    n = static_cast<int>(impl_->taken);  // more is waiting: the caller polls again
  impl_->on_record = nullptr;
  if (impl_->callback_error) std::rethrow_exception(std::exchange(impl_->callback_error, nullptr));
  return n;
}

LoaderStats BpfLoader::stats() const {
  LoaderStats s;
  // .bss is mmapped: the kernel's counter, read without a syscall.
  s.lost = __atomic_load_n(&impl_->skel->bss->lost, __ATOMIC_RELAXED);
  s.shed = __atomic_load_n(&impl_->skel->bss->shed, __ATOMIC_RELAXED);
  s.records = impl_->records;
  return s;
}

const char* BpfLoader::sched_variant() const { return impl_->variant; }
bool BpfLoader::session_spans() const { return impl_->session_spans; }

}  // namespace mlprof::agent
