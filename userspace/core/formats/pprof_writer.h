#pragma once
// Writing pprof's profile.proto by hand: the protobuf wire format and the
// string table. Shared by the one-profile exporter (export_pprof.cpp) and the
// aggregate of many sources (pprof_aggregate.cpp). Private to userspace/core.
//
// The protobuf encoding is written by hand: the message is a handful of
// varint, packed and length-delimited fields, while libprotobuf and protoc
// would add a code generator to the build and a runtime library to every
// binary that links the core (the extension and the agent) for it.

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/pprof_fields.h"
#include "util/strings.h"

namespace mlprof::pprof {

enum WireType : uint32_t { kVarint = 0, kLengthDelimited = 2 };

// Appends protobuf wire format to a string. Zero scalars are left out, as
// proto3 does (a reader sees the default, which is zero).
class ProtoWriter {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void tag(uint32_t field, WireType wire) { varint((static_cast<uint64_t>(field) << 3) | wire); }
  void uint_field(uint32_t field, uint64_t v) {
    if (v == 0) return;
    tag(field, kVarint);
    varint(v);
  }
  // int64 is a plain varint of the two's complement: 10 bytes when negative.
  void int_field(uint32_t field, int64_t v) { uint_field(field, static_cast<uint64_t>(v)); }
  void bool_field(uint32_t field, bool v) { uint_field(field, v ? 1 : 0); }
  void bytes_field(uint32_t field, std::string_view bytes) {
    tag(field, kLengthDelimited);
    varint(bytes.size());
    out_.append(bytes);
  }
  void message_field(uint32_t field, const ProtoWriter& m) { bytes_field(field, m.out_); }
  // A packed repeated varint field (proto3's default for repeated scalars).
  template <typename T>
  void packed_field(uint32_t field, const std::vector<T>& values) {
    if (values.empty()) return;
    scratch_.clear();
    for (const T v : values) {
      uint64_t u = static_cast<uint64_t>(v);
      while (u >= 0x80) {
        scratch_.push_back(static_cast<char>(u | 0x80));
        u >>= 7;
      }
      scratch_.push_back(static_cast<char>(u));
    }
    bytes_field(field, scratch_);
  }
  void clear() { out_.clear(); }
  const std::string& bytes() const { return out_; }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
  std::string scratch_;
};

// pprof's string table: index 0 is "", every string once. Strings of a
// profile's own table are looked up once per id: use() names the table of
// the profile being written (the aggregate calls it once per source).
class PprofStrings {
 public:
  PprofStrings() { add(""); }
  void use(const StringTable& profile_strings) {
    profile_ = &profile_strings;
    from_profile_.assign(profile_strings.size(), -1);
  }
  // A string of the table given to use(), by its id there.
  int64_t of_profile(uint32_t id) {
    if (profile_ == nullptr || id >= from_profile_.size()) return 0;
    int64_t& slot = from_profile_[id];
    if (slot < 0) slot = add(profile_->get(id));
    return slot;
  }
  int64_t add(std::string_view s) {
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    owned_.emplace_back(s);
    const auto idx = static_cast<int64_t>(owned_.size() - 1);
    index_.emplace(owned_.back(), idx);
    return idx;
  }
  void write(ProtoWriter& out) const {
    for (const std::string& s : owned_) out.bytes_field(pprof_field::kStringTable, s);
  }

 private:
  const StringTable* profile_ = nullptr;
  std::vector<int64_t> from_profile_;
  std::deque<std::string> owned_;  // deque: stable addresses for the views in index_
  std::unordered_map<std::string_view, int64_t> index_;
};

inline void write_value_type(ProtoWriter& out, uint32_t field_number, int64_t type, int64_t unit) {
  ProtoWriter vt;
  vt.int_field(pprof_field::kValueTypeType, type);
  vt.int_field(pprof_field::kValueTypeUnit, unit);
  out.message_field(field_number, vt);
}

inline ProtoWriter label_bytes(int64_t key, int64_t str) {
  ProtoWriter label;
  label.int_field(pprof_field::kLabelKey, key);
  label.int_field(pprof_field::kLabelStr, str);
  return label;
}

}  // namespace mlprof::pprof
