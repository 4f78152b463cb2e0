#include "formats/export_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "export_fixture.h"
#include "perfetto_ts.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using export_util::RunInterval;

using test::double_ns;
using test::textual_ns;

std::string us(int64_t ns) {
  std::string out;
  export_util::append_us(out, ns);
  return out;
}

TEST(AppendUs, WritesMicrosecondsWithoutTrailingZeros) {
  EXPECT_EQ(us(0), "0");
  EXPECT_EQ(us(1'000), "1");
  EXPECT_EQ(us(1'500), "1.5");
  EXPECT_EQ(us(1'230), "1.23");
  EXPECT_EQ(us(7), "0.007");
  EXPECT_EQ(us(-2'500), "-2.5");
}

TEST(AppendUs, AddsADigitWhereADoubleReaderWouldLoseANanosecond) {
  // 1.001 parses to 1.00099999..., times 1000 truncates to 1000.
  ASSERT_EQ(double_ns("1.001"), 1'000);
  EXPECT_EQ(us(1'001), "1.0011");
  EXPECT_EQ(textual_ns("1.0011"), 1'001);
  EXPECT_EQ(double_ns("1.0011"), 1'001);
}

TEST(AppendUs, EveryNanosecondSurvivesBothReadings) {
  // Small values, values around a trace's length, and an hour into one.
  std::vector<int64_t> values;
  for (int64_t v = 0; v < 200'000; ++v) values.push_back(v);
  for (int64_t v = 1'000'000'000; v < 1'000'100'000; ++v) values.push_back(v);
  for (int64_t v = 3'600'000'000'000; v < 3'600'000'050'000; ++v) values.push_back(v);
  int bumped = 0;
  for (const int64_t v : values) {
    const std::string text = us(v);
    ASSERT_EQ(textual_ns(text), v) << text;
    ASSERT_EQ(double_ns(text), v) << text;
    bumped += text.size() > 4 && text[text.size() - 5] == '.';
  }
  EXPECT_GT(bumped, 0);  // the fourth digit was needed somewhere
}

TEST(SelfTimes, SubtractSameLaneChildrenOnly) {
  const Profile p = test::export_profile_fixture();
  const std::vector<int64_t> self = export_util::self_times(p);
  auto self_of = [&](const std::string& name) {
    for (size_t i = 0; i < p.spans.size(); ++i) {
      if (p.display_name(p.spans[i]) == name) return self[i];
    }
    return int64_t{-1};
  };
  // fetch and work (other lanes) are not subtracted from predict.
  EXPECT_EQ(self_of("predict"), 11'999);
  EXPECT_EQ(self_of("preprocess"), 1'500);
  EXPECT_EQ(self_of("produce"), 2'000);
  EXPECT_EQ(self_of("consume"), 2'000);
  EXPECT_EQ(self_of("my label"), 500);
  EXPECT_EQ(self_of("fetch"), 3'000);
  EXPECT_EQ(self_of("work"), 3'500);
}

TEST(SelfTimes, NeverNegative) {
  // A generator resumed under another caller: its parent lost the time
  // twice over in this hand-made case.
  Profile p;
  const uint32_t f = test::user_fn(p, "f"), g = test::user_fn(p, "g");
  p.lanes.push_back(
      test::make_lane({test::call(0, f), test::call(10, g), test::ret(100), test::ret(20)}));
  build_tree(p);
  p.spans[1].active_ns = 1'000;  // more than its parent ran
  for (const int64_t v : export_util::self_times(p)) EXPECT_GE(v, 0);
}

TEST(LaneIntervals, GeneratorsBySegmentInStackOrder) {
  const Profile p = test::export_profile_fixture();
  const auto lanes = export_util::lane_intervals(p);
  ASSERT_EQ(lanes.size(), 3u);
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> times;
  for (const RunInterval& iv : lanes[0]) {
    names.push_back(p.display_name(p.spans[iv.span]));
    times.emplace_back(iv.start_ns, iv.end_ns);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"predict", "preprocess", "produce", "consume",
                                             "produce", "produce", "my label"}));
  EXPECT_EQ(times, (std::vector<std::pair<int64_t, int64_t>>{{2'001, 20'000},
                                                             {3'000, 4'500},
                                                             {5'000, 6'000},
                                                             {7'000, 9'000},
                                                             {7'500, 8'000},
                                                             {9'500, 10'000},
                                                             {11'000, 11'500}}));
  EXPECT_EQ(lanes[0][4].segment, 2u);
  EXPECT_EQ(lanes[0][4].segments, 3u);
}

TEST(LaneIntervals, RepairsOverlapsAndNegativeLengths) {
  Profile p;
  const uint32_t f = test::user_fn(p, "f");
  p.lanes.push_back(test::make_lane({test::call(0, f), test::ret(100), test::call(200, f),
                                     test::ret(300), test::call(400, f), test::ret(500)}));
  build_tree(p);
  // As a hand-edited document could have them: the second span overlaps the
  // first one's end and the third ends before it starts.
  p.spans[0].end_ns = 150;
  p.spans[1].start_ns = 50;
  p.spans[1].end_ns = 300;
  p.spans[2].end_ns = 350;
  const auto lanes = export_util::lane_intervals(p);
  ASSERT_EQ(lanes[0].size(), 3u);
  EXPECT_EQ(lanes[0][1].start_ns, 50);
  EXPECT_EQ(lanes[0][1].end_ns, 150);  // clipped to the span it starts inside
  EXPECT_EQ(lanes[0][2].start_ns, 400);
  EXPECT_EQ(lanes[0][2].end_ns, 400);
}

TEST(FlagText, NamesTheFlagsAReaderCaresAbout) {
  EXPECT_EQ(export_util::flag_text(0), "");
  EXPECT_EQ(export_util::flag_text(kSpanGenerator | kSpanLabelled), "");
  EXPECT_EQ(export_util::flag_text(kSpanException | kSpanOpenAtEnd), "exception, open at end");
}

}  // namespace
}  // namespace mlprof
