#include "model/summary.h"

#include <gtest/gtest.h>

namespace mlprof {
namespace {

TEST(FormatBytes, OneDecimal1024Based) {
  EXPECT_EQ(format_bytes(0), "0B");
  EXPECT_EQ(format_bytes(1023), "1023B");
  EXPECT_EQ(format_bytes(1024), "1.0KB");
  EXPECT_EQ(format_bytes(8000), "7.8KB");      // docs/design/capture.md, "The text tree"
  EXPECT_EQ(format_bytes(40000), "39.1KB");    // float32 (1000, 10)
  EXPECT_EQ(format_bytes(512000), "500.0KB");  // float32 (1000, 128)
  EXPECT_EQ(format_bytes(3LL << 30), "3.0GB");
  EXPECT_EQ(format_bytes(5LL << 50), "5.0PB");
}

TEST(FormatIo, SpecShapes) {
  IOSummary df;
  df.type_name = "pandas.core.frame.DataFrame";
  df.has_shape = true;
  df.shape = {1000, 50};
  df.dtype = "float64";
  df.length = 1000;
  df.size_bytes = 400 * 1024;
  EXPECT_EQ(format_io(df), "(DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)");

  IOSummary vec;
  vec.type_name = "numpy.ndarray";
  vec.has_shape = true;
  vec.shape = {1000};
  vec.dtype = "int64";
  vec.size_bytes = 8000;
  EXPECT_EQ(format_io(vec), "(ndarray, shape=(1000,), dtype=int64, 7.8KB)");

  IOSummary scalar0d;
  scalar0d.type_name = "numpy.float64";
  scalar0d.has_shape = true;
  scalar0d.dtype = "float64";
  scalar0d.repr_short = "0.5";
  EXPECT_EQ(format_io(scalar0d), "(float64, shape=(), dtype=float64, 0.5)");
}

TEST(FormatIo, DeviceLengthReprAndUnknownDims) {
  IOSummary t;
  t.type_name = "torch.Tensor";
  t.has_shape = true;
  t.shape = {-1, 128};
  t.dtype = "float32";
  t.device = "cuda:0";
  t.size_bytes = 4096;
  EXPECT_EQ(format_io(t), "(Tensor, shape=(?, 128), dtype=float32, device=cuda:0, 4.0KB)");

  IOSummary s;
  s.type_name = "str";
  s.length = 5;
  s.repr_short = "'hello'";
  EXPECT_EQ(format_io(s), "(str, len=5, 'hello')");

  IOSummary none;
  none.type_name = "NoneType";
  EXPECT_EQ(format_io(none), "(NoneType)");
  EXPECT_EQ(format_io(IOSummary{}), "(?)");
}

TEST(ShortTypeName, LastDottedComponent) {
  EXPECT_EQ(short_type_name("pandas.core.frame.DataFrame"), "DataFrame");
  EXPECT_EQ(short_type_name("list"), "list");
  EXPECT_EQ(short_type_name(""), "");
}

// ---- parse_io_text ----------------------------------------------------------------

TEST(ParseIoText, GivesBackFieldsThatFormatToTheSameText) {
  std::vector<IOSummary> cases;
  IOSummary s;
  s.type_name = "DataFrame";
  s.has_shape = true;
  s.shape = {1000, 50};
  s.dtype = "float64,object";
  s.size_bytes = 409600;
  cases.push_back(s);
  s = {};
  s.type_name = "Tensor";
  s.has_shape = true;
  s.shape = {8, -1};
  s.dtype = "float32";
  s.device = "cuda:0";
  s.size_bytes = 4096;
  cases.push_back(s);
  s = {};
  s.type_name = "ndarray";
  s.has_shape = true;
  s.shape = {7};
  s.size_bytes = 56;
  cases.push_back(s);
  s = {};
  s.type_name = "ndarray";
  s.has_shape = true;  // 0-d
  s.size_bytes = 8;
  cases.push_back(s);
  s = {};
  s.type_name = "list";
  s.length = 3;
  s.size_bytes = 120;
  cases.push_back(s);
  s = {};
  s.type_name = "str";
  s.length = 12;
  s.repr_short = "'a, b=c, 12B'";  // a repr that looks like fields
  cases.push_back(s);
  s = {};
  s.type_name = "int";
  s.repr_short = "42";
  cases.push_back(s);
  s = {};
  s.type_name = "NoneType";
  cases.push_back(s);
  s = {};
  s.type_name = "tuple";
  s.length = 2;
  s.repr_short = "(1, 2)";
  cases.push_back(s);
  for (int64_t bytes :
       {1023LL, 1024LL, 1075LL, 1048575LL, 1048576LL, 6451LL, 5LL * 1024 * 1024 * 1024 + 12345}) {
    s = {};
    s.type_name = "bytes";
    s.size_bytes = bytes;
    cases.push_back(s);
  }
  for (const IOSummary& c : cases) {
    const std::string text = format_io(c);
    SCOPED_TRACE(text);
    const IOSummary back = parse_io_text(text);
    EXPECT_EQ(format_io(back), text);
    EXPECT_EQ(back.type_name, c.type_name);
    EXPECT_EQ(back.has_shape, c.has_shape);
    EXPECT_EQ(back.shape, c.shape);
    EXPECT_EQ(back.dtype, c.dtype);
    EXPECT_EQ(back.device, c.device);
    EXPECT_EQ(back.repr_short, c.repr_short);
    EXPECT_EQ(back.size_bytes >= 0, c.size_bytes >= 0);
    if (c.size_bytes >= 0 && c.size_bytes < 1024) {
      EXPECT_EQ(back.size_bytes, c.size_bytes);
    }
  }
}

TEST(ParseIoText, CutOrForeignTextStaysReadable) {
  // Cut at MLPROF_IO_SUMMARY_LEN - 1: no closing parenthesis.
  const IOSummary cut = parse_io_text("(str, len=500, 'aaaaaaaaaa");
  EXPECT_EQ(cut.type_name, "str");
  EXPECT_EQ(cut.length, 500);
  EXPECT_EQ(cut.repr_short, "'aaaaaaaaaa");
  const IOSummary cut_shape = parse_io_text("(DataFrame, shape=(10, 2");
  EXPECT_EQ(cut_shape.type_name, "DataFrame");
  EXPECT_EQ(cut_shape.repr_short, "shape=(10, 2");
  // Not format_io's form at all: kept whole.
  const IOSummary other = parse_io_text("DataFrame (64, 12) float64 6.0 KiB");
  EXPECT_EQ(other.repr_short, "DataFrame (64, 12) float64 6.0 KiB");
  EXPECT_EQ(format_io(other), "(?, DataFrame (64, 12) float64 6.0 KiB)");
  EXPECT_EQ(parse_io_text("").repr_short, "");
}

// fuzz_agent_io_text's finding (fuzz/regressions/fuzz_agent_io_text/): a
// type whose short name is empty ("pkg.") formatted as "()", which reads
// back as no type and formats as "(?)". Both are "(?)" now.
TEST(ParseIoText, ATypeWithAnEmptyShortNameFormatsAsNoType) {
  IOSummary s;
  s.type_name = "pkg.";
  EXPECT_EQ(format_io(s), "(?)");
  const std::string once = format_io(parse_io_text("(l shape=(1000 40(Te0."));
  EXPECT_EQ(format_io(parse_io_text(once)), once);
}

TEST(ParseIoText, NumbersPastTheirRangeAreTextNotAnException) {
  // A summary can come from a target's memory (the agent): std::stoll and
  // std::stod threw out_of_range on these, and left a session half-read.
  const std::string digits(400, '9');
  for (const std::string& text :
       {"(bytes, " + digits + "B)", "(bytes, " + digits + ".5KB)", "(list, len=" + digits + ")",
        "(ndarray, shape=(" + digits + ", 2))"}) {
    IOSummary s;
    EXPECT_NO_THROW(s = parse_io_text(text)) << text.substr(0, 30);
    EXPECT_EQ(s.size_bytes, -1) << text.substr(0, 30);
  }
}

}  // namespace
}  // namespace mlprof
