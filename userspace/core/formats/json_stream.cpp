#include "formats/json_stream.h"

#include <rapidjson/encodedstream.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <cstring>
#include <string_view>

#include "formats/json_numbers.h"

namespace mlprof {

namespace {

// kJsonParseFlags (json_numbers.h): numbers by std::from_chars, exact.
// Iterative: a hostile file of nested brackets must not exhaust the stack.
// Encoding: a string that is not UTF-8 would fail later, in the renderers
// and in Python.
constexpr unsigned kParseFlags = kJsonParseFlags;

bool is_key(const char* str, rapidjson::SizeType length, std::string_view key) {
  return std::string_view(str, length) == key;
}

}  // namespace

void SpanRows::put(Tag tag, uint64_t payload) {
  if (chunks_.empty() || chunks_.back().size() + kMaxCell > kChunk) {
    chunks_.emplace_back().reserve(kChunk);
  }
  std::vector<uint8_t>& c = chunks_.back();
  c.push_back(tag);
  if (tag == kDouble) {
    for (int i = 0; i < 8; ++i) c.push_back(static_cast<uint8_t>(payload >> (8 * i)));
  } else if (tag == kInt64 || tag == kUint64) {
    do {
      c.push_back(static_cast<uint8_t>((payload & 0x7F) | (payload > 0x7F ? 0x80 : 0)));
      payload >>= 7;
    } while (payload != 0);
  }
}

rapidjson::Value SpanRows::get() {
  // The same test as put's: a cell never straddles two chunks.
  if (read_at_ + kMaxCell > kChunk) {
    ++read_chunk_;
    read_at_ = 0;
  }
  const uint8_t* p = chunks_[read_chunk_].data() + read_at_;
  const uint8_t* const start = p;
  const Tag tag = static_cast<Tag>(*p++);
  uint64_t payload = 0;
  if (tag == kDouble) {
    for (int i = 0; i < 8; ++i) payload |= uint64_t{*p++} << (8 * i);
  } else if (tag == kInt64 || tag == kUint64) {
    for (int shift = 0;; shift += 7) {
      payload |= uint64_t{*p & 0x7Fu} << shift;
      if ((*p++ & 0x80) == 0) break;
    }
  }
  read_at_ += static_cast<size_t>(p - start);
  switch (tag) {
    case kInt64:  // zigzag: small negatives (parent -1) stay one byte
      return rapidjson::Value(static_cast<int64_t>(payload >> 1) ^
                              -static_cast<int64_t>(payload & 1));
    case kUint64:
      return rapidjson::Value(payload);
    case kDouble: {
      double d;
      std::memcpy(&d, &payload, sizeof d);
      return rapidjson::Value(d);
    }
    case kNull:
      return rapidjson::Value();
    case kFalse:
      return rapidjson::Value(false);
    case kTrue:
      return rapidjson::Value(true);
    case kString:
      return rapidjson::Value(rapidjson::kStringType);
    case kArrayTag:
      return rapidjson::Value(rapidjson::kArrayType);
    case kObject:
      return rapidjson::Value(rapidjson::kObjectType);
  }
  return rapidjson::Value();
}

rapidjson::Value SpanRows::bad_row_type() const {
  switch (bad_type_) {
    case kNull:
      return rapidjson::Value();
    case kFalse:
      return rapidjson::Value(false);
    case kTrue:
      return rapidjson::Value(true);
    case kString:
      return rapidjson::Value(rapidjson::kStringType);
    case kObject:
      return rapidjson::Value(rapidjson::kObjectType);
    case kInt64:
    case kUint64:
      return rapidjson::Value(0);
    case kDouble:
      return rapidjson::Value(0.5);
    default:
      return rapidjson::Value(rapidjson::kArrayType);
  }
}

void SpanRows::next_row(rapidjson::Value& out, rapidjson::Document::AllocatorType& alloc) {
  if (!out.IsArray() || out.Size() != width_) {
    out.SetArray();
    for (size_t k = 0; k < width_; ++k) out.PushBack(rapidjson::Value(), alloc);
  }
  for (rapidjson::SizeType k = 0; k < width_; ++k) out[k] = get();
}

// The SAX handler: every event goes to the Document (a rapidjson Handler
// itself, as in GenericDocument::ParseStream) except those of the rows of
// the top-level "spans" array, which go into SpanRows.
// RapidJSON's SAX handler interface names these methods (Null, StartObject...).
// NOLINTBEGIN(readability-identifier-naming)
class SpanSplitter {
 public:
  SpanSplitter(rapidjson::Document& doc, SpanRows& rows) : doc_(doc), rows_(rows) {}

  bool Null() { return scalar(SpanRows::kNull) ? true : doc_.Null(); }
  bool Bool(bool b) { return scalar(b ? SpanRows::kTrue : SpanRows::kFalse) ? true : doc_.Bool(b); }
  bool Int(int i) { return scalar(SpanRows::kInt64, i) ? true : doc_.Int(i); }
  bool Uint(unsigned u) { return scalar(SpanRows::kInt64, u) ? true : doc_.Uint(u); }
  bool Int64(int64_t i) { return scalar(SpanRows::kInt64, i) ? true : doc_.Int64(i); }
  bool Uint64(uint64_t u) {
    const bool fits = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    return (fits ? scalar(SpanRows::kInt64, static_cast<int64_t>(u))
                 : scalar(SpanRows::kUint64, 0, u))
               ? true
               : doc_.Uint64(u);
  }
  bool Double(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    return scalar(SpanRows::kDouble, 0, bits) ? true : doc_.Double(d);
  }
  bool RawNumber(const char* str, rapidjson::SizeType length, bool) {
    return emit_number(*this, std::string_view(str, length));  // kJsonParseFlags
  }
  bool String(const char* str, rapidjson::SizeType length, bool copy) {
    return scalar(SpanRows::kString) ? true : doc_.String(str, length, copy);
  }
  bool Key(const char* str, rapidjson::SizeType length, bool copy) {
    if (in_spans_) return true;
    next_ = kOther;
    if (depth_ == 1 && root_object_) {
      if (!seen_fields_ && is_key(str, length, "span_fields")) {
        seen_fields_ = true;
        next_ = kFields;
      } else if (!seen_spans_ && is_key(str, length, "spans")) {
        seen_spans_ = true;
        next_ = kSpans;
      }
    }
    return doc_.Key(str, length, copy);
  }
  bool StartObject() {
    if (in_spans_) return start(SpanRows::kObject);
    if (depth_ == 0) root_object_ = true;
    next_ = kOther;
    ++depth_;
    return doc_.StartObject();
  }
  bool EndObject(rapidjson::SizeType members) {
    if (in_spans_) {
      --level_;
      return true;
    }
    --depth_;
    return doc_.EndObject(members);
  }
  bool StartArray() {
    if (in_spans_) return start(SpanRows::kArrayTag);
    ++depth_;
    if (next_ == kFields) fields_depth_ = depth_;
    if (next_ == kSpans && have_width_) {
      in_spans_ = true;
      rows_.streamed_ = true;
      rows_.width_ = width_;
    }
    next_ = kOther;
    return doc_.StartArray();
  }
  bool EndArray(rapidjson::SizeType elements) {
    if (in_spans_) {
      if (level_ > 0) return end_array(elements);
      in_spans_ = false;  // the end of "spans": its stand-in stays empty
      --depth_;
      return doc_.EndArray(0);
    }
    if (depth_ == fields_depth_) {
      width_ = elements;
      have_width_ = true;
      fields_depth_ = -1;
    }
    --depth_;
    return doc_.EndArray(elements);
  }

 private:
  enum Next { kOther, kFields, kSpans };

  // A scalar: true when it belongs to the spans rows (and was taken).
  bool scalar(SpanRows::Tag tag, int64_t i = 0, uint64_t raw = 0) {
    if (!in_spans_) {
      next_ = kOther;
      return false;
    }
    if (level_ == 0) {  // a row that is no array
      bad(tag, 0);
      ++rows_.rows_;
    } else if (level_ == 1 && row_is_array_) {
      cell(tag, tag == SpanRows::kInt64
                    ? (static_cast<uint64_t>(i) << 1) ^ static_cast<uint64_t>(i >> 63)
                    : raw);
    }
    return true;
  }
  bool start(SpanRows::Tag tag) {
    if (level_ == 0) {
      row_is_array_ = tag == SpanRows::kArrayTag;
      cells_ = 0;
      if (!row_is_array_) {
        bad(tag, 0);
        ++rows_.rows_;
      }
    } else if (level_ == 1 && row_is_array_) {
      cell(tag, 0);
    }
    ++level_;
    return true;
  }
  bool end_array(rapidjson::SizeType elements) {
    if (--level_ == 0 && row_is_array_) {
      if (elements != width_) bad(SpanRows::kArrayTag, elements);
      ++rows_.rows_;
    }
    return true;
  }
  void cell(SpanRows::Tag tag, uint64_t payload) {
    // Cells past the width, or of rows after a bad one, are never read.
    if (rows_.bad_row_ == SpanRows::kNone && cells_++ < width_) rows_.put(tag, payload);
  }
  void bad(SpanRows::Tag tag, size_t cells) {
    if (rows_.bad_row_ != SpanRows::kNone) return;
    rows_.bad_row_ = rows_.rows_;
    rows_.bad_type_ = tag;
    rows_.bad_cells_ = cells;
  }

  rapidjson::Document& doc_;
  SpanRows& rows_;
  int depth_ = 0;  // containers open in the DOM
  bool root_object_ = false;
  Next next_ = kOther;  // what the value after the last key is
  bool seen_fields_ = false, seen_spans_ = false;
  int fields_depth_ = -1;  // depth_ of the open "span_fields" array
  bool have_width_ = false;
  size_t width_ = 0;
  bool in_spans_ = false;
  int level_ = 0;  // containers open inside "spans"
  bool row_is_array_ = false;
  size_t cells_ = 0;
};
// NOLINTEND(readability-identifier-naming)

rapidjson::ParseResult parse_document(std::string_view text, rapidjson::Document& doc,
                                      SpanRows& rows) {
  rapidjson::ParseResult result;
  auto generate = [&](rapidjson::Document& d) {
    // As rapidjson::Document::Parse(str, length) reads.
    rapidjson::MemoryStream ms(text.data(), text.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> is(ms);
    rapidjson::Reader reader;
    SpanSplitter splitter(d, rows);
    result = reader.Parse<kParseFlags>(is, splitter);
    return !result.IsError();
  };
  doc.Populate(generate);
  return result;
}

}  // namespace mlprof
