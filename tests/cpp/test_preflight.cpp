// preflight.cpp: the checks before attaching (-o, hostPID, a --pid that is not
// Python). The pid-namespace files are laid out in a temporary directory as
// /proc lays them out (symlinks with the kernel's link texts), since a real
// other namespace needs root; tests/e2e/test_agent_deploy.py runs the agent in
// one for real.
#include "agent/preflight.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "temp_dir.h"

using namespace mlprof::agent;

namespace {

void put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

void link(const std::string& target, const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0) << path;
}

}  // namespace

TEST(Preflight, OutputInAWritableDirectory) {
  mlprof::test::TempDir dir;
  EXPECT_EQ(output_unwritable(dir.path() + "/p.json.gz"), "");
  EXPECT_TRUE(dir.files().empty()) << "the probe file is removed";
}

TEST(Preflight, OutputDirectoryMissingOrNotADirectory) {
  mlprof::test::TempDir dir;
  const std::string missing = output_unwritable(dir.path() + "/nope/p.json.gz");
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  put(dir.path() + "/file", "x");
  const std::string file = output_unwritable(dir.path() + "/file/p.json.gz");
  EXPECT_NE(file.find("is not a directory"), std::string::npos) << file;
}

TEST(Preflight, OutputWhereNoFileCanBeCreated) {
  // procfs refuses new files even to root: a real refusal, unlike a chmod.
  const std::string line = output_unwritable("/proc/p.json.gz");
  EXPECT_NE(line.find("cannot create a file in /proc"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Preflight, PidNamespaceRule) {
  EXPECT_FALSE(sees_only_own_container(kInitPidNsInode, false, "systemd"));
  EXPECT_FALSE(sees_only_own_container(kInitPidNsInode, true, "mlprof-ebpf"));  // the host's init
  EXPECT_TRUE(
      sees_only_own_container(4026532301, true, "mlprof-ebpf"));     // no hostPID, agent is pid 1
  EXPECT_TRUE(sees_only_own_container(4026532301, false, "pause"));  // shareProcessNamespace
  EXPECT_TRUE(sees_only_own_container(4026532301, false, "catatonit"));  // podman's infra
  // A node that is a container itself (kind): the node's init is pid 1.
  EXPECT_FALSE(sees_only_own_container(4026532301, false, "systemd"));
}

TEST(Preflight, HostPidsHiddenReadsProc) {
  mlprof::test::TempDir dir;
  const std::string proc = dir.path();
  // /proc/self is a link to the pid; /proc/PID/ns/pid a link whose text names the namespace.
  link("pid:[4026532301]", proc + "/1/ns/pid");
  put(proc + "/1/comm", "mlprof-ebpf\n");
  link("1", proc + "/self");
  const std::string line = host_pids_hidden(proc);
  EXPECT_NE(line.find("hostPID: true"), std::string::npos) << line;
  EXPECT_NE(line.find("pid:[4026532301]"), std::string::npos) << line;

  // The host's namespace: nothing to say. /proc/self -> 4242.
  mlprof::test::TempDir host;
  link("pid:[4026531836]", host.path() + "/4242/ns/pid");
  put(host.path() + "/1/comm", "systemd\n");
  link("4242", host.path() + "/self");
  EXPECT_EQ(host_pids_hidden(host.path()), "");
  EXPECT_EQ(host_pids_hidden(host.path() + "/none"), "") << "unreadable: not judged";
}

TEST(Preflight, PythonOrNot) {
  EXPECT_TRUE(looks_like_python("/usr/bin/python3.11", ""));
  EXPECT_TRUE(looks_like_python("/opt/venv/bin/python", ""));
  EXPECT_TRUE(looks_like_python(
      "/usr/bin/uwsgi",
      "7f00-7f10 r-xp 0 08:01 12 /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\n"));
  EXPECT_FALSE(
      looks_like_python("/usr/bin/sleep", "7f00-7f10 r-xp 0 08:01 12 /usr/lib/libc.so.6\n"));
  EXPECT_FALSE(
      looks_like_python("/usr/bin/ipython-free-sleep", ""));  // the name must start with it
}

TEST(Preflight, NotPythonLineOnARealProcess) {
  // This test binary is not Python.
  const std::string line = not_python_line(getpid());
  EXPECT_NE(line.find("is not a Python process"), std::string::npos) << line;
  EXPECT_NE(line.find("pid " + std::to_string(getpid())), std::string::npos) << line;
  EXPECT_EQ(not_python_line(999999999), "")
      << "a pid that does not exist is TargetFinder's to report";
}
