// The names the kernel join gives its numbers: wakers, wait objects,
// syscalls (this machine's table), and a wait reason's text. The join
// itself is sched.cpp; the self figures read from it, sched_self.cpp.

#include <sys/syscall.h>
#include <cstddef>
#include <string>
#include <string_view>

#include "analysis/sched.h"

namespace mlprof {

namespace {
constexpr const char* kWakerKindNames[] = {"task", "timer", "softirq", "hardirq"};
constexpr const char* kWaitObjectNames[] = {"", "futex", "lock", "gil"};

// An enum's name in its table (by value), nullptr past the end; and back.
template <typename E, size_t N>
const char* name_in(const char* const (&names)[N], E value) {
  const auto i = static_cast<size_t>(value);
  return i < N ? names[i] : nullptr;
}
template <typename E, size_t N>
bool parse_in(const char* const (&names)[N], std::string_view name, E& value) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) {
      value = static_cast<E>(i);
      return true;
    }
  }
  return false;
}
}  // namespace

const char* waker_kind_name(WakerKind kind) { return name_in(kWakerKindNames, kind); }
bool parse_waker_kind(std::string_view name, WakerKind& kind) {
  return parse_in(kWakerKindNames, name, kind);
}
const char* wait_object_name(WaitObject w) { return name_in(kWaitObjectNames, w); }
bool parse_wait_object(std::string_view name, WaitObject& w) {
  return parse_in(kWaitObjectNames, name, w);
}

std::string syscall_name(int32_t nr) {
  if (nr < 0) return "";
  // The syscalls a thread sleeps in, by this architecture's numbers (the
  // agent records the number; it runs where the target runs).
  struct Entry {
    long nr;
    const char* name;
  };
  static const Entry
      kTable
          [] =
              {
#define MLPROF_SYSCALL(n) {SYS_##n, #n},
#ifdef SYS_read
                  MLPROF_SYSCALL(read)
#endif
#ifdef SYS_write
                      MLPROF_SYSCALL(write)
#endif
#ifdef SYS_pread64
                          MLPROF_SYSCALL(pread64)
#endif
#ifdef SYS_pwrite64
                              MLPROF_SYSCALL(pwrite64)
#endif
#ifdef SYS_readv
                                  MLPROF_SYSCALL(readv)
#endif
#ifdef SYS_writev
                                      MLPROF_SYSCALL(writev)
#endif
#ifdef SYS_open
                                          MLPROF_SYSCALL(open)
#endif
#ifdef SYS_openat
                                              MLPROF_SYSCALL(openat)
#endif
#ifdef SYS_close
                                                  MLPROF_SYSCALL(close)
#endif
#ifdef SYS_fsync
                                                      MLPROF_SYSCALL(fsync)
#endif
#ifdef SYS_fdatasync
                                                          MLPROF_SYSCALL(fdatasync)
#endif
#ifdef SYS_futex
                                                              MLPROF_SYSCALL(futex)
#endif
#ifdef SYS_futex_waitv
                                                                  MLPROF_SYSCALL(futex_waitv)
#endif
#ifdef SYS_poll
                                                                      MLPROF_SYSCALL(poll)
#endif
#ifdef SYS_ppoll
                                                                          MLPROF_SYSCALL(ppoll)
#endif
#ifdef SYS_select
                                                                              MLPROF_SYSCALL(select)
#endif
#ifdef SYS_pselect6
                                                                                  MLPROF_SYSCALL(
                                                                                      pselect6)
#endif
#ifdef SYS_epoll_wait
                                                                                      MLPROF_SYSCALL(
                                                                                          epoll_wait)
#endif
#ifdef SYS_epoll_pwait
                                                                                          MLPROF_SYSCALL(
                                                                                              epoll_pwait)
#endif
#ifdef SYS_epoll_pwait2
                                                                                              MLPROF_SYSCALL(
                                                                                                  epoll_pwait2)
#endif
#ifdef SYS_nanosleep
                                                                                                  MLPROF_SYSCALL(
                                                                                                      nanosleep)
#endif
#ifdef SYS_clock_nanosleep
                                                                                                      MLPROF_SYSCALL(
                                                                                                          clock_nanosleep)
#endif
#ifdef SYS_accept
                                                                                                          MLPROF_SYSCALL(
                                                                                                              accept)
#endif
#ifdef SYS_accept4
                                                                                                              MLPROF_SYSCALL(
                                                                                                                  accept4)
#endif
#ifdef SYS_connect
                                                                                                                  MLPROF_SYSCALL(
                                                                                                                      connect)
#endif
#ifdef SYS_recvfrom
                                                                                                                      MLPROF_SYSCALL(
                                                                                                                          recvfrom)
#endif
#ifdef SYS_recvmsg
                                                                                                                          MLPROF_SYSCALL(
                                                                                                                              recvmsg)
#endif
#ifdef SYS_recvmmsg
                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                  recvmmsg)
#endif
#ifdef SYS_sendto
                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                      sendto)
#endif
#ifdef SYS_sendmsg
                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                          sendmsg)
#endif
#ifdef SYS_wait4
                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                              wait4)
#endif
#ifdef SYS_waitid
                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                  waitid)
#endif
#ifdef SYS_pause
                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                      pause)
#endif
#ifdef SYS_rt_sigtimedwait
                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                          rt_sigtimedwait)
#endif
#ifdef SYS_rt_sigsuspend
                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                              rt_sigsuspend)
#endif
#ifdef SYS_sched_yield
                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                  sched_yield)
#endif
#ifdef SYS_mmap
                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                      mmap)
#endif
#ifdef SYS_munmap
                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                          munmap)
#endif
#ifdef SYS_mprotect
                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                              mprotect)
#endif
#ifdef SYS_madvise
                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                  madvise)
#endif
#ifdef SYS_brk
                                                                                                                                                                                  MLPROF_SYSCALL(brk)
#endif
#ifdef SYS_ioctl
                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                          ioctl)
#endif
#ifdef SYS_flock
                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                              flock)
#endif
#ifdef SYS_fcntl
                                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                                  fcntl)
#endif
#ifdef SYS_io_getevents
                                                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                                                      io_getevents)
#endif
#ifdef SYS_io_uring_enter
                                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                                          io_uring_enter)
#endif
#ifdef SYS_splice
                                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                                              splice)
#endif
#ifdef SYS_sendfile
                                                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                                                  sendfile)
#endif
#ifdef SYS_exit
                                                                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                                                                      exit)
#endif
#ifdef SYS_exit_group
                                                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                                                          exit_group)
#endif
#ifdef SYS_clone
                                                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                                                              clone)
#endif
#ifdef SYS_clone3
                                                                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                                                                  clone3)
#endif
#ifdef SYS_execve
                                                                                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                                                                                      execve)
#endif
#ifdef SYS_getdents64
                                                                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                                                                          getdents64)
#endif
#ifdef SYS_newfstatat
                                                                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                                                                              newfstatat)
#endif
#ifdef SYS_statx
                                                                                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                                                                                  statx)
#endif
#ifdef SYS_unlink
                                                                                                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                                                                                                      unlink)
#endif
#ifdef SYS_unlinkat
                                                                                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                                                                                          unlinkat)
#endif
#ifdef SYS_rename
                                                                                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                                                                                              rename)
#endif
#ifdef SYS_renameat2
                                                                                                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                  renameat2)
#endif
#ifdef SYS_mkdir
                                                                                                                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                      mkdir)
#endif
#ifdef SYS_mkdirat
                                                                                                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                          mkdirat)
#endif
#ifdef SYS_sync
                                                                                                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                              sync)
#endif
#ifdef SYS_syncfs
                                                                                                                                                                                                                                                                              MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                                  syncfs)
#endif
#ifdef SYS_msync
                                                                                                                                                                                                                                                                                  MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                                      msync)
#endif
#ifdef SYS_ftruncate
                                                                                                                                                                                                                                                                                      MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                                          ftruncate)
#endif
#ifdef SYS_fallocate
                                                                                                                                                                                                                                                                                          MLPROF_SYSCALL(
                                                                                                                                                                                                                                                                                              fallocate)
#endif
#undef MLPROF_SYSCALL
              };
  for (const Entry& e : kTable) {
    if (e.nr == nr) return e.name;
  }
  return "syscall " + std::to_string(nr);
}

std::string WaitReason::text() const {
  if (object == WaitObject::kGil) return "GIL";
  if (object == WaitObject::kLock) return "lock";
  std::string out = syscall < 0 ? std::string("?") : syscall_name(syscall);
  out += ' ';
  out += state;
  return out;
}

}  // namespace mlprof
