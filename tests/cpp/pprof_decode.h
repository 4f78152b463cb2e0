#pragma once
// A pprof decoder for the tests, written from profile.proto's field numbers
// (github.com/google/pprof/proto/profile.proto), not from the encoder's
// code: test_export_pprof.cpp and test_pprof_aggregate.cpp read what the
// writers wrote with it.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/file_io.h"

namespace mlprof::test {

// Protobuf wire format: a field at a time.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : p_(data.data()), end_(data.data() + data.size()) {}
  bool done() const { return p_ >= end_ || failed_; }
  bool failed() const { return failed_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const auto byte = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
    failed_ = true;
    return 0;
  }
  // Reads a key; the field's value is then read with varint() or bytes().
  std::pair<uint32_t, uint32_t> key() {
    const uint64_t k = varint();
    return {static_cast<uint32_t>(k >> 3), static_cast<uint32_t>(k & 7)};
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) {
      failed_ = true;
      return {};
    }
    std::string_view out(p_, n);
    p_ += n;
    return out;
  }
  // A repeated varint field, packed (wire type 2) or not (0).
  void repeated(uint32_t wire, std::vector<uint64_t>& out) {
    if (wire == 0) {
      out.push_back(varint());
      return;
    }
    WireReader packed(bytes());
    while (!packed.done()) out.push_back(packed.varint());
  }
  void skip(uint32_t wire) {
    if (wire == 0) {
      varint();
    } else if (wire == 2) {
      bytes();
    } else {
      failed_ = true;
    }
  }

 private:
  const char* p_;
  const char* end_;
  bool failed_ = false;
};

struct PprofFunction {
  std::string name, system_name, filename;
  int64_t start_line = 0;
};
struct PprofSample {
  std::vector<uint64_t> locations;
  std::vector<int64_t> values;
  std::map<std::string, std::string> labels;
};
struct PprofProfile {
  std::vector<std::string> strings;
  std::vector<std::pair<std::string, std::string>> sample_types;
  std::vector<PprofSample> samples;
  std::map<uint64_t, uint64_t> location_function;  // location id -> function id
  std::map<uint64_t, PprofFunction> functions;
  int64_t time_nanos = 0, duration_nanos = 0, period = 0;
  std::string default_sample_type;
  std::vector<std::string> comments;

  // Function names of a sample's stack, leaf first.
  std::vector<std::string> stack(const PprofSample& s) const {
    std::vector<std::string> names;
    for (const uint64_t loc : s.locations)
      names.push_back(functions.at(location_function.at(loc)).name);
    return names;
  }
};

inline PprofProfile decode(const std::string& gz) {
  Result<std::string> raw = gzip_decompress(gz);
  EXPECT_TRUE(raw.ok());
  if (!raw.ok()) return {};
  // Raw ids first; strings are resolved once the table is read (it comes last).
  struct RawSample {
    std::vector<uint64_t> locations, values;
    std::vector<std::pair<uint64_t, uint64_t>> labels;
  };
  std::vector<std::pair<uint64_t, uint64_t>> sample_types;
  std::vector<RawSample> samples;
  std::map<uint64_t, std::vector<uint64_t>> functions;  // id -> name, system, file, line
  std::vector<uint64_t> comments;
  uint64_t default_type = 0;
  PprofProfile out;
  auto value_type = [](std::string_view bytes) {
    WireReader r(bytes);
    std::pair<uint64_t, uint64_t> vt{0, 0};
    while (!r.done()) {
      const auto [f, w] = r.key();
      if (f == 1) {
        vt.first = r.varint();
      } else if (f == 2) {
        vt.second = r.varint();
      } else {
        r.skip(w);
      }
    }
    return vt;
  };
  WireReader r(raw.value());
  while (!r.done()) {
    const auto [field, wire] = r.key();
    switch (field) {
      case 1:
        sample_types.push_back(value_type(r.bytes()));
        break;
      case 2: {
        WireReader s(r.bytes());
        RawSample sample;
        while (!s.done()) {
          const auto [f, w] = s.key();
          if (f == 1) {
            s.repeated(w, sample.locations);
          } else if (f == 2) {
            s.repeated(w, sample.values);
          } else if (f == 3) {
            WireReader l(s.bytes());
            std::pair<uint64_t, uint64_t> kv{0, 0};
            while (!l.done()) {
              const auto [lf, lw] = l.key();
              if (lf == 1) {
                kv.first = l.varint();
              } else if (lf == 2) {
                kv.second = l.varint();
              } else {
                l.skip(lw);
              }
            }
            sample.labels.push_back(kv);
          } else {
            s.skip(w);
          }
        }
        samples.push_back(std::move(sample));
        break;
      }
      case 4: {
        WireReader l(r.bytes());
        uint64_t id = 0, function = 0;
        while (!l.done()) {
          const auto [f, w] = l.key();
          if (f == 1) {
            id = l.varint();
          } else if (f == 4) {
            WireReader line(l.bytes());
            while (!line.done()) {
              const auto [lf, lw] = line.key();
              if (lf == 1) {
                function = line.varint();
              } else {
                line.skip(lw);
              }
            }
          } else {
            l.skip(w);
          }
        }
        out.location_function[id] = function;
        break;
      }
      case 5: {
        WireReader fr(r.bytes());
        std::vector<uint64_t> fields(6, 0);
        while (!fr.done()) {
          const auto [f, w] = fr.key();
          if (f >= 1 && f <= 5 && w == 0) {
            fields[f] = fr.varint();
          } else {
            fr.skip(w);
          }
        }
        functions[fields[1]] = fields;
        break;
      }
      case 6:
        out.strings.emplace_back(r.bytes());
        break;
      case 9:
        out.time_nanos = static_cast<int64_t>(r.varint());
        break;
      case 10:
        out.duration_nanos = static_cast<int64_t>(r.varint());
        break;
      case 12:
        out.period = static_cast<int64_t>(r.varint());
        break;
      case 13:
        r.repeated(wire, comments);
        break;
      case 14:
        default_type = r.varint();
        break;
      default:
        r.skip(wire);
    }
  }
  EXPECT_FALSE(r.failed());
  auto str = [&](uint64_t i) { return i < out.strings.size() ? out.strings[i] : "<bad index>"; };
  for (const auto& [t, u] : sample_types) out.sample_types.emplace_back(str(t), str(u));
  for (const RawSample& s : samples) {
    PprofSample ps;
    ps.locations = s.locations;
    for (const uint64_t v : s.values) ps.values.push_back(static_cast<int64_t>(v));
    for (const auto& [k, v] : s.labels) ps.labels[str(k)] = str(v);
    out.samples.push_back(std::move(ps));
  }
  for (const auto& [id, f] : functions) {
    out.functions[id] = {str(f[2]), str(f[3]), str(f[4]), static_cast<int64_t>(f[5])};
  }
  for (const uint64_t c : comments) out.comments.push_back(str(c));
  out.default_sample_type = str(default_type);
  return out;
}

}  // namespace mlprof::test
