#pragma once
// UTF-8 well-formedness (Unicode 15, table 3-7): every string the core hands
// to Python, SQL and the renderers must be UTF-8, and the importers of binary
// and line formats (pprof, folded stacks) check their text with this. The
// JSON readers have rapidjson's check built into the parse; glibc's mbrtowc
// depends on the locale, hence these few lines.

#include <cstddef>
#include <string>
#include <string_view>

namespace mlprof {

// The offset of the first byte of `s` that does not start a well-formed
// sequence (overlong forms, surrogates and code points past U+10FFFF are
// not); npos when all of `s` is UTF-8.
size_t first_invalid_utf8(std::string_view s);
// "byte 0xa2 at offset 7": what a refusal says of the invalid byte at `at`.
std::string invalid_utf8_text(std::string_view s, size_t at);
// `s` with each byte that does not start a well-formed sequence replaced by
// U+FFFD: for text the agent takes from a target (names cut at a fixed byte
// count end mid-character), which must not make a whole document unreadable.
std::string to_valid_utf8(std::string_view s);
// `text` safe for a terminal: names, comm and paths come from targets, and
// an escape sequence in one must not reach the operator's terminal. Invalid
// UTF-8 becomes U+FFFD; C0 controls (but tab, and newline when `lines`),
// DEL and C1 controls become \xNN / \uNNNN.
std::string terminal_text(std::string_view text, bool lines);

}  // namespace mlprof
