#include "views/group.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "profile_builder.h"
#include "render/render_text.h"
#include "views/view.h"

namespace mlprof {
namespace {

using test::call;
using test::label;
using test::lib_fn;
using test::make_lane;
using test::ret;
using test::user_fn;

uint32_t stdlib_fn(Profile& p, const std::string& name, const std::string& module) {
  return p.functions.add(name, module, "/usr/lib/python3.12/" + module + ".py", 1,
                         FunctionKind::kPython, false);
}

std::string name_of(const Profile& p, int32_t s) {
  return p.display_name(p.spans[static_cast<size_t>(s)]);
}

std::vector<std::string> child_names(const Profile& p, int32_t s) {
  std::vector<std::string> out;
  const int32_t first =
      s < 0 ? (p.roots.empty() ? -1 : p.roots[0]) : p.spans[static_cast<size_t>(s)].first_child;
  for (int32_t c = first; c >= 0; c = p.spans[static_cast<size_t>(c)].next_sibling)
    out.push_back(name_of(p, c));
  return out;
}

int32_t find(const Profile& p, const std::string& name) {
  for (size_t i = 0; i < p.spans.size(); ++i) {
    if (name_of(p, static_cast<int32_t>(i)) == name) return static_cast<int32_t>(i);
  }
  return -1;
}

// PyFuncModel.predict as profiling() sees it: MLflow's checks, the model's
// steps, a stdlib call between MLflow's, MLflow's output conversion.
class GroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p.start_ns = 0;
    p.end_ns = 200;
    const uint32_t predict = lib_fn(p, "PyFuncModel.predict", "mlflow.pyfunc");
    const uint32_t context = lib_fn(p, "_try_get_prediction_context", "mlflow.tracing.provider");
    const uint32_t ctx_init = lib_fn(p, "Context.__init__", "mlflow.pyfunc.context");
    const uint32_t signature = stdlib_fn(p, "signature", "inspect");
    const uint32_t validate = lib_fn(p, "_validate_prediction_input", "mlflow.models.utils");
    const uint32_t enforce = lib_fn(p, "_enforce_schema", "mlflow.models.utils");
    const uint32_t astype = lib_fn(p, "DataFrame.astype", "pandas.core.generic");
    const uint32_t wrapper = lib_fn(p, "_PythonModelPyfuncWrapper.predict", "mlflow.pyfunc.model");
    const uint32_t user_predict = user_fn(p, "FraudScorer.predict");
    const uint32_t features = user_fn(p, "features");
    const uint32_t convert = lib_fn(p, "_convert_output", "mlflow.pyfunc");
    p.lanes.push_back(make_lane({
        call(0, predict),
        call(1, context),
        ret(10),
        call(10, ctx_init),
        ret(20),
        call(20, signature),
        ret(30),
        call(30, validate),
        call(35, enforce),
        call(40, astype),
        ret(50),
        ret(55),
        ret(60),
        call(62, wrapper),
        call(63, user_predict),
        call(64, features),
        ret(120),
        ret(121),
        ret(122),
        call(130, signature),
        ret(135),
        call(140, convert),
        ret(150),
        ret(160),
    }));
    IOSummary in;
    in.type_name = "DataFrame";
    p.lanes[0].io = {{7, IORole::kArgument, "data", in}};  // _validate_prediction_input's call
    build_tree(p);
    group_framework_spans(p);
  }
  Profile p;
};

TEST_F(GroupTest, EachRunOfMlflowCallsBecomesOneNodeNamedForWhatItDoes) {
  EXPECT_EQ(child_names(p, p.roots[0]),
            (std::vector<std::string>{"[mlflow: input checks, context]",
                                      "_PythonModelPyfuncWrapper.predict", "signature",
                                      "[mlflow: output]"}));
  const int32_t g = find(p, "[mlflow: input checks, context]");
  // The stdlib call between two of MLflow's joins their run.
  EXPECT_EQ(child_names(p, g),
            (std::vector<std::string>{"_try_get_prediction_context", "Context.__init__",
                                      "signature", "_validate_prediction_input"}));
  const Span& group = p.spans[static_cast<size_t>(g)];
  EXPECT_TRUE(group.flags & kSpanGroup);
  EXPECT_EQ(group.start_ns, 1);
  EXPECT_EQ(group.end_ns, 60);
  EXPECT_EQ(group.active_ns, 59);
  EXPECT_EQ(group.depth, 1u);
  EXPECT_EQ(p.functions.module(group.function), "mlflow");
  EXPECT_FALSE(p.functions.get(group.function).user_code);
}

TEST_F(GroupTest, MembersAndTheirCallsGoOneLevelDeeperAndKeepTheirData) {
  EXPECT_EQ(p.spans[static_cast<size_t>(find(p, "_validate_prediction_input"))].depth, 2u);
  EXPECT_EQ(p.spans[static_cast<size_t>(find(p, "_enforce_schema"))].depth, 3u);
  EXPECT_EQ(p.spans[static_cast<size_t>(find(p, "DataFrame.astype"))].depth, 4u);
  // The delegation to the model is not grouped, and neither is the model.
  EXPECT_EQ(p.spans[static_cast<size_t>(find(p, "features"))].depth, 3u);
  ASSERT_EQ(p.io.size(), 1u);
  EXPECT_EQ(p.io[0].span, find(p, "_validate_prediction_input"));
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const int32_t parent = p.spans[i].parent;
    EXPECT_LT(parent, static_cast<int32_t>(i)) << "parents come before children";
    if (parent >= 0) EXPECT_EQ(p.spans[i].depth, p.spans[static_cast<size_t>(parent)].depth + 1);
  }
}

TEST_F(GroupTest, MembersKeepTheirValuesAndAGroupSumsItsCalls) {
  // A counter that grows by 10 per event: a span's value is 10 x its events.
  Profile& q = p;  // rebuilt from its lanes' events (build_tree starts over)
  for (uint32_t i = 0; i < q.lanes[0].events.size(); ++i) {
    q.lanes[0].readings.push_back({i, ValueKind::kAllocBytes, int64_t{i} * 10});
  }
  build_tree(q);
  group_framework_spans(q);
  const auto value = [&](const std::string& name) {
    const uint64_t* v = q.value_of(find(q, name), ValueKind::kAllocBytes);
    return v ? static_cast<int64_t>(*v) : -1;
  };
  EXPECT_EQ(value("_validate_prediction_input"), 50);  // events 7..12
  EXPECT_EQ(value("_try_get_prediction_context"), 10);
  // Its four calls: 10 + 10 + 10 + 50.
  EXPECT_EQ(value("[mlflow: input checks, context]"), 80);
  EXPECT_EQ(value("PyFuncModel.predict"), 10 * static_cast<int64_t>(q.lanes[0].events.size() - 1));
  EXPECT_EQ(q.value_of(find(q, "[mlflow: input checks, context]"), ValueKind::kCpuNs), nullptr);
}

TEST_F(GroupTest, TheTreeShowsTheGroupsAndOpensThemOneLevelDeeper) {
  ViewOptions one;
  one.depth = 1;
  EXPECT_EQ(render_text(p, one),
            "PyFuncModel.predict: 0.16us\n"
            "  [mlflow: input checks, context]: 0.06us\n"
            "  _PythonModelPyfuncWrapper.predict: 0.06us\n"
            "  signature: 0.01us\n"
            "  [mlflow: output]: 0.01us\n");
  ViewOptions two;
  two.depth = 2;
  const std::string text = render_text(p, two);
  EXPECT_NE(text.find("    _validate_prediction_input: 0.03us\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("_enforce_schema"), std::string::npos) << text;
}

TEST(Group, WhatRunsUnderAnMlflowCallDoesNotChangeItsGroup) {
  // A capture one level shallower would not see my_callback: the grouping
  // must not depend on it. It stays under run_callbacks, a level deeper.
  Profile p;
  const uint32_t run = lib_fn(p, "run_callbacks", "mlflow.utils");
  const uint32_t mine = user_fn(p, "my_callback");
  const uint32_t log = lib_fn(p, "log_metric", "mlflow.tracking.fluent");
  p.lanes.push_back(make_lane({call(0, run), call(1, mine), ret(5), ret(6), call(7, log), ret(9)}));
  build_tree(p);
  group_framework_spans(p);
  ASSERT_EQ(p.spans.size(), 4u);
  ASSERT_EQ(p.roots.size(), 1u);
  EXPECT_EQ(name_of(p, p.roots[0]), "[mlflow]");  // no category word for either
  EXPECT_EQ(child_names(p, p.roots[0]), (std::vector<std::string>{"run_callbacks", "log_metric"}));
  EXPECT_EQ(child_names(p, find(p, "run_callbacks")), std::vector<std::string>{"my_callback"});
  EXPECT_EQ(p.spans[static_cast<size_t>(find(p, "my_callback"))].depth, 2u);
}

// `events` as a capture at depth `ceiling` records them: calls deeper than
// the ceiling (and everything under them) left out, with their returns.
std::vector<Event> cut_at(const std::vector<Event>& events, int ceiling) {
  std::vector<Event> out;
  std::vector<bool> kept;  // per open call
  bool label_pending = false;
  Event label_event;
  for (const Event& e : events) {
    if (e.kind == EventKind::kLabel) {
      label_pending = true;
      label_event = e;
      continue;
    }
    if (e.kind == EventKind::kCall) {
      const bool keep = static_cast<int>(kept.size()) <= ceiling && (kept.empty() || kept.back());
      kept.push_back(keep);
      if (keep && label_pending) out.push_back(label_event);
      if (keep) out.push_back(e);
      label_pending = false;
      continue;
    }
    if (e.kind == EventKind::kReturn) {
      if (kept.back()) out.push_back(e);
      kept.pop_back();
    }
  }
  return out;
}

// Issue 42, item 5: PyFuncModel.predict captured at every depth, rendered at
// every depth up to it, reads the same. Under _validate_prediction_input,
// levels down, run a labelled pandas call (a labeller names it) and user
// code (a callback): once they kept it out of the group, so depth 1 held
// three MLflow nodes when captured deep enough to see them, one otherwise.
TEST(Group, EveryViewAtDepthDIsTheSameForEveryCaptureDepthFromD) {
  // Every capture names its functions in this order: the same ids in each.
  struct Names {
    uint32_t predict, context, validate, enforce, column, astype, hook, check, user_predict, step,
        convert, relabel;
  };
  const auto name = [](Profile& p) {
    return Names{lib_fn(p, "PyFuncModel.predict", "mlflow.pyfunc"),
                 lib_fn(p, "_try_get_prediction_context", "mlflow.tracing.provider"),
                 lib_fn(p, "_validate_prediction_input", "mlflow.models.utils"),
                 lib_fn(p, "_enforce_schema", "mlflow.models.utils"),
                 lib_fn(p, "_enforce_named_col_schema", "mlflow.models.utils"),
                 lib_fn(p, "NDFrame.astype", "pandas.core.generic"),
                 user_fn(p, "my_dtype_hook"),
                 lib_fn(p, "_check_input", "mlflow.models.utils"),
                 user_fn(p, "predict"),
                 user_fn(p, "step"),
                 lib_fn(p, "_convert_output", "mlflow.pyfunc"),
                 p.functions.strings().intern("DataFrame.astype")};
  };
  Profile names_only;
  const auto [predict, context, validate, enforce, column, astype, hook, check, user_predict, step,
              convert, relabel] = name(names_only);
  std::vector<Event> events{
      call(0, predict),  // 0
      call(1, context),
      ret(2),             // 1
      call(3, validate),  // 1
      call(4, enforce),   // 2
      call(5, column),    // 3
      label(relabel),
      call(6, astype),
      call(7, hook),
      ret(8),
      ret(9),  // 4, 5
      ret(10),
      ret(11),
      call(12, check),
      ret(13),  // 2
      ret(14),
      call(15, context),
      ret(16),  // 1
      call(20, user_predict),
      call(21, step),
      call(22, step),
      ret(23),
      ret(24),
      ret(30),  // 1-3
      call(31, convert),
      ret(32),  // 1
      ret(40),
  };
  for (Event& e : events) e.ts_ns *= 100'000;  // 0.1 ms a unit
  auto capture = [&](int ceiling) {
    Profile p;
    name(p);
    p.start_ns = 0;
    p.end_ns = 4'000'000;
    p.captured_depth = ceiling;
    p.lanes.push_back(make_lane(ceiling < 0 ? events : cut_at(events, ceiling)));
    build_tree(p);
    group_framework_spans(p);
    return p;
  };
  const Profile all = capture(-1);
  ViewOptions one;
  one.depth = 1;
  EXPECT_EQ(render_text(all, one),
            "PyFuncModel.predict: 4.00ms\n"
            "  [mlflow: input checks, context]: 1.50ms\n"
            "  predict: 1.00ms\n"
            "  [mlflow: output]: 0.10ms\n");
  for (int ceiling = 0; ceiling <= 6; ++ceiling) {
    const Profile p = capture(ceiling);
    for (int depth = 0; depth <= ceiling; ++depth) {
      ViewOptions view;
      view.depth = depth;
      EXPECT_EQ(render_text(p, view), render_text(all, view))
          << "captured at " << ceiling << ", shown at " << depth;
    }
  }
}

TEST(Group, MlflowCallsDeepInsideAGroupAreNotGroupedAgain) {
  Profile p;
  const uint32_t predict = user_fn(p, "predict");
  const uint32_t validate = lib_fn(p, "_validate_prediction_input", "mlflow.models.utils");
  const uint32_t astype = lib_fn(p, "DataFrame.astype", "pandas.core.generic");
  const uint32_t enforce = lib_fn(p, "_enforce_schema", "mlflow.models.utils");
  p.lanes.push_back(make_lane({call(0, predict), call(1, validate), call(2, astype),
                               call(3, enforce), ret(4), ret(5), ret(6), ret(7)}));
  build_tree(p);
  group_framework_spans(p);
  ASSERT_EQ(p.spans.size(), 5u);  // one group: the mlflow call under pandas stays a plain span
  EXPECT_EQ(child_names(p, find(p, "DataFrame.astype")),
            std::vector<std::string>{"_enforce_schema"});
  EXPECT_EQ(p.spans[static_cast<size_t>(find(p, "_enforce_schema"))].depth, 4u);
}

TEST(Group, AProfileWithoutMlflowIsUnchanged) {
  Profile p;
  const uint32_t a = user_fn(p, "a");
  const uint32_t b = lib_fn(p, "check_array", "sklearn.utils.validation");
  p.lanes.push_back(make_lane({call(0, a), call(1, b), ret(5), ret(6)}));
  build_tree(p);
  const std::vector<Span> before = p.spans;
  group_framework_spans(p);
  ASSERT_EQ(p.spans.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(p.spans[i].function, before[i].function);
    EXPECT_EQ(p.spans[i].depth, before[i].depth);
  }
}

// The agent's sessions of a process start on one shared base of names and
// keep a GroupCache: each session is grouped exactly as without the cache,
// and a function the base lacks (the session's own) is classified too.
TEST(GroupCache, SessionsOnOneBaseGroupAsWithoutTheCache) {
  auto base = std::make_shared<FunctionTable>();
  const uint32_t predict =
      base->add("PyFuncModel.predict", "mlflow.pyfunc", "/v/site-packages/mlflow/pyfunc.py", 1,
                FunctionKind::kPython, false);
  const uint32_t enforce =
      base->add("_enforce_schema", "mlflow.models.utils", "/v/site-packages/mlflow/u.py", 1,
                FunctionKind::kPython, false);
  const uint32_t score =
      base->add("score", "app.model", "/app/model.py", 1, FunctionKind::kPython, true);
  auto session = [&](bool own_function) {
    Profile p;
    p.functions = FunctionTable(base);
    const uint32_t convert = own_function ? lib_fn(p, "_convert_output", "mlflow.pyfunc") : enforce;
    p.end_ns = 100;
    p.lanes.push_back(make_lane({call(0, predict), call(1, enforce), ret(10), call(10, score),
                                 ret(50), call(50, convert), ret(60), ret(100)}));
    build_tree(p);
    return p;
  };
  GroupCache cache;
  for (const bool own : {false, true, false, true}) {
    Profile with = session(own), without = session(own);
    group_framework_spans(with, &cache);
    group_framework_spans(without);
    ASSERT_EQ(render_text(with, {}), render_text(without, {}));
    EXPECT_EQ(child_names(with, with.roots[0]), child_names(without, without.roots[0]));
    EXPECT_EQ(child_names(with, with.roots[0]).front(), "[mlflow: input checks]");
  }
  EXPECT_EQ(cache.base, base);
  EXPECT_EQ(cache.classes.size(), base->size());
}

// The cache keeps the grouping's working arrays from one session to the
// next: sessions of other shapes after it (more runs, none, fewer spans)
// are grouped exactly as each would be alone.
TEST(GroupCache, ItsReusedArraysCarryNothingFromOneSessionToTheNext) {
  auto base = std::make_shared<FunctionTable>();
  const uint32_t predict =
      base->add("PyFuncModel.predict", "mlflow.pyfunc", "/v/site-packages/mlflow/pyfunc.py", 1,
                FunctionKind::kPython, false);
  const uint32_t enforce =
      base->add("_enforce_schema", "mlflow.models.utils", "/v/site-packages/mlflow/u.py", 1,
                FunctionKind::kPython, false);
  const uint32_t context = base->add("_set_context", "mlflow.utils", "/v/site-packages/mlflow/c.py",
                                     1, FunctionKind::kPython, false);
  const uint32_t score =
      base->add("score", "app.model", "/app/model.py", 1, FunctionKind::kPython, true);
  // `runs` groups of MLflow calls, each followed by the model's step.
  auto session = [&](int runs) {
    Profile p;
    p.functions = FunctionTable(base);
    std::vector<Event> events{call(0, predict)};
    int64_t t = 0;
    for (int r = 0; r < runs; ++r) {
      for (const uint32_t f : {enforce, context}) {
        events.push_back(call(++t, f));
        events.push_back(ret(++t));
      }
      events.push_back(call(++t, score));
      events.push_back(ret(++t));
    }
    if (runs == 0) {
      events.push_back(call(++t, score));
      events.push_back(ret(++t));
    }
    events.push_back(ret(++t));
    p.end_ns = t;
    p.lanes.push_back(make_lane(events));
    build_tree(p);
    return p;
  };
  GroupCache cache;
  for (const int runs : {5, 0, 1, 3, 0, 2}) {
    Profile with = session(runs), without = session(runs);
    group_framework_spans(with, &cache);
    group_framework_spans(without);
    ASSERT_EQ(render_text(with, {}), render_text(without, {})) << runs << " runs";
    ASSERT_EQ(with.spans.size(), without.spans.size());
    for (size_t i = 0; i < with.spans.size(); ++i) {
      EXPECT_EQ(with.spans[i].parent, without.spans[i].parent);
      EXPECT_EQ(with.spans[i].depth, without.spans[i].depth);
      EXPECT_EQ(with.spans[i].flags, without.spans[i].flags);
    }
    EXPECT_EQ(child_names(with, with.roots[0]).size(), runs == 0 ? 1u : 2u * runs);
  }
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

// Two of MLflow's generators consumed in turn overlap in time: each is
// suspended while the other runs. Their waits summed (160) would exceed the
// group's wall (110); the group waits what its members did not run: 110 - 40.
TEST(GroupWaiting, OverlappingMembersWaitNoMoreThanTheWallTheyDidNotRun) {
  Profile q;
  q.start_ns = 0;
  q.end_ns = 200;
  const uint32_t predict = test::user_fn(q, "predict");
  const uint32_t a = test::lib_fn(q, "_wrap_generator", "mlflow.pyfunc.utils");
  const uint32_t b = test::lib_fn(q, "_stream_wrapper", "mlflow.tracing.fluent");
  q.lanes.push_back(
      test::make_lane({test::call(0, predict), test::call(10, a), test::suspend(20, 1),
                       test::call(20, b), test::suspend(30, 3), test::resume(100, 1),
                       test::ret(110), test::resume(110, 3), test::ret(120), test::ret(130)}));
  build_tree(q);
  group_framework_spans(q);
  int32_t group = -1;
  for (size_t i = 0; i < q.spans.size(); ++i) {
    if (q.spans[i].flags & kSpanGroup) group = static_cast<int32_t>(i);
  }
  ASSERT_GE(group, 0);
  const Span& g = q.spans[static_cast<size_t>(group)];
  EXPECT_EQ(g.duration_ns(), 110);
  EXPECT_EQ(g.waiting_ns, 70);
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

// MLflow's context manager (a generator) entered before the model's step
// and left after it: grouped, it would stretch its group over the step. It
// stays a node of its own; the MLflow call before it is grouped alone.
TEST(GroupRuns, AMemberSuspendedAcrossTheNextSiblingEndsTheRunAndStaysANode) {
  Profile q;
  q.start_ns = 0;
  q.end_ns = 200;
  const uint32_t predict = test::user_fn(q, "predict");
  const uint32_t check = test::lib_fn(q, "_validate_prediction_input", "mlflow.models.utils");
  const uint32_t cm = test::lib_fn(q, "safe_set_span_in_context", "mlflow.tracing.provider");
  const uint32_t step = test::user_fn(q, "step");
  q.lanes.push_back(
      test::make_lane({test::call(0, predict), test::call(10, check), test::ret(15),
                       test::call(20, cm), test::suspend(25, 3), test::call(30, step),
                       test::ret(80), test::resume(90, 3), test::ret(95), test::ret(100)}));
  build_tree(q);
  group_framework_spans(q);
  std::vector<const Span*> groups;
  for (const Span& s : q.spans) {
    if (s.flags & kSpanGroup) groups.push_back(&s);
  }
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0]->duration_ns(), 5);
  for (const Span& s : q.spans) {
    if (s.function == cm || s.function == step) {
      EXPECT_EQ(s.parent, 0) << s.function;  // predict's children
    }
  }
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

// A stream's MLflow calls before and after a yield are two groups: one
// group would hold the consumer's time between them.
TEST(GroupRuns, ARunNeverSpansItsParentsSuspension) {
  Profile q;
  q.start_ns = 0;
  q.end_ns = 200;
  const uint32_t stream = test::user_fn(q, "stream");
  const uint32_t enter = test::lib_fn(q, "_start_stream_span", "mlflow.tracing.fluent");
  const uint32_t leave = test::lib_fn(q, "_end_stream_span", "mlflow.tracing.fluent");
  q.lanes.push_back(test::make_lane({test::call(0, stream), test::call(10, enter), test::ret(20),
                                     test::suspend(25, 0), test::resume(150, 0),
                                     test::call(160, leave), test::ret(170), test::ret(180)}));
  build_tree(q);
  group_framework_spans(q);
  std::vector<int64_t> walls;
  for (const Span& s : q.spans) {
    if (s.flags & kSpanGroup) walls.push_back(s.duration_ns());
  }
  EXPECT_EQ(walls, (std::vector<int64_t>{10, 10}));
}

}  // namespace
}  // namespace mlprof
