// inject.cpp: the script the target runs (run here by a real python3 the way
// CPython runs it, exec() of its source in a fresh namespace, against fake
// mlflow_profiler packages), the lines made of its result, the refusal
// reasons, and Injection::start's refusals against real child processes
// (no privilege needed: they are this test's children). The injection into
// a live 3.14 server is tests/e2e/test_agent_inject.py.

#include "agent/inject.h"

#include "agent/options.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "temp_dir.h"

namespace mlprof::agent {
namespace {

namespace fs = std::filesystem;

void put(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string python3() {
  for (const char* p : {"/usr/bin/python3", "/usr/local/bin/python3"})
    if (access(p, X_OK) == 0) return p;
  return {};
}

// Runs the script as CPython's _PyRunRemoteDebugger does (the source read,
// then run in a fresh namespace), in an isolated python3 (-I -S: no
// site-packages, so no installed mlflow_profiler is found by accident).
// Returns what the harness prints after it: the mlflow_profiler modules
// left in sys.modules, and whether the script raised.
std::string run_script(const std::string& dir, const std::string& package_dir,
                       const std::string& extra_path = "") {
  put(dir + "/inject.py", inject_script(dir, package_dir));
  put(dir + "/harness.py",
      "import sys\n"
      "src = open(sys.argv[1]).read()\n" +
          (extra_path.empty() ? "" : "sys.path.insert(0, '" + extra_path + "')\n") +
          "try:\n"
          "    exec(compile(src, 'inject', 'exec'), {})\n"
          "    raised = False\n"
          "except BaseException:\n"
          "    raised = True\n"
          "print(sorted(m for m in sys.modules if m.startswith('mlflow_profiler')), raised)\n");
  auto quote = [](const std::string& s) {  // for sh
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const std::string cmd =
      python3() + " -I -S " + quote(dir + "/harness.py") + " " + quote(dir + "/inject.py");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (p != nullptr) pclose(p);
  return out;
}

// A stand-in mlflow_profiler: autoprofile() records its arguments in a file.
void fake_package(const std::string& root, const std::string& autoprofile_body,
                  bool enabled = false) {
  put(root + "/mlflow_profiler/__init__.py",
      "__version__ = '9.9.9'\n"
      "from . import _autoprofile\n"
      "def autoprofile(**kw):\n" +
          autoprofile_body + "\n");
  put(root + "/mlflow_profiler/_autoprofile.py",
      std::string("def is_enabled():\n    return ") + (enabled ? "True" : "False") + "\n");
}

class InjectScript : public ::testing::Test {
 protected:
  void SetUp() override {
    if (python3().empty()) GTEST_SKIP() << "no python3 to run the script with";
  }
  mlprof::test::TempDir dir_, pkg_;
};

TEST_F(InjectScript, ImportsFromThePackageDirAndTurnsOnAutoprofileAtRateZero) {
  fake_package(pkg_.path(), "    open(__file__ + '.called', 'w').write(repr(sorted(kw.items())))");
  const std::string after = run_script(dir_.path(), pkg_.path());
  EXPECT_NE(after.find("['mlflow_profiler', 'mlflow_profiler._autoprofile'] False"),
            std::string::npos)
      << after;
  EXPECT_EQ(slurp(pkg_.path() + "/mlflow_profiler/__init__.py.called"), "[('sample_rate', 0)]");
  EXPECT_FALSE(fs::exists(dir_.path() + "/inject.py")) << "the script removes itself";
  const std::string result = slurp(dir_.path() + "/result.json");
  const InjectOutcome o = outcome_of_result(4242, result, pkg_.path());
  EXPECT_EQ(o.verdict, InjectVerdict::kLoaded) << result;
  EXPECT_NE(o.line.find("pid 4242 (Python 3."), std::string::npos) << o.line;
  EXPECT_NE(o.line.find("loaded mlflow_profiler 9.9.9 from " + pkg_.path() +
                        "/mlflow_profiler/__init__.py"),
            std::string::npos)
      << o.line;
  EXPECT_NE(o.line.find("autoprofile(sample_rate=0)"), std::string::npos) << o.line;
  EXPECT_EQ(o.line.find('\n'), std::string::npos);
}

TEST_F(InjectScript, AnAutoprofileAlreadyOnKeepsItsSettings) {
  fake_package(pkg_.path(), "    open(__file__ + '.called', 'w').write('x')", /*enabled=*/true);
  run_script(dir_.path(), pkg_.path());
  EXPECT_FALSE(fs::exists(pkg_.path() + "/mlflow_profiler/__init__.py.called"));
  const InjectOutcome o = outcome_of_result(1, slurp(dir_.path() + "/result.json"), pkg_.path());
  EXPECT_EQ(o.verdict, InjectVerdict::kLoaded);
  EXPECT_NE(o.line.find("its own autoprofile() settings stay"), std::string::npos) << o.line;
}

TEST_F(InjectScript, AMissingPackageIsReportedWithThePathTriedAndNothingRaised) {
  const std::string after = run_script(dir_.path(), pkg_.path());  // pkg_ is empty
  EXPECT_NE(after.find("[] False"), std::string::npos) << after;
  const InjectOutcome o = outcome_of_result(7, slurp(dir_.path() + "/result.json"), pkg_.path());
  EXPECT_EQ(o.verdict, InjectVerdict::kCannotProfile);
  EXPECT_NE(o.line.find("cannot import mlflow_profiler: ModuleNotFoundError: No module named "
                        "'mlflow_profiler'"),
            std::string::npos)
      << o.line;
  EXPECT_NE(o.line.find("tried --inject-path " + pkg_.path()), std::string::npos) << o.line;
}

TEST_F(InjectScript, WithoutAPackageDirItNamesTheTargetsSysPath) {
  run_script(dir_.path(), "");
  const InjectOutcome o = outcome_of_result(7, slurp(dir_.path() + "/result.json"), "");
  EXPECT_EQ(o.verdict, InjectVerdict::kCannotProfile);
  EXPECT_NE(o.line.find("tried its sys.path ("), std::string::npos) << o.line;
  EXPECT_NE(o.line.find("/lib/python3"), std::string::npos) << o.line;  // the stdlib directory
  EXPECT_NE(o.line.find("--inject-path DIR"), std::string::npos) << o.line;
}

TEST_F(InjectScript, AFailedImportLeavesNoHalfImportedModules) {
  put(pkg_.path() + "/mlflow_profiler/__init__.py",
      "from . import _native\nraise ImportError('_core built for another Python')\n");
  put(pkg_.path() + "/mlflow_profiler/_native.py", "X = 1\n");
  const std::string after = run_script(dir_.path(), pkg_.path());
  EXPECT_NE(after.find("[] False"), std::string::npos) << after;
  const InjectOutcome o = outcome_of_result(7, slurp(dir_.path() + "/result.json"), pkg_.path());
  EXPECT_NE(o.line.find("ImportError: _core built for another Python"), std::string::npos)
      << o.line;
}

TEST_F(InjectScript, AnAutoprofileThatRaisesIsReportedAndNotRaised) {
  fake_package(pkg_.path(), "    raise ImportError('autoprofile() needs MLflow')");
  const std::string after = run_script(dir_.path(), pkg_.path());
  EXPECT_NE(after.find(" False"), std::string::npos) << after;
  const InjectOutcome o = outcome_of_result(7, slurp(dir_.path() + "/result.json"), pkg_.path());
  EXPECT_EQ(o.verdict, InjectVerdict::kCannotProfile);
  EXPECT_NE(o.line.find("but autoprofile() failed: ImportError: autoprofile() needs MLflow"),
            std::string::npos)
      << o.line;
}

TEST_F(InjectScript, APackageImportedFromElsewhereIsNotTakenForThePackageDir) {
  mlprof::test::TempDir elsewhere;
  fake_package(elsewhere.path(), "    pass");
  const std::string after = run_script(dir_.path(), pkg_.path(), elsewhere.path());
  (void)after;
  // pkg_ is empty: the import falls through to `elsewhere` on sys.path.
  const InjectOutcome o = outcome_of_result(7, slurp(dir_.path() + "/result.json"), pkg_.path());
  EXPECT_EQ(o.verdict, InjectVerdict::kCannotProfile);
  EXPECT_NE(o.line.find("mlflow_profiler came from " + elsewhere.path()), std::string::npos)
      << o.line;
}

TEST_F(InjectScript, APackageOfSymlinkedFilesCountsAsThePackageDir) {
  // scripts/devpath.sh's layout: the files are symlinks into the sources.
  mlprof::test::TempDir sources;
  fake_package(sources.path(), "    pass");
  fs::create_directories(pkg_.path() + "/mlflow_profiler");
  for (const char* f : {"__init__.py", "_autoprofile.py"})
    fs::create_symlink(sources.path() + "/mlflow_profiler/" + f,
                       pkg_.path() + "/mlflow_profiler/" + f);
  run_script(dir_.path(), pkg_.path());
  const InjectOutcome o = outcome_of_result(1, slurp(dir_.path() + "/result.json"), pkg_.path());
  EXPECT_EQ(o.verdict, InjectVerdict::kLoaded) << o.line;
}

TEST_F(InjectScript, AnyBytesInThePathsAreSafe) {
  const std::string odd = dir_.path() + "/it's \"odd\"\\ dir";
  fs::create_directories(odd);
  fake_package(pkg_.path(), "    pass");
  run_script(odd, pkg_.path());
  EXPECT_EQ(outcome_of_result(1, slurp(odd + "/result.json"), pkg_.path()).verdict,
            InjectVerdict::kLoaded);
}

TEST(InjectOptions, TheFlagTheDirectoryAndTheirErrors) {
  auto a = parse_options({"--pid", "4242", "--inject", "--inject-path", "/opt/mlprof-314"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a.value().inject);
  EXPECT_EQ(a.value().inject_path, "/opt/mlprof-314");
  auto plain = parse_options({"--pid", "4242"});
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain.value().inject);
  auto err = [](std::vector<std::string> args) {
    auto r = parse_options(args);
    return r ? std::string() : r.error().message;
  };
  EXPECT_NE(err({"--all", "--inject"}).find("give --pid N"), std::string::npos);
  EXPECT_NE(err({"--pid", "1", "--inject-path", "/x"}).find("give --inject too"),
            std::string::npos);
  EXPECT_NE(err({"--pid", "1", "--inject", "--inject-path", "site-packages"})
                .find("must be an absolute directory, as the target process sees it"),
            std::string::npos);
  EXPECT_NE(err({"--pid", "1", "--inject=yes"}).find("--inject takes no value"), std::string::npos);
  EXPECT_NE(usage().find("--inject-path DIR"), std::string::npos);
}

TEST(InjectLines, OutcomeOfAnUnreadableResult) {
  const InjectOutcome o = outcome_of_result(3, "{not json", "");
  EXPECT_EQ(o.verdict, InjectVerdict::kError);
  EXPECT_NE(o.line.find("unreadable"), std::string::npos);
}

// A target writes its result.json: nesting a million levels deep is one
// line, not a stack overflow (fuzz_agent_inject_result found it).
TEST(InjectLines, AResultNestedAMillionDeepIsUnreadableNotACrash) {
  const InjectOutcome o = outcome_of_result(3, std::string(1000000, '['), "");
  EXPECT_EQ(o.verdict, InjectVerdict::kError);
  EXPECT_NE(o.line.find("unreadable"), std::string::npos);
}

TEST(InjectLines, WhyRemoteDebuggingIsOff) {
  using namespace std::string_literals;
  EXPECT_NE(remote_debug_off_reason("PATH=/bin\0PYTHON_DISABLE_REMOTE_DEBUG=\0"s, "python3\0"s)
                .find("PYTHON_DISABLE_REMOTE_DEBUG is set"),
            std::string::npos);
  EXPECT_NE(remote_debug_off_reason("PATH=/bin\0"s, "python3\0-X\0disable-remote-debug\0s.py\0"s)
                .find("-X disable-remote-debug is on its command line"),
            std::string::npos);
  EXPECT_NE(remote_debug_off_reason(""s, "python3\0-Xdisable-remote-debug\0"s)
                .find("-X disable-remote-debug"),
            std::string::npos);
  // Neither: the build, or an option the files do not show.
  EXPECT_NE(
      remote_debug_off_reason("PATH=/bin\0"s, "python3\0-X\0dev\0"s).find("--without-remote-debug"),
      std::string::npos);
}

TEST(InjectLines, PtraceScopeThreeRefusesTheRestAllow) {
  EXPECT_EQ(ptrace_scope_refusal(5, "0\n"), "");
  EXPECT_EQ(ptrace_scope_refusal(5, "1\n"), "");
  EXPECT_EQ(ptrace_scope_refusal(5, "2\n"), "");
  const std::string line = ptrace_scope_refusal(5, "3\n");
  EXPECT_NE(line.find("kernel.yama.ptrace_scope is 3"), std::string::npos) << line;
  EXPECT_NE(line.find("MLFLOW_PROFILER_AUTOPROFILE=1"), std::string::npos) << line;
}

// ---- Injection::start against real processes ------------------------------------

struct Child {
  pid_t pid = -1;
  explicit Child(std::vector<std::string> argv) {
    pid = fork();
    if (pid == 0) {
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    usleep(300'000);  // mapped by then
  }
  ~Child() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

TEST(Injection, AnOlderPythonGetsTheLineSayingWhatToDoInstead) {
  if (python3().empty()) GTEST_SKIP() << "no python3";
  Child py({python3(), "-c", "import time; time.sleep(30)"});
  InjectOptions opts;
  opts.ptrace_scope = "/nonexistent";  // as without Yama
  auto in = Injection::start(py.pid, opts);
  ASSERT_TRUE(in->outcome());
  EXPECT_EQ(in->outcome()->verdict, InjectVerdict::kCannotProfile);
  const std::string& line = in->outcome()->line;
  EXPECT_NE(line.find("runs Python 3."), std::string::npos) << line;
  EXPECT_NE(line.find("PEP 768 came in Python 3.14"), std::string::npos) << line;
  EXPECT_NE(line.find("MLFLOW_PROFILER_AUTOPROFILE=1"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Injection, APtraceScopeOfThreeRefusesBeforeAnythingIsWritten) {
  mlprof::test::TempDir dir;
  put(dir.path() + "/ptrace_scope", "3\n");
  Child sleeper({"/bin/sleep", "30"});
  InjectOptions opts;
  opts.ptrace_scope = dir.path() + "/ptrace_scope";
  auto in = Injection::start(sleeper.pid, opts);
  ASSERT_TRUE(in->outcome());
  EXPECT_EQ(in->outcome()->verdict, InjectVerdict::kPrivilege);
  EXPECT_NE(in->outcome()->line.find("ptrace_scope is 3"), std::string::npos);
}

TEST(Injection, AProcessWithoutACPythonRuntimeCannotTakeIt) {
  Child sleeper({"/bin/sleep", "30"});
  InjectOptions opts;
  opts.ptrace_scope = "/nonexistent";
  auto in = Injection::start(sleeper.pid, opts);
  ASSERT_TRUE(in->outcome());
  EXPECT_EQ(in->outcome()->verdict, InjectVerdict::kCannotProfile);
  const std::string& line = in->outcome()->line;
  EXPECT_NE(line.find("no CPython runtime"), std::string::npos) << line;
}

}  // namespace
}  // namespace mlprof::agent
