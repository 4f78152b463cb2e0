#include "formats/import.h"

#include <gtest/gtest.h>

#include <string>

#include "formats/export.h"
#include "profile_builder.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::ret;

TEST(Import, FrameNamesSplitIntoNameFileAndLine) {
  const FrameName a = parse_frame_name("leaf (/tmp/spy_target.py:4)");
  EXPECT_EQ(a.name, "leaf");
  EXPECT_EQ(a.file, "/tmp/spy_target.py");
  EXPECT_EQ(a.line, 4);
  const FrameName b = parse_frame_name("Series.__truediv__");
  EXPECT_EQ(b.name, "Series.__truediv__");
  EXPECT_EQ(b.line, 0);
  EXPECT_EQ(parse_frame_name("f (no line here)").name, "f (no line here)");
}

TEST(Import, DetectsEachFormatByContent) {
  EXPECT_EQ(detect_input(R"({"traceEvents": []})"), InputFormat::kChromeTrace);
  EXPECT_EQ(detect_input(R"([{"ph": "X"}])"), InputFormat::kChromeTrace);
  EXPECT_EQ(detect_input(R"({"$schema": "https://www.speedscope.app/file-format-schema.json"})"),
            InputFormat::kSpeedscope);
  EXPECT_EQ(detect_input(R"({"meta": {"format": "mlflow-profiler"}})"), InputFormat::kDocument);
  EXPECT_EQ(detect_input(" 2\na;b 3\n"), InputFormat::kFolded);
  EXPECT_EQ(detect_input(std::string("\x0a\x04\x08\x01\x10\x02", 6)), InputFormat::kPprof);
  EXPECT_EQ(detect_input("hello world"), InputFormat::kUnknown);
}

TEST(Import, FoldedCountsExpandAndAnEmptyStackIsIdle) {
  auto r = import_folded(" 2\na (x.py:1);b (x.py:5) 3\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& s = std::get<StackSamples>(r.value());
  ASSERT_EQ(s.samples.size(), 5u);
  EXPECT_TRUE(s.samples[0].frames.empty());
  ASSERT_EQ(s.samples[4].frames.size(), 2u);
  EXPECT_EQ(s.functions.strings().get(s.functions.get(s.samples[4].frames[1].function).name), "b");
  EXPECT_EQ(s.samples[4].frames[1].line, 5);
  EXPECT_FALSE(import_folded("a;b notanumber\n").ok());
}

TEST(Import, ChromeTraceNestsByTimeAndClampsAChildToItsParent) {
  auto r = import_chrome_trace(R"json({"traceEvents": [
      {"ph": "X", "pid": 1, "tid": 2, "ts": 10, "dur": 10, "name": "outer (a.py:1)"},
      {"ph": "X", "pid": 1, "tid": 2, "ts": 12, "dur": 30, "name": "inner"},
      {"ph": "X", "pid": 1, "tid": 3, "ts": 0, "dur": 1, "name": "other"}]})json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Profile& p = std::get<Profile>(r.value());
  ASSERT_EQ(p.lanes.size(), 2u);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.display_name(p.spans[0]), "outer");
  EXPECT_EQ(p.spans[1].parent, 0);
  EXPECT_EQ(p.spans[1].end_ns, 20000);  // ends with its parent (clock rounding)
  EXPECT_EQ(p.meta.at("pid"), "1");
}

TEST(Import, OurPprofExportReadsBackAsOneSamplePerSpan) {
  Profile p;
  p.start_ns = 0;
  p.end_ns = 100;
  const uint32_t a = test::user_fn(p, "predict"), b = test::user_fn(p, "encode");
  p.lanes.push_back(make_lane({call(0, a), call(10, b), ret(40), ret(100)}));
  build_tree(p);
  auto r = import_profile(export_profile(p, ExportFormat::kPprof));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& s = std::get<StackSamples>(r.value());
  ASSERT_EQ(s.samples.size(), 2u);
  EXPECT_EQ(s.value_types.at(0), std::make_pair(std::string("calls"), std::string("count")));
  EXPECT_EQ(s.value_types.at(1), std::make_pair(std::string("wall"), std::string("nanoseconds")));
  int64_t wall = 0;
  for (const auto& x : s.samples) wall += x.values.at(1);
  EXPECT_EQ(wall, 100);  // self times: 70 + 30
}

TEST(Import, ACutOffPprofIsTruncated) {
  Profile p;
  p.lanes.push_back(make_lane({call(0, test::user_fn(p, "f")), ret(5)}));
  build_tree(p);
  const std::string raw = export_profile(p, ExportFormat::kPprof);
  auto whole = import_profile(raw);
  ASSERT_TRUE(whole.ok());
  auto cut = import_profile(raw.substr(0, raw.size() / 2));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().kind, Error::Kind::kTruncated) << cut.error().message;
}

}  // namespace
}  // namespace mlprof
