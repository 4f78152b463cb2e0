// PprofAggregate (pprof_aggregate.h): many sources into one profile.proto.
// Call paths are interned as a trie (node = parent node + location), so a
// span's path costs one hash lookup given its parent's, and a sample is a
// (path node, label set) pair whose values are summed as sources come in.

#include "formats/pprof_aggregate.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analysis/sched.h"
#include "formats/export_util.h"
#include "formats/pprof_writer.h"
#include "util/file_io.h"
#include "util/saturating.h"

namespace mlprof {

namespace field = pprof_field;
using pprof::ProtoWriter;

namespace {

int64_t meta_int(const std::map<std::string, std::string>& meta, const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return 0;
  int64_t v = 0;
  const std::string& s = it->second;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() ? v : 0;
}

}  // namespace

// Named, not anonymous: State (declared in the header) holds a map of them.
namespace pprof_aggregate_detail {

// A function is its name, file and first line: what makes two sources'
// frames the same frame. system_name is the first source's.
struct FrameKey {
  int64_t name, filename, line;
  bool operator==(const FrameKey&) const = default;
};
struct FrameKeyHash {
  size_t operator()(const FrameKey& k) const {
    size_t h = std::hash<int64_t>()(k.name);
    for (const int64_t v : {k.filename, k.line}) {
      h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};

}  // namespace pprof_aggregate_detail

namespace {

using pprof_aggregate_detail::FrameKey;
using pprof_aggregate_detail::FrameKeyHash;

constexpr uint32_t kNoNode = std::numeric_limits<uint32_t>::max();

}  // namespace

struct PprofAggregate::State {
  pprof::PprofStrings strings;
  ProtoWriter functions, locations;  // encoded as they are first seen
  std::unordered_map<FrameKey, uint64_t, FrameKeyHash> function_ids;
  std::unordered_map<uint64_t, uint64_t> location_ids;  // function id << 32 | line -> location id

  // The call-path trie: node 0 is the empty path.
  struct Node {
    uint32_t parent = 0;
    uint64_t location = 0;
  };
  std::vector<Node> nodes{Node{}};
  std::unordered_map<uint64_t, uint32_t> child;  // parent << 32 | location -> node

  std::vector<std::string> label_sets{std::string()};  // encoded Sample.label fields; 0: none
  std::unordered_map<std::string, uint32_t> label_set_ids{{std::string(), 0}};

  struct Sample {
    uint32_t node = 0;
    uint32_t labels = 0;
    std::vector<int64_t> values;  // by type; shorter when types came later
  };
  std::vector<Sample> samples;
  std::unordered_map<uint64_t, uint32_t> sample_ids;  // node << 32 | label set -> index

  std::vector<std::pair<std::string, std::string>> types;
  std::vector<std::pair<int64_t, int64_t>> type_strings;
  std::vector<int64_t> comments;
  size_t sources = 0;
  int64_t start_unix_ns = 0, end_unix_ns = 0;

  size_t type_index(const std::string& type, const std::string& unit) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i].first == type && types[i].second == unit) return i;
    }
    types.emplace_back(type, unit);
    type_strings.emplace_back(strings.add(type), strings.add(unit));
    return types.size() - 1;
  }

  uint32_t label_set(const Labels& labels) {
    ProtoWriter encoded;
    for (const auto& [key, value] : labels) {
      encoded.message_field(field::kSampleLabel,
                            pprof::label_bytes(strings.add(key), strings.add(value)));
    }
    auto [it, inserted] =
        label_set_ids.try_emplace(encoded.bytes(), static_cast<uint32_t>(label_sets.size()));
    if (inserted) label_sets.push_back(encoded.bytes());
    return it->second;
  }

  uint64_t location(FrameKey key, int64_t system_name, int64_t line) {
    auto [fit, new_function] = function_ids.try_emplace(key, function_ids.size() + 1);
    if (new_function) {
      ProtoWriter f;
      f.uint_field(field::kFunctionId, fit->second);
      f.int_field(field::kFunctionName, key.name);
      f.int_field(field::kFunctionSystemName, system_name);
      f.int_field(field::kFunctionFilename, key.filename);
      f.int_field(field::kFunctionStartLine, key.line);
      functions.message_field(field::kFunction, f);
    }
    const uint64_t lkey = (fit->second << 32) | static_cast<uint32_t>(line);
    auto [lit, new_location] = location_ids.try_emplace(lkey, location_ids.size() + 1);
    if (new_location) {
      ProtoWriter l, ln;
      ln.uint_field(field::kLineFunctionId, fit->second);
      ln.int_field(field::kLineLine, line);
      l.uint_field(field::kLocationId, lit->second);
      l.message_field(field::kLocationLine, ln);
      locations.message_field(field::kLocation, l);
    }
    return lit->second;
  }

  uint32_t child_of(uint32_t parent, uint64_t location) {
    auto [it, inserted] = child.try_emplace((static_cast<uint64_t>(parent) << 32) | location,
                                            static_cast<uint32_t>(nodes.size()));
    if (inserted) nodes.push_back({parent, location});
    return it->second;
  }

  Sample& sample(uint32_t node, uint32_t labels) {
    auto [it, inserted] = sample_ids.try_emplace((static_cast<uint64_t>(node) << 32) | labels,
                                                 static_cast<uint32_t>(samples.size()));
    if (inserted) samples.push_back({node, labels, {}});
    Sample& s = samples[it->second];
    if (s.values.size() < types.size()) s.values.resize(types.size(), 0);
    return s;
  }
};

PprofAggregate::PprofAggregate() : state_(std::make_unique<State>()) {
  state_->comments.push_back(state_->strings.add("mlflow-profiler"));
}
PprofAggregate::~PprofAggregate() = default;

void PprofAggregate::add(const Profile& p, const Labels& labels) {
  State& st = *state_;
  ++st.sources;
  st.strings.use(p.functions.strings());
  const uint32_t label_set = st.label_set(labels);
  // The types to_pprof writes for this profile, in its order.
  const bool kernel = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  const size_t calls = st.type_index("calls", "count"), wall = st.type_index("wall", "nanoseconds");
  const size_t off_cpu = kernel ? st.type_index("off_cpu", "nanoseconds") : 0;
  const size_t runq = kernel ? st.type_index("runq", "nanoseconds") : 0;

  if (const int64_t start = meta_int(p.meta, "start_unix_ns"); start > 0) {
    const int64_t end = start + std::max<int64_t>(0, p.end_ns - p.start_ns);
    st.start_unix_ns = st.start_unix_ns == 0 ? start : std::min(st.start_unix_ns, start);
    st.end_unix_ns = std::max(st.end_unix_ns, end);
  }

  // A span's location, as to_pprof makes it: its display name and its code.
  std::unordered_map<uint64_t, uint64_t> location_of;  // label << 32 | function -> location
  auto span_location = [&](const Span& s) {
    const uint64_t key = (static_cast<uint64_t>(s.label) << 32) | s.function;
    auto [it, inserted] = location_of.try_emplace(key, 0);
    if (inserted) {
      FrameKey fk{st.strings.of_profile(export_util::display_name_id(p, s)), 0, 0};
      int64_t system_name = 0;
      if (s.function < p.functions.size()) {
        const FunctionInfo& fn = p.functions.get(s.function);
        system_name = st.strings.of_profile(fn.name);
        fk.filename = st.strings.of_profile(fn.file);
        fk.line = fn.line;
      }
      it->second = st.location(fk, system_name, fk.line);
    }
    return it->second;
  };

  // Each span's path node, parents first (a parent normally comes before
  // its children; a walk up covers the rest, and a cycle in a hand-edited
  // profile ends at the path's length limit).
  std::vector<uint32_t> node_of(p.spans.size(), kNoNode);
  std::vector<int32_t> chain;
  auto node_for = [&](int32_t i) {
    chain.clear();
    int32_t j = i;
    while (j >= 0 && static_cast<size_t>(j) < p.spans.size() && node_of[j] == kNoNode &&
           chain.size() <= p.spans.size()) {
      chain.push_back(j);
      j = p.spans[j].parent;
    }
    uint32_t node = (j >= 0 && static_cast<size_t>(j) < p.spans.size() && node_of[j] != kNoNode)
                        ? node_of[j]
                        : 0;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      node = st.child_of(node, span_location(p.spans[*it]));
      node_of[*it] = node;
    }
    return node_of[i];
  };

  const std::vector<int64_t> self = export_util::self_times(p);
  const std::vector<SelfOffCpu> self_kernel = kernel ? self_off_cpu(p) : std::vector<SelfOffCpu>{};
  for (size_t i = 0; i < p.spans.size(); ++i) {
    State::Sample& s = st.sample(node_for(static_cast<int32_t>(i)), label_set);
    s.values[calls] = saturating_add(s.values[calls], 1);
    s.values[wall] = saturating_add(s.values[wall], self[i]);
    if (kernel) {
      s.values[off_cpu] = saturating_add(s.values[off_cpu], self_kernel[i].off_cpu_ns);
      s.values[runq] = saturating_add(s.values[runq], self_kernel[i].runq_ns);
    }
  }
}

void PprofAggregate::add(const StackSamples& samples, const Labels& labels) {
  State& st = *state_;
  ++st.sources;
  st.strings.use(samples.functions.strings());
  const uint32_t label_set = st.label_set(labels);
  std::vector<size_t> type_of;
  for (const auto& [type, unit] : samples.value_types) type_of.push_back(st.type_index(type, unit));
  std::unordered_map<uint64_t, uint64_t> location_of;  // function << 32 | line -> location
  for (const StackSamples::Sample& sample : samples.samples) {
    uint32_t node = 0;
    for (const StackSamples::Frame& f : sample.frames) {
      const uint64_t key =
          (static_cast<uint64_t>(f.function) << 32) | static_cast<uint32_t>(f.line);
      auto [it, inserted] = location_of.try_emplace(key, 0);
      if (inserted) {
        FrameKey fk{0, 0, 0};
        if (f.function < samples.functions.size()) {
          const FunctionInfo& fn = samples.functions.get(f.function);
          fk = {st.strings.of_profile(fn.name), st.strings.of_profile(fn.file), fn.line};
        }
        it->second = st.location(fk, fk.name, f.line);
      }
      node = st.child_of(node, it->second);
    }
    State::Sample& s = st.sample(node, label_set);
    for (size_t v = 0; v < sample.values.size() && v < type_of.size(); ++v)
      s.values[type_of[v]] = saturating_add(s.values[type_of[v]], sample.values[v]);
  }
}

void PprofAggregate::add_comment(std::string_view comment) {
  state_->comments.push_back(state_->strings.add(comment));
}

size_t PprofAggregate::sources() const { return state_->sources; }
size_t PprofAggregate::samples() const { return state_->samples.size(); }
std::vector<std::pair<std::string, std::string>> PprofAggregate::sample_types() const {
  return state_->types;
}

int64_t PprofAggregate::total(std::string_view type, std::string_view unit) const {
  const State& st = *state_;
  for (size_t t = 0; t < st.types.size(); ++t) {
    if (st.types[t].first != type || st.types[t].second != unit) continue;
    int64_t sum = 0;
    for (const State::Sample& s : st.samples)
      sum = saturating_add(sum, t < s.values.size() ? s.values[t] : 0);
    return sum;
  }
  return 0;
}

std::string PprofAggregate::to_pprof() const {
  // Every string written here was interned when added: the table is complete.
  const State& st = *state_;
  ProtoWriter out;
  for (const auto& [type, unit] : st.type_strings)
    pprof::write_value_type(out, field::kSampleType, type, unit);
  std::vector<uint64_t> stack;
  std::vector<int64_t> values;
  ProtoWriter sample;
  for (const State::Sample& s : st.samples) {
    stack.clear();
    for (uint32_t n = s.node; n != 0; n = st.nodes[n].parent) stack.push_back(st.nodes[n].location);
    values.assign(st.types.size(), 0);
    std::copy(s.values.begin(), s.values.end(), values.begin());
    sample.clear();
    sample.packed_field(field::kSampleLocationId, stack);
    sample.packed_field(field::kSampleValue, values);
    sample.bytes().append(st.label_sets[s.labels]);
    out.message_field(field::kSample, sample);
  }
  out.bytes().append(st.locations.bytes());
  out.bytes().append(st.functions.bytes());

  out.int_field(field::kTimeNanos, st.start_unix_ns);
  out.int_field(field::kDurationNanos, st.end_unix_ns - st.start_unix_ns);
  // pprof shows wall time first where a source has it; otherwise its last type.
  std::ptrdiff_t wall = -1;
  for (size_t t = 0; t < st.types.size(); ++t) {
    if (st.types[t].first == "wall") {
      wall = static_cast<std::ptrdiff_t>(t);
      break;
    }
  }
  if (wall >= 0) {
    pprof::write_value_type(out, field::kPeriodType, st.type_strings[wall].first,
                            st.type_strings[wall].second);
    out.int_field(field::kPeriod, 1);
  }
  out.packed_field(field::kComment, st.comments);
  if (wall >= 0) out.int_field(field::kDefaultSampleType, st.type_strings[wall].first);
  st.strings.write(out);
  return gzip_compress(out.bytes());
}

}  // namespace mlprof
