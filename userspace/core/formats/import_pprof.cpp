// pprof (profile.proto, gzip-compressed or not) as StackSamples. A pprof
// sample is pre-aggregated (counted c times); it stays one sample with its
// values as the file gives them, so the store grows with the file and every
// sum stays exact (docs/design/store.md, "Versions and conversion"). Sample
// types and units are kept as the file names them. The thread comes from a
// "thread", "thread_name" or "thread_id" label; other labels are dropped
// and counted (meta "pprof.dropped_labels").

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/import.h"
#include "formats/pprof_fields.h"
#include "util/utf8.h"

namespace mlprof {

namespace {

namespace field = pprof_field;

Error not_pprof(const std::string& why) {
  return Error{Error::Kind::kCorrupt, 0, "not a pprof profile: " + why};
}
Error truncated() {
  return Error{Error::Kind::kTruncated, 0,
               "the pprof profile ends early (the file was cut off while being written or copied)"};
}

// A bounds-checked reader of one protobuf message.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool done() const { return at_ >= data_.size(); }
  bool failed() const { return failed_; }
  // The next field's number and wire type; false at the end or on bad input.
  bool next(uint32_t* field, uint32_t* wire) {
    uint64_t key = 0;
    if (done() || !varint(&key)) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    return true;
  }
  bool varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= data_.size()) return fail();
      const auto b = static_cast<uint8_t>(data_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return fail();
  }
  bool bytes(std::string_view* out) {
    uint64_t n = 0;
    if (!varint(&n)) return false;
    if (n > data_.size() - at_) return fail();
    *out = data_.substr(at_, n);
    at_ += n;
    return true;
  }
  // Skips a field of `wire` type.
  bool skip(uint32_t wire) {
    uint64_t v = 0;
    std::string_view s;
    switch (wire) {
      case 0:
        return varint(&v);
      case 1:
        if (data_.size() - at_ < 8) return fail();
        at_ += 8;
        return true;
      case 2:
        return bytes(&s);
      case 5:
        if (data_.size() - at_ < 4) return fail();
        at_ += 4;
        return true;
      default:
        return fail();
    }
  }
  // A repeated integer field: packed (wire 2) or one value (wire 0).
  bool ints(uint32_t wire, std::vector<uint64_t>* out) {
    if (wire == 0) {
      uint64_t v = 0;
      if (!varint(&v)) return false;
      out->push_back(v);
      return true;
    }
    std::string_view packed;
    if (wire != 2 || !bytes(&packed)) return fail();
    Reader r(packed);
    while (!r.done()) {
      uint64_t v = 0;
      if (!r.varint(&v)) return fail();
      out->push_back(v);
    }
    return true;
  }

 private:
  bool fail() {
    failed_ = true;
    return false;
  }
  std::string_view data_;
  size_t at_ = 0;
  bool failed_ = false;
};

struct RawSample {
  std::vector<uint64_t> locations;  // leaf first
  std::vector<int64_t> values;
  std::vector<std::pair<int64_t, int64_t>> labels;  // (key, str) string indices; num labels dropped
  uint32_t dropped_labels = 0;
};
struct RawLocation {
  std::vector<std::pair<uint64_t, int64_t>> lines;  // (function id, line); the last is the caller
};
struct RawFunction {
  int64_t name = 0, system_name = 0, filename = 0, start_line = 0;
};

}  // namespace

Result<Imported> import_pprof(std::string_view bytes) {
  Reader r(bytes);
  std::vector<std::string_view> strings;
  std::vector<std::pair<int64_t, int64_t>> types;
  std::vector<RawSample> samples;
  std::unordered_map<uint64_t, RawLocation> locations;
  std::unordered_map<uint64_t, RawFunction> functions;
  uint64_t time_nanos = 0, duration_nanos = 0;
  std::vector<uint64_t> comments;
  uint32_t f = 0, wire = 0;
  while (r.next(&f, &wire)) {
    std::string_view msg;
    if (f == field::kStringTable && wire == 2) {
      if (!r.bytes(&msg)) break;
      if (const size_t bad = first_invalid_utf8(msg); bad != std::string_view::npos) {
        return not_pprof("string " + std::to_string(strings.size()) +
                         " of its string table is not " + "UTF-8 text (" +
                         invalid_utf8_text(msg, bad) + ")");
      }
      strings.push_back(msg);
    } else if (f == field::kSampleType && wire == 2) {
      if (!r.bytes(&msg)) break;
      Reader m(msg);
      uint32_t g = 0, w = 0;
      std::pair<int64_t, int64_t> t{0, 0};
      while (m.next(&g, &w)) {
        uint64_t v = 0;
        if (w == 0 && m.varint(&v)) {
          (g == field::kValueTypeType ? t.first : t.second) = static_cast<int64_t>(v);
        } else if (!m.skip(w)) {
          break;
        }
      }
      if (m.failed()) return not_pprof("a sample type is malformed");
      types.push_back(t);
    } else if (f == field::kSample && wire == 2) {
      if (!r.bytes(&msg)) break;
      Reader m(msg);
      RawSample s;
      uint32_t g = 0, w = 0;
      while (m.next(&g, &w)) {
        if (g == field::kSampleLocationId) {
          if (!m.ints(w, &s.locations)) break;
        } else if (g == field::kSampleValue) {
          std::vector<uint64_t> v;
          if (!m.ints(w, &v)) break;
          for (uint64_t x : v) s.values.push_back(static_cast<int64_t>(x));
        } else if (g == field::kSampleLabel && w == 2) {
          std::string_view lm;
          if (!m.bytes(&lm)) break;
          Reader l(lm);
          int64_t key = 0, str = 0;
          bool num = false;
          uint32_t h = 0, lw = 0;
          while (l.next(&h, &lw)) {
            uint64_t v = 0;
            if (lw != 0 || !l.varint(&v)) {
              if (!l.skip(lw)) break;
              continue;
            }
            if (h == field::kLabelKey) key = static_cast<int64_t>(v);
            if (h == field::kLabelStr) str = static_cast<int64_t>(v);
            if (h == field::kLabelNum) num = true;
          }
          if (l.failed()) return not_pprof("a sample label is malformed");
          if (num && str == 0) {
            ++s.dropped_labels;
          } else {
            s.labels.emplace_back(key, str);
          }
        } else if (!m.skip(w)) {
          break;
        }
      }
      if (m.failed()) return not_pprof("a sample is malformed");
      samples.push_back(std::move(s));
    } else if (f == field::kLocation && wire == 2) {
      if (!r.bytes(&msg)) break;
      Reader m(msg);
      uint64_t id = 0;
      RawLocation loc;
      uint32_t g = 0, w = 0;
      while (m.next(&g, &w)) {
        if (g == field::kLocationId && w == 0) {
          if (!m.varint(&id)) break;
        } else if (g == field::kLocationLine && w == 2) {
          std::string_view lm;
          if (!m.bytes(&lm)) break;
          Reader l(lm);
          uint64_t fn = 0, line = 0;
          uint32_t h = 0, lw = 0;
          while (l.next(&h, &lw)) {
            uint64_t v = 0;
            if (lw == 0 && l.varint(&v)) {
              if (h == field::kLineFunctionId) fn = v;
              if (h == field::kLineLine) line = v;
            } else if (!l.skip(lw)) {
              break;
            }
          }
          if (l.failed()) return not_pprof("a location's line is malformed");
          loc.lines.emplace_back(fn, static_cast<int64_t>(line));
        } else if (!m.skip(w)) {
          break;
        }
      }
      if (m.failed() || id == 0) return not_pprof("a location is malformed or has no id");
      locations[id] = std::move(loc);
    } else if (f == field::kFunction && wire == 2) {
      if (!r.bytes(&msg)) break;
      Reader m(msg);
      uint64_t id = 0;
      RawFunction fn;
      uint32_t g = 0, w = 0;
      while (m.next(&g, &w)) {
        uint64_t v = 0;
        if (w != 0 || !m.varint(&v)) {
          if (!m.skip(w)) break;
          continue;
        }
        if (g == field::kFunctionId) id = v;
        if (g == field::kFunctionName) fn.name = static_cast<int64_t>(v);
        if (g == field::kFunctionSystemName) fn.system_name = static_cast<int64_t>(v);
        if (g == field::kFunctionFilename) fn.filename = static_cast<int64_t>(v);
        if (g == field::kFunctionStartLine) fn.start_line = static_cast<int64_t>(v);
      }
      if (m.failed() || id == 0) return not_pprof("a function is malformed or has no id");
      functions[id] = fn;
    } else if (f == field::kTimeNanos && wire == 0) {
      if (!r.varint(&time_nanos)) break;
    } else if (f == field::kDurationNanos && wire == 0) {
      if (!r.varint(&duration_nanos)) break;
    } else if (f == field::kComment) {
      if (!r.ints(wire, &comments)) break;
    } else if (!r.skip(wire)) {
      break;
    }
  }
  if (r.failed()) return truncated();
  if (strings.empty() || strings[0] != "")
    return not_pprof("its string table does not start with \"\"");
  if (types.empty()) return not_pprof("it has no sample types");
  auto str = [&](int64_t i) -> std::string {
    return i >= 0 && static_cast<size_t>(i) < strings.size() ? std::string(strings[i])
                                                             : std::string();
  };

  StackSamples out;
  out.meta["source"] = "pprof";
  if (time_nanos) out.meta["start_unix_ns"] = std::to_string(time_nanos);
  // The tool: ours names itself in the comments ("tool=mlflow-profiler@..."
  // from a profile's meta, or "mlflow-profiler"); Go's runtime/pprof names
  // nothing, but its runtime's functions are Go (.go or .s files).
  for (const uint64_t c : comments) {
    const std::string text = c < strings.size() ? std::string(strings[c]) : std::string();
    if (text.starts_with("tool=")) out.meta["tool"] = text.substr(5);
    if (text == "mlflow-profiler" && !out.meta.count("tool")) out.meta["tool"] = text;
  }
  if (!out.meta.count("tool")) {
    for (const auto& [id, fn] : functions) {
      const std::string name = str(fn.name), file = str(fn.filename);
      const auto ends = [&](const char* tail) {
        return file.size() > std::strlen(tail) && file.ends_with(tail);
      };
      if (name.starts_with("runtime.") && (ends(".go") || ends(".s"))) {
        out.meta["tool"] = "go";
        break;
      }
    }
  }
  out.end_ns = static_cast<int64_t>(duration_nanos);
  for (size_t i = 0; i < types.size(); ++i)
    out.value_types.emplace_back(str(types[i].first), str(types[i].second));
  std::unordered_map<uint64_t, uint32_t> fn_ids;
  std::unordered_map<std::string, uint32_t> threads;
  uint64_t dropped = 0;
  const size_t max_frames = std::max(kFramesFloor, bytes.size() * kFramesPerInputByte);
  size_t frames = 0;
  std::vector<int64_t> sums(types.size(), 0);
  for (const RawSample& s : samples) {
    if (s.values.size() != types.size())
      return not_pprof("a sample's values do not match the sample types");
    // A sample counted c times stays one sample with its values (count c):
    // the store grows with the file, not with its counts.
    if (std::all_of(s.values.begin(), s.values.end(), [](int64_t v) { return v == 0; }))
      continue;  // holds nothing
    for (size_t i = 0; i < types.size(); ++i) {
      const int64_t v = s.values[i];
      if ((v > 0 && sums[i] > kMaxValueSum - v) || (v < 0 && sums[i] < -kMaxValueSum - v))
        return not_pprof("its " + out.value_types[i].first + " values add up past 2^62");
      sums[i] += v;
    }
    StackSamples::Sample row;
    std::string thread = "all threads";
    for (const auto& [k, v] : s.labels) {
      const std::string key = str(k);
      if (key == "thread" || key == "thread_name" || key == "thread_id") {
        thread = str(v);
      } else {
        ++dropped;
      }
    }
    dropped += s.dropped_labels;
    auto t = threads.find(thread);
    if (t == threads.end()) {
      t = threads.emplace(thread, static_cast<uint32_t>(out.threads.size())).first;
      out.threads.push_back({thread, out.threads.size()});
    }
    row.thread = t->second;
    for (auto it = s.locations.rbegin(); it != s.locations.rend(); ++it) {
      const auto loc = locations.find(*it);
      if (loc == locations.end()) return not_pprof("a sample names a location that is not there");
      if (row.frames.size() + loc->second.lines.size() > kMaxStackDepth) {
        return not_pprof("a sample's stack is deeper than " + std::to_string(kMaxStackDepth) +
                         " frames");
      }
      frames += loc->second.lines.size();
      if (frames > max_frames) {
        return not_pprof("its samples' stacks hold more than " + std::to_string(max_frames) +
                         " frames (" + std::to_string(kFramesPerInputByte) +
                         " a byte of the file, at least " + std::to_string(kFramesFloor) + ")");
      }
      for (auto line = loc->second.lines.rbegin(); line != loc->second.lines.rend(); ++line) {
        auto id = fn_ids.find(line->first);
        if (id == fn_ids.end()) {
          const auto fn = functions.find(line->first);
          if (fn == functions.end())
            return not_pprof("a location names a function that is not there");
          id = fn_ids
                   .emplace(line->first,
                            out.functions.add(str(fn->second.name), "", str(fn->second.filename),
                                              static_cast<int32_t>(fn->second.start_line),
                                              FunctionKind::kPython, false))
                   .first;
        }
        row.frames.push_back({id->second, static_cast<int32_t>(line->second)});
      }
    }
    row.values = s.values;
    out.samples.push_back(std::move(row));
  }
  if (dropped) out.meta["pprof.dropped_labels"] = std::to_string(dropped);
  if (out.threads.empty()) out.threads.push_back({"all threads", 0});
  return Imported{std::move(out)};
}

}  // namespace mlprof
