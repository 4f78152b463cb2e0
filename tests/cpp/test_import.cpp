#include "formats/import.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/export.h"
#include "formats/pprof_fields.h"
#include "formats/pprof_writer.h"
#include "profile_builder.h"
#include "util/file_io.h"

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

TEST(Import, FoldedCountsAreValuesAndAnEmptyStackIsIdle) {
  auto r = import_folded(" 2\na (x.py:1);b (x.py:5) 3\nc 0\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& s = std::get<StackSamples>(r.value());
  ASSERT_EQ(s.samples.size(), 2u);  // a line is a sample; a line counted 0 times holds nothing
  EXPECT_EQ(s.count_type(), 0);
  EXPECT_TRUE(s.samples[0].frames.empty());
  EXPECT_EQ(s.samples[0].values, std::vector<int64_t>{2});
  ASSERT_EQ(s.samples[1].frames.size(), 2u);
  EXPECT_EQ(s.samples[1].values, std::vector<int64_t>{3});
  EXPECT_EQ(s.functions.strings().get(s.functions.get(s.samples[1].frames[1].function).name), "b");
  EXPECT_EQ(s.samples[1].frames[1].line, 5);
  EXPECT_FALSE(import_folded("a;b notanumber\n").ok());
}

TEST(Import, FoldedCountsDoNotGrowTheSamples) {
  // Issue 44's mutant: 122 bytes whose counts were about 5 million a line
  // once became 15 million rows. Now 3 samples, the counts exact.
  auto r = import_folded("main;load 5000000\nmain;score 4999999\nmain 5000001\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& s = std::get<StackSamples>(r.value());
  ASSERT_EQ(s.samples.size(), 3u);
  int64_t total = 0;
  for (const auto& x : s.samples) total += StackSamples::weight(x, s.count_type());
  EXPECT_EQ(total, 15000000);
}

TEST(Import, FoldedCountsPast2To62OrStacksTooDeepAreRefused) {
  auto sum = import_folded("a 4611686018427387903\nb 1\nc 2\n");
  ASSERT_FALSE(sum.ok());
  EXPECT_EQ(sum.error().message, "its counts add up past 2^62 by line 3");
  std::string deep;
  for (size_t i = 0; i < kMaxStackDepth; ++i) deep += "f;";
  auto at_limit = import_folded(deep.substr(0, deep.size() - 1) + " 1\n");
  ASSERT_TRUE(at_limit.ok()) << at_limit.error().message;
  auto past = import_folded(deep + "g 1\n");
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.error().message, "line 1's stack is deeper than 100000 frames");
}

// A pprof of one function at one location with `lines` lines, and `samples`
// samples each naming that location `refs` times, counted `count` times.
std::string pprof_of(size_t lines, size_t refs, size_t samples, int64_t count) {
  namespace f = pprof_field;
  pprof::ProtoWriter out, vt, fn, loc, line, sample;
  vt.uint_field(f::kValueTypeType, 1);
  vt.uint_field(f::kValueTypeUnit, 2);
  out.message_field(f::kSampleType, vt);
  sample.packed_field(f::kSampleLocationId, std::vector<uint64_t>(refs, 1));
  sample.packed_field(f::kSampleValue, std::vector<int64_t>{count});
  for (size_t i = 0; i < samples; ++i) out.message_field(f::kSample, sample);
  line.uint_field(f::kLineFunctionId, 1);
  line.int_field(f::kLineLine, 7);
  loc.uint_field(f::kLocationId, 1);
  for (size_t i = 0; i < lines; ++i) loc.message_field(f::kLocationLine, line);
  out.message_field(f::kLocation, loc);
  fn.uint_field(f::kFunctionId, 1);
  fn.uint_field(f::kFunctionName, 3);
  out.message_field(f::kFunction, fn);
  for (const char* str : {"", "samples", "count", "f"}) out.bytes_field(f::kStringTable, str);
  return out.bytes();
}

TEST(Import, APprofSampleKeepsItsCountAsAValue) {
  auto r = import_pprof(pprof_of(1, 2, 3, 1000000000));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& s = std::get<StackSamples>(r.value());
  ASSERT_EQ(s.samples.size(), 3u);
  EXPECT_EQ(s.samples[0].values, std::vector<int64_t>{1000000000});
  EXPECT_EQ(s.samples[0].frames.size(), 2u);
  auto zero = import_pprof(pprof_of(1, 2, 3, 0));  // counted 0 times: nothing to hold
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(std::get<StackSamples>(zero.value()).samples.empty());
}

TEST(Import, APprofWhoseFramesMultiplyIsRefused) {
  // 100 lines at one location, named 1,000 times by each of 11 samples:
  // 1.1 million frames from a file of about 12 KB.
  const std::string raw = pprof_of(100, 1000, 11, 1);
  ASSERT_LT(raw.size(), 16000u);
  auto r = import_pprof(raw);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("hold more than 1000000 frames"), std::string::npos)
      << r.error().message;
  auto deep = import_pprof(pprof_of(1000, 101, 1, 1));  // 101,000 frames in one stack
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.error().message.find("deeper than 100000 frames"), std::string::npos)
      << deep.error().message;
  auto sum = import_pprof(pprof_of(1, 1, 2, int64_t{1} << 62));
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.error().message.find("samples values add up past 2^62"), std::string::npos)
      << sum.error().message;
}

TEST(Import, AGzipBombIsRefusedBeforeItInflates) {
  // 10 MB of zeros gzip to about 10 KB: far past 100 times, and under the
  // 64 MiB floor, so it reads; 80 MiB does not.
  const std::string small = gzip_compress(std::string(size_t{10} << 20, '\0'));
  auto ok = gzip_decompress(small, gzip_input_limit(small.size()));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  const std::string bomb = gzip_compress(std::string(size_t{80} << 20, ' '));
  auto r = import_profile(bomb);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kUnsupported);
  EXPECT_NE(r.error().message.find("inflate to more than 67108864 bytes"), std::string::npos)
      << r.error().message;
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

TEST(Import, EntriesThatAreNotObjectsAreRefused) {
  // fuzz_import_speedscope's finding: an event that was an array reached
  // FindMember, rapidjson's assertion (and undefined behaviour without one).
  const std::string head =
      R"({"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": )"
      R"([{"name": "f"}]}, "profiles": [{"type": "evented", "name": "t", "unit": "milliseconds", )"
      R"("startValue": 0, "endValue": 10, "events": )";
  auto event = import_speedscope(head + R"([{"type": "O", "frame": 0, "at": 2}, [1, 2]]}]})");
  ASSERT_FALSE(event.ok());
  EXPECT_EQ(event.error().message, "not a speedscope file: an event lacks its type, time or frame");
  auto profile = import_speedscope(
      R"({"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": )"
      R"({"frames": [{"name": "f"}]}, "profiles": [[], 3]})");
  EXPECT_FALSE(profile.ok());
  auto chrome = import_chrome_trace(R"({"traceEvents": [[1], "X", {"ph": "X", "ts": 1, "dur": 2,
      "name": "f"}]})");
  ASSERT_TRUE(chrome.ok()) << chrome.error().message;
}

TEST(Import, ASpeedscopeFileWithNoProfilesSaysItHoldsNoSamples) {
  // What py-spy 0.4.3 writes when it took no sample (CI: a target that ended
  // before a starved py-spy sampled it).
  auto r = import_speedscope(
      R"({"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[],)"
      R"("shared":{"frames":[]},"activeProfileIndex":null,"exporter":"py-spy@0.4.3",)"
      R"("name":"py-spy profile"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "the speedscope file holds no profiles: its tool recorded no samples");
  auto no_frames = import_speedscope(R"({"profiles": [{"type": "sampled"}]})");
  ASSERT_FALSE(no_frames.ok());
  EXPECT_EQ(no_frames.error().message, "not a speedscope file: no shared.frames or no profiles");
}

TEST(Import, ALoneSurrogateEscapeIsRefused) {
  // fuzz_import_speedscope: a frame named "\\uDDD6" was read into a name that
  // is not UTF-8, and the document the profile was saved as did not read back.
  auto speedscope = import_speedscope(
      R"({"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": )"
      R"([{"name": "f\uDDD6"}]}, "profiles": [{"type": "evented", "name": "t", "unit": )"
      R"("milliseconds", "startValue": 0, "endValue": 10, "events": [{"type": "O", "frame": 0, )"
      R"("at": 2}, {"type": "C", "frame": 0, "at": 5}]}]})");
  ASSERT_FALSE(speedscope.ok());
  EXPECT_EQ(speedscope.error().message,
            "not speedscope JSON: invalid at offset 99 (a \\u escape of a lone UTF-16 surrogate, "
            "which is no character)");
  auto chrome =
      import_chrome_trace(R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "name": "\udc00"}]})");
  ASSERT_FALSE(chrome.ok());
  EXPECT_NE(chrome.error().message.find("lone UTF-16 surrogate"), std::string::npos)
      << chrome.error().message;
  auto pair = import_chrome_trace(
      R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "name": "\ud83d\ude00"}]})");
  ASSERT_TRUE(pair.ok()) << pair.error().message;
}

TEST(Import, ChromeTraceIdsThatAreNotIntegersAreThreadZero) {
  // fuzz_import_chrome's first finding: GetInt64 of a pid of 1.5 (or a tid
  // past int64) was rapidjson's assertion, and garbage without assertions.
  auto r = import_chrome_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 2, \"pid\": 1.5, "
      "\"tid\": 1e30, \"name\": \"f\"}, {\"ph\": \"X\", \"ts\": 4, \"dur\": 2, \"pid\": "
      "18446744073709551615, \"tid\": -3, \"name\": \"g\"}]}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& p = std::get<Profile>(r.value());
  ASSERT_EQ(p.spans.size(), 2u);
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
