#include "util/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace mlprof {
namespace {

constexpr size_t kAll = std::string_view::npos;

TEST(Utf8, WellFormedTextOfEveryLength) {
  EXPECT_EQ(first_invalid_utf8(""), kAll);
  EXPECT_EQ(first_invalid_utf8("ascii ~\x7f"), kAll);
  EXPECT_EQ(first_invalid_utf8("na\xc3\xafve \xe6\x97\xa5 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"),
            kAll);
  EXPECT_EQ(first_invalid_utf8("\xed\x9f\xbf \xee\x80\x80"), kAll);  // around the surrogates
}

TEST(Utf8, TheFirstByteThatStartsNoWellFormedSequence) {
  EXPECT_EQ(first_invalid_utf8("caf\xe9"), 3u);           // Latin-1
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2u);            // a lone continuation byte
  EXPECT_EQ(first_invalid_utf8("\xc0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(first_invalid_utf8("x\xe0\x80\xaf"), 1u);     // overlong 3-byte
  EXPECT_EQ(first_invalid_utf8("\xf0\x80\x80\xaf"), 0u);  // overlong 4-byte
  EXPECT_EQ(first_invalid_utf8("\xed\xa0\x80"), 0u);      // a surrogate (U+D800)
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xf5\x80\x80\x80"), 0u);  // no such lead byte
  EXPECT_EQ(first_invalid_utf8("ok\xe2\x82"), 2u);        // cut inside a sequence
  EXPECT_EQ(first_invalid_utf8("\xe2\x82x"), 0u);         // a missing continuation
  EXPECT_EQ(invalid_utf8_text("caf\xe9", 3), "byte 0xe9 at offset 3");
}

TEST(Utf8, ToValidReplacesEachBadByteAndKeepsTheRest) {
  EXPECT_EQ(to_valid_utf8("na\xc3\xafve \xe6\x97\xa5"), "na\xc3\xafve \xe6\x97\xa5");
  EXPECT_EQ(to_valid_utf8("caf\xe9!"), "caf\xef\xbf\xbd!");
  // A name cut mid-character at a field's size: each byte of the cut
  // sequence is one replacement, and the result is well formed.
  const std::string cut = to_valid_utf8("ok\xe2\x82");
  EXPECT_EQ(cut, "ok\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(first_invalid_utf8(cut), std::string_view::npos);
  EXPECT_EQ(to_valid_utf8(""), "");
}

// A target names its threads (comm), functions and files: what the agent
// prints of them carries no escape sequence to the operator's terminal.
TEST(Utf8, TerminalTextEscapesControlsAndKeepsText) {
  EXPECT_EQ(terminal_text("predict \xe6\x97\xa5\tok", false), "predict \xe6\x97\xa5\tok");
  EXPECT_EQ(terminal_text("\x1b]0;owned\x07\x1b[2J", false), "\\x1b]0;owned\\x07\\x1b[2J");
  EXPECT_EQ(terminal_text("a\nb\x7f", false), "a\\x0ab\\x7f");
  EXPECT_EQ(terminal_text("a\nb\r", true), "a\nb\\x0d");
  EXPECT_EQ(terminal_text("csi \xc2\x9b"
                          "31m \xc2\xa0",
                          true),
            "csi \\u009b31m \xc2\xa0");  // C1; NBSP kept
  EXPECT_EQ(terminal_text("bad \xff", false), "bad \xef\xbf\xbd");
}

}  // namespace
}  // namespace mlprof
