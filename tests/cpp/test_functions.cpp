#include "model/functions.h"

#include <gtest/gtest.h>

#include <memory>

namespace mlprof {
namespace {

PathRules stdlib_rules() {
  PathRules rules;
  rules.library_prefixes = {"/usr/lib/python3.12", "/opt/py/lib/"};
  return rules;
}

TEST(ClassifyUserCode, AppFilesAreUserCode) {
  EXPECT_TRUE(classify_user_code("/app/model.py", stdlib_rules()));
  EXPECT_TRUE(classify_user_code("model.py", stdlib_rules()));
  EXPECT_TRUE(classify_user_code("/home/me/proj/pipeline.py", PathRules{}));
}

TEST(ClassifyUserCode, InstalledPackagesAreNot) {
  const PathRules rules = stdlib_rules();
  EXPECT_FALSE(classify_user_code("/venv/lib/python3.12/site-packages/sklearn/pipeline.py", rules));
  EXPECT_FALSE(classify_user_code("/usr/lib/python3/dist-packages/numpy/core/numeric.py", rules));
  EXPECT_FALSE(classify_user_code("C:\\py\\Lib\\site-packages\\torch\\nn.py", rules));
}

TEST(ClassifyUserCode, StandardLibraryPrefixesAreNot) {
  const PathRules rules = stdlib_rules();
  EXPECT_FALSE(classify_user_code("/usr/lib/python3.12/json/decoder.py", rules));
  EXPECT_FALSE(classify_user_code("/usr/lib/python3.12", rules));
  EXPECT_FALSE(classify_user_code("/opt/py/lib/os.py", rules));
  // A prefix matches whole path components only.
  EXPECT_TRUE(classify_user_code("/usr/lib/python3.12-extras/mine.py", rules));
}

TEST(ClassifyUserCode, CodeCloudpicklePickledByValueIs) {
  // A notebook's model class, logged with MLflow and loaded back.
  EXPECT_TRUE(classify_user_code("<dynamic-code>", PathRules{}));
  EXPECT_TRUE(classify_user_code("<dynamic-code>", stdlib_rules(), "/home/me/proj/agent.py"));
  EXPECT_FALSE(classify_user_code("<dynamic-code-x>", PathRules{}));
  // MLflow's tracing closure on a pickled class: its module is MLflow's.
  EXPECT_FALSE(classify_user_code("<dynamic-code>", PathRules{},
                                  "/venv/lib/python3.11/site-packages/mlflow/tracing/fluent.py"));
}

TEST(ClassifyUserCode, PseudoFilesAndEmptyPathsAreNot) {
  EXPECT_FALSE(classify_user_code("<frozen importlib._bootstrap>", PathRules{}));
  EXPECT_FALSE(classify_user_code("<string>", PathRules{}));
  EXPECT_FALSE(classify_user_code("", PathRules{}));
}

TEST(ClassifyUserCode, EmptyPrefixIsIgnored) {
  PathRules rules;
  rules.library_prefixes = {""};
  EXPECT_TRUE(classify_user_code("/app/model.py", rules));
}

TEST(ModuleIn, MatchesWholeDottedComponents) {
  EXPECT_TRUE(module_in("a", "a"));
  EXPECT_TRUE(module_in("a.b", "a"));
  EXPECT_TRUE(module_in("a.b.c", "a.b"));
  EXPECT_FALSE(module_in("ab", "a"));
  EXPECT_FALSE(module_in("a", "a.b"));
  EXPECT_FALSE(module_in("b.a", "a"));
  EXPECT_FALSE(module_in("a", ""));
  EXPECT_FALSE(module_in("", "a"));
}

TEST(FunctionTable, SameKeyGivesSameId) {
  FunctionTable t;
  const uint32_t a =
      t.add("predict", "app.model", "/app/model.py", 10, FunctionKind::kPython, true);
  const uint32_t b =
      t.add("predict", "app.model", "/app/model.py", 10, FunctionKind::kPython, true);
  EXPECT_EQ(a, b);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.name(a), "predict");
  EXPECT_EQ(t.module(a), "app.model");
  const FunctionInfo& fn = t.get(a);
  EXPECT_EQ(t.strings().get(fn.file), "/app/model.py");
  EXPECT_EQ(fn.line, 10);
  EXPECT_EQ(fn.kind, FunctionKind::kPython);
  EXPECT_TRUE(fn.user_code);
}

TEST(FunctionTable, EachKeyFieldDistinguishes) {
  FunctionTable t;
  const uint32_t base = t.add("f", "m", "/f.py", 1, FunctionKind::kPython, true);
  EXPECT_NE(t.add("g", "m", "/f.py", 1, FunctionKind::kPython, true), base);
  EXPECT_NE(t.add("f", "n", "/f.py", 1, FunctionKind::kPython, true), base);
  EXPECT_NE(t.add("f", "m", "/g.py", 1, FunctionKind::kPython, true), base);
  EXPECT_NE(t.add("f", "m", "/f.py", 2, FunctionKind::kPython, true), base);
  EXPECT_NE(t.add("f", "m", "/f.py", 1, FunctionKind::kBlock, true), base);
  EXPECT_EQ(t.size(), 6u);
}

TEST(FunctionTable, FirstClassificationWins) {
  // user_code is derived from the file, so a second add with another value is
  // a caller bug; the table keeps one answer per function.
  FunctionTable t;
  const uint32_t a = t.add("f", "m", "/f.py", 1, FunctionKind::kPython, false);
  EXPECT_EQ(t.add("f", "m", "/f.py", 1, FunctionKind::kPython, true), a);
  EXPECT_FALSE(t.get(a).user_code);
}

TEST(FunctionTable, SharesStringsWithItsTable) {
  FunctionTable t;
  const uint32_t a = t.add("f", "pkg", "/f.py", 1, FunctionKind::kC, false);
  const uint32_t b = t.add("g", "pkg", "/f.py", 1, FunctionKind::kC, false);
  EXPECT_EQ(t.get(a).module, t.get(b).module);
  EXPECT_EQ(t.strings().intern("pkg"), t.get(a).module);
  EXPECT_THROW(t.get(99), std::out_of_range);
}

TEST(FunctionTable, ATableOnABaseKeepsItsIdsAndAddsOnlyWhatIsNew) {
  auto base = std::make_shared<FunctionTable>();
  const uint32_t predict =
      base->add("predict", "app", "/srv/app.py", 10, FunctionKind::kPython, true);
  const uint32_t load = base->add("load", "app", "/srv/app.py", 20, FunctionKind::kPython, true);
  FunctionTable t(base);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.add("load", "app", "/srv/app.py", 20, FunctionKind::kPython, true), load);
  EXPECT_EQ(t.name(predict), "predict");
  EXPECT_TRUE(t.get(predict).user_code);
  // A new function, and one that differs from a base one by its kind only.
  const uint32_t score = t.add("score", "app", "/srv/app.py", 30, FunctionKind::kPython, true);
  const uint32_t load_c = t.add("load", "app", "/srv/app.py", 20, FunctionKind::kC, false);
  EXPECT_EQ(score, 2u);
  EXPECT_EQ(load_c, 3u);
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.name(score), "score");
  EXPECT_EQ(t.get(load_c).kind, FunctionKind::kC);
  EXPECT_EQ(t.module(score), "app");
  // Strings go through the base too: "app" kept its id.
  EXPECT_EQ(t.get(score).module, base->get(predict).module);
  EXPECT_EQ(base->size(), 2u);  // never written
  EXPECT_EQ(t.base(), base.get());
  EXPECT_EQ(t.strings().base(), &base->strings());
}

TEST(FunctionTable, FlattenedKeepsEveryIdWithoutTheBase) {
  auto base = std::make_shared<FunctionTable>();
  base->add("predict", "app", "/srv/app.py", 10, FunctionKind::kPython, true);
  base->strings().intern("a label");
  FunctionTable t(base);
  const uint32_t score = t.add("score", "app", "/srv/app.py", 30, FunctionKind::kC, false);
  const uint32_t label = t.strings().intern("another label");
  const FunctionTable flat = t.flattened();
  EXPECT_EQ(flat.base(), nullptr);
  ASSERT_EQ(flat.size(), t.size());
  ASSERT_EQ(flat.strings().size(), t.strings().size());
  for (uint32_t i = 0; i < t.strings().size(); ++i)
    EXPECT_EQ(flat.strings().get(i), t.strings().get(i));
  for (uint32_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(flat.name(i), t.name(i));
    EXPECT_EQ(flat.get(i).name, t.get(i).name);
    EXPECT_EQ(flat.get(i).kind, t.get(i).kind);
    EXPECT_EQ(flat.get(i).user_code, t.get(i).user_code);
    EXPECT_EQ(flat.get(i).line, t.get(i).line);
  }
  EXPECT_EQ(flat.name(score), "score");
  EXPECT_EQ(flat.strings().get(label), "another label");
}

}  // namespace
}  // namespace mlprof
