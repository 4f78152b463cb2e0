// to_folded: lines as flamegraph.pl reads them (its regex
// /^(.*)\s+?(\d+(?:\.\d*)?)$/: the count after the last whitespace, frames
// split on ';'), which inferno and speedscope's importer follow too.

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "export_fixture.h"
#include "formats/export.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

struct FoldedLine {
  std::vector<std::string> frames;
  int64_t value = 0;
};

std::vector<FoldedLine> parse_folded(const std::string& text) {
  std::vector<FoldedLine> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    EXPECT_NE(nl, std::string::npos) << "the last line must end with a newline";
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    const std::string count = line.substr(space + 1);
    EXPECT_FALSE(count.empty());
    EXPECT_EQ(count.find_first_not_of("0123456789"), std::string::npos) << line;
    FoldedLine fl;
    fl.value = std::stoll(count);
    size_t from = 0;
    const std::string stack = line.substr(0, space);
    while (true) {
      const size_t semi = stack.find(';', from);
      fl.frames.push_back(stack.substr(from, semi - from));
      if (semi == std::string::npos) break;
      from = semi + 1;
    }
    out.push_back(fl);
  }
  return out;
}

std::map<std::string, int64_t> by_stack(const std::vector<FoldedLine>& lines) {
  std::map<std::string, int64_t> out;
  for (const FoldedLine& l : lines) {
    std::string key;
    for (const std::string& f : l.frames) key += (key.empty() ? "" : ";") + f;
    EXPECT_EQ(out.count(key), 0u) << "stack written twice: " << key;
    out[key] = l.value;
  }
  return out;
}

TEST(Folded, OneRootPerLaneWithSelfTimes) {
  const Profile p = test::export_profile_fixture();
  const std::string text = to_folded(p);
  const auto stacks = by_stack(parse_folded(text));
  EXPECT_EQ(stacks, (std::map<std::string, int64_t>{
                        {"thread MainThread;predict", 11'999},
                        {"thread MainThread;predict;preprocess", 1'500},
                        {"thread MainThread;predict;produce", 2'000},
                        {"thread MainThread;predict;consume", 2'000},
                        {"thread MainThread;predict;my label", 500},
                        // A task or thread under predict keeps predict in its stack,
                        // under its own lane's root.
                        {"thread MainThread, task 1;predict;fetch", 3'000},
                        {"thread Worker;predict;work", 3'500},
                    }));
  // Depth-first, children in call order.
  EXPECT_EQ(text.substr(0, text.find('\n')), "thread MainThread;predict 11999");
}

TEST(Folded, NoLaneFrameForOneLaneAndSameStacksSummed) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), step = test::user_fn(p, "step");
  using test::call;
  using test::ret;
  p.lanes.push_back(test::make_lane(
      {call(0, predict), call(10, step), ret(30), call(40, step), ret(45), ret(100)}));
  build_tree(p);
  EXPECT_EQ(to_folded(p), "predict 75\npredict;step 25\n");
}

// Overlapping sessions of one thread share its root: a hostile document's
// spans there, each as long as a time can be, add up past int64. The value
// stops at int64's end (UBSan's signed overflow before the fix).
TEST(Folded, ValuesPastInt64StopAtItsEnd) {
  const Profile p = test::int64_overflow_fixture();
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(to_folded(p), "thread MainThread;predict 9223372036854775807\n");
}

TEST(Folded, ZeroSelfTimeStacksAreLeftOut) {
  Profile p;
  const uint32_t outer = test::user_fn(p, "outer"), inner = test::user_fn(p, "inner");
  using test::call;
  using test::ret;
  p.lanes.push_back(test::make_lane({call(0, outer), call(0, inner), ret(50), ret(50)}));
  build_tree(p);
  EXPECT_EQ(to_folded(p), "outer;inner 50\n");
}

TEST(Folded, SeparatorsInNamesAreReplaced) {
  Profile p;
  const uint32_t f = test::user_fn(p, "load;parse\nline\ttab");
  const uint32_t blank = test::user_fn(p, "");
  using test::call;
  using test::ret;
  p.lanes.push_back(test::make_lane({call(0, f), call(10, blank), ret(20), ret(30)}));
  build_tree(p);
  EXPECT_EQ(to_folded(p), "load:parse line tab 20\nload:parse line tab;? 10\n");
}

TEST(Folded, ValuesAddUpToTheSelfTimes) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const Profile p = test::random_profile(seed, 500, 6, true);
    const auto lines = parse_folded(to_folded(p));
    int64_t total = 0;
    for (const FoldedLine& l : lines) {
      EXPECT_GT(l.value, 0);
      total += l.value;
    }
    // Self times of the spans: active minus same-lane children, floored at 0.
    std::vector<int64_t> self(p.spans.size());
    for (size_t i = 0; i < p.spans.size(); ++i) self[i] = p.spans[i].active_ns;
    for (const Span& s : p.spans) {
      if (s.parent >= 0) self[s.parent] -= s.active_ns;
    }
    int64_t expected = 0;
    for (const int64_t v : self) expected += std::max<int64_t>(v, 0);
    EXPECT_EQ(total, expected) << "seed " << seed;
  }
}

TEST(Folded, SameProfileSameBytes) {
  const Profile p = test::random_profile(5, 1'000, 6, true);
  EXPECT_EQ(to_folded(p), to_folded(p));
}

}  // namespace
}  // namespace mlprof
