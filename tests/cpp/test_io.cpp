#include "core/io.h"

#include <gtest/gtest.h>

namespace mlprof {
namespace {

TEST(FormatBytes, OneDecimal1024Based) {
  EXPECT_EQ(format_bytes(0), "0B");
  EXPECT_EQ(format_bytes(1023), "1023B");
  EXPECT_EQ(format_bytes(1024), "1.0KB");
  EXPECT_EQ(format_bytes(8000), "7.8KB");      // spec 000 section 4: int64 (1000,)
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

}  // namespace
}  // namespace mlprof
