#include "views/view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::ret;

// (name, view depth, duration, merged) of each node, in pre-order.
using NodeRow = std::tuple<std::string, uint32_t, int64_t, uint32_t>;

std::vector<NodeRow> rows(const Profile& p, const View& v) {
  std::vector<NodeRow> out;
  for (const ViewNode& n : v.nodes)
    out.emplace_back(node_name(p, n), n.depth, n.duration_ns, n.merged);
  return out;
}

// Names through the view's child links, "name(depth)" in pre-order.
void walk(const Profile& p, const View& v, int32_t idx, std::vector<std::string>& out) {
  out.push_back(node_name(p, v.nodes[idx]) + "(" + std::to_string(v.nodes[idx].depth) + ")");
  for (const int32_t c : v.nodes[idx].children) walk(p, v, c, out);
}
std::vector<std::string> shape(const Profile& p, const View& v) {
  std::vector<std::string> out;
  for (const int32_t r : v.roots) walk(p, v, r, out);
  return out;
}

// predict -> preprocess -> encode -> tokenize, depth 3.
class ViewDepthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t predict = test::user_fn(p, "predict");
    const uint32_t pre = test::user_fn(p, "preprocess");
    const uint32_t enc = test::user_fn(p, "encode");
    const uint32_t tok = test::user_fn(p, "tokenize");
    const uint32_t post = test::user_fn(p, "postprocess");
    p.end_ns = 1000;
    p.captured_depth = 3;
    p.lanes.push_back(make_lane({call(0, predict), call(10, pre), call(20, enc), call(30, tok),
                                 ret(40), ret(50), ret(60), call(70, post), ret(80), ret(90)}));
    build_tree(p);
  }
  Profile p;
};

TEST_F(ViewDepthTest, FullViewShowsEverythingCaptured) {
  const View v = make_view(p, {});
  EXPECT_EQ(shape(p, v), (std::vector<std::string>{"predict(0)", "preprocess(1)", "encode(2)",
                                                   "tokenize(3)", "postprocess(1)"}));
  EXPECT_EQ(v.requested_depth, -1);
  EXPECT_EQ(v.effective_depth, 3);
  EXPECT_FALSE(v.depth_clamped);
  ASSERT_EQ(v.roots.size(), 1u);
  EXPECT_EQ(v.nodes[0].span, 0);
  EXPECT_EQ(v.nodes[0].duration_ns, 90);
  EXPECT_EQ(v.nodes[0].start_ns, 0);
  EXPECT_EQ(v.nodes[0].end_ns, 90);
  EXPECT_TRUE(v.nodes[0].collapsed.empty());
}

TEST_F(ViewDepthTest, ShallowerDepthHidesDeeperNodes) {
  ViewOptions opts;
  opts.depth = 1;
  const View v = make_view(p, opts);
  EXPECT_EQ(shape(p, v),
            (std::vector<std::string>{"predict(0)", "preprocess(1)", "postprocess(1)"}));
  EXPECT_EQ(v.effective_depth, 1);
  EXPECT_FALSE(v.depth_clamped);
  opts.depth = 0;
  EXPECT_EQ(shape(p, make_view(p, opts)), (std::vector<std::string>{"predict(0)"}));
}

TEST_F(ViewDepthTest, DeeperThanCapturedIsClamped) {
  ViewOptions opts;
  opts.depth = 5;
  const View v = make_view(p, opts);
  EXPECT_EQ(v.nodes.size(), 5u);
  EXPECT_EQ(v.requested_depth, 5);
  EXPECT_EQ(v.effective_depth, 3);
  EXPECT_TRUE(v.depth_clamped);
  opts.depth = 3;
  EXPECT_FALSE(make_view(p, opts).depth_clamped);
}

TEST_F(ViewDepthTest, UnlimitedCaptureIsNeverClamped) {
  p.captured_depth = -1;
  ViewOptions opts;
  opts.depth = 2;
  View v = make_view(p, opts);
  EXPECT_EQ(v.nodes.size(), 4u);
  EXPECT_EQ(v.effective_depth, 2);
  EXPECT_FALSE(v.depth_clamped);
  opts.depth = 50;
  v = make_view(p, opts);
  EXPECT_EQ(v.nodes.size(), 5u);
  EXPECT_FALSE(v.depth_clamped);
  EXPECT_EQ(v.effective_depth, 50);
  EXPECT_EQ(make_view(p, {}).effective_depth, -1);
}

TEST_F(ViewDepthTest, NodesArePreOrderWithParentLinks) {
  const View v = make_view(p, {});
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    const ViewNode& n = v.nodes[i];
    if (n.parent >= 0) {
      EXPECT_LT(n.parent, static_cast<int32_t>(i));
      EXPECT_EQ(v.nodes[n.parent].depth + 1, n.depth);
    }
  }
  EXPECT_EQ(v.nodes[4].parent, 0);
  EXPECT_EQ(v.nodes[0].children, (std::vector<int32_t>{1, 4}));
}

TEST_F(ViewDepthTest, CallPathJoinsDisplayNames) {
  EXPECT_EQ(call_path(p, 3), "predict/preprocess/encode/tokenize");
  EXPECT_EQ(call_path(p, 0), "predict");
  EXPECT_EQ(call_path(p, -1), "");
  p.spans[1].label = p.functions.strings().intern("prep");
  EXPECT_EQ(call_path(p, 2), "predict/prep/encode");
}

// predict -> map (C) -> [step -> len (C) -> inner], then sum (C) with no children.
class CFoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t predict = test::user_fn(p, "predict");
    const uint32_t map = test::c_fn(p, "map");
    const uint32_t step = test::user_fn(p, "step");
    const uint32_t len = test::c_fn(p, "len");
    const uint32_t inner = test::user_fn(p, "inner");
    const uint32_t sum = test::c_fn(p, "sum");
    p.end_ns = 1000;
    p.captured_depth = -1;
    p.lanes.push_back(make_lane({call(0, predict), call(10, map, kEvCFunction), call(20, step),
                                 call(30, len, kEvCFunction), call(40, inner), ret(50), ret(60),
                                 ret(70), call(75, step), ret(76), ret(80),
                                 call(85, sum, kEvCFunction), ret(86), ret(100)}));
    build_tree(p);
  }
  Profile p;
};

TEST_F(CFoldTest, CCallsAreFoldedByDefault) {
  EXPECT_EQ(shape(p, make_view(p, {})),
            (std::vector<std::string>{"predict(0)", "step(1)", "inner(2)", "step(1)"}));
}

TEST_F(CFoldTest, ShowCCallsKeepsThem) {
  ViewOptions opts;
  opts.show_c_calls = true;
  EXPECT_EQ(shape(p, make_view(p, opts)),
            (std::vector<std::string>{"predict(0)", "map(1)", "step(2)", "len(3)", "inner(4)",
                                      "step(2)", "sum(1)"}));
}

TEST_F(CFoldTest, DepthCountsInTheFoldedView) {
  ViewOptions opts;
  opts.depth = 1;
  EXPECT_EQ(shape(p, make_view(p, opts)),
            (std::vector<std::string>{"predict(0)", "step(1)", "step(1)"}));
  opts.show_c_calls = true;
  EXPECT_EQ(shape(p, make_view(p, opts)),
            (std::vector<std::string>{"predict(0)", "map(1)", "sum(1)"}));
}

TEST(CFold, CRootsAreFoldedToo) {
  Profile p;
  const uint32_t exec = test::c_fn(p, "exec");
  const uint32_t f = test::user_fn(p, "f");
  p.lanes.push_back(
      make_lane({call(0, exec, kEvCFunction), call(1, f), ret(2), call(3, f), ret(4), ret(5)}));
  p.end_ns = 10;
  build_tree(p);
  const View v = make_view(p, {});
  EXPECT_EQ(shape(p, v), (std::vector<std::string>{"f(0)", "f(0)"}));
  EXPECT_EQ(v.roots.size(), 2u);
}

// The spec's collapsing example: library runs become "[pkg]" nodes.
class CollapseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t predict = test::user_fn(p, "predict");
    const uint32_t pre = test::user_fn(p, "preprocess");
    const uint32_t validate = test::user_fn(p, "validate_schema");
    const uint32_t scaler =
        test::lib_fn(p, "StandardScaler.transform", "sklearn.preprocessing._data");
    const uint32_t check = test::lib_fn(p, "check_array", "sklearn.preprocessing._data");
    const uint32_t callback = test::user_fn(p, "my_callback");
    const uint32_t asarray = test::lib_fn(p, "asarray", "numpy");
    const uint32_t run = test::user_fn(p, "_run_model");
    const uint32_t fwd = test::lib_fn(p, "Linear.forward", "torch.nn.modules.linear");
    const uint32_t nomod =
        p.functions.add("mystery", "", "/venv/site-packages/x.py", 1, FunctionKind::kPython, false);
    p.end_ns = 10'000;
    p.captured_depth = -1;
    // Tabular on purpose: one line per step of the call tree.
    // clang-format off
    p.lanes.push_back(make_lane({
        call(0, predict),
        call(10, pre),
        call(20, validate), ret(30),
        call(40, scaler), call(42, callback), ret(44), ret(50),  // 10
        call(60, check), ret(65),                                 // 5
        call(70, scaler), ret(72),                                // 2
        call(80, asarray), ret(81),                               // numpy breaks the run
        call(90, check), ret(99),
        ret(100),
        call(200, run),
        call(210, fwd), ret(300),
        call(310, fwd), ret(400),
        call(410, nomod), ret(420),
        ret(500),
        ret(600),
    }));
    // clang-format on
    build_tree(p);
  }
  Profile p;
};

TEST_F(CollapseTest, RunsOfOnePackageMerge) {
  ViewOptions opts;
  opts.collapse_frameworks = true;
  const View v = make_view(p, opts);
  EXPECT_EQ(rows(p, v), (std::vector<NodeRow>{
                            {"predict", 0, 600, 1},
                            {"preprocess", 1, 90, 1},
                            {"validate_schema", 2, 10, 1},
                            {"[sklearn.preprocessing]", 2, 17, 3},
                            {"[numpy]", 2, 1, 1},
                            {"[sklearn.preprocessing]", 2, 9, 1},
                            {"_run_model", 1, 300, 1},
                            {"[torch.nn]", 2, 180, 2},
                            {"[mystery]", 2, 10, 1},
                        }));
  const ViewNode& merged = v.nodes[3];
  EXPECT_EQ(merged.start_ns, 40);
  EXPECT_EQ(merged.end_ns, 72);
  EXPECT_EQ(p.display_name(p.spans[merged.span]), "StandardScaler.transform");
  EXPECT_TRUE(merged.children.empty());  // my_callback is hidden under it
}

TEST_F(CollapseTest, WithoutCollapsingLibrarySpansAreShown) {
  const View v = make_view(p, {});
  EXPECT_EQ(v.nodes.size(), p.spans.size());
  for (const ViewNode& n : v.nodes) {
    EXPECT_TRUE(n.collapsed.empty());
    EXPECT_EQ(n.merged, 1u);
  }
}

TEST_F(CollapseTest, UserModulesAreNotCollapsed) {
  ViewOptions opts;
  opts.collapse_frameworks = true;
  opts.user_modules = {"torch.nn"};
  const View v = make_view(p, opts);
  std::vector<std::string> names;
  for (const ViewNode& n : v.nodes) names.push_back(node_name(p, n));
  EXPECT_EQ(std::count(names.begin(), names.end(), "Linear.forward"), 2);
  EXPECT_EQ(std::count(names.begin(), names.end(), "[torch.nn]"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "[numpy]"), 1);
}

TEST_F(CollapseTest, CollapsedNodesRespectTheDepth) {
  ViewOptions opts;
  opts.collapse_frameworks = true;
  opts.depth = 1;
  EXPECT_EQ(shape(p, make_view(p, opts)),
            (std::vector<std::string>{"predict(0)", "preprocess(1)", "_run_model(1)"}));
}

TEST(IsUserCode, LabelsBlocksAndUserModules) {
  Profile p;
  const uint32_t lib = test::lib_fn(p, "f", "sklearn.base");
  const uint32_t user = test::user_fn(p, "g");
  Span s;
  ViewOptions opts;
  s.function = user;
  EXPECT_TRUE(is_user_code(p, s, opts));
  s.function = lib;
  EXPECT_FALSE(is_user_code(p, s, opts));
  opts.user_modules = {"sklearn"};
  EXPECT_TRUE(is_user_code(p, s, opts));
  opts.user_modules = {"sklearn.bas"};
  EXPECT_FALSE(is_user_code(p, s, opts));
  s.flags = kSpanLabelled;
  EXPECT_TRUE(is_user_code(p, s, opts));
  s.flags = kSpanBlock;
  EXPECT_TRUE(is_user_code(p, s, opts));
  s.flags = 0;
  s.function = 999;  // unknown function id: not user code, and no crash
  EXPECT_FALSE(is_user_code(p, s, opts));
}

TEST(FrameworkPackage, AtMostTwoPublicComponents) {
  EXPECT_EQ(framework_package("sklearn.preprocessing._data"), "sklearn.preprocessing");
  EXPECT_EQ(framework_package("torch.nn.modules.linear"), "torch.nn");
  EXPECT_EQ(framework_package("numpy"), "numpy");
  EXPECT_EQ(framework_package("numpy._core.multiarray"), "numpy");
  EXPECT_EQ(framework_package("_thread"), "_thread");
  EXPECT_EQ(framework_package(""), "");
}

// The re-render property: a view at depth k is the full view with the nodes
// deeper than k removed, for every k, whatever the other options.
TEST(ReRender, ViewAtDepthKIsTheFullViewPruned) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    Profile p = test::random_profile(seed, 600, 9, /*generators=*/seed % 2 == 0);
    p.captured_depth = -1;  // so that every k filters
    for (int variant = 0; variant < 4; ++variant) {
      ViewOptions opts;
      opts.show_c_calls = variant & 1;
      opts.collapse_frameworks = variant & 2;
      const std::vector<NodeRow> full = rows(p, make_view(p, opts));
      uint32_t deepest = 0;
      for (const NodeRow& r : full) deepest = std::max(deepest, std::get<1>(r));
      // Collapsing hides whatever is under a library span.
      ASSERT_GE(deepest, opts.collapse_frameworks ? 1u : 4u) << "the random tree should be deep";
      for (int k = 0; k <= static_cast<int>(deepest) + 1; ++k) {
        std::vector<NodeRow> expected;
        for (const NodeRow& r : full) {
          if (static_cast<int>(std::get<1>(r)) <= k) expected.push_back(r);
        }
        opts.depth = k;
        ASSERT_EQ(rows(p, make_view(p, opts)), expected)
            << "seed " << seed << " variant " << variant << " k " << k;
        opts.depth = -1;
      }
    }
  }
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

// A generator started by predict, resumed once inside its sibling consume and
// once more by predict: its shown time is what ran under predict, so the
// children's times add up to no more than predict's.
TEST(ViewTimes, AGeneratorShowsItsRunningTimeUnderItsParent) {
  Profile p;
  p.end_ns = 200;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t gen = test::user_fn(p, "gen");
  const uint32_t consume = test::user_fn(p, "consume");
  p.lanes.push_back(test::make_lane({
      test::call(0, predict),
      test::call(10, gen),
      test::suspend(20, 1),
      test::call(30, consume),
      test::resume(40, 1),
      test::suspend(50, 1),
      test::ret(60),
      test::resume(70, 1),
      test::ret(80),
      test::ret(100),
  }));
  build_tree(p);
  const View v = make_view(p, {});
  EXPECT_EQ(rows(p, v), (std::vector<NodeRow>{
                            {"predict", 0, 100, 1}, {"gen", 1, 20, 1}, {"consume", 1, 30, 1}}));
  int64_t children = 0;
  for (const int32_t c : v.nodes[0].children)
    children += v.nodes[static_cast<size_t>(c)].duration_ns;
  EXPECT_LE(children, v.nodes[0].duration_ns);
  // Its wall time and active time are still the span's.
  EXPECT_EQ(p.spans[1].duration_ns(), 70);
  EXPECT_EQ(p.spans[1].active_ns, 30);
}

}  // namespace
}  // namespace mlprof
