// remote_exec.h: the PEP 768 protocol's parsers on bytes laid out as
// CPython 3.14's and 3.15's headers lay them out (the byte positions below
// were printed by a C program compiled against each version's
// Include/internal/pycore_debug_offsets.h: offsetof debugger_support 712 and
// 840, sizeof 760 and 888), and the whole protocol against this process
// itself: a fake _PyRuntime in a .PyRuntime section of this executable,
// read and written through process_vm_readv/writev as a real target's is.

#include "agent/remote_exec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace mlprof::agent {
namespace {

struct Positions {  // byte positions in _Py_DebugOffsets
  size_t interpreters_head = 40, interp_size = 48, interp_id = 56, interp_next = 64,
         threads_main = 80, tstate_size = 176, debugger_support = 712, total = 760;
};
constexpr Positions k314{};
constexpr Positions k315{40, 48, 56, 64, 80, 176, 840, 888};

void put(std::string& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, sizeof v); }

// _Py_DebugOffsets bytes of `version` laid out at the positions `p`; the
// values are made up (plausible: each field inside its structure).
std::string offsets_bytes(uint64_t version, const Positions& p = k314) {
  std::string b(debug_offsets_read_size(), '\0');
  std::memcpy(b.data(), "xdebugpy", 8);
  put(b, 8, version);
  put(b, p.interpreters_head, 0x28);
  put(b, p.interp_size, 0x4000);
  put(b, p.interp_id, 0x10);
  put(b, p.interp_next, 0x18);
  put(b, p.threads_main, 0x70);
  put(b, p.tstate_size, 0x600);
  const size_t d = p.debugger_support;
  put(b, d + 0, 0x90);     // eval_breaker
  put(b, d + 8, 0x200);    // remote_debugger_support
  put(b, d + 16, 0x3000);  // remote_debugging_enabled (config.remote_debug)
  put(b, d + 24, 0);       // debugger_pending_call
  put(b, d + 32, 4);       // debugger_script_path
  put(b, d + 40, 512);     // debugger_script_path_size
  return b;
}

TEST(PyVersion, TextOfReleasesPreReleasesAndNames) {
  EXPECT_EQ(PyVersion{0x030E07F0}.text(), "3.14.7");
  EXPECT_EQ(PyVersion{0x030F00C2}.text(), "3.15.0rc2");
  EXPECT_EQ(PyVersion{0x030F00A3}.text(), "3.15.0a3");
  EXPECT_EQ(PyVersion{0x030B0000}.text(), "3.11");
}

TEST(ParseDebugOffsets, ThreeFourteenFieldsComeFromTheirBytePositions) {
  RemoteExecError why;
  auto o = parse_debug_offsets(offsets_bytes(0x030E07F0), &why);
  ASSERT_TRUE(o) << why.message;
  EXPECT_EQ(o.value().version.text(), "3.14.7");
  EXPECT_EQ(o.value().runtime_interpreters_head, 0x28u);
  EXPECT_EQ(o.value().interp_id, 0x10u);
  EXPECT_EQ(o.value().interp_next, 0x18u);
  EXPECT_EQ(o.value().interp_threads_main, 0x70u);
  EXPECT_EQ(o.value().tstate_eval_breaker, 0x90u);
  EXPECT_EQ(o.value().tstate_debugger_support, 0x200u);
  EXPECT_EQ(o.value().interp_remote_debug, 0x3000u);
  EXPECT_EQ(o.value().support_script_path, 4u);
  EXPECT_EQ(o.value().support_script_path_size, 512u);
}

TEST(ParseDebugOffsets, ThreeFifteenHasItsOwnLayout) {
  RemoteExecError why;
  auto o = parse_debug_offsets(offsets_bytes(0x030F00C2, k315), &why);
  ASSERT_TRUE(o) << why.message;
  EXPECT_EQ(o.value().tstate_debugger_support, 0x200u);
  EXPECT_EQ(o.value().support_script_path_size, 512u);
  // 3.15's bytes read as 3.14's put the debugger block elsewhere: implausible.
  auto wrong = parse_debug_offsets(offsets_bytes(0x030E07F0, k315), &why);
  EXPECT_FALSE(wrong);
  EXPECT_EQ(why.reason, RemoteExecRefusal::kUnknownVersion);
}

TEST(ParseDebugOffsets, RefusesWhatItCannotDrive) {
  RemoteExecError why;
  std::string no_cookie = offsets_bytes(0x030E07F0);
  no_cookie[0] = 'X';
  EXPECT_FALSE(parse_debug_offsets(no_cookie, &why));
  EXPECT_EQ(why.reason, RemoteExecRefusal::kNoRuntime);

  EXPECT_FALSE(parse_debug_offsets(offsets_bytes(0x030D05F0), &why));  // 3.13.5
  EXPECT_EQ(why.reason, RemoteExecRefusal::kTooOld);
  EXPECT_EQ(why.version.text(), "3.13.5");

  EXPECT_FALSE(parse_debug_offsets(offsets_bytes(0x031000F0), &why));  // 3.16.0
  EXPECT_EQ(why.reason, RemoteExecRefusal::kUnknownVersion);
  EXPECT_NE(why.message.find("upgrade mlprof-ebpf"), std::string::npos) << why.message;

  EXPECT_FALSE(parse_debug_offsets(offsets_bytes(0x030F00B1, k315), &why));  // 3.15.0b1
  EXPECT_EQ(why.reason, RemoteExecRefusal::kUnknownVersion);
  EXPECT_NE(why.message.find("pre-release"), std::string::npos) << why.message;

  std::string huge_path = offsets_bytes(0x030E07F0);
  put(huge_path, k314.debugger_support + 40, 1u << 30);
  EXPECT_FALSE(parse_debug_offsets(huge_path, &why));
  EXPECT_EQ(why.reason, RemoteExecRefusal::kUnknownVersion);

  EXPECT_FALSE(parse_debug_offsets(std::string("xdebugpy"), &why));
  EXPECT_EQ(why.reason, RemoteExecRefusal::kNoRuntime);
}

TEST(RuntimeCandidates, PythonFilesAtOffsetZeroOnceInMapsOrder) {
  const std::string maps =
      "55d0c8a00000-55d0c8a2e000 r--p 00000000 fd:01 1050 /usr/bin/python3.14\n"
      "55d0c8a2e000-55d0c8d00000 r-xp 0002e000 fd:01 1050 /usr/bin/python3.14\n"
      "7f0000000000-7f0000100000 r--p 00000000 fd:01 2000 /opt/lib/libpython3.14.so.1.0 (deleted)\n"
      "7f0000100000-7f0000200000 r-xp 00100000 fd:01 2000 /opt/lib/libpython3.14.so.1.0 (deleted)\n"
      "7f1000000000-7f1000010000 r--p 00000000 fd:01 3000 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "7f2000000000-7f2000001000 rw-p 00000000 00:00 0 \n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
  const auto c = runtime_candidates(maps);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].path, "/usr/bin/python3.14");
  EXPECT_EQ(c[0].start, 0x55d0c8a00000u);
  EXPECT_EQ(c[1].path, "/opt/lib/libpython3.14.so.1.0");
  EXPECT_EQ(c[1].start, 0x7f0000000000u);
}

TEST(PythonVersionInMaps, NamesOfOlderInterpreters) {
  auto v =
      python_version_in_maps("7f 00000000 fd:01 1 /root/.pyenv/versions/3.11.9/bin/python3.11\n");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->text(), "3.11");
  v = python_version_in_maps(
      "x /venv/lib/python3.12/site-packages/numpy/_core/_multiarray_umath.cpython-312-x86_64.so\n");
  ASSERT_TRUE(v);  // the stdlib directory's name says it too
  EXPECT_EQ(v->text(), "3.12");
  EXPECT_FALSE(python_version_in_maps("x /usr/lib/foo/_core.cpython-311-x86_64-linux-gnu.so\n"));
  EXPECT_FALSE(python_version_in_maps("x /usr/bin/bash\n"));
}

// ---- the protocol against this process ----------------------------------------

// A fake runtime: the linker puts it in .PyRuntime as CPython's
// GENERATE_DEBUG_SECTION puts _PyRuntime; the interpreter and thread state
// it points at are plain buffers.
struct FakeRuntime {
  char offsets[1024];
  uint64_t interpreters_head;  // runtime_state.interpreters_head points here
};
__attribute__((section(".PyRuntime"), used)) FakeRuntime g_runtime;
alignas(8) char g_interp[0x4000];
alignas(8) char g_subinterp[0x4000];  // a subinterpreter: the list's head, id 1
alignas(8) char g_tstate[0x600];

class FakeInterpreter : public ::testing::Test {
 protected:
  void SetUp() override {
    std::memset(&g_runtime, 0, sizeof g_runtime);
    std::memset(g_interp, 0, sizeof g_interp);
    std::memset(g_subinterp, 0, sizeof g_subinterp);
    std::memset(g_tstate, 0, sizeof g_tstate);
    std::string b = offsets_bytes(0x030E07F0);
    put(b, k314.interpreters_head, offsetof(FakeRuntime, interpreters_head));
    std::memcpy(g_runtime.offsets, b.data(), std::min(b.size(), sizeof g_runtime.offsets));
    g_runtime.interpreters_head = reinterpret_cast<uint64_t>(g_interp);
    const uint64_t tstate = reinterpret_cast<uint64_t>(g_tstate);
    std::memcpy(g_interp + 0x70, &tstate, 8);  // threads.main
    const int32_t one = 1;
    std::memcpy(g_interp + 0x3000, &one, 4);     // config.remote_debug
    const uint64_t breaker = 0x12345600u | 0x1;  // a version in the upper bits, a GIL drop request
    std::memcpy(g_tstate + 0x90, &breaker, 8);
  }

  // This executable's offset-0 mapping.
  static RuntimeCandidate self() {
    std::ifstream maps("/proc/self/maps");
    std::stringstream text;
    text << maps.rdbuf();
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const std::string path(exe, n > 0 ? static_cast<size_t>(n) : 0);
    for (std::string line; std::getline(text, line);) {
      const bool ends_with_path = line.size() > path.size() && line.ends_with(path);
      if (ends_with_path && line.find(" 00000000 ") != std::string::npos)
        return {path, std::stoull(line.substr(0, line.find('-')), nullptr, 16)};
    }
    return {};
  }

  int32_t pending() const { return *reinterpret_cast<const int32_t*>(g_tstate + 0x200); }
  const char* script_path() const { return g_tstate + 0x200 + 4; }
  uint64_t breaker() const { return *reinterpret_cast<const uint64_t*>(g_tstate + 0x90); }
};

TEST_F(FakeInterpreter, TheSectionAddressIsWhereTheLoaderPutTheRuntime) {
  const RuntimeCandidate c = self();
  ASSERT_NE(c.start, 0u);
  RemoteProcess p(getpid());
  RemoteExecError why;
  auto o = p.debug_offsets_in("/proc/self/exe", c.start, &why);
  ASSERT_TRUE(o) << why.message;
  EXPECT_EQ(p.runtime_address(), reinterpret_cast<uint64_t>(&g_runtime));
  EXPECT_EQ(o.value().version.text(), "3.14.7");
}

TEST_F(FakeInterpreter, SendWritesThePathTheFlagAndOnlyTheEventByteOfTheBreaker) {
  RemoteProcess p(getpid());
  RemoteExecError why;
  auto o = p.debug_offsets_in("/proc/self/exe", self().start, &why);
  ASSERT_TRUE(o) << why.message;
  ASSERT_TRUE(p.send(o.value(), "/tmp/mlprof-inject-abc/inject.py", &why)) << why.message;
  EXPECT_STREQ(script_path(), "/tmp/mlprof-inject-abc/inject.py");
  EXPECT_EQ(pending(), 1);
  EXPECT_EQ(breaker(), 0x12345600u | 0x1 | kEvalPleaseStopBit);
  EXPECT_TRUE(p.pending(o.value()));

  // A second script while the first is pending: refused, the first stays.
  RemoteProcess other(getpid());
  ASSERT_TRUE(other.debug_offsets_in("/proc/self/exe", self().start, &why));
  EXPECT_FALSE(other.send(o.value(), "/tmp/other.py", &why));
  EXPECT_EQ(why.reason, RemoteExecRefusal::kBusy);
  EXPECT_STREQ(script_path(), "/tmp/mlprof-inject-abc/inject.py");

  // Taken back before the interpreter ran it; then there is nothing to take.
  EXPECT_TRUE(p.cancel(o.value()));
  EXPECT_EQ(pending(), 0);
  EXPECT_FALSE(p.cancel(o.value()));
}

TEST_F(FakeInterpreter, TheMainInterpreterIsFoundBehindASubinterpreter) {
  // Each new interpreter goes to the head of the list; a subinterpreter
  // has no threads.main of its own.
  const int64_t one = 1;
  std::memcpy(g_subinterp + 0x10, &one, 8);  // id 1
  const uint64_t main_interp = reinterpret_cast<uint64_t>(g_interp);
  std::memcpy(g_subinterp + 0x18, &main_interp, 8);  // next
  g_runtime.interpreters_head = reinterpret_cast<uint64_t>(g_subinterp);
  RemoteProcess p(getpid());
  RemoteExecError why;
  auto o = p.debug_offsets_in("/proc/self/exe", self().start, &why);
  ASSERT_TRUE(o) << why.message;
  ASSERT_TRUE(p.send(o.value(), "/tmp/s.py", &why)) << why.message;
  EXPECT_STREQ(script_path(), "/tmp/s.py");
  EXPECT_EQ(pending(), 1);
}

TEST_F(FakeInterpreter, RefusalsOfTheInterpreterState) {
  RemoteExecError why;
  {
    const int32_t zero = 0;
    std::memcpy(g_interp + 0x3000, &zero, 4);  // PYTHON_DISABLE_REMOTE_DEBUG
    RemoteProcess p(getpid());
    auto o = p.debug_offsets_in("/proc/self/exe", self().start, &why);
    ASSERT_TRUE(o);
    EXPECT_FALSE(p.send(o.value(), "/tmp/x.py", &why));
    EXPECT_EQ(why.reason, RemoteExecRefusal::kDisabled);
    EXPECT_EQ(pending(), 0);
    EXPECT_EQ(breaker(), 0x12345601u);  // nothing written
  }
  SetUp();
  {
    std::memset(g_interp + 0x70, 0, 8);  // no main thread
    RemoteProcess p(getpid());
    auto o = p.debug_offsets_in("/proc/self/exe", self().start, &why);
    ASSERT_TRUE(o);
    EXPECT_FALSE(p.send(o.value(), "/tmp/x.py", &why));
    EXPECT_EQ(why.reason, RemoteExecRefusal::kNoMainThread);
  }
  SetUp();
  {
    RemoteProcess p(getpid());
    auto o = p.debug_offsets_in("/proc/self/exe", self().start, &why);
    ASSERT_TRUE(o);
    EXPECT_FALSE(p.send(o.value(), "/tmp/" + std::string(600, 'x'), &why));
    EXPECT_EQ(why.reason, RemoteExecRefusal::kPathTooLong);
    EXPECT_EQ(pending(), 0);
  }
}

TEST(RemoteProcess, AnExecutableWithoutARuntimeIsNoRuntime) {
  RemoteProcess p(getpid());
  RemoteExecError why;
  EXPECT_FALSE(p.debug_offsets_in("/bin/sh", 0x1000, &why));
  EXPECT_EQ(why.reason, RemoteExecRefusal::kNoRuntime);
}

}  // namespace
}  // namespace mlprof::agent
