#include "formats/json_stream.h"

#include <gtest/gtest.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "profile_builder.h"
#include "sanitized.h"

namespace mlprof {
namespace {

std::string serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return buf.GetString();
}

rapidjson::Document dom(const std::string& text) {
  rapidjson::Document d;
  d.Parse<rapidjson::kParseFullPrecisionFlag>(text.c_str());
  return d;
}

// What the reader sees of a cell: its type, the number tests, the number.
std::string cell(const rapidjson::Value& v) {
  std::string s = std::to_string(v.GetType()) + (v.IsInt() ? "i" : "") + (v.IsUint() ? "u" : "") +
                  (v.IsInt64() ? "I" : "") + (v.IsUint64() ? "U" : "") + (v.IsDouble() ? "d" : "");
  if (v.IsInt64()) s += " " + std::to_string(v.GetInt64());
  if (v.IsUint64()) s += " " + std::to_string(v.GetUint64());
  if (v.IsDouble()) s += " " + std::to_string(v.GetDouble());
  return s;
}

// Parses `text` both ways and checks every streamed row against the DOM's.
void expect_rows_as_dom(const std::string& text) {
  rapidjson::Document doc;
  SpanRows rows;
  ASSERT_FALSE(parse_document(text, doc, rows).IsError());
  ASSERT_TRUE(rows.streamed());
  EXPECT_TRUE(doc["spans"].IsArray());
  EXPECT_EQ(doc["spans"].Size(), 0u);  // the stand-in
  const rapidjson::Document full = dom(text);
  const rapidjson::Value& want = full["spans"];
  ASSERT_EQ(rows.size(), want.Size());
  EXPECT_EQ(rows.bad_row(), SpanRows::kNone);
  rapidjson::Document row;
  for (rapidjson::SizeType i = 0; i < want.Size(); ++i) {
    rows.next_row(row, row.GetAllocator());
    ASSERT_EQ(row.Size(), want[i].Size()) << i;
    for (rapidjson::SizeType k = 0; k < row.Size(); ++k) {
      ASSERT_EQ(cell(row[k]), cell(want[i][k])) << "spans[" << i << "][" << k << "]";
    }
  }
  // The rest of the document is the DOM's.
  rapidjson::Document rest = dom(text);
  rest["spans"].SetArray();
  EXPECT_EQ(serialize(doc), serialize(rest));
}

// The document with "span_fields" moved after "spans".
std::string fields_last(const std::string& text) {
  rapidjson::Document d = dom(text);
  rapidjson::Value fields(d["span_fields"], d.GetAllocator());
  d.RemoveMember("span_fields");
  d.AddMember("span_fields", fields, d.GetAllocator());
  return serialize(d);
}

TEST(JsonStream, ADocumentsSpansStreamAsTheDomHoldsThem) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    Profile p = test::random_profile(seed, 400, 6, seed % 2 == 0);
    expect_rows_as_dom(to_json_document(p));
  }
}

TEST(JsonStream, EveryKindOfCellStreamsAsTheDomHoldsIt) {
  const std::string cells =
      "[-1, 0, 1, 127, 128, -64, -65, 2147483647, 2147483648, 4294967295, 4294967296, "
      "-2147483648, -2147483649, 9223372036854775807, -9223372036854775808, "
      "9223372036854775808, 18446744073709551615, 18446744073709551616, 1.5, -0.0, 1e300, "
      "null, true, false, \"x\", [1, [2]], {\"a\": [1]}]";
  std::string text = R"({"meta": {}, "span_fields": [)";
  for (int k = 0; k < 27; ++k) text += (k ? ", \"c" : "\"c") + std::to_string(k) + "\"";
  text += "], \"spans\": [";
  // Enough rows to fill several chunks of 1 MiB (a row takes over 100
  // bytes; half the rows under a sanitizer).
  for (int i = 0; i < (MLPROF_SANITIZED ? 20000 : 40000); ++i) text += (i ? ", " : "") + cells;
  text += R"(], "after": [[1, 2]]})";
  expect_rows_as_dom(text);
}

TEST(JsonStream, SpanFieldsAfterSpansKeepTheRowsInTheDom) {
  const std::string doc = to_json_document(test::random_profile(7, 300, 5, true));
  const std::string moved = fields_last(doc);
  rapidjson::Document d;
  SpanRows rows;
  ASSERT_FALSE(parse_document(moved, d, rows).IsError());
  EXPECT_FALSE(rows.streamed());
  EXPECT_EQ(serialize(d), serialize(dom(moved)));
  // Both ways read the same profile.
  Result<Profile> streamed = read_json_document(doc);
  Result<Profile> kept = read_json_document(moved);
  ASSERT_TRUE(streamed.ok()) << streamed.error().message;
  ASSERT_TRUE(kept.ok()) << kept.error().message;
  EXPECT_EQ(to_json_document(kept.value()), doc);
  EXPECT_EQ(to_json_document(streamed.value()), doc);
}

TEST(JsonStream, SpansThatAreNoArrayStayInTheDom) {
  const std::string text = R"({"span_fields": ["a"], "spans": {"x": [[1]]}, "b": [[2]]})";
  rapidjson::Document d;
  SpanRows rows;
  ASSERT_FALSE(parse_document(text, d, rows).IsError());
  EXPECT_FALSE(rows.streamed());
  EXPECT_EQ(serialize(d), serialize(dom(text)));
}

// Each bad row reads with the same error streamed as kept in the DOM.
TEST(JsonStream, BadRowsFailAsTheDomPathDoes) {
  using Edit = std::function<void(rapidjson::Document&)>;
  const std::vector<std::pair<Edit, std::string>> cases = {
      {[](auto& d) { d["spans"][4].PopBack(); }, "spans[4]: has 11 cells, the header names 12"},
      {[](auto& d) { d["spans"][4].PushBack(1, d.GetAllocator()); },
       "spans[4]: has 13 cells, the header names 12"},
      {[](auto& d) { d["spans"][3].SetObject(); },
       "spans[3]: expected an array (one row), found an object"},
      {[](auto& d) { d["spans"][3].SetString("row"); }, "found a string"},
      {[](auto& d) { d["spans"][3].SetDouble(2.5); }, "found a number"},
      {[](auto& d) { d["spans"][3].SetUint64(1ull << 63); }, "found an integer"},
      {[](auto& d) { d["spans"][3].SetBool(true); }, "found a boolean"},
      {[](auto& d) { d["spans"][3].SetNull(); }, "found null"},
      {[](auto& d) { d["spans"][2][0].SetInt(12); }, "spans[2]: parent 12 is not an earlier span"},
      {[](auto& d) { d["spans"][2][6].SetArray(); },
       "spans[2].start_ns: expected an integer, found an array"},
      {[](auto& d) { d["spans"][2][1].SetUint64(1ull << 63); },
       "spans[2].function: expected a non-negative 32-bit integer, found an integer"},
      {[](auto& d) { d["spans"][2][6].SetUint64(~0ull); },
       "spans[2].start_ns: expected an integer, found an integer"},
      // The first bad row is the one named, after a good row's error.
      {[](auto& d) {
         d["spans"][5].SetNull();
         d["spans"][2].PopBack();
         d["spans"][1][4].SetUint(7);
       },
       "spans[1]: depth 7 does not match"},
      {[](auto& d) {
         d["spans"][5].SetNull();
         d["spans"][2].PopBack();
       },
       "spans[2]: has 11 cells"},
  };
  const std::string doc = to_json_document(test::random_profile(3, 200, 5, false));
  for (const auto& [edit, message] : cases) {
    rapidjson::Document d = dom(doc);
    edit(d);
    const std::string text = serialize(d);
    Result<Profile> streamed = read_json_document(text);
    Result<Profile> kept = read_json_document(fields_last(text));
    ASSERT_FALSE(streamed.ok()) << message;
    ASSERT_FALSE(kept.ok()) << message;
    EXPECT_EQ(streamed.error().kind, Error::Kind::kCorrupt);
    EXPECT_EQ(streamed.error().message, kept.error().message);
    EXPECT_NE(streamed.error().message.find(message), std::string::npos)
        << streamed.error().message;
  }
}

}  // namespace
}  // namespace mlprof
