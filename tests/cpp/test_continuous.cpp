// The continuous agent's rotation (agent/continuous.h) into a real spool:
// one item per workload per period with its labels and figures, the early
// cut that bounds memory, the summary line; the duty cycle's windows and
// the duration syntax of --rotate / --duty-cycle.

#include "agent/continuous.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>

#include "agent/options.h"
#include "agent/sink_dir.h"
#include "formats/json_read.h"
#include "profile_builder.h"
#include "temp_dir.h"
#include "util/file_io.h"

namespace mlprof::agent {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kT0 =
    1'800'000'000 * kS;  // a whole minute of the clock (1800000000 = 30000000 * 60)

class NamedSink : public Sink {
 public:
  Delivery deliver(const SpoolItem&) override { return {DeliveryStatus::kRetry, "not delivering"}; }
  std::string describe() const override { return "sqlite:///p.db"; }
};

// A finished session of `spans` calls in process `pid`, with the meta a
// pod's session carries when `pod` is given.
Profile session(uint32_t pid, int spans, const std::string& pod = "",
                const std::string& container = "") {
  Profile p;
  const uint32_t f = test::user_fn(p, "predict");
  std::vector<Event> events;
  for (int i = 0; i < spans; ++i) {
    events.push_back(test::call(100 + 10 * i, f));
    events.push_back(test::ret(105 + 10 * i));
  }
  Lane lane = test::make_lane(std::move(events));
  lane.pid = pid;
  p.lanes.push_back(std::move(lane));
  p.start_ns = 100;
  p.end_ns = 100 + 10 * spans;
  p.meta["pid"] = std::to_string(pid);
  if (!pod.empty()) {
    p.meta["namespace"] = "ml";
    p.meta["pod"] = pod;
    p.meta["container"] = container;
  }
  build_tree(p);
  return p;
}

struct Rig {
  test::TempDir dir;
  std::unique_ptr<Spool> spool;
  NamedSink sink;
  std::FILE* out = std::tmpfile();
  Rig() { spool = std::move(Spool::open(dir.path()).value()); }
  ~Rig() { std::fclose(out); }
  std::string printed() {
    std::fflush(out);
    std::rewind(out);
    std::string s;
    char buf[512];
    while (std::fgets(buf, sizeof buf, out)) s += buf;
    return s;
  }
};

ContinuousOptions options(int64_t rotate_s = 60) {
  ContinuousOptions o;
  o.rotate_ns = rotate_s * kS;
  o.node = "node-1";
  o.labels = {{"cluster", "eu"}};
  return o;
}

TEST(Continuous, EachPeriodIsOneItemPerWorkloadWithItsLabels) {
  Rig rig;
  Continuous c(options(), *rig.spool, rig.sink, rig.out,
               kT0 + 20 * kS);  // starts 20 s into a minute
  c.add(session(11, 2));
  c.add(session(11, 3));
  c.add(session(12, 1, "scorer-6c5d8", "model"));
  c.add(session(13, 4, "scorer-6c5d8", "model"));  // another process of the same container
  EXPECT_EQ(c.held_sessions(), 4u);
  EXPECT_FALSE(c.tick(kT0 + 59 * kS));
  EXPECT_TRUE(c.tick(kT0 + 60 * kS));  // the minute's end
  EXPECT_EQ(c.held_sessions(), 0u);

  auto items = rig.spool->items();
  ASSERT_EQ(items.size(), 2u);
  // Workloads in key order: "pid/11", then "pod/ml/scorer-6c5d8/model".
  const SpoolItem& pod = items[1];
  EXPECT_EQ(pod.labels, (std::map<std::string, std::string>{{"cluster", "eu"},
                                                            {"node", "node-1"},
                                                            {"namespace", "ml"},
                                                            {"pod", "scorer-6c5d8"},
                                                            {"container", "model"}}));
  EXPECT_EQ(pod.sessions, 2u);
  EXPECT_EQ(pod.spans, 5u);
  EXPECT_EQ(pod.period_start_unix_ns, kT0 + 20 * kS);
  EXPECT_EQ(pod.period_end_unix_ns, kT0 + 60 * kS);
  EXPECT_TRUE(pod.key.starts_with("node-1_ml-scorer-6c5d8-model_20270115T080020Z_")) << pod.key;
  const SpoolItem& proc = items[0];
  EXPECT_EQ(proc.labels.at("pid"), "11");
  EXPECT_EQ(proc.sessions, 2u);
  EXPECT_EQ(proc.spans, 5u);
  EXPECT_NE(pod.key, proc.key);

  // The document: both sessions' spans, the labels in its meta.
  auto doc = read_json_document(read_file(pod.path).value());
  ASSERT_TRUE(doc) << doc.error().message;
  EXPECT_EQ(doc.value().spans.size(), 5u);
  EXPECT_EQ(doc.value().meta.at("pod"), "scorer-6c5d8");
  EXPECT_EQ(doc.value().meta.at("agent_item"), pod.key);
  EXPECT_EQ(doc.value().meta.at("period_end_unix_ns"), std::to_string(kT0 + 60 * kS));

  // The next period is the next whole minute; an idle one still says so.
  c.add(session(11, 1));
  EXPECT_TRUE(c.tick(kT0 + 121 * kS));
  ASSERT_EQ(rig.spool->items().size(), 3u);
  EXPECT_EQ(rig.spool->items()[2].period_start_unix_ns, kT0 + 60 * kS);
  EXPECT_EQ(rig.spool->items()[2].period_end_unix_ns, kT0 + 120 * kS);
  EXPECT_TRUE(c.tick(kT0 + 180 * kS));
  const std::string printed = rig.printed();
  EXPECT_NE(printed.find(
                "mlprof-ebpf: period 2027-01-15T08:00:20Z +40s: 2 workloads, 4 sessions, 10 spans; "
                "delivered 0, spooled 2, dropped 0; sink sqlite:///p.db\n"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("+60s: 0 workloads, 0 sessions, 0 spans;"), std::string::npos) << printed;
}

TEST(Continuous, PastTheHeldSpansBoundThePeriodIsCutShort) {
  Rig rig;
  ContinuousOptions o = options();
  o.max_held_spans = 10;
  Continuous c(o, *rig.spool, rig.sink, rig.out, kT0);
  c.add(session(11, 6));
  EXPECT_FALSE(c.tick(kT0 + kS));
  c.add(session(11, 6));
  EXPECT_TRUE(c.tick(kT0 + 2 * kS));  // 12 spans held: written now
  EXPECT_EQ(c.held_spans(), 0u);
  c.add(session(11, 1));
  EXPECT_TRUE(c.tick(kT0 + 60 * kS));
  auto items = rig.spool->items();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].period_end_unix_ns, kT0 + 2 * kS);
  EXPECT_EQ(items[1].period_start_unix_ns, kT0 + 2 * kS);
  EXPECT_NE(items[0].key, items[1].key);
}

TEST(Continuous, EmptySessionsCountAgainstTheBoundToo) {
  // A target can end sessions with no spans in a loop (issue 44's audit,
  // F3): each holds memory, so each counts.
  Rig rig;
  ContinuousOptions o = options();
  o.max_held_spans = 10;
  Continuous c(o, *rig.spool, rig.sink, rig.out, kT0);
  for (int i = 0; i < 10; ++i) c.add(session(11, 0));
  EXPECT_FALSE(c.tick(kT0 + kS));  // 10 sessions, 0 spans: at the bound
  c.add(session(11, 0));
  EXPECT_TRUE(c.tick(kT0 + 2 * kS));
  EXPECT_EQ(rig.spool->items().size(), 1u);
}

TEST(Continuous, FinishWritesThePartialPeriod) {
  Rig rig;
  Continuous c(options(), *rig.spool, rig.sink, rig.out, kT0 + 5 * kS);
  c.add(session(11, 2));
  c.finish(kT0 + 7 * kS);
  auto items = rig.spool->items();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].period_end_unix_ns, kT0 + 7 * kS);
}

TEST(Continuous, TheDutyCycleSaysItsShareOfThePeriod) {
  Rig rig;
  ContinuousOptions o = options();
  o.duty = DutyCycle{10 * kS, 60 * kS};
  Continuous c(o, *rig.spool, rig.sink, rig.out, kT0);
  c.capture_changed(false, kT0 + 10 * kS);
  c.tick(kT0 + 60 * kS);
  EXPECT_EQ(c.last().profiled_ns, 10 * kS);
  EXPECT_NE(rig.printed().find("; profiled 10s of 60s (17%, duty cycle 10s/60s)"),
            std::string::npos)
      << rig.printed();
}

TEST(DutyCycle, OnForTheFirstPartOfEveryPeriodAlignedToTheClock) {
  const DutyCycle d{10 * kS, 60 * kS};
  EXPECT_TRUE(d.on_at(kT0));
  EXPECT_TRUE(d.on_at(kT0 + 9 * kS));
  EXPECT_FALSE(d.on_at(kT0 + 10 * kS));
  EXPECT_FALSE(d.on_at(kT0 + 59 * kS));
  EXPECT_TRUE(d.on_at(kT0 + 60 * kS));
  EXPECT_EQ(d.next_change(kT0 + 3 * kS), kT0 + 10 * kS);
  EXPECT_EQ(d.next_change(kT0 + 30 * kS), kT0 + 60 * kS);
  EXPECT_EQ(d.text(), "10s/60s");
  EXPECT_TRUE(DutyCycle{}.on_at(kT0 + 30 * kS));  // none: always on
}

TEST(Options, ContinuousModeFlags) {
  auto o = parse_options({"--all", "--continuous", "--sink", "/srv/p", "--rotate", "5m",
                          "--duty-cycle", "10s/60s", "--spool", "/s", "--spool-max-mb", "64",
                          "--retry-max", "30s", "--label", "cluster=eu"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_TRUE(o.value().continuous);
  EXPECT_EQ(o.value().rotate_ns, 300 * kS);
  EXPECT_EQ(o.value().duty_on_ns, 10 * kS);
  EXPECT_EQ(o.value().duty_period_ns, 60 * kS);
  EXPECT_EQ(o.value().spool_max_bytes, uint64_t{64} << 20);
  EXPECT_EQ(o.value().retry_max_ns, 30 * kS);
  EXPECT_EQ(o.value().labels.at("cluster"), "eu");

  auto error = [](std::vector<std::string> args) {
    auto r = parse_options(args);
    return r ? std::string() : r.error().message;
  };
  EXPECT_TRUE(error({"--all", "--continuous"}).starts_with("--continuous needs --sink URL"));
  EXPECT_TRUE(
      error({"--all", "--sink", "/x"}).starts_with("--sink belongs to the continuous agent"));
  EXPECT_TRUE(
      error({"--all", "--rotate", "1m"}).starts_with("--rotate belongs to the continuous agent"));
  EXPECT_NE(error({"--all", "--continuous", "--sink", "/x", "-o", "a.json"}).find("single capture"),
            std::string::npos);
  EXPECT_NE(
      error({"--all", "--continuous", "--sink", "/x", "--rotate", "500ms"}).find("at least 1 s"),
      std::string::npos);
  EXPECT_NE(error({"--all", "--duty-cycle", "60s/60s"}).find("ON shorter than PERIOD"),
            std::string::npos);
  EXPECT_NE(error({"--all", "--duty-cycle", "10s"}).find("ON/PERIOD"), std::string::npos);
  EXPECT_EQ(error({"--all", "--duty-cycle", "10s/1m"}), "");  // a single capture may have one too
}

TEST(Options, TheDirectorySinksRetentionBoundsTheDiskByDefault) {
  auto d = parse_options({"--all", "--continuous", "--sink", "/srv/p"});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d.value().sink_max_bytes, uint64_t{1024} << 20);
  EXPECT_EQ(d.value().sink_max_age_ns, 7 * 86400 * kS);
  EXPECT_EQ(d.value().sink_bound_given, "");
  auto o = parse_options({"--all", "--continuous", "--sink", "/srv/p", "--sink-max-age", "36h",
                          "--sink-max-mb", "200"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o.value().sink_max_bytes, uint64_t{200} << 20);
  EXPECT_EQ(o.value().sink_max_age_ns, 36 * 3600 * kS);
  EXPECT_EQ(o.value().sink_bound_given, "--sink-max-age");
  auto error = [](std::vector<std::string> args) {
    auto r = parse_options(args);
    return r ? std::string() : r.error().message;
  };
  EXPECT_TRUE(error({"--all", "--continuous", "--sink", "/p", "--sink-max-mb", "0"})
                  .starts_with("--sink-max-mb '0' is not"));
  EXPECT_TRUE(error({"--all", "--continuous", "--sink", "/p", "--sink-max-age", "500ms"})
                  .starts_with("--sink-max-age"));
  EXPECT_TRUE(error({"--all", "--sink-max-mb", "10"})
                  .starts_with("--sink-max-mb belongs to the continuous agent"));
}

TEST(Continuous, ADirectorySinksLineSaysWhatItHoldsAndPruned) {
  Rig rig;
  const std::string dir = rig.dir.path() + "/profiles";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  auto sink = open_directory_sink(dir, {uint64_t{1} << 20, 0});  // no age: this clock is in 2027
  Continuous c(options(), *rig.spool, *sink, rig.out, kT0);
  c.add(session(11, 2));
  c.tick(kT0 + 60 * kS);
  ASSERT_TRUE(rig.spool->deliver_one(*sink));
  c.tick(kT0 + 120 * kS);
  const std::string printed = rig.printed();
  const uint64_t size = sink->retention()->bytes;
  ASSERT_GT(size, 0u);
  char expected[160];
  std::snprintf(expected, sizeof expected,
                "; sink %s; directory %.1f MB in 1 file (bound 1 MB), pruned 0\n", dir.c_str(),
                static_cast<double>(size) / (1 << 20));
  EXPECT_NE(printed.find(expected), std::string::npos) << printed << expected;
}

TEST(Options, Durations) {
  EXPECT_EQ(parse_duration_ns("90"), 90 * kS);
  EXPECT_EQ(parse_duration_ns("90s"), 90 * kS);
  EXPECT_EQ(parse_duration_ns("1500ms"), 1500'000'000);
  EXPECT_EQ(parse_duration_ns("1.5m"), 90 * kS);
  EXPECT_EQ(parse_duration_ns("2h"), 7200 * kS);
  EXPECT_EQ(parse_duration_ns("7d"), 7 * 86400 * kS);
  for (const char* bad : {"", "s", "0", "-5s", "5x", "5 s", "1e30h", "0.1ms"})
    EXPECT_FALSE(parse_duration_ns(bad)) << bad;
}

}  // namespace
}  // namespace mlprof::agent
