#include "formats/json_numbers.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/memorystream.h>

#include <string>
#include <string_view>

namespace mlprof {
namespace {

// `text` (a JSON array) parsed as the core's readers parse it.
rapidjson::Document parse_numbers(std::string_view text, rapidjson::ParseResult* result = nullptr) {
  rapidjson::Document doc;
  rapidjson::ParseResult r;
  auto generate = [&](rapidjson::Document& d) {
    rapidjson::MemoryStream ms(text.data(), text.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> is(ms);
    rapidjson::Reader reader;
    NumbersAsValues<rapidjson::Document> numbers(d);
    r = reader.Parse<kJsonParseFlags>(is, numbers);
    return !r.IsError();
  };
  doc.Populate(generate);
  if (result) *result = r;
  return doc;
}

TEST(JsonNumbers, AZeroSignificandWithAnExponentIsZero) {
  // rapidjson 1.1.0's full precision read these as -6.06e-269 and 8.06e+264
  // (fuzz_document's finding).
  const auto d = parse_numbers("[0e308, 0.000000000000000000000e100, -0e-300, 0.0e5]");
  ASSERT_TRUE(d.IsArray());
  for (const auto& v : d.GetArray()) {
    ASSERT_TRUE(v.IsDouble());
    EXPECT_EQ(v.GetDouble(), 0.0);
  }
}

TEST(JsonNumbers, IntegersTakeTheNarrowestTypeAsRapidjsonDoes) {
  const auto d = parse_numbers(
      "[5, -5, 4294967296, -2147483649, 18446744073709551615, 18446744073709551616, "
      "-9223372036854775809]");
  ASSERT_TRUE(d.IsArray());
  EXPECT_TRUE(d[0].IsUint() && d[0].GetUint() == 5u);
  EXPECT_TRUE(d[1].IsInt() && d[1].GetInt() == -5);
  EXPECT_TRUE(d[2].IsUint64() && !d[2].IsUint() && d[2].GetUint64() == 4294967296u);
  EXPECT_TRUE(d[3].IsInt64() && !d[3].IsInt() && d[3].GetInt64() == -2147483649);
  EXPECT_TRUE(d[4].IsUint64() && d[4].GetUint64() == 18446744073709551615u);
  EXPECT_TRUE(d[5].IsDouble() && d[5].GetDouble() == 18446744073709551616.0);  // past 64 bits
  EXPECT_TRUE(d[6].IsDouble() && d[6].GetDouble() == -9223372036854775809.0);
}

TEST(JsonNumbers, DoublesAreCorrectlyRoundedAndOutOfRangeIsZeroOrRefused) {
  const auto d =
      parse_numbers("[0.1, 1.7976931348623157e308, 2.2250738585072014e-308, 1e-400, -1e-400]");
  ASSERT_TRUE(d.IsArray());
  EXPECT_EQ(d[0].GetDouble(), 0.1);
  EXPECT_EQ(d[1].GetDouble(), 1.7976931348623157e308);
  EXPECT_EQ(d[2].GetDouble(), 2.2250738585072014e-308);
  EXPECT_EQ(d[3].GetDouble(), 0.0);  // too small: zero, as rapidjson reads it
  EXPECT_EQ(d[4].GetDouble(), 0.0);
  rapidjson::ParseResult r;
  parse_numbers("[1, 1.8e308]", &r);
  // Too big: refused where it starts, in rapidjson's words.
  EXPECT_EQ(std::string(json_parse_error_text(r.Code())), "Number too big to be stored in double.");
  EXPECT_EQ(r.Offset(), 4u);
}

TEST(JsonNumbers, TheLeadingPowerOfTen) {
  EXPECT_EQ(json_detail::leading_power_of_ten("120"), 2);
  EXPECT_EQ(json_detail::leading_power_of_ten("0.05e3"), 1);
  EXPECT_EQ(json_detail::leading_power_of_ten("-0.0005"), -4);
  EXPECT_EQ(json_detail::leading_power_of_ten("0.000"), 0);
  EXPECT_GT(json_detail::leading_power_of_ten("1e99999999999999999999"), 400);
}

TEST(JsonNumbers, ALoneLowSurrogateEscapeIsFound) {
  // fuzz_import_speedscope's second finding: rapidjson 1.1.0 took "\\uDDD6"
  // and wrote bytes that are not UTF-8, which no reader took back.
  constexpr size_t npos = std::string_view::npos;
  EXPECT_EQ(lone_surrogate_escape(R"(["a\uDDD6b"])"), 3u);
  EXPECT_EQ(lone_surrogate_escape(R"(["\u00e9", "\udc00"])"), 12u);
  EXPECT_EQ(lone_surrogate_escape(R"(["\uD83D\uDE00", "\ud83d\ude00"])"), npos);  // pairs
  EXPECT_EQ(lone_surrogate_escape(R"(["\\uDC00"])"), npos);  // an escaped backslash, then text
  EXPECT_EQ(lone_surrogate_escape(R"(["\uD83D\uDE00\uDE00"])"), 14u);  // the second low
  EXPECT_EQ(lone_surrogate_escape(R"(["\uDC0"])"), npos);  // not an escape: rapidjson refuses it
  EXPECT_EQ(lone_surrogate_escape(""), npos);
  EXPECT_EQ(lone_surrogate_escape("\\"), npos);
}

}  // namespace
}  // namespace mlprof
