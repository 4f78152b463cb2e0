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

TEST(Import, FoldedTextThatIsNotUtf8IsRefusedWithItsLineAndByte) {
  auto ok = import_folded("main;na\xc3\xafve;\xe6\x97\xa5\xf0\x9f\x98\x80 2\n");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  auto bad = import_folded("a 1\nmain;caf\xe9 3\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "line 2 is not UTF-8 text (byte 0xe9 at offset 8)");
}

TEST(Import, JsonStringsThatAreNotUtf8AreRefused) {
  auto chrome = import_chrome_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 2, \"name\": \"caf\xe9\"}]}");
  ASSERT_FALSE(chrome.ok());
  EXPECT_NE(chrome.error().message.find("Invalid encoding"), std::string::npos)
      << chrome.error().message;
}

TEST(Import, TimesOutOfRangeOrGoingBackAreRefused) {
  for (const char* json : {
           R"({"traceEvents": [{"ph": "X", "ts": 1e300, "dur": 2, "name": "f"}]})",
           R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1e16, "name": "f"}]})",
           R"({"traceEvents": [{"ph": "B", "ts": -1e17, "name": "f"}]})",
       }) {
    auto r = import_chrome_trace(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.error().message.find("out of range"), std::string::npos) << r.error().message;
  }
  const std::string head =
      R"({"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": )"
      R"([{"name": "f"}]}, "profiles": [{"type": "evented", "name": "t", "unit": "milliseconds", )"
      R"("startValue": 0, "endValue": 10, "events": )";
  auto back = import_speedscope(
      head + R"([{"type": "O", "frame": 0, "at": 5}, {"type": "C", "frame": 0, "at": 2}]}]})");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.error().message, "not a speedscope file: profile 0's event 1 goes back in time");
  auto fine = import_speedscope(
      head + R"([{"type": "O", "frame": 0, "at": 2}, {"type": "C", "frame": 0, "at": 5}]}]})");
  ASSERT_TRUE(fine.ok()) << fine.error().message;
  const Profile& p = std::get<Profile>(fine.value());
  ASSERT_EQ(p.spans.size(), 1u);
  EXPECT_EQ(p.spans[0].end_ns - p.spans[0].start_ns, 3'000'000);
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

TEST(Import, APprofStringThatIsNotUtf8IsRefused) {
  // sample_type {type: 1, unit: 2}; string_table "", "samples", "count", "f\xa2".
  const std::string raw(
      "\x0a\x04\x08\x01\x10\x02\x32\x00\x32\x07samples\x32\x05"
      "count\x32\x02"
      "f\xa2",
      28);
  auto r = import_pprof(raw);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "not a pprof profile: string 3 of its string table is not UTF-8 text (byte 0xa2 at "
            "offset 1)");
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
