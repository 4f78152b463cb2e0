#include "util/strings.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlprof {
namespace {

TEST(StringTable, IdZeroIsTheEmptyString) {
  StringTable t;
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.get(0), "");
  EXPECT_EQ(t.intern(""), 0u);
  EXPECT_EQ(t.size(), 1u);
}

// The empty string is id 0 before any string is stored (a table that stores
// nothing allocates nothing), after others are, on a base, and after a move.
TEST(StringTable, TheEmptyStringIsIdZeroBeforeAndAfterOthersAreStored) {
  StringTable t;
  EXPECT_EQ(t.find(""), std::optional<uint32_t>(0));
  EXPECT_EQ(t.intern("a"), 1u);
  EXPECT_EQ(t.get(0), "");
  EXPECT_EQ(t.find(""), std::optional<uint32_t>(0));
  EXPECT_EQ(t.intern(""), 0u);
  EXPECT_EQ(t.size(), 2u);
  auto empty_base = std::make_shared<const StringTable>();
  StringTable on(empty_base);
  EXPECT_EQ(on.size(), 1u);
  EXPECT_EQ(on.intern(""), 0u);
  EXPECT_EQ(on.intern("b"), 1u);
  EXPECT_EQ(on.get(0), "");
  EXPECT_EQ(on.get(1), "b");
  EXPECT_EQ(on.size(), 2u);
  StringTable moved(std::move(t));
  EXPECT_EQ(moved.get(1), "a");
  EXPECT_EQ(moved.find("a"), std::optional<uint32_t>(1));
  EXPECT_EQ(moved.intern("c"), 2u);
}

TEST(StringTable, InternGivesOneIdPerDistinctString) {
  StringTable t;
  const uint32_t a = t.intern("predict");
  const uint32_t b = t.intern("preprocess");
  EXPECT_NE(a, b);
  EXPECT_EQ(t.intern("predict"), a);
  EXPECT_EQ(t.intern(std::string("pre") + "process"), b);
  EXPECT_EQ(t.get(a), "predict");
  EXPECT_EQ(t.get(b), "preprocess");
  EXPECT_EQ(t.size(), 3u);
}

TEST(StringTable, UnknownIdGivesEmptyString) {
  StringTable t;
  EXPECT_EQ(t.get(7), "");
  EXPECT_EQ(t.get(UINT32_MAX), "");
}

TEST(StringTable, KeysDoNotAliasTheCallersBuffer) {
  StringTable t;
  std::string buf = "first";
  const uint32_t id = t.intern(buf);
  buf = "other";  // the table must have copied it
  EXPECT_EQ(t.get(id), "first");
  EXPECT_EQ(t.intern("first"), id);
  EXPECT_NE(t.intern(buf), id);
}

TEST(StringTable, ManyStringsStayFindableAcrossGrowthAndMove) {
  StringTable t;
  std::vector<uint32_t> ids;
  // Short strings live inside std::string (SSO): the deque must not move them.
  for (int i = 0; i < 20000; ++i) ids.push_back(t.intern(std::to_string(i) + "s"));
  StringTable moved = std::move(t);
  for (int i = 0; i < 20000; ++i) {
    const std::string s = std::to_string(i) + "s";
    ASSERT_EQ(moved.intern(s), ids[i]);
    ASSERT_EQ(moved.get(ids[i]), s);
  }
  EXPECT_EQ(moved.size(), 20001u);
}

TEST(StringTable, EmbeddedNulsAndUtf8AreDistinctStrings) {
  StringTable t;
  const uint32_t a = t.intern(std::string_view("a\0b", 3));
  const uint32_t b = t.intern("a");
  const uint32_t c = t.intern("caf\xc3\xa9");
  EXPECT_NE(a, b);
  EXPECT_EQ(t.get(a).size(), 3u);
  EXPECT_EQ(t.get(c), "caf\xc3\xa9");
}

TEST(StringTable, ATableOnABaseKeepsTheBasesIdsAndAddsItsOwnPastThem) {
  auto base = std::make_shared<StringTable>();
  const uint32_t predict = base->intern("predict");
  const uint32_t load = base->intern("load");
  StringTable t(base);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.get(predict), "predict");
  EXPECT_EQ(t.intern("load"), load);  // found in the base, not added
  EXPECT_EQ(t.intern(""), 0u);
  const uint32_t score = t.intern("score");
  EXPECT_EQ(score, 3u);
  EXPECT_EQ(t.get(score), "score");
  EXPECT_EQ(t.find("score"), score);
  EXPECT_EQ(t.find("absent"), std::nullopt);
  EXPECT_EQ(t.get(99), "");
  // The base is shared, never written: a second table on it does not see "score".
  StringTable u(base);
  EXPECT_EQ(base->size(), 3u);
  EXPECT_EQ(u.find("score"), std::nullopt);
  EXPECT_EQ(u.intern("other"), 3u);
  EXPECT_EQ(t.base(), base.get());
}

TEST(StringTable, ATableOnABaseStaysValidAfterTheBaseIsDropped) {
  auto base = std::make_shared<StringTable>();
  const uint32_t predict = base->intern("predict");
  StringTable t(base);
  base.reset();
  EXPECT_EQ(t.get(predict), "predict");
  StringTable moved = std::move(t);
  EXPECT_EQ(moved.get(predict), "predict");
  EXPECT_EQ(moved.intern("predict"), predict);
}

}  // namespace
}  // namespace mlprof
