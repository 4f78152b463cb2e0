// The HTML report as a file: one self-contained page, the profile document
// embedded intact and unbreakable by user text. What the page shows is
// tested in a real browser (tests/python/test_html_report.py).
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <string_view>

#include "formats/export.h"
#include "formats/json_doc.h"
#include "model/summary.h"
#include "profile_builder.h"
#include "render/render_text.h"

namespace mlprof {
namespace {

using test::call;
using test::make_lane;
using test::ret;

constexpr std::string_view kAttack = "</script><script>alert(1)</script><!--";

// The text of the <script type="application/json" id="..."> block.
std::string json_block(const std::string& html, const std::string& id) {
  const std::string open = "<script type=\"application/json\" id=\"" + id + "\">";
  const size_t at = html.find(open);
  if (at == std::string::npos) return {};
  const size_t from = at + open.size();
  const size_t end = html.find("</script>", from);
  if (end == std::string::npos) return {};
  return html.substr(from, end - from);
}

// "\u003c" back to '<': what JSON.parse reads from the block.
std::string unescape_lt(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t from = 0;
  for (size_t at = s.find("\\u003c"); at != std::string::npos; at = s.find("\\u003c", from)) {
    out.append(s, from, at - from);
    out += '<';
    from = at + 6;
  }
  out.append(s, from, std::string::npos);
  return out;
}

size_t count(std::string_view haystack, std::string_view needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string_view::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

class HtmlReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t predict = test::user_fn(p, "predict");
    const uint32_t evil = test::user_fn(p, std::string(kAttack));
    p.start_ns = 1'000;
    p.end_ns = 90'000;
    p.meta = {{"engine", "sys.monitoring"}, {"host", "box"}};
    // clang-format off
    p.lanes.push_back(make_lane({
        call(1'100, predict),
        call(1'200, evil), ret(40'000),
        ret(80'000),
    }));
    p.lanes.push_back(make_lane({call(2'000, predict), ret(3'000)}, "worker"));
    // clang-format on
    build_tree(p);
    SpanIO in;
    in.span = 0;
    in.name = "df";
    in.summary.type_name = "pandas.core.frame.DataFrame";
    in.summary.has_shape = true;
    in.summary.shape = {1000, 50};
    in.summary.dtype = "float64";
    in.summary.size_bytes = 400 * 1024;
    SpanIO out;
    out.span = 1;
    out.role = IORole::kReturn;
    out.summary.type_name = "str";
    out.summary.length = 5;
    out.summary.repr_short = std::string(kAttack);
    p.io = {in, out};
    html = to_html_report(p);
  }

  Profile p;
  std::string html;
};

TEST_F(HtmlReportTest, IsOnePageWithTheDocumentEmbeddedIntact) {
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(count(html, "id=\"mlprof-doc\""), 1u);
  EXPECT_EQ(unescape_lt(json_block(html, "mlprof-doc")), to_json_document(p));
  EXPECT_NE(html.find("</html>"), std::string::npos);
  // The CSS and the script are inlined by the build, not linked.
  EXPECT_EQ(html.find("href=\"report.css\""), std::string::npos);
  EXPECT_EQ(html.find("src=\"report.js\""), std::string::npos);
  EXPECT_NE(html.find("<style>"), std::string::npos);
  EXPECT_NE(html.find("window.mlprofReport"), std::string::npos);
}

TEST_F(HtmlReportTest, UserTextCannotBreakOutOfTheDataBlocks) {
  // The only script elements are the page's own three: the two data blocks
  // and the inline code. A name or repr holding "</script><script>" adds none.
  EXPECT_EQ(count(html, "<script"), 3u);
  EXPECT_EQ(count(html, "</script>"), 3u);
  EXPECT_EQ(html.find(kAttack), std::string::npos);
  EXPECT_EQ(html.find("alert(1)</script>"), std::string::npos);
  // The escaped text still reads back as the user's string.
  rapidjson::Document doc;
  const std::string text = json_block(html, "mlprof-doc");
  doc.Parse(text.c_str(), text.size());
  ASSERT_FALSE(doc.HasParseError());
  bool found = false;
  for (const auto& s : doc["strings"].GetArray())
    found = found || std::string_view(s.GetString()) == kAttack;
  EXPECT_TRUE(found);
  EXPECT_EQ(html.find("<!--", html.find("id=\"mlprof-doc\"")), std::string::npos);
}

TEST_F(HtmlReportTest, EmbedsWhatTheCoreFormats) {
  rapidjson::Document extras;
  const std::string text = json_block(html, "mlprof-extras");
  extras.Parse(text.c_str(), text.size());
  ASSERT_FALSE(extras.HasParseError()) << text;
  const auto& io_text = extras["io_text"];
  ASSERT_EQ(io_text.Size(), 2u);
  EXPECT_STREQ(io_text[0].GetString(), "(DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)");
  EXPECT_EQ(std::string(io_text[1].GetString()), format_io(p.io[1].summary));
  const auto& titles = extras["lane_titles"];
  ASSERT_EQ(titles.Size(), 2u);
  EXPECT_STREQ(titles[0].GetString(), "thread MainThread");
  EXPECT_STREQ(titles[1].GetString(), "thread worker");
}

TEST_F(HtmlReportTest, NeedsNoNetworkNorStorage) {
  // Inside MLflow's artifact viewer (iframe sandbox="allow-scripts") there
  // is no network and storage throws: the page must use neither.
  for (const char* banned :
       {"http://", "https://", "fetch(", "XMLHttpRequest", "localStorage", "sessionStorage",
        "document.cookie", "@import", "url(", "<link", "src=", "import("}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  }
}

TEST(HtmlReport, AnEmptyProfileIsStillAPage) {
  Profile p;
  const std::string html = to_html_report(p);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(unescape_lt(json_block(html, "mlprof-doc")), to_json_document(p));
  EXPECT_NE(html.find("\"io_text\":[]"), std::string::npos);
}

TEST(HtmlReport, ABigProfileIsTheDocumentPlusAFixedTemplate) {
  const Profile p = test::random_profile(3, 20'000, 6, true);
  const std::string html = to_html_report(p);
  const std::string doc = to_json_document(p);
  EXPECT_EQ(unescape_lt(json_block(html, "mlprof-doc")), doc);
  // No per-span overhead beyond the document: the template is the rest.
  EXPECT_LT(html.size(), doc.size() + 100'000);
}

}  // namespace
}  // namespace mlprof
