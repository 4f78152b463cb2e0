#pragma once
// PEP 768 from C++: asks a live CPython 3.14+ interpreter to run a script at
// its next safe point, as sys.remote_exec(pid, path) does (CPython's
// Python/remote_debugging.c). The agent's image has no Python, so the
// protocol is done here with process_vm_readv/writev:
//
//   1. _PyRuntime: the .PyRuntime section of the python executable or the
//      libpython the target maps (/proc/PID/maps, the file opened through
//      /proc/PID/root, so a container's is found too).
//   2. _Py_DebugOffsets at its start: the cookie "xdebugpy", the version
//      (PY_VERSION_HEX), and the offsets of the fields below.
//   3. interpreters.head, then each one's next -> the main interpreter (id
//      0; CPython's own sys.remote_exec takes the head, the newest
//      subinterpreter when there are any); its config.remote_debug must be
//      1 (PYTHON_DISABLE_REMOTE_DEBUG, -X disable-remote-debug and a build
//      --without-remote-debug make it 0).
//   4. threads.main -> the main thread's state: the script's path goes into
//      remote_debugger_support.debugger_script_path, 1 into
//      debugger_pending_call, and _PY_EVAL_PLEASE_STOP_BIT into its
//      eval_breaker. The main thread runs the script the next time it checks
//      its eval breaker (a loop's back edge, a call): PyRun_String in a fresh
//      namespace; an exception goes to sys.unraisablehook, never raised.
//
// The parsers are pure functions of bytes (tests/cpp/test_remote_exec.cpp);
// RemoteProcess does the reads and writes.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mlprof::agent {

// "xdebugpy": the first 8 bytes of _Py_DebugOffsets (3.13 and newer).
inline constexpr std::string_view kPyDebugCookie = "xdebugpy";
// _PY_EVAL_PLEASE_STOP_BIT of Include/internal/pycore_ceval.h (3.14, 3.15).
inline constexpr uint8_t kEvalPleaseStopBit = 1u << 5;

// PY_VERSION_HEX, split: 0x030E07F0 is 3.14.7 final.
struct PyVersion {
  uint64_t hex = 0;
  int major() const { return static_cast<int>((hex >> 24) & 0xff); }
  int minor() const { return static_cast<int>((hex >> 16) & 0xff); }
  int micro() const { return static_cast<int>((hex >> 8) & 0xff); }
  int level() const { return static_cast<int>((hex >> 4) & 0xf); }  // 0xA alpha ... 0xF final
  int serial() const { return static_cast<int>(hex & 0xf); }
  // "3.14.7", "3.15.0rc2".
  std::string text() const;
};

// Why a target's interpreter cannot take a script (RemoteExecError::reason).
enum class RemoteExecRefusal {
  kNone,
  kNoRuntime,       // no .PyRuntime section in any python file it maps
  kTooOld,          // a CPython before 3.14: no PEP 768
  kUnknownVersion,  // a layout this agent does not know (newer, or a 3.15 alpha/beta)
  kDisabled,        // config.remote_debug is not 1
  kNoMainThread,    // no interpreter, or no main thread state (finalizing)
  kBusy,            // another debugger's script is pending on that thread
  kPathTooLong,     // the script's path does not fit debugger_script_path
  kPermission,      // process_vm_readv/writev refused (EPERM): ptrace access
  kIo,              // a read or write failed otherwise (the process exited ...)
};

struct RemoteExecError {
  RemoteExecRefusal reason = RemoteExecRefusal::kIo;
  int errnum = 0;
  std::string message;  // what failed, without the "pid N: " prefix
  PyVersion version;    // the interpreter's version where known (kTooOld: from its name)
};

// The fields of _Py_DebugOffsets that the protocol uses (both the layout of
// _Py_DebugOffsets itself and its values change between minor versions).
struct DebugOffsets {
  PyVersion version;
  bool free_threaded = false;
  uint64_t runtime_interpreters_head = 0;  // in _PyRuntimeState
  uint64_t interp_id = 0;                  // in PyInterpreterState (int64_t; the main one's is 0)
  uint64_t interp_next = 0;                // in PyInterpreterState
  uint64_t interp_threads_main = 0;        // in PyInterpreterState
  uint64_t interp_remote_debug = 0;        // PyInterpreterState.config.remote_debug (int)
  uint64_t interp_size = 0;
  uint64_t tstate_eval_breaker = 0;      // in PyThreadState (uintptr_t)
  uint64_t tstate_debugger_support = 0;  // PyThreadState.remote_debugger_support
  uint64_t tstate_size = 0;
  uint64_t support_pending_call = 0;  // in _PyRemoteDebuggerSupport (int32_t)
  uint64_t support_script_path = 0;   // char[support_script_path_size]
  uint64_t support_script_path_size = 0;
};

// Bytes to read at _PyRuntime so that parse_debug_offsets sees every
// layout it knows (the largest _Py_DebugOffsets among them).
size_t debug_offsets_read_size();

// Parses the bytes at the start of _PyRuntime. Refusals: no cookie
// (kNoRuntime), a version before 3.14 (kTooOld), a layout this build does
// not know (kUnknownVersion), offsets that cannot be right (kUnknownVersion).
Result<DebugOffsets> parse_debug_offsets(std::string_view bytes, RemoteExecError* why);

// A file mapped by the target whose name says it may hold _PyRuntime.
struct RuntimeCandidate {
  std::string path;    // as the target sees it (the maps line's path)
  uint64_t start = 0;  // address of its mapping at file offset 0
};

// The python executable and libpython mappings of a /proc/PID/maps text:
// each file whose base name contains "python" (as CPython's own search),
// once, with the start of its offset-0 mapping; in the order of the maps.
std::vector<RuntimeCandidate> runtime_candidates(std::string_view maps);

// Where .PyRuntime lands in memory for an ELF image mapped at `start`:
// start + section address - the first PT_LOAD's page-aligned address.
// `elf` holds the file's bytes from offset 0 (at least the headers and
// section names). nullopt when there is no such section.
std::optional<uint64_t> pyruntime_address(std::string_view elf, uint64_t start);

// "3.11" from ".../bin/python3.11" or ".../libpython3.11.so.1.0" in a maps
// text (the first match): how an interpreter without debug offsets (3.12
// and older) is named. nullopt when none.
std::optional<PyVersion> python_version_in_maps(std::string_view maps);

// One target process, read and written through process_vm_readv/writev
// (the agent's CAP_SYS_PTRACE; Yama's ptrace_scope 3 refuses them to all).
class RemoteProcess {
 public:
  // `proc`: where /proc is (tests: the same). Nothing is opened yet.
  explicit RemoteProcess(pid_t pid, std::string proc = "/proc");

  // Finds _PyRuntime and reads its debug offsets; the refusals above.
  Result<DebugOffsets> debug_offsets(RemoteExecError* why);
  // The same for one ELF file (opened from here) mapped at `start`:
  // kNoRuntime when it has no .PyRuntime section or no cookie there.
  Result<DebugOffsets> debug_offsets_in(const std::string& file, uint64_t start,
                                        RemoteExecError* why);
  // The address of _PyRuntime found by debug_offsets() (0 before).
  uint64_t runtime_address() const { return runtime_; }

  // Step 3 and the checks of step 4, writing nothing: the main interpreter,
  // remote debugging enabled in it, its main thread's state, no script
  // pending there (kBusy). The state's address is kept for send().
  bool locate(const DebugOffsets& offsets, RemoteExecError* why);
  // Step 4's writes for `script_path` (as the target sees it), after
  // locate() (called here if it was not). A failed write may leave the
  // pending flag set: cancel() takes it back.
  bool send(const DebugOffsets& offsets, const std::string& script_path, RemoteExecError* why);
  // True while the script sent is still pending (the main thread has not
  // taken it); false once taken, or on a read error.
  bool pending(const DebugOffsets& offsets);
  // Takes back a script not yet taken: its pending flag to 0. Returns
  // whether it was still pending (false: the interpreter took it).
  bool cancel(const DebugOffsets& offsets);

  // Plain reads and writes of the target's memory; false with errno set.
  bool read(uint64_t address, void* out, size_t size);
  bool write(uint64_t address, const void* data, size_t size);

 private:
  bool read_u64(uint64_t address, uint64_t* out) { return read(address, out, sizeof *out); }
  RemoteExecError io_error(const std::string& what) const;

  pid_t pid_;
  std::string proc_;
  uint64_t runtime_ = 0;
  uint64_t main_tstate_ = 0;
};

}  // namespace mlprof::agent
