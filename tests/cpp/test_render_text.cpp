#include "render/render_text.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernel_fixture.h"
#include "profile_builder.h"
#include "views/merge.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

TEST(FormatDuration, MillisecondsDownToOneHundredthThenMicroseconds) {
  EXPECT_EQ(format_duration(48'120'000), "48.12ms");
  EXPECT_EQ(format_duration(30'000), "0.03ms");
  EXPECT_EQ(format_duration(10'000), "0.01ms");
  EXPECT_EQ(format_duration(4'200), "4.20us");
  EXPECT_EQ(format_duration(0), "0.00us");
  EXPECT_EQ(format_duration(2'000'000'000), "2000.00ms");
}

// The example of docs/design/capture.md's "The text tree", captured at depth 3.
class SpecExampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fn = [&](const char* name) { return test::user_fn(p, name); };
    const uint32_t predict = fn("predict"), pre = fn("preprocess"), enc = fn("tokenizer.encode"),
                   bpe = fn("_byte_pair_encode"), conv = fn("_convert_tokens"),
                   stack = fn("numpy.stack"), run = fn("_run_model"), lin = fn("Linear.forward"),
                   post = fn("postprocess");
    p.captured_depth = 3;
    p.end_ns = 50'000'000;
    // Tabular on purpose: one line per step of the call tree.
    // clang-format off
    p.lanes.push_back(make_lane({
        call(0, predict),
        call(100'000, pre),
        call(200'000, enc),
        call(210'000, bpe), ret(1'810'000),
        call(1'820'000, conv), ret(2'070'000),
        ret(2'070'000),
        call(2'100'000, stack), ret(2'220'000),
        ret(2'410'000),
        call(2'500'000, run),
        call(2'600'000, lin), ret(24'700'000),
        call(24'700'000, lin), ret(47'000'000),
        ret(47'000'000),
        call(47'050'000, post), ret(47'080'000),
        ret(48'120'000),
    }));
    // clang-format on
    build_tree(p);
  }
  Profile p;
};

TEST_F(SpecExampleTest, RenderedAtDepthOne) {
  ViewOptions opts;
  opts.depth = 1;
  EXPECT_EQ(render_text(p, opts),
            "predict: 48.12ms\n"
            "  preprocess: 2.31ms\n"
            "  _run_model: 44.50ms\n"
            "  postprocess: 0.03ms\n");
}

TEST_F(SpecExampleTest, RenderedAtDepthTwo) {
  ViewOptions opts;
  opts.depth = 2;
  EXPECT_EQ(render_text(p, opts),
            "predict: 48.12ms\n"
            "  preprocess: 2.31ms\n"
            "    tokenizer.encode: 1.87ms\n"
            "    numpy.stack: 0.12ms\n"
            "  _run_model: 44.50ms\n"
            "    Linear.forward: 22.10ms\n"
            "    Linear.forward: 22.30ms\n"
            "  postprocess: 0.03ms\n");
}

TEST_F(SpecExampleTest, RenderedInFull) {
  EXPECT_EQ(render_text(p, {}),
            "predict: 48.12ms\n"
            "  preprocess: 2.31ms\n"
            "    tokenizer.encode: 1.87ms\n"
            "      _byte_pair_encode: 1.60ms\n"
            "      _convert_tokens: 0.25ms\n"
            "    numpy.stack: 0.12ms\n"
            "  _run_model: 44.50ms\n"
            "    Linear.forward: 22.10ms\n"
            "    Linear.forward: 22.30ms\n"
            "  postprocess: 0.03ms\n");
}

TEST_F(SpecExampleTest, DeeperThanCapturedAddsANote) {
  p.captured_depth = 2;  // pretend the ceiling was 2 (nothing deeper recorded)
  ViewOptions opts;
  opts.depth = 4;
  const std::string text = render_text(p, opts);
  EXPECT_TRUE(
      text.ends_with("  postprocess: 0.03ms\n"
                     "(captured at depth 2; depth 4 was requested, showing depth 2)\n"))
      << text;
}

TEST(RenderText, MarkersForExceptionsOpenSuspendedGeneratorsAndGroups) {
  Profile p;
  const uint32_t main = test::user_fn(p, "main"), fail = test::user_fn(p, "fail"),
                 gen = test::user_fn(p, "gen"), gen2 = test::user_fn(p, "gen2"),
                 work = test::user_fn(p, "work"), asarray = test::lib_fn(p, "asarray", "numpy");
  p.end_ns = 1'000'000;
  // Tabular on purpose: one line per step of the call tree.
  // clang-format off
  p.lanes.push_back(make_lane({
      call(0, main),                                  // 0
      call(1'000, fail), ret(5'000, kEvException),    // 1, 2
      call(10'000, gen),                              // 3
      suspend(20'000, 3), resume(50'000, 3),          // 4, 5
      suspend(60'000, 3), resume(70'000, 3),          // 6, 7
      ret(100'000),                                   // 8
      call(110'000, asarray), ret(120'000),           // 9, 10
      call(130'000, asarray), ret(150'000),           // 11, 12
      call(160'000, asarray), ret(170'000),           // 13, 14
      call(200'000, gen2), suspend(230'000, 15),      // 15, 16
      call(300'000, work),                            // 17
  }));
  // clang-format on
  build_tree(p);
  ViewOptions opts;
  opts.collapse_frameworks = true;
  EXPECT_EQ(render_text(p, opts),
            "main: 1.00ms [open]\n"
            "  fail: 4.00us\n"  // main went on: it caught the exception
            "  gen: 0.05ms (generator, 2 resumes, 0.09ms wall)\n"
            "  [numpy]: 0.04ms [x3]\n"
            "  gen2: 0.03ms [suspended] (generator, 0 resumes, 0.80ms wall)\n"
            "  work: 0.70ms [open]\n");
  opts.collapse_frameworks = false;
  EXPECT_NE(render_text(p, opts).find("  asarray: 0.02ms\n"), std::string::npos);
}

TEST(RenderText, OneResumeIsSingular) {
  Profile p;
  const uint32_t gen = test::user_fn(p, "gen");
  p.end_ns = 100'000;
  p.lanes.push_back(make_lane({call(0, gen), suspend(20'000, 0), resume(30'000, 0), ret(50'000)}));
  build_tree(p);
  EXPECT_EQ(render_text(p, {}), "gen: 0.04ms (generator, 1 resume, 0.05ms wall)\n");
}

TEST(RenderText, CollapsedSpecExample) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), pre = test::user_fn(p, "preprocess"),
                 validate = test::user_fn(p, "validate_schema"),
                 normalize = test::user_fn(p, "normalize"),
                 scale = test::lib_fn(p, "StandardScaler.transform", "sklearn.preprocessing._data"),
                 run = test::user_fn(p, "_run_model"),
                 fwd = test::lib_fn(p, "Module._call_impl", "torch.nn.modules.module"),
                 post = test::user_fn(p, "postprocess"),
                 npfn = test::lib_fn(p, "argmax", "numpy.core.fromnumeric");
  p.end_ns = 50'000'000;
  // Tabular on purpose: one line per step of the call tree.
  // clang-format off
  p.lanes.push_back(make_lane({
      call(0, predict),
      call(0, pre),
      call(0, validate), ret(450'000),
      call(450'000, normalize), ret(1'570'000),
      call(1'570'000, scale), ret(2'310'000),
      ret(2'310'000),
      call(2'310'000, run), call(2'320'000, fwd), ret(46'800'000), ret(46'810'000),
      call(46'810'000, post), call(46'815'000, npfn), ret(46'835'000), ret(46'840'000),
      ret(48'120'000),
  }));
  // clang-format on
  build_tree(p);
  ViewOptions opts;
  opts.collapse_frameworks = true;
  EXPECT_EQ(render_text(p, opts),
            "predict: 48.12ms\n"
            "  preprocess: 2.31ms\n"
            "    validate_schema: 0.45ms\n"
            "    normalize: 1.12ms\n"
            "    [sklearn.preprocessing]: 0.74ms\n"
            "  _run_model: 44.50ms\n"
            "    [torch.nn]: 44.48ms\n"
            "  postprocess: 0.03ms\n"
            "    [numpy.core]: 0.02ms\n");
}

TEST(RenderText, LaneHeadersWhenSeveralLanesHaveRoots) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), gather = test::user_fn(p, "gather"),
                 fetch = test::user_fn(p, "fetch"), load = test::user_fn(p, "load"),
                 other = test::user_fn(p, "other_task");
  p.end_ns = 10'000'000;
  p.lanes.push_back(
      make_lane({call(0, predict), call(100'000, gather), ret(5'000'000), ret(6'000'000)}));
  // A task created inside gather: it renders under it, with no header.
  p.lanes.push_back(make_lane({call(200'000, fetch), ret(1'200'000)}, "MainThread", 1, 0, 1));
  Lane worker = make_lane({call(50'000, load), ret(3'050'000)}, "Worker-1");
  worker.thread_id = 7;
  worker.dropped = 12;
  p.lanes.push_back(std::move(worker));
  // A task lane that was not created under a span: its own header.
  p.lanes.push_back(make_lane({call(7'000'000, other), ret(7'500'000)}, "MainThread", 2));
  build_tree(p);
  EXPECT_EQ(render_text(p, {}),
            "thread MainThread\n"
            "predict: 6.00ms\n"
            "  gather: 4.90ms\n"
            "    fetch: 1.00ms\n"
            "thread Worker-1\n"
            "load: 3.00ms\n"
            "thread MainThread, task 2\n"
            "other_task: 0.50ms\n"
            "(12 calls dropped in thread Worker-1: the buffer of max_events was full)\n");
}

TEST(RenderText, NestedLanesAloneGetNoHeader) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), fetch = test::user_fn(p, "fetch");
  p.end_ns = 10'000'000;
  Lane main = make_lane({call(0, predict), ret(6'000'000)});
  main.dropped = 3;
  p.lanes.push_back(std::move(main));
  p.lanes.push_back(make_lane({call(200'000, fetch), ret(1'200'000)}, "MainThread", 1, 0, 0));
  build_tree(p);
  EXPECT_EQ(render_text(p, {}),
            "predict: 6.00ms\n"
            "  fetch: 1.00ms\n"
            "(3 calls dropped in thread MainThread: the buffer of max_events was full)\n");
}

TEST(RenderText, EmptyProfile) {
  Profile p;
  p.lanes.push_back(make_lane({}));
  build_tree(p);
  EXPECT_EQ(render_text(p, {}), "(no spans captured)\n");
}

TEST(RenderText, UnnamedThreadIsNamedByItsId) {
  Lane lane = make_lane({}, "");
  lane.thread_id = 99;
  lane.task = 3;
  EXPECT_EQ(lane_title(lane), "thread 99, task 3");
}

// Re-rendering at depth k gives the full text's lines indented at most 2k.
TEST(RenderText, ReRenderAtEveryDepthPrunesTheFullText) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    Profile p = test::random_profile(seed, 500, 8, /*generators=*/true);
    p.captured_depth = -1;
    auto lines = [](const std::string& text) {
      std::vector<std::string> out;
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) out.push_back(line);
      return out;
    };
    const std::vector<std::string> full = lines(render_text(p, {}));
    const int deepest = p.max_depth();
    for (int k = 0; k <= deepest; ++k) {
      std::vector<std::string> expected;
      for (const std::string& line : full) {
        const size_t indent = line.find_first_not_of(' ');
        if (indent <= 2 * static_cast<size_t>(k)) expected.push_back(line);
      }
      ViewOptions opts;
      opts.depth = k;
      ASSERT_EQ(lines(render_text(p, opts)), expected) << "seed " << seed << " k " << k;
    }
  }
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

IOSummary array_summary(const char* type, std::vector<int64_t> shape, const char* dtype,
                        int64_t bytes) {
  IOSummary s;
  s.type_name = type;
  s.has_shape = true;
  s.shape = std::move(shape);
  s.dtype = dtype;
  s.size_bytes = bytes;
  return s;
}

// The I/O display (docs/design/capture.md, "The text tree"), same capture.
TEST_F(SpecExampleTest, IoDisplayAtDepthOne) {
  const IOSummary frame =
      array_summary("pandas.core.frame.DataFrame", {1000, 50}, "float64", 409600);
  const IOSummary labels = array_summary("numpy.ndarray", {1000}, "int64", 8000);
  const IOSummary features = array_summary("numpy.ndarray", {1000, 128}, "float32", 512000);
  const IOSummary logits = array_summary("numpy.ndarray", {1000, 10}, "float32", 40000);
  // kCall indices in the lane: predict 0, preprocess 1, _run_model 11, postprocess 17.
  p.lanes[0].io = {
      {0, IORole::kArgument, "df", frame},       {0, IORole::kReturn, "", labels},
      {1, IORole::kArgument, "df", frame},       {1, IORole::kReturn, "", features},
      {11, IORole::kArgument, "x", features},    {11, IORole::kReturn, "", logits},
      {17, IORole::kArgument, "logits", logits}, {17, IORole::kReturn, "", labels},
  };
  build_tree(p);
  ViewOptions o;
  o.depth = 1;
  o.show_io = true;
  EXPECT_EQ(render_text(p, o),
            "predict: 48.12ms\n"
            "  in:  (DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)\n"
            "  out: (ndarray, shape=(1000,), dtype=int64, 7.8KB)\n"
            "\n"
            "  preprocess: 2.31ms\n"
            "    in:  (DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)\n"
            "    out: (ndarray, shape=(1000, 128), dtype=float32, 500.0KB)\n"
            "\n"
            "  _run_model: 44.50ms\n"
            "    in:  (ndarray, shape=(1000, 128), dtype=float32, 500.0KB)\n"
            "    out: (ndarray, shape=(1000, 10), dtype=float32, 39.1KB)\n"
            "\n"
            "  postprocess: 0.03ms\n"
            "    in:  (ndarray, shape=(1000, 10), dtype=float32, 39.1KB)\n"
            "    out: (ndarray, shape=(1000,), dtype=int64, 7.8KB)\n");
  // Without show_io the same capture renders the plain tree.
  o.show_io = false;
  EXPECT_EQ(
      render_text(p, o),
      "predict: 48.12ms\n  preprocess: 2.31ms\n  _run_model: 44.50ms\n  postprocess: 0.03ms\n");
}

TEST_F(SpecExampleTest, SeveralArgumentsAreNamedAndSpansWithoutIoGetNoBlankLine) {
  IOSummary n;
  n.type_name = "int";
  n.repr_short = "3";
  IOSummary s;
  s.type_name = "str";
  s.length = 2;
  s.repr_short = "'ab'";
  p.lanes[0].io = {{1, IORole::kArgument, "k", n}, {1, IORole::kArgument, "mode", s}};
  build_tree(p);
  ViewOptions o;
  o.depth = 1;
  o.show_io = true;
  EXPECT_EQ(render_text(p, o),
            "predict: 48.12ms\n"
            "  preprocess: 2.31ms\n"
            "    in:  k=(int, 3)\n"
            "    in:  mode=(str, len=2, 'ab')\n"
            "\n"
            "  _run_model: 44.50ms\n"
            "  postprocess: 0.03ms\n");
}

TEST(RenderTextKernel, EachSpanShowsOnCpuOffCpuAndRunQueue) {
  const Profile p = test::kernel_profile_fixture();
  EXPECT_EQ(render_text(p, {}),
            "predict: 0.02ms [cpu 0.02ms, off 1.30us: blocked 0.70us, runq 0.60us; "
            "threads off 1.70us; woken by 5000 (Worker)]\n"
            "  preprocess: 1.50us [cpu 0.70us, off 0.80us: blocked 0.70us, runq 0.10us; "
            "woken by 5000 (Worker)]\n"
            "  produce: 1.50us (generator, 2 resumes, 5.00us wall) [cpu 2.00us, off 0.00us]\n"
            "  consume: 2.00us [cpu 2.00us, off 0.00us]\n"
            "  my label: 0.50us [cpu 0.50us, off 0.00us; threads off 0.10us]\n"
            "  fetch: 3.00us [cpu 3.00us, off 0.00us]\n"
            "  work: 3.50us [cpu 1.90us, off 1.60us: blocked 1.50us, runq 0.10us; "
            "woken by 4242 (MainThread)]\n"
            "(3 kernel events lost: the off-CPU figures are low)\n");
}

TEST(RenderTextKernel, FormatKernelLeavesOutWhatIsNotKnown) {
  SpanKernel k;
  k.on_cpu_ns = 2'100'000;
  k.off_cpu_ns = 10'200'000;
  k.blocked_ns = 10'100'000;
  k.runq_ns = 100'000;
  k.own_off_cpu_ns = 10'200'000;
  k.own_blocked_ns = 10'100'000;
  k.own_runq_ns = 100'000;
  EXPECT_EQ(format_kernel(k, ""), "[cpu 2.10ms, off 10.20ms: blocked 10.10ms, runq 0.10ms]");
  k.top_waker_tid = 4243;
  EXPECT_EQ(format_kernel(k, ""), "[cpu 2.10ms, off 10.20ms: blocked 10.10ms, runq 0.10ms]");
  k.top_waker_ns = 1;
  EXPECT_EQ(format_kernel(k, "Worker"),
            "[cpu 2.10ms, off 10.20ms: blocked 10.10ms, runq 0.10ms; woken by 4243 (Worker)]");
  // The name the waker had at the wakeup wins over the one it started with.
  k.top_waker_name = "renamed";
  EXPECT_EQ(format_kernel(k, "Worker"),
            "[cpu 2.10ms, off 10.20ms: blocked 10.10ms, runq 0.10ms; woken by 4243 (renamed)]");
  EXPECT_EQ(format_kernel(SpanKernel{}, "x"), "[cpu 0.00us, off 0.00us]");
}

TEST(RenderTextKernel, FormatKernelShowsStartedThreadsWaitsAndTimerWakeupsApart) {
  SpanKernel k;
  k.on_cpu_ns = 1'000'000;
  k.own_off_cpu_ns = 5'000'000;
  k.own_blocked_ns = 5'000'000;
  k.off_cpu_ns = 15'000'000;  // two started threads slept 5 ms each
  k.waits = {{202, 'S', 4'000'000, 1}, {-1, 'D', 600'000, 1}, {0, 'D', 400'000, 2}};
  k.top_waker_kind = WakerKind::kTimer;
  k.top_waker_ns = 4'000'000;
  EXPECT_EQ(format_kernel(k, "ignored"),
            "[cpu 1.00ms, off 5.00ms: blocked 5.00ms, runq 0.00us; threads off 10.00ms; in " +
                syscall_name(202) + " S 4.00ms, " + syscall_name(0) + " D 0.40ms; woken by timer]");
}

TEST(RenderTextKernel, CollapsedNodesAndUnattributedProfilesShowNoFigures) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t transform = test::lib_fn(p, "transform", "sklearn.preprocessing._data");
  const uint32_t fit = test::lib_fn(p, "fit", "sklearn.preprocessing._data");
  p.end_ns = 100'000;
  p.lanes.push_back(make_lane({call(0, predict), call(10'000, transform), ret(20'000),
                               call(20'000, fit), ret(30'000), ret(100'000)}));
  build_tree(p);
  p.kernel.present = true;
  p.kernel.off_cpu = {test::fixture_interval(4242, 12'000, 12'000, 13'000, false, 0)};
  p.kernel.off_cpu[0].pid = 0;
  attribute_kernel(p);
  ViewOptions opts;
  opts.collapse_frameworks = true;
  // Two spans merged into one node: no single span's figures to show.
  EXPECT_EQ(render_text(p, opts),
            "predict: 0.10ms [cpu 0.10ms, off 1.00us: blocked 0.00us, runq 1.00us]\n"
            "  [sklearn.preprocessing]: 0.02ms [x2]\n");
  // The kernel's figures gone: no columns, no guesses; what the spans
  // waited (taken from them when they were attributed) stays.
  p.kernel.spans.clear();
  EXPECT_EQ(render_text(p, {}),
            "predict: 0.10ms, waiting 1.00us\n"
            "  transform: 0.01ms, waiting 1.00us\n"
            "  fit: 0.01ms\n");
}

TEST(RenderTextKernel, LanesOfSeveralProcessesAndSessionsAreTitledWithThem) {
  Lane lane;
  lane.thread_name = "MainThread";
  EXPECT_EQ(lane_title(lane), "thread MainThread");
  lane.pid = 4242;
  EXPECT_EQ(lane_title(lane), "thread MainThread, pid 4242");
  lane.session = 3;
  lane.task = 1;
  EXPECT_EQ(lane_title(lane), "thread MainThread, task 1, pid 4242, session 3");

  Profile a = test::kernel_profile_fixture();
  Profile b = test::kernel_profile_fixture();
  a.meta["session"] = "1";
  b.meta["session"] = "2";
  Profile m;
  append_profile(m, a);
  append_profile(m, b);
  const std::string text = render_text(m, {});
  EXPECT_EQ(text.find("thread MainThread, pid 777, session 1\npredict: 0.02ms [cpu"), 0u) << text;
  EXPECT_NE(text.find("\nthread MainThread, pid 777, session 2\npredict: 0.02ms [cpu"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(6 kernel events lost"), std::string::npos);
}

}  // namespace
}  // namespace mlprof
