// options.cpp: the command line a user types, its defaults and its errors.
#include "agent/options.h"

#include <gtest/gtest.h>

using namespace mlprof;
using namespace mlprof::agent;

namespace {

Options ok(const std::vector<std::string>& args) {
  auto r = parse_options(args);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : Options{};
}

std::string err(const std::vector<std::string>& args) {
  auto r = parse_options(args);
  EXPECT_FALSE(r.ok()) << "parsed";
  if (r.ok()) return {};
  EXPECT_EQ(r.error().kind, Error::Kind::kUnsupported);
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "one line";
  return r.error().message;
}

}  // namespace

TEST(Options, TheIssueExamples) {
  Options a = ok({"--pid", "4242", "--duration", "30", "-o", "predict.trace.json"});
  EXPECT_EQ(a.pids, std::vector<pid_t>{4242});
  EXPECT_DOUBLE_EQ(a.duration_s, 30);
  EXPECT_EQ(a.output, "predict.trace.json");
  ASSERT_TRUE(a.format.has_value());
  EXPECT_EQ(*a.format, ExportFormat::kChromeTrace);  // from the extension

  Options b = ok({"--container", "serving-1", "--stream"});
  EXPECT_EQ(b.container, "serving-1");
  EXPECT_TRUE(b.stream);
  EXPECT_FALSE(b.format.has_value());  // text to stdout
  EXPECT_EQ(b.duration_s, 0);          // until a signal

  Options c = ok({"--all", "--format", "pprof", "-o", "fleet.pb.gz"});
  EXPECT_TRUE(c.all);
  EXPECT_EQ(*c.format, ExportFormat::kPprof);
}

TEST(Options, RepeatedPidsEqualsFormAndDefaults) {
  Options o = ok({"--pid=1", "--pid", "22", "--pid=333"});
  EXPECT_EQ(o.pids, (std::vector<pid_t>{1, 22, 333}));
  EXPECT_EQ(o.depth, -1);
  EXPECT_EQ(o.verbose, 0);
  EXPECT_EQ(o.ring_bytes, 0u);
  EXPECT_TRUE(o.output.empty());
  Options v = ok({"--cgroup", "/libpod_parent", "-v", "-v", "--depth", "2", "--duration=0.5"});
  EXPECT_EQ(v.cgroup, "/libpod_parent");
  EXPECT_EQ(v.verbose, 2);
  EXPECT_EQ(v.depth, 2);
  EXPECT_DOUBLE_EQ(v.duration_s, 0.5);
}

TEST(Options, FormatFromTheFileNameUnlessGiven) {
  EXPECT_EQ(*ok({"--all", "-o", "x.json"}).format, ExportFormat::kJson);
  EXPECT_EQ(*ok({"--all", "-o", "x.json.gz"}).format, ExportFormat::kJsonGz);
  EXPECT_EQ(*ok({"--all", "-o", "x.speedscope.json"}).format, ExportFormat::kSpeedscope);
  EXPECT_EQ(*ok({"--all", "-o", "X.PB.GZ"}).format, ExportFormat::kPprof);
  EXPECT_FALSE(ok({"--all", "-o", "report.txt"}).format.has_value());  // unknown extension: text
  // --format wins over the extension, in either order.
  EXPECT_EQ(*ok({"--all", "--format", "speedscope", "-o", "x.json"}).format,
            ExportFormat::kSpeedscope);
  EXPECT_EQ(*ok({"--all", "-o", "x.json", "--format", "chrome"}).format,
            ExportFormat::kChromeTrace);
  EXPECT_FALSE(ok({"--all", "-o", "x.json", "--format", "text"}).format.has_value());
  // The core's names work too.
  EXPECT_EQ(*ok({"--all", "--format", "chrome_trace"}).format, ExportFormat::kChromeTrace);
  EXPECT_EQ(*ok({"--all", "--format", "json"}).format, ExportFormat::kJson);
  EXPECT_EQ(format_label(std::nullopt), "text");
  EXPECT_EQ(format_label(ExportFormat::kChromeTrace), "chrome");
  EXPECT_EQ(format_label(ExportFormat::kPprof), "pprof");
}

TEST(Options, HelpAndVersionNeedNoTarget) {
  EXPECT_TRUE(ok({"--help"}).help);
  EXPECT_TRUE(ok({"-h"}).help);
  EXPECT_TRUE(ok({"--version"}).version);
  EXPECT_NE(usage().find("--container NAME|ID"), std::string::npos);
  EXPECT_NE(usage().find("Exit status"), std::string::npos);
  EXPECT_EQ(usage().find("ring-kb"), std::string::npos);  // hidden
  EXPECT_TRUE(version_line().starts_with("mlprof-ebpf "));
}

TEST(Options, TargetErrorsSayWhatToGive) {
  EXPECT_NE(err({}).find("no target: give --pid N, --container NAME|ID, --cgroup PATH or --all"),
            std::string::npos);
  EXPECT_NE(err({"--pid", "1", "--all"}).find("give one of them"), std::string::npos);
  EXPECT_NE(err({"--container", "a", "--cgroup", "/x"}).find("give one of them"),
            std::string::npos);
  EXPECT_NE(err({"--container", "a", "--container", "b"}).find("one container per agent"),
            std::string::npos);
  EXPECT_NE(err({"--container", ""}).find("needs a container name"), std::string::npos);
  EXPECT_NE(err({"4242"}).find("unexpected argument '4242'"), std::string::npos);
}

TEST(Options, PodByNamespaceNameAndContainer) {
  EXPECT_EQ(ok({"--pod", "ml/scorer-6c5d8"}).pod, "ml/scorer-6c5d8");
  EXPECT_EQ(ok({"--pod", "ml/scorer-6c5d8/model", "--stream"}).pod, "ml/scorer-6c5d8/model");
  EXPECT_EQ(ok({"--pod=ml/a", "--host-root", "/host"}).host_root, "/host");
  EXPECT_EQ(ok({"--all"}).host_root, "");  // the node's / itself
  for (const char* bad : {"scorer", "ml/", "/scorer", "ml//model", "ml/a/b/c", "", "ml/a/"}) {
    SCOPED_TRACE(bad);
    EXPECT_NE(
        err({"--pod", bad})
            .find("is not NAMESPACE/NAME or NAMESPACE/NAME/CONTAINER: e.g. --pod ml/scorer-6c5d8"),
        std::string::npos);
  }
  EXPECT_NE(err({"--pod", "ml/a", "--pod", "ml/b"}).find("one pod per agent"), std::string::npos);
  EXPECT_NE(err({"--pod", "ml/a", "--all"}).find("give one of them"), std::string::npos);
  EXPECT_NE(err({"--pod", "ml/a", "--container", "x"}).find("give one of them"), std::string::npos);
  EXPECT_NE(err({"--pod", "ml/a", "--host-root", "host"}).find("must be an absolute directory"),
            std::string::npos);
  EXPECT_NE(err({"--pod"}).find("--pod needs a value"), std::string::npos);
}

TEST(Options, ValueErrorsNameTheOptionAndTheFix) {
  EXPECT_NE(err({"--pid", "abc"}).find("--pid 'abc' is not a process id"), std::string::npos);
  EXPECT_NE(err({"--pid", "0"}).find("is not a process id"), std::string::npos);
  EXPECT_NE(err({"--pid", "-3"}).find("is not a process id"), std::string::npos);
  EXPECT_NE(err({"--pid", "12x"}).find("is not a process id"), std::string::npos);
  EXPECT_NE(err({"--pid", "99999999999999999999"}).find("is not a process id"), std::string::npos);
  EXPECT_NE(
      err({"--all", "--duration", "0"}).find("--duration '0' is not a positive number of seconds"),
      std::string::npos);
  EXPECT_NE(err({"--all", "--duration", "nan"}).find("--duration"), std::string::npos);
  EXPECT_NE(err({"--all", "--duration", "5s"}).find("e.g. --duration 30"), std::string::npos);
  EXPECT_NE(err({"--all", "--depth", "two"}).find("--depth 'two' is not a depth"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--depth", "-2"}).find("is not a depth"), std::string::npos);
  EXPECT_NE(err({"--all", "--format", "xml"}).find("use text, json, chrome, pprof or speedscope"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--format", "pprof"}).find("write it to a file with -o FILE"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--ring-kb", "3"}).find("power of two"), std::string::npos);
  EXPECT_EQ(ok({"--all", "--ring-kb", "64"}).ring_bytes, 64u * 1024);
}

TEST(Options, MissingValuesAndUnknownOptions) {
  EXPECT_NE(err({"--all", "-o"}).find("-o needs a value"), std::string::npos);
  EXPECT_NE(err({"--pid"}).find("--pid needs a value"), std::string::npos);
  EXPECT_NE(err({"--all", "--duration"}).find("--duration needs a value"), std::string::npos);
  EXPECT_NE(err({"--all", "--frobnicate"}).find("unknown option '--frobnicate'"),
            std::string::npos);
  EXPECT_NE(err({"--all", "-x"}).find("unknown option '-x'"), std::string::npos);
  // First: getopt starts over from optind 0, which names the program, not the option.
  EXPECT_NE(err({"--frobnicate", "--all"}).find("unknown option '--frobnicate'"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--stream=yes"}).find("--stream"), std::string::npos);
}

TEST(Options, ParsingTwiceStartsOver) {
  // getopt keeps global state; a second parse must not continue from the first.
  EXPECT_EQ(ok({"--pid", "7"}).pids, std::vector<pid_t>{7});
  EXPECT_EQ(ok({"--pid", "8"}).pids, std::vector<pid_t>{8});
  err({"--bad"});
  EXPECT_TRUE(ok({"--all"}).all);
}

TEST(Options, StoreAndLabels) {
  Options a = ok({"--pid", "7", "--store", "profiles.db", "--label", "model=fraud", "--label",
                  "version=3", "--label", "note=a=b", "--label", "empty="});
  EXPECT_EQ(a.store, "profiles.db");
  const std::map<std::string, std::string> want{
      {"model", "fraud"}, {"version", "3"}, {"note", "a=b"}, {"empty", ""}};
  EXPECT_EQ(a.labels, want);
  EXPECT_EQ(ok({"--all", "--store", "sqlite:////var/lib/p.db"}).store, "sqlite:////var/lib/p.db");
  // A later --label of the same key wins, as mlprof add's.
  EXPECT_EQ(ok({"--all", "--store", "s.db", "--label", "model=a", "--label", "model=b"})
                .labels.at("model"),
            "b");
  EXPECT_TRUE(ok({"--all"}).store.empty());
  EXPECT_NE(usage().find("--store STORE"), std::string::npos);
  EXPECT_NE(usage().find("--label KEY=VALUE"), std::string::npos);
}

TEST(Options, StoreErrorsSayWhatToGive) {
  EXPECT_NE(err({"--all", "--store", ""}).find("--store needs a SQLite file"), std::string::npos);
  EXPECT_NE(err({"--all", "--store"}).find("--store needs a value"), std::string::npos);
  EXPECT_NE(err({"--all", "--store", "a.db", "--store", "b.db"}).find("--store given twice"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--store", "postgresql://u@h/db"}).find("mlprof add URL FILE.json"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--store", "s.db", "--label", "model"})
                .find("--label takes KEY=VALUE, got 'model'"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--store", "s.db", "--label", "=x"}).find("--label takes KEY=VALUE"),
            std::string::npos);
  EXPECT_NE(err({"--all", "--label", "model=m"}).find("give --store FILE too"), std::string::npos);
}
