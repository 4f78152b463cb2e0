#pragma once
// The core tests' reading of a JSON text they had written: a parse error
// fails the test, with the offset and the text.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

namespace mlprof::test {

inline rapidjson::Document parse_json(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << "offset " << doc.GetErrorOffset() << " in " << text;
  return doc;
}

}  // namespace mlprof::test
