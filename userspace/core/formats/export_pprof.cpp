// pprof's profile.proto (github.com/google/pprof, proto/profile.proto),
// gzip-compressed. One sample per span: its call stack (leaf first), one
// call and its self wall time (and, with the eBPF agent's kernel figures, its
// self off-CPU and run-queue time), and string labels for the thread, the
// asyncio task, the profile_span label, the flags and the agent's pid and
// session.
//
// The encoding is written by hand (pprof_writer.h says why).

#include <charconv>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis/sched.h"
#include "formats/export.h"
#include "formats/export_util.h"
#include "formats/pprof_writer.h"
#include "render/render_text.h"
#include "util/file_io.h"

namespace mlprof {

namespace {

using pprof::PprofStrings;
using pprof::ProtoWriter;
using pprof::write_value_type;
namespace field = pprof_field;

int64_t meta_int(const Profile& p, const char* key) {
  const auto it = p.meta.find(key);
  if (it == p.meta.end()) return 0;
  int64_t v = 0;
  const std::string& s = it->second;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() ? v : 0;
}

}  // namespace

std::string to_pprof(const Profile& p) {
  const StringTable& strings = p.functions.strings();
  PprofStrings table;
  table.use(strings);
  ProtoWriter out;
  out.bytes().reserve(1024 + p.spans.size() * 48);

  // Sample values: [calls, wall], and [off_cpu, runq] after them when the
  // profile has kernel figures (the agent's). By pprof's convention the count
  // comes first; default_sample_type makes wall the one pprof shows.
  const int64_t wall = table.add("wall");
  const int64_t nanoseconds = table.add("nanoseconds");
  write_value_type(out, field::kSampleType, table.add("calls"), table.add("count"));
  write_value_type(out, field::kSampleType, wall, nanoseconds);
  const bool kernel = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  if (kernel) {
    write_value_type(out, field::kSampleType, table.add("off_cpu"), nanoseconds);
    write_value_type(out, field::kSampleType, table.add("runq"), nanoseconds);
  }

  // Functions and locations: one of each per distinct (display name, function).
  // A labelled span is its own function named after the label, with the
  // code's qualified name as system_name.
  ProtoWriter functions, locations, scratch;
  std::unordered_map<uint64_t, uint64_t> location_of;  // (label << 32 | function) -> id
  struct FunctionKey {
    int64_t name, system_name, filename, line;
    bool operator==(const FunctionKey&) const = default;
  };
  struct FunctionKeyHash {
    size_t operator()(const FunctionKey& k) const {
      size_t h = std::hash<int64_t>()(k.name);
      for (const int64_t v : {k.system_name, k.filename, k.line}) {
        h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      }
      return h;
    }
  };
  std::unordered_map<FunctionKey, uint64_t, FunctionKeyHash> function_ids;
  std::vector<uint64_t> span_location(p.spans.size());
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    const uint64_t key = (static_cast<uint64_t>(s.label) << 32) | s.function;
    auto [it, inserted] = location_of.try_emplace(key, 0);
    if (inserted) {
      FunctionKey fk{table.of_profile(export_util::display_name_id(p, s)), 0, 0, 0};
      if (s.function < p.functions.size()) {
        const FunctionInfo& fn = p.functions.get(s.function);
        fk.system_name = table.of_profile(fn.name);
        fk.filename = table.of_profile(fn.file);
        fk.line = fn.line;
      }
      auto [fit, new_function] = function_ids.try_emplace(fk, function_ids.size() + 1);
      if (new_function) {
        scratch.clear();
        scratch.uint_field(field::kFunctionId, fit->second);
        scratch.int_field(field::kFunctionName, fk.name);
        scratch.int_field(field::kFunctionSystemName, fk.system_name);
        scratch.int_field(field::kFunctionFilename, fk.filename);
        scratch.int_field(field::kFunctionStartLine, fk.line);
        functions.message_field(field::kFunction, scratch);
      }
      it->second = location_of.size();
      ProtoWriter line;
      line.uint_field(field::kLineFunctionId, fit->second);
      line.int_field(field::kLineLine, fk.line);
      scratch.clear();
      scratch.uint_field(field::kLocationId, it->second);
      scratch.message_field(field::kLocationLine, line);
      locations.message_field(field::kLocation, scratch);
    }
    span_location[i] = it->second;
  }

  // Labels, the same for every sample of a lane, encoded once.
  const int64_t thread_key = table.add("thread"), task_key = table.add("task");
  const int64_t label_key = table.add("label"), flags_key = table.add("flags");
  using pprof::label_bytes;
  std::vector<ProtoWriter> lane_labels(p.lanes.size());
  for (size_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& lane = p.lanes[li];
    const std::string thread =
        lane.thread_name.empty() ? std::to_string(lane.thread_id) : lane.thread_name;
    lane_labels[li].message_field(field::kSampleLabel, label_bytes(thread_key, table.add(thread)));
    if (lane.task != 0) {
      lane_labels[li].message_field(field::kSampleLabel,
                                    label_bytes(task_key, table.add(std::to_string(lane.task))));
    }
    // The agent's lanes: which process and session (-tagfocus=pid=4242).
    if (lane.pid != 0) {
      lane_labels[li].message_field(
          field::kSampleLabel, label_bytes(table.add("pid"), table.add(std::to_string(lane.pid))));
    }
    if (lane.session != 0) {
      lane_labels[li].message_field(
          field::kSampleLabel,
          label_bytes(table.add("session"), table.add(std::to_string(lane.session))));
    }
  }

  const std::vector<int64_t> self = export_util::self_times(p);
  // Self off-CPU and run-queue time, so that pprof's cumulative sums give the
  // inclusive figures back.
  const std::vector<SelfOffCpu> self_kernel = kernel ? self_off_cpu(p) : std::vector<SelfOffCpu>{};
  std::vector<uint64_t> stack;
  std::vector<int64_t> values(kernel ? 4 : 2);
  ProtoWriter sample;
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    stack.clear();
    for (auto j = static_cast<int32_t>(i); j >= 0 && stack.size() <= p.spans.size();
         j = p.spans[j].parent) {
      stack.push_back(span_location[j]);
    }
    values[0] = 1;
    values[1] = self[i];
    if (kernel) {
      values[2] = self_kernel[i].off_cpu_ns;
      values[3] = self_kernel[i].runq_ns;
    }
    sample.clear();
    sample.packed_field(field::kSampleLocationId, stack);
    sample.packed_field(field::kSampleValue, values);
    if (s.lane < lane_labels.size()) sample.bytes().append(lane_labels[s.lane].bytes());
    if (s.label != 0) {
      sample.message_field(field::kSampleLabel, label_bytes(label_key, table.of_profile(s.label)));
    }
    const std::string flags = export_util::flag_text(s.flags);
    if (!flags.empty()) {
      sample.message_field(field::kSampleLabel, label_bytes(flags_key, table.add(flags)));
    }
    out.message_field(field::kSample, sample);
  }
  out.bytes().append(locations.bytes());
  out.bytes().append(functions.bytes());

  // Provenance as comments (`pprof -comments`), in the meta map's key order.
  std::vector<int64_t> comments = {table.add("mlflow-profiler"),
                                   table.add("captured_depth=" + std::to_string(p.captured_depth))};
  for (const auto& [key, value] : p.meta) comments.push_back(table.add(key + "=" + value));
  if (p.kernel.present) {
    comments.push_back(table.add("lost_kernel_events=" + std::to_string(p.kernel.lost_events)));
  }

  // time_nanos is wall-clock (UTC) time; the spans are on CLOCK_MONOTONIC, so
  // it comes from the session's wall-clock start when the capture recorded it.
  out.int_field(field::kTimeNanos, meta_int(p, "start_unix_ns"));
  out.int_field(field::kDurationNanos, p.end_ns - p.start_ns);
  write_value_type(out, field::kPeriodType, wall, nanoseconds);
  out.int_field(field::kPeriod, 1);
  out.packed_field(field::kComment, comments);
  out.int_field(field::kDefaultSampleType, wall);
  table.write(out);
  return gzip_compress(out.bytes());
}

}  // namespace mlprof
