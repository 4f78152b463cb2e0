// The agent's reports over sessions built as the joiner builds them: spans
// from lanes, off-CPU intervals attributed by core attribute_kernel.

#include "agent/stall_report.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <sstream>
#include <string>
#include <vector>

#include "analysis/sched.h"
#include "profile_builder.h"
#include "views/merge.h"

namespace mlprof::agent {
namespace {

using test::call;
using test::make_lane;
using test::ret;

constexpr int64_t kMs = 1'000'000;

// One session of process `pid` (its main thread's tid is the pid):
//   predict [0, 100ms] { load [10, 60] { read [20, 50] }  compute [60, 90] }
// read() sleeps `blocked` ns from 21 ms and waits 1 ms in the run queue
// after its wakeup by thread `waker`; compute() is preempted for `preempt`
// ns at 70 ms. Times are relative to t0.
Profile session(uint32_t pid, uint64_t serial, int64_t t0, int64_t blocked, int64_t preempt,
                uint64_t waker = 4250) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t load = test::user_fn(p, "load");
  const uint32_t read = test::user_fn(p, "read", "app.io");
  const uint32_t compute = test::user_fn(p, "compute");
  p.lanes.push_back(make_lane(
      {call(t0, predict), call(t0 + 10 * kMs, load), call(t0 + 20 * kMs, read), ret(t0 + 50 * kMs),
       ret(t0 + 60 * kMs), call(t0 + 60 * kMs, compute), ret(t0 + 90 * kMs), ret(t0 + 100 * kMs)}));
  p.lanes[0].native_tid = pid;
  p.lanes[0].pid = pid;
  p.lanes[0].session = serial;
  p.captured_depth = 3;
  p.start_ns = t0;
  p.end_ns = t0 + 100 * kMs;
  p.meta = {{"pid", std::to_string(pid)}, {"session", std::to_string(serial)}, {"source", "ebpf"}};
  build_tree(p);
  KernelData& k = p.kernel;
  k.present = true;
  if (blocked > 0) {
    OffCpuInterval iv;
    iv.tid = pid;
    iv.pid = pid;
    iv.start_ns = t0 + 21 * kMs;
    iv.end_ns = iv.start_ns + blocked + kMs;
    iv.wake_ns = iv.start_ns + blocked;
    iv.blocked = true;
    iv.waker_tid = waker;
    iv.prev_state = 1;  // TASK_INTERRUPTIBLE
    iv.syscall = SYS_read;
    k.off_cpu.push_back(iv);
  }
  if (preempt > 0) {
    OffCpuInterval iv;
    iv.tid = pid;
    iv.pid = pid;
    iv.start_ns = t0 + 70 * kMs;
    iv.end_ns = iv.start_ns + preempt;
    iv.wake_ns = iv.start_ns;
    k.off_cpu.push_back(iv);
  }
  ThreadLifetime io;
  io.tid = waker;
  io.pid = pid;
  io.name = "io-worker";
  k.threads.push_back(io);
  attribute_kernel(p);
  return p;
}

// The line of `text` that starts with `prefix` ("" if none).
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix)) return line;
  }
  return "";
}

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(SpanStalls, SelfFiguresNameTheSpanWhereTheStallHappens) {
  const Profile p = session(100, 1, 0, 20 * kMs, 5 * kMs);
  const std::vector<Stall> st = span_stalls(p, {});
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(p.display_name(p.spans[static_cast<size_t>(st[0].span)]), "read");
  EXPECT_EQ(st[0].off_cpu_ns, 21 * kMs);
  EXPECT_EQ(st[0].blocked_ns, 20 * kMs);
  EXPECT_EQ(st[0].runq_ns, 1 * kMs);
  EXPECT_EQ(st[0].wall_ns, 30 * kMs);
  EXPECT_EQ(p.display_name(p.spans[static_cast<size_t>(st[1].span)]), "compute");
  EXPECT_EQ(st[1].off_cpu_ns, 5 * kMs);
  EXPECT_EQ(st[1].runq_ns, 5 * kMs);
}

TEST(SpanStalls, AtTheDepthCutASpanStandsForItsHiddenCallees) {
  const Profile p = session(100, 1, 0, 20 * kMs, 5 * kMs);
  StallReportOptions depth1;
  depth1.depth = 1;
  const std::vector<Stall> st = span_stalls(p, depth1);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(p.display_name(p.spans[static_cast<size_t>(st[0].span)]),
            "load");  // read is hidden in it
  EXPECT_EQ(st[0].off_cpu_ns, 21 * kMs);
  EXPECT_EQ(st[0].wall_ns, 50 * kMs);
  EXPECT_EQ(p.display_name(p.spans[static_cast<size_t>(st[1].span)]),
            "compute");  // a leaf: its own
  StallReportOptions depth0;
  depth0.depth = 0;
  const std::vector<Stall> root = span_stalls(p, depth0);
  ASSERT_EQ(root.size(), 1u);
  EXPECT_EQ(root[0].span, 0);
  EXPECT_EQ(root[0].off_cpu_ns, 26 * kMs);
  StallReportOptions long_only;
  long_only.min_wall_ns = 31 * kMs;  // read (30 ms) and compute (30 ms) are too short
  EXPECT_TRUE(span_stalls(p, long_only).empty());
}

TEST(SpanStalls, InProcessProfilesHaveNone) {
  Profile p = session(100, 1, 0, 20 * kMs, 5 * kMs);
  p.kernel = KernelData{};
  EXPECT_TRUE(span_stalls(p, {}).empty());
}

TEST(StallReport, RanksCallPathsByTheirOffCpuTimeOverSessions) {
  // Three sessions: read sleeps 20, 10 and 27 ms; compute is preempted 5 ms
  // each time. Then another process whose compute is preempted 20 ms in
  // each of three sessions: the same call path, now with more off-CPU time.
  std::vector<Profile> all;
  all.push_back(session(100, 1, 0, 20 * kMs, 5 * kMs));
  all.push_back(session(100, 2, 200 * kMs, 10 * kMs, 5 * kMs));
  all.push_back(session(100, 3, 400 * kMs, 27 * kMs, 5 * kMs));
  const std::string text = stall_report(all);
  SCOPED_TRACE(text);
  // read: 3 calls, mean wall 30 ms, mean off-CPU 20 ms (19 blocked + 1 runq), 66.7%.
  const std::vector<std::string> read = cells(line_starting(text, "predict/load/read"));
  ASSERT_EQ(read.size(), 14u);
  EXPECT_EQ(read[1], "3");
  EXPECT_EQ(read[2], "30.00ms");
  EXPECT_EQ(read[3], "20.00ms");
  EXPECT_EQ(read[4], "66.7%");
  EXPECT_EQ(read[5], "19.00ms");
  EXPECT_EQ(read[6], "1.00ms");
  EXPECT_EQ(read[7], "-");                                                // it started no threads
  EXPECT_EQ(read[8] + " " + read[9] + " " + read[10], "read S 19.00ms");  // waited in
  EXPECT_EQ(read[11] + " " + read[12] + " " + read[13], "io-worker (tid 4250)");
  const std::vector<std::string> compute = cells(line_starting(text, "predict/compute"));
  ASSERT_EQ(compute.size(), 10u);
  EXPECT_EQ(compute[3], "5.00ms");
  EXPECT_EQ(compute[5], "0.00us");  // preempted: no blocked time
  EXPECT_EQ(compute[7], "-");       // nobody woke it
  // read's row comes first: more off-CPU in total.
  EXPECT_LT(text.find("predict/load/read"), text.find("predict/compute"));
  // Spans with no off-CPU time of their own are not stalls.
  EXPECT_EQ(line_starting(text, "predict "), "");
  EXPECT_EQ(line_starting(text, "predict/load "), "");

  for (uint64_t s = 1; s <= 3; ++s)
    all.push_back(session(200, s, (500 + 200 * static_cast<int64_t>(s)) * kMs, 0, 20 * kMs));
  const std::string more = stall_report(all);
  EXPECT_LT(more.find("predict/compute"), more.find("predict/load/read")) << more;
  StallReportOptions one;
  one.top = 1;
  const std::string top1 = stall_report(all, one);
  EXPECT_NE(top1.find("predict/compute"), std::string::npos);
  EXPECT_EQ(top1.find("predict/load/read"), std::string::npos) << top1;
}

TEST(StallReport, AWakerIsNamedOnceOverSessionsThoughItsTidChanges) {
  // A worker started per call wakes read(): another tid each session, one name.
  std::vector<Profile> all;
  all.push_back(session(100, 1, 0, 20 * kMs, 0, 4250));
  all.push_back(session(100, 2, 200 * kMs, 20 * kMs, 0, 4251));
  const std::string text = stall_report(all);
  const std::vector<std::string> read = cells(line_starting(text, "predict/load/read"));
  ASSERT_FALSE(read.empty()) << text;
  EXPECT_EQ(read.back(), "io-worker") << text;
  // An unnamed waker is named by its tid.
  all[1].kernel.threads.clear();
  all[0].kernel.threads.clear();
  const std::string unnamed = stall_report(all);
  const std::vector<std::string> row = cells(line_starting(unnamed, "predict/load/read"));
  ASSERT_GE(row.size(), 2u) << unnamed;
  EXPECT_EQ(row[row.size() - 2] + " " + row.back(), "tid 4250") << unnamed;
}

TEST(StallReport, SaysWhyItIsEmpty) {
  std::vector<Profile> none;
  none.push_back(session(100, 1, 0, 0, 0));
  EXPECT_EQ(stall_report(none), "scheduler stalls: none (no span spent time off the CPU)\n");
  std::vector<Profile> in_process;
  in_process.push_back(session(100, 1, 0, 20 * kMs, 0));
  in_process[0].kernel = KernelData{};
  EXPECT_EQ(stall_report(in_process), "scheduler stalls: no kernel figures in these sessions\n");
}

TEST(CaptureText, PerCallPathStatisticsThenTheStalls) {
  std::vector<Profile> all;
  all.push_back(session(100, 1, 0, 20 * kMs, 5 * kMs));
  all.push_back(session(100, 2, 200 * kMs, 10 * kMs, 5 * kMs));
  all.push_back(session(101, 1, 400 * kMs, 27 * kMs, 5 * kMs));
  all[2].meta["truncated"] = "process exited";
  all[2].kernel.lost_events = 3;
  const std::string text = capture_text(all);
  SCOPED_TRACE(text);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "3 sessions of 2 processes (pids 100, 101) over 500.00ms, 1 truncated, 3 events lost");
  EXPECT_EQ(cells(line_starting(text, "call path")),
            (std::vector<std::string>{"call", "path", "calls", "mean", "p50", "p99", "on-CPU",
                                      "off-CPU", "runq"}));
  // predict: 100 ms each; off-CPU 26, 16, 33 ms -> mean 25 ms; on-CPU 75 ms.
  const std::vector<std::string> predict = cells(line_starting(text, "predict "));
  ASSERT_EQ(predict.size(), 8u);
  EXPECT_EQ(predict[1], "3");
  EXPECT_EQ(predict[2], "100.00ms");
  EXPECT_EQ(predict[5], "75.00ms");
  EXPECT_EQ(predict[6], "25.00ms");
  EXPECT_EQ(predict[7], "6.00ms");  // read's 1 ms after its wakeup, compute's 5 ms preempted
  // Children indented under their parents, in first-seen order.
  const std::string tree = text.substr(text.find("predict "));
  EXPECT_LT(tree.find("  load "), tree.find("    read "));
  EXPECT_LT(tree.find("    read "), tree.find("  compute "));
  const std::vector<std::string> read = cells(line_starting(text, "    read "));
  ASSERT_EQ(read.size(), 8u);
  EXPECT_EQ(read[2], "30.00ms");
  EXPECT_EQ(read[5], "10.00ms");
  EXPECT_EQ(read[6], "20.00ms");
  EXPECT_EQ(read[7], "1.00ms");
  // Then the stall report.
  EXPECT_NE(text.find("\nscheduler stalls: "), std::string::npos);
  EXPECT_NE(line_starting(text, "predict/load/read"), "");
}

TEST(CaptureText, OpenCallsAreCountedApartFromSamples) {
  std::vector<Profile> all;
  all.push_back(session(100, 1, 0, 20 * kMs, 5 * kMs));
  // A session cut while read() ran: predict, load and read open at 40 ms.
  Profile cut = session(100, 2, 200 * kMs, 10 * kMs, 0);
  for (Lane& lane : cut.lanes) lane.events.resize(3);
  cut.end_ns = 240 * kMs;
  cut.lanes[0].truncated = true;
  build_tree(cut);
  attribute_kernel(cut);
  all.push_back(std::move(cut));
  const std::string text = capture_text(all);
  SCOPED_TRACE(text);
  const std::vector<std::string> read = cells(line_starting(text, "    read "));
  ASSERT_GE(read.size(), 4u);
  EXPECT_EQ(read[1] + " " + read[2] + " " + read[3], "1 (+1 open)");
  EXPECT_EQ(read[4], "30.00ms");  // the open call is not a sample
  EXPECT_EQ(read[8], "21.00ms");  // nor in the means of the kernel figures
}

TEST(CaptureText, TheDepthHidesDeeperPaths) {
  std::vector<Profile> all;
  all.push_back(session(100, 1, 0, 20 * kMs, 5 * kMs));
  StallReportOptions opts;
  opts.depth = 1;
  const std::string text = capture_text(all, opts);
  SCOPED_TRACE(text);
  EXPECT_EQ(text.find("/read"), std::string::npos);
  EXPECT_EQ(line_starting(text, "    read"), "");
  EXPECT_NE(line_starting(text, "  load "), "");
  // load stands for read in the stalls.
  const std::vector<std::string> load = cells(line_starting(text, "predict/load "));
  ASSERT_GE(load.size(), 4u);
  EXPECT_EQ(load[3], "21.00ms");
}

TEST(CaptureText, PathsPastTheCapAreCountedNotShown) {
  CaptureStallReport r({}, 2);
  r.add(session(100, 1, 0, 20 * kMs, 5 * kMs));
  const std::string text = r.summary_text();
  SCOPED_TRACE(text);
  EXPECT_NE(line_starting(text, "  load "), "");
  EXPECT_EQ(text.find("compute"), std::string::npos);
  EXPECT_NE(text.find("(2 calls not shown: past the 2 call paths tracked)"), std::string::npos);
  EXPECT_EQ(r.sessions(), 1u);
  EXPECT_EQ(CaptureStallReport().summary_text(), "no sessions captured\n");
}

TEST(SessionText, HeaderTreeAndStalls) {
  Profile p = session(4242, 17, 0, 20 * kMs, 5 * kMs);
  p.meta["truncated"] = "capture ended";
  p.kernel.lost_events = 2;
  const std::string text = session_text(p);
  SCOPED_TRACE(text);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "pid 4242 session 17: 100.00ms, 4 spans, truncated: capture ended, 2 events lost");
  EXPECT_NE(line_starting(text, "predict: 100.00ms"), "");
  EXPECT_NE(line_starting(text, "    read: 30.00ms"), "");
  EXPECT_NE(text.find("\nstalls:\n"), std::string::npos);
  EXPECT_EQ(line_starting(text, "  predict/load/read:"),
            "  predict/load/read: off-CPU 21.00ms (70.0% of 30.00ms): blocked 20.00ms, runq "
            "1.00ms; waited in read S 20.00ms; woken by io-worker (tid 4250)");
  EXPECT_EQ(line_starting(text, "  predict/compute:"),
            "  predict/compute: off-CPU 5.00ms (16.7% of 30.00ms): blocked 0.00us, runq 5.00ms");
  StallReportOptions shallow;
  shallow.depth = 1;
  shallow.top = 1;
  const std::string top = session_text(p, shallow);
  EXPECT_EQ(line_starting(top, "    read"), "") << top;
  EXPECT_NE(line_starting(top, "  predict/load: off-CPU 21.00ms"), "") << top;
  EXPECT_EQ(line_starting(top, "  predict/compute:"), "") << top;
}

TEST(SessionText, NoStallsAndNoKernelData) {
  Profile calm = session(1, 1, 0, 0, 0);
  EXPECT_NE(session_text(calm).find("\nstalls: none\n"), std::string::npos);
  calm.kernel = KernelData{};
  EXPECT_EQ(session_text(calm).find("stalls"), std::string::npos);
}

TEST(CombineSessions, OneProfileKeepsEachLanesProcessAndSession) {
  std::vector<Profile> all;
  all.push_back(session(100, 1, 0, 20 * kMs, 5 * kMs));
  all.push_back(session(200, 4, 300 * kMs, 10 * kMs, 0));
  const Profile one = combine_sessions(all);
  ASSERT_EQ(one.lanes.size(), 2u);
  EXPECT_EQ(one.lanes[0].pid, 100u);
  EXPECT_EQ(one.lanes[1].pid, 200u);
  EXPECT_EQ(one.lanes[1].session, 4u);
  EXPECT_EQ(one.spans.size(), 8u);
  EXPECT_EQ(one.roots.size(), 2u);
  EXPECT_EQ(one.start_ns, 0);
  EXPECT_EQ(one.end_ns, 400 * kMs);
  EXPECT_TRUE(one.kernel.present);
  EXPECT_EQ(one.kernel.off_cpu.size(), 3u);
  ASSERT_EQ(one.kernel.spans.size(), 8u);
  EXPECT_EQ(one.kernel.spans[4].off_cpu_ns, 11 * kMs);  // the second predict
  EXPECT_EQ(one.meta.at("source"), "ebpf");
  EXPECT_EQ(one.meta.count("pid"), 0u);  // the sessions' pids differ
  EXPECT_EQ(one.captured_depth, 3);
}

TEST(CombineSessions, NoSessionsSeedARunningCombination) {
  Profile all = combine_sessions({});
  EXPECT_TRUE(all.spans.empty());
  EXPECT_TRUE(all.meta.empty());
  Profile s = session(100, 1, 0, 20 * kMs, 5 * kMs);
  s.captured_depth = 1;
  append_profile(all, s);
  // The first session's meta and depth as they are, not merged with a default.
  EXPECT_EQ(all.meta.at("pid"), "100");
  EXPECT_EQ(all.meta.at("session"), "1");
  EXPECT_EQ(all.captured_depth, 1);
  EXPECT_EQ(all.spans.size(), 4u);
}

}  // namespace
}  // namespace mlprof::agent
