// The agent's health file and the probe's verdict (agent/health.h): the
// file's text read back, the thresholds on a stuck loop and a wedged sink,
// readiness, and the probe command on real files.

#include "agent/health.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace mlprof::agent {
namespace {

using test::TempDir;

constexpr int64_t kS = 1'000'000'000;

HealthState running(int64_t now) {
  HealthState s;
  s.pid = 4242;
  s.started_ns = now - 600 * kS;
  s.ready = true;
  s.loop_ns = now - kS / 2;
  s.has_sink = true;
  s.sink = "postgresql://prof@db/profiles";
  s.last_delivered_ns = now - 20 * kS;
  s.delivered = 12;
  s.written_unix_ns = 1'700'000'000'000'000'000;
  return s;
}

// Runs health_main on these words (the program name is added).
int probe(std::vector<std::string> words) {
  words.insert(words.begin(), "mlprof-ebpf");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return health_main(static_cast<int>(words.size()), argv.data());
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Health, TheFileReadsBackAsWritten) {
  HealthState s = running(1'000 * kS);
  s.sink_call_since_ns = 999 * kS;
  s.pending = 3;
  s.failures = 7;
  s.last_error = "cannot reach the server:\nConnection refused";  // a newline stays on its line
  const std::string text = format_health(s);
  EXPECT_TRUE(text.starts_with("mlprof-ebpf health 1\n")) << text;
  EXPECT_NE(text.find("\nwritten=2023-11-14T22:13:20Z\n"), std::string::npos) << text;
  auto back = parse_health(text);
  ASSERT_TRUE(back) << back.error().message;
  const HealthState& b = back.value();
  EXPECT_EQ(b.pid, s.pid);
  EXPECT_EQ(b.started_ns, s.started_ns);
  EXPECT_EQ(b.loop_ns, s.loop_ns);
  EXPECT_TRUE(b.ready);
  EXPECT_FALSE(b.stopping);
  EXPECT_TRUE(b.has_sink);
  EXPECT_EQ(b.sink, s.sink);
  EXPECT_EQ(b.sink_call_since_ns, s.sink_call_since_ns);
  EXPECT_EQ(b.last_delivered_ns, s.last_delivered_ns);
  EXPECT_EQ(b.delivered, 12u);
  EXPECT_EQ(b.pending, 3u);
  EXPECT_EQ(b.failures, 7u);
  EXPECT_EQ(b.last_error, "cannot reach the server: Connection refused");
  EXPECT_EQ(b.written_unix_ns, s.written_unix_ns);
}

TEST(Health, WithoutASinkNoDeliveryLines) {
  HealthState s = running(1'000 * kS);
  s.has_sink = false;
  const std::string text = format_health(s);
  EXPECT_EQ(text.find("sink"), std::string::npos) << text;
  auto back = parse_health(text);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back.value().has_sink);
}

TEST(Health, OtherTextIsRefusedWithTheReason) {
  EXPECT_NE(parse_health("").error().message.find("empty"), std::string::npos);
  EXPECT_NE(parse_health("hello\n").error().message.find("not an mlprof-ebpf health file"),
            std::string::npos);
  auto v2 = parse_health("mlprof-ebpf health 2\npid=1\n");
  EXPECT_EQ(v2.error().kind, Error::Kind::kVersion);
  EXPECT_NE(v2.error().message.find("the agent's own binary"), std::string::npos);
  // A number that is not one, a required key missing.
  EXPECT_FALSE(parse_health("mlprof-ebpf health 1\npid=x\nstarted_ns=1\nloop_ns=1\nready=1\n"));
  EXPECT_FALSE(parse_health("mlprof-ebpf health 1\npid=1\nstarted_ns=1\nready=1\n"));
  // Unknown keys are skipped (a newer agent's additions).
  EXPECT_TRUE(
      parse_health("mlprof-ebpf health 1\npid=1\nstarted_ns=1\nloop_ns=1\nready=1\nnew=2\n"));
}

TEST(Health, ARunningAgentIsLiveAndReady) {
  const int64_t now = 1'000 * kS;
  const HealthState s = running(now);
  HealthVerdict live = judge_health(s, now, false);
  EXPECT_TRUE(live.ok) << live.line;
  EXPECT_EQ(live.line,
            "live: the ring drained 0.5 s ago; sink postgresql://prof@db/profiles: 12 delivered, "
            "the last 20.0 s ago, 0 waiting");
  HealthVerdict ready = judge_health(s, now, true);
  EXPECT_TRUE(ready.ok);
  EXPECT_TRUE(ready.line.starts_with("ready: ")) << ready.line;
}

TEST(Health, AStuckLoopFailsPastItsLimit) {
  const int64_t now = 1'000 * kS;
  HealthState s = running(now);
  s.loop_ns = now - 60 * kS;  // at the limit: still live
  EXPECT_TRUE(judge_health(s, now, false).ok);
  s.loop_ns = now - 61 * kS;
  HealthVerdict v = judge_health(s, now, false);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.line.rfind(
                "stuck: the main loop last drained the ring buffer 61.0 s ago (limit 60.0 s)", 0),
            0u)
      << v.line;
  EXPECT_NE(v.line.find("/proc/4242/task/*/stack"), std::string::npos) << v.line;
  EXPECT_FALSE(judge_health(s, now, true).ok);  // not ready either
  // Another limit.
  HealthLimits limits;
  limits.max_loop_gap_ns = 90 * kS;
  EXPECT_TRUE(judge_health(s, now, false, limits).ok);
}

TEST(Health, AWedgedSinkCallFailsARetryingSinkDoesNot) {
  const int64_t now = 1'000 * kS;
  HealthState s = running(now);
  // Refused and retrying, nothing in flight: live (a restart would not help).
  s.failures = 40;
  s.pending = 9;
  s.last_error = "cannot reach the server: Connection refused";
  HealthVerdict retrying = judge_health(s, now, false);
  EXPECT_TRUE(retrying.ok) << retrying.line;
  EXPECT_NE(retrying.line.find("9 waiting; retrying: cannot reach the server"), std::string::npos)
      << retrying.line;
  // A call in flight for 300 s: still live; past it: stuck.
  s.sink_call_since_ns = now - 300 * kS;
  EXPECT_TRUE(judge_health(s, now, false).ok);
  s.sink_call_since_ns = now - 301 * kS;
  HealthVerdict wedged = judge_health(s, now, false);
  EXPECT_FALSE(wedged.ok);
  EXPECT_EQ(wedged.line.rfind("stuck: a call to the sink postgresql://prof@db/profiles has been in "
                              "flight for 301.0 s (limit 300.0 s): the sink is wedged",
                              0),
            0u)
      << wedged.line;
  EXPECT_NE(wedged.line.find("the spool keeps 9 items"), std::string::npos) << wedged.line;
  HealthLimits limits;
  limits.max_sink_call_ns = 10 * 60 * kS;
  EXPECT_TRUE(judge_health(s, now, false, limits).ok);
}

TEST(Health, StartingIsLiveNotReadyAndStuckPastTheLimit) {
  const int64_t now = 1'000 * kS;
  HealthState s;
  s.pid = 7;
  s.started_ns = now - 3 * kS;
  s.loop_ns = s.started_ns;
  HealthVerdict live = judge_health(s, now, false);
  EXPECT_TRUE(live.ok);
  EXPECT_TRUE(live.line.starts_with("live, starting:")) << live.line;
  HealthVerdict ready = judge_health(s, now, true);
  EXPECT_FALSE(ready.ok);
  EXPECT_EQ(ready.line,
            "not ready: loading the BPF programs and looking for targets (started 3.0 s ago)");
  s.started_ns = s.loop_ns = now - 61 * kS;
  HealthVerdict stuck = judge_health(s, now, false);
  EXPECT_FALSE(stuck.ok);
  EXPECT_TRUE(stuck.line.starts_with("stuck starting: no progress for 61.0 s")) << stuck.line;
}

TEST(Health, StoppingIsLiveButNotReady) {
  const int64_t now = 1'000 * kS;
  HealthState s = running(now);
  s.stopping = true;
  EXPECT_TRUE(judge_health(s, now, false).ok);
  HealthVerdict v = judge_health(s, now, true);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.line, "not ready: stopping (flushing the last period to the sink)");
}

TEST(Health, AFileFromAnEarlierBootIsNotTakenForALiveAgent) {
  const int64_t now = 100 * kS;  // a fresh boot's clock
  HealthState s = running(5'000 * kS);
  HealthVerdict v = judge_health(s, now, false);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.line.find("an earlier boot"), std::string::npos) << v.line;
}

TEST(Health, TheFileIsReplacedAtMostOnceASecond) {
  TempDir dir;
  const std::string path = dir.path() + "/health";
  HealthFile f(path);
  const int64_t t0 = health_clock_ns();
  ASSERT_TRUE(f.start(t0));
  auto first = parse_health(read(path));
  ASSERT_TRUE(first);
  EXPECT_EQ(first.value().pid, ::getpid());
  EXPECT_FALSE(first.value().ready);
  EXPECT_EQ(first.value().loop_ns, t0);
  f.set_ready(t0 + 1);  // written at once
  EXPECT_TRUE(parse_health(read(path)).value().ready);
  EXPECT_FALSE(f.due(t0 + kS / 2));
  EXPECT_TRUE(f.due(t0 + kS + 1));
  HealthState delivery;
  delivery.has_sink = true;
  delivery.sink = "/var/lib/mlprof/profiles";
  delivery.delivered = 5;
  f.set_delivery([&] { return delivery; });
  f.beat(t0 + kS / 2);  // not due: not written
  EXPECT_EQ(parse_health(read(path)).value().delivered, 0u);
  f.beat(t0 + kS + 1);
  auto beat = parse_health(read(path));
  ASSERT_TRUE(beat);
  EXPECT_EQ(beat.value().loop_ns, t0 + kS + 1);
  EXPECT_EQ(beat.value().delivered, 5u);
  EXPECT_EQ(beat.value().sink, "/var/lib/mlprof/profiles");
  // No temporary file is left beside it.
  EXPECT_EQ(dir.files(), std::vector<std::string>{"health"});
}

TEST(Health, AnUnwritableFileIsAnErrorAtStart) {
  TempDir dir;
  HealthFile missing(dir.path() + "/no-such-dir/health");
  auto r = missing.start(health_clock_ns());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no-such-dir/health.tmp"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("No such file or directory"), std::string::npos);
}

TEST(Health, TheProbeCommandExitsZeroOneOrTwo) {
  TempDir dir;
  const std::string path = dir.path() + "/health";
  // No file yet: 1.
  EXPECT_EQ(probe({"--health", path}), 1);
  HealthFile f(path);
  ASSERT_TRUE(f.start(health_clock_ns()));
  EXPECT_EQ(probe({"--health", path}), 0);             // live while starting
  EXPECT_EQ(probe({"--health", path, "--ready"}), 1);  // not ready yet
  f.set_ready(health_clock_ns());
  EXPECT_EQ(probe({"--ready", "--health=" + path}), 0);
  // A state written long ago: stuck, unless the limit is longer.
  HealthState old = f.state();
  old.loop_ns = health_clock_ns() - 120 * kS;
  {
    std::ofstream out(path);
    out << format_health(old);
  }
  EXPECT_EQ(probe({"--health", path}), 1);
  EXPECT_EQ(probe({"--health", path, "--max-loop-gap", "5m"}), 0);
  // Usage: 2.
  EXPECT_EQ(probe({"--health"}), 2);
  EXPECT_EQ(probe({"--health", path, "--max-loop-gap", "soon"}), 2);
  EXPECT_EQ(probe({"--health", path, "--pid", "1"}), 2);
  // Not a health file: 1.
  {
    std::ofstream out(path);
    out << "{}";
  }
  EXPECT_EQ(probe({"--health", path}), 1);
}

TEST(Health, ProbeWordsAreFoundAnywhere) {
  std::vector<std::string> words = {"mlprof-ebpf", "--ready", "--health", "/x"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_TRUE(is_health_probe(4, argv.data()));
  std::vector<std::string> agent = {"mlprof-ebpf", "--all", "--health-file", "/x"};
  std::vector<char*> argv2;
  for (std::string& w : agent) argv2.push_back(w.data());
  EXPECT_FALSE(is_health_probe(4, argv2.data()));
}

}  // namespace
}  // namespace mlprof::agent
