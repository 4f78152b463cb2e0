#pragma once
// Parses a profile document into a rapidjson DOM, except the rows of its
// top-level "spans" table, which are kept here in about 3.5 bytes a cell. Why:
// memory. The DOM takes 16 bytes a JSON value, and the spans rows are most of
// a document's values (a 1M-span document's rows alone took ~180 MB as DOM).
// Only what the document reader needs of a row is kept: each number, and the
// type of anything else (for its "expected ..., found ..." message).

#include <rapidjson/document.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

namespace mlprof {

class SpanRows {
 public:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  // True when the rows are here: the document's first "spans" is an array and
  // its first "span_fields" (an array) came before it. The DOM's "spans" is
  // then an empty array standing in for them.
  bool streamed() const { return streamed_; }
  size_t size() const { return rows_; }
  // The first row that is not an array of width() cells (kNone if none):
  // later rows are not kept, as the reader stops at that one.
  size_t bad_row() const { return bad_row_; }
  // That row: a value of its type when it is no array, else its cell count.
  rapidjson::Value bad_row_type() const;
  bool bad_row_is_array() const { return bad_type_ == kArrayTag; }
  size_t bad_row_cells() const { return bad_cells_; }
  size_t width() const { return width_; }

  // The next row (rows are read once, in order, before bad_row()) into
  // `out`: an array of width() cells of the types and values the text held
  // (a container or string cell reads as an empty one).
  void next_row(rapidjson::Value& out, rapidjson::Document::AllocatorType& alloc);
  // Frees the rows once read (the profile's other sections come after).
  void release() { std::vector<std::vector<uint8_t>>().swap(chunks_); }

 private:
  friend class SpanSplitter;
  // A cell is a tag byte and its payload: a varint for an integer, 8 bytes
  // for a double, nothing for the other types.
  enum Tag : uint8_t {
    kInt64,
    kUint64,
    kDouble,
    kNull,
    kFalse,
    kTrue,
    kString,
    kArrayTag,
    kObject
  };
  static constexpr size_t kChunk = size_t{1} << 20;  // no reallocation copies while parsing
  static constexpr size_t kMaxCell = 11;             // tag and a 10-byte varint

  void put(Tag tag, uint64_t payload = 0);
  rapidjson::Value get();

  std::vector<std::vector<uint8_t>> chunks_;
  size_t read_chunk_ = 0, read_at_ = 0;
  bool streamed_ = false;
  size_t width_ = 0;
  size_t rows_ = 0;
  size_t bad_row_ = kNone;
  Tag bad_type_ = kArrayTag;
  size_t bad_cells_ = 0;
};

// Parses `text` (rapidjson's full-precision, iterative, UTF-8-validating
// parse) into `doc` and `rows`. The result is the parse's error, if any, at
// the same offset as rapidjson::Document::Parse would give.
rapidjson::ParseResult parse_document(std::string_view text, rapidjson::Document& doc,
                                      SpanRows& rows);

}  // namespace mlprof
