#include "formats/export.h"

#include <gtest/gtest.h>

namespace mlprof {
namespace {

TEST(FormatForPath, LongestExtensionWinsAndCaseDoesNotMatter) {
  EXPECT_EQ(format_for_path("predict.html"), ExportFormat::kHtml);
  EXPECT_EQ(format_for_path("predict.json"), ExportFormat::kJson);
  EXPECT_EQ(format_for_path("predict.json.gz"), ExportFormat::kJsonGz);
  EXPECT_EQ(format_for_path("predict.trace.json"), ExportFormat::kChromeTrace);
  EXPECT_EQ(format_for_path("/tmp/x/predict.speedscope.json"), ExportFormat::kSpeedscope);
  EXPECT_EQ(format_for_path("predict.pb.gz"), ExportFormat::kPprof);
  EXPECT_EQ(format_for_path("predict.folded"), ExportFormat::kFolded);
  EXPECT_EQ(format_for_path("Predict.JSON.GZ"), ExportFormat::kJsonGz);
  EXPECT_EQ(format_for_path("P.Trace.Json"), ExportFormat::kChromeTrace);
  EXPECT_EQ(format_for_path("predict.txt"), std::nullopt);
  EXPECT_EQ(format_for_path("predict.gz"), std::nullopt);
  EXPECT_EQ(format_for_path(""), std::nullopt);
}

TEST(FormatNames, EveryFormatRoundTripsThroughItsName) {
  for (ExportFormat f : {ExportFormat::kJson, ExportFormat::kJsonGz, ExportFormat::kChromeTrace,
                         ExportFormat::kPprof, ExportFormat::kSpeedscope, ExportFormat::kFolded,
                         ExportFormat::kHtml}) {
    EXPECT_EQ(format_from_name(format_name(f)), f);
  }
  EXPECT_EQ(format_from_name("png"), std::nullopt);
  const std::string known = known_extensions();
  for (const char* ext :
       {".html", ".json", ".json.gz", ".trace.json", ".pb.gz", ".speedscope.json", ".folded"}) {
    EXPECT_NE(known.find(ext), std::string::npos) << ext;
  }
}

}  // namespace
}  // namespace mlprof
