// Reading the store back (docs/store.md): one source as the Profile it was
// added as (the same tree), or as the sampled stacks it was imported as.
// A source's spans are read in sample id ranges, which bounds the rows held.

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "analysis/sched.h"
#include "formats/import.h"    // kMaxStackDepth
#include "formats/json_doc.h"  // kSpanValueTypes
#include "model/profile_check.h"
#include "store/sql_batch.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "views/waiting.h"

namespace mlprof {

using namespace store_detail;

namespace {

// Sample ids one read of a source's spans covers: bounds the rows held.
using sql_batch::kRowsPerRead;

// A function's kind as stored; one this reader does not know is damage.
FunctionKind function_kind(int64_t kind) {
  if (!is_function_kind(kind))
    throw StoreFailure("a function's kind " + std::to_string(kind) + " is unknown (" +
                       kFunctionKinds + ")");
  return static_cast<FunctionKind>(kind);
}

// The table's index of a functions row, added on its first sight: r[at] is
// its function_id, r[at + 1..6] its name, module, filename, start_line,
// kind and user_code, as both readers select them.
uint32_t function_of(FunctionTable& table, std::unordered_map<int64_t, uint32_t>& seen,
                     const SqlRow& r, size_t at) {
  auto [it, added] = seen.try_emplace(as_int(r[at]), 0);
  if (added) {
    it->second = table.add(as_text(r[at + 1]), as_text(r[at + 2]), as_text(r[at + 3]),
                           static_cast<int32_t>(as_int(r[at + 4])),
                           function_kind(as_int(r[at + 5])), as_int(r[at + 6]) != 0);
  }
  return it->second;
}

// A stored time (a session's start plus an offset, or a kernel time) as
// the Profile holds it: within +-kMaxTimeNs, else the store is damaged.
int64_t stored_time(int64_t base, int64_t offset = 0) {
  int64_t t = 0;
  if (__builtin_add_overflow(base, offset, &t) || !is_time(t))
    throw StoreFailure("a stored time is out of range (|t| >= 2^62 ns)");
  return t;
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + comma, v);
    if (ec != std::errc() || ptr != text.data() + comma)
      throw StoreFailure("an I/O shape is not a list of integers");
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

}  // namespace

Result<StackSamples> read_stack_source(StoreDriver& d, int64_t source_id) {
  const auto src =
      d.query("SELECT sample_kind, start_ns, end_ns FROM sources WHERE source_id = ?", {source_id});
  if (src.empty())
    return Error{Error::Kind::kUnsupported, 0,
                 "the store has no source " + std::to_string(source_id)};
  if (as_text(src[0][0]) != "stacks") {
    return Error{Error::Kind::kUnsupported, 0,
                 "source " + std::to_string(source_id) + " holds spans, not sampled stacks"};
  }
  StackSamples ss;
  ss.start_ns = as_int(src[0][1]);
  ss.end_ns = as_int(src[0][2]);
  for (const auto& r :
       d.query("SELECT key, value FROM source_labels WHERE source_id = ?", {source_id})) {
    ss.meta[as_text(r[0])] = as_text(r[1]);
  }
  std::unordered_map<int64_t, uint32_t> thread_of;
  for (const auto& r :
       d.query("SELECT l.lane_id, l.thread_id, l.thread_name FROM lanes l JOIN sessions se ON "
               "se.session_id = l.session_id WHERE se.source_id = ? ORDER BY l.ordinal",
               {source_id})) {
    thread_of[as_int(r[0])] = static_cast<uint32_t>(ss.threads.size());
    ss.threads.push_back({as_text(r[2]), static_cast<uint64_t>(as_int(r[1]))});
  }
  // Call paths: each stack's frames, root first, built from its parents.
  // Walked up without recursion (a recursion a level, 100,000 levels deep,
  // overflowed the stack: fuzz/regressions/fuzz_store_read/), each stack row
  // read once; a sample's whole path is kept per stack a sample names. A
  // damaged store's parents may form a cycle; no real call path is deeper
  // than an import takes (kMaxStackDepth).
  struct Node {
    int64_t parent = 0;
    SqlRow row;  // its location's line and its function, as read
  };
  std::unordered_map<int64_t, Node> node_of;
  std::unordered_map<int64_t, std::vector<StackSamples::Frame>> frames_of{{0, {}}};
  std::unordered_map<int64_t, uint32_t> fn_of;
  std::vector<const Node*> up;  // the stacks above a sample's, not yet a path: innermost first
  auto frames = [&](int64_t stack) -> const std::vector<StackSamples::Frame>& {
    auto known = frames_of.find(stack);
    if (known != frames_of.end()) return known->second;
    up.clear();
    for (int64_t at = stack; (known = frames_of.find(at)) == frames_of.end();) {
      if (up.size() >= kMaxStackDepth) throw StoreFailure("a call path is a cycle or too deep");
      auto n = node_of.find(at);
      if (n == node_of.end()) {
        auto rows = d.query(
            "SELECT k.parent_stack_id, lo.line, f.function_id, f.name, f.module, f.filename, "
            "f.start_line, f.kind, "
            "f.user_code FROM stacks k JOIN locations lo ON lo.location_id = k.location_id JOIN "
            "functions f ON "
            "f.function_id = lo.function_id WHERE k.stack_id = ?",
            {at});
        if (rows.empty()) throw StoreFailure("a sample names a call path that is not there");
        n = node_of.emplace(at, Node{as_int(rows[0][0]), std::move(rows[0])}).first;
      }
      up.push_back(&n->second);
      at = n->second.parent;
    }
    std::vector<StackSamples::Frame> out;
    out.reserve(known->second.size() + up.size());
    out.insert(out.end(), known->second.begin(), known->second.end());
    for (auto i = up.rbegin(); i != up.rend(); ++i) {  // root first: functions in that order
      const SqlRow& r = (*i)->row;
      out.push_back({function_of(ss.functions, fn_of, r, 2), static_cast<int32_t>(as_int(r[1]))});
    }
    if (out.size() > kMaxStackDepth) throw StoreFailure("a call path is a cycle or too deep");
    return frames_of.emplace(stack, std::move(out)).first->second;
  };
  std::unordered_map<int64_t, size_t> type_index;
  for (const auto& r :
       d.query("SELECT DISTINCT t.type_id, t.type, t.unit FROM " + values_table(has_2_(d, 4)) +
                   " v JOIN value_types t ON t.type_id = v.type_id "
                   "JOIN samples s ON s.sample_id = v.sample_id JOIN lanes l ON l.lane_id = "
                   "s.lane_id JOIN sessions se ON "
                   "se.session_id = l.session_id WHERE se.source_id = ? ORDER BY t.type_id",
               {source_id})) {
    type_index[as_int(r[0])] = ss.value_types.size();
    ss.value_types.emplace_back(as_text(r[1]), as_text(r[2]));
  }
  std::unordered_map<int64_t, size_t> sample_index;
  for (const auto& r : d.query(
           "SELECT s.sample_id, s.lane_id, s.stack_id FROM samples s JOIN lanes l ON l.lane_id = "
           "s.lane_id JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id = ? "
           "ORDER BY s.sample_id",
           {source_id})) {
    StackSamples::Sample s;
    const auto thread = thread_of.find(as_int(r[1]));
    if (thread == thread_of.end()) throw StoreFailure("a sample names a lane that is not there");
    s.thread = thread->second;
    s.frames = frames(as_int(r[2]));
    s.values.assign(ss.value_types.size(), 0);
    sample_index[as_int(r[0])] = ss.samples.size();
    ss.samples.push_back(std::move(s));
  }
  for (const auto& r :
       d.query("SELECT v.sample_id, v.type_id, v.value FROM " + values_table(has_2_(d, 4)) +
                   " v JOIN samples s ON "
                   "s.sample_id = v.sample_id JOIN lanes l ON l.lane_id = s.lane_id JOIN sessions "
                   "se ON "
                   "se.session_id = l.session_id WHERE se.source_id = ?",
               {source_id})) {
    const auto sample = sample_index.find(as_int(r[0]));
    const auto type = type_index.find(as_int(r[1]));
    if (sample == sample_index.end() || type == type_index.end())
      throw StoreFailure("a value names a sample or a type that is not there");
    ss.samples[sample->second].values[type->second] = as_int(r[2]);
  }
  if (!ss.samples.empty() && ss.value_types.empty())
    throw StoreFailure("the samples of source " + std::to_string(source_id) + " have no values");
  return ss;
}

Result<Profile> read_source(StoreDriver& d, int64_t source_id) {
  const auto src = d.query(
      "SELECT start_ns, end_ns, captured_depth, events_captured, events_skipped, "
      "unmatched_returns, kernel, "
      "lost_events, sample_kind FROM sources WHERE source_id = ?",
      {source_id});
  if (src.empty()) {
    return Error{Error::Kind::kUnsupported, 0,
                 "the store has no source " + std::to_string(source_id)};
  }
  if (as_text(src[0][8]) == "stacks") {
    return Error{Error::Kind::kUnsupported, 0,
                 "source " + std::to_string(source_id) +
                     " holds sampled stacks, not spans (mlprof show prints them)"};
  }
  Profile p;
  const SqlRow& s = src[0];
  p.start_ns = stored_time(as_int(s[0]));
  p.end_ns = stored_time(as_int(s[1]));
  p.captured_depth = static_cast<int>(as_int(s[2]));
  p.stats.events_captured = static_cast<uint64_t>(as_int(s[3]));
  p.stats.events_skipped = static_cast<uint64_t>(as_int(s[4]));
  p.stats.unmatched_returns = static_cast<uint64_t>(as_int(s[5]));
  p.kernel.present = as_int(s[6]) != 0;
  p.kernel.lost_events = static_cast<uint64_t>(as_int(s[7]));
  for (const auto& r :
       d.query("SELECT key, value FROM source_labels WHERE source_id = ?", {source_id})) {
    p.meta[as_text(r[0])] = as_text(r[1]);
  }

  // Lanes in document order, with their session's pid and serial.
  std::unordered_map<int64_t, uint32_t> lane_index;
  std::unordered_map<int64_t, int64_t> lane_session_start;
  std::vector<int64_t> parent_lane_ids;
  const bool traces = has_2_2(d);
  for (const auto& r : d.query(
           std::string("SELECT l.lane_id, l.thread_id, l.native_tid, l.thread_name, l.task, "
                       "l.parent_lane_id, "
                       "l.parent_call, l.events, l.dropped, l.truncated, se.pid, se.serial, "
                       "se.start_ns, ") +
               (traces
                    ? "t.trace_id, t.span_id FROM lanes l JOIN sessions se ON se.session_id = "
                      "l.session_id "
                      "LEFT JOIN session_traces t ON t.session_id = se.session_id"
                    : "NULL, NULL FROM lanes l JOIN sessions se ON se.session_id = l.session_id") +
               " WHERE se.source_id = ? ORDER BY l.ordinal",
           {source_id})) {
    Lane lane;
    lane.thread_id = static_cast<uint64_t>(as_int(r[1]));
    lane.native_tid = static_cast<uint64_t>(as_int(r[2]));
    lane.thread_name = as_text(r[3]);
    lane.task = static_cast<uint32_t>(as_int(r[4]));
    parent_lane_ids.push_back(is_null(r[5]) ? -1 : as_int(r[5]));
    lane.parent_call = static_cast<uint32_t>(as_int(r[6]));
    lane.recorded = static_cast<uint64_t>(as_int(r[7]));
    lane.dropped = static_cast<uint64_t>(as_int(r[8]));
    lane.truncated = as_int(r[9]) != 0;
    lane.pid = static_cast<uint32_t>(as_int(r[10]));
    lane.session = static_cast<uint64_t>(as_int(r[11]));
    if (!is_null(r[13])) {
      lane.trace_id = as_text(r[13]);
      lane.span_id = as_text(r[14]);
    }
    lane_index[as_int(r[0])] = static_cast<uint32_t>(p.lanes.size());
    lane_session_start[as_int(r[0])] = stored_time(as_int(r[12]));
    p.lanes.push_back(std::move(lane));
  }
  for (size_t i = 0; i < p.lanes.size(); ++i) {
    const auto it = lane_index.find(parent_lane_ids[i]);
    p.lanes[i].parent_lane = it == lane_index.end() ? -1 : static_cast<int32_t>(it->second);
  }

  // Spans, read in sample id ranges (one add's ids are contiguous) so that
  // no more than a range's rows are held at once, then grouped by lane in
  // lane order, in sample order within a lane, as the document has them.
  std::vector<int64_t> ids, parent_ids;  // in sample order
  std::unordered_map<int64_t, uint32_t> function_ids;
  const bool v2_6 = has_2_(d, 6);  // the span's resource
  for (const auto& range :
       d.query("SELECT first_sample_id, sample_count FROM sessions WHERE source_id = ? ORDER BY "
               "first_sample_id",
               {source_id})) {
    const int64_t first = as_int(range[0]), end = first + as_int(range[1]);
    for (int64_t lo = first; lo < end; lo += kRowsPerRead) {
      for (const auto& r : d.query("SELECT s.sample_id, s.lane_id, s.parent_id, s.flags, "
                                   "s.start_ns, s.end_ns, s.active_ns, s.resumes, "
                                   "k.depth, lo.label, f.function_id, f.name, f.module, "
                                   "f.filename, f.start_line, f.kind, f.user_code" +
                                       std::string(v2_6 ? ", s.resource " : ", NULL ") +
                                       "FROM samples s JOIN stacks k ON k.stack_id = s.stack_id "
                                       "JOIN locations lo ON lo.location_id = "
                                       "k.location_id JOIN functions f ON f.function_id = "
                                       "lo.function_id WHERE s.sample_id BETWEEN ? AND ? "
                                       "ORDER BY s.sample_id",
                                   {lo, std::min(lo + kRowsPerRead, end) - 1})) {
        Span sp;
        const int64_t lane_id = as_int(r[1]);
        const auto lane = lane_index.find(lane_id);
        if (lane == lane_index.end())
          return Error{Error::Kind::kCorrupt, 0, "a span's lane is not in its source"};
        sp.lane = lane->second;
        const int64_t base = lane_session_start.at(lane_id);
        parent_ids.push_back(is_null(r[2]) ? -1 : as_int(r[2]));
        sp.flags = static_cast<uint32_t>(as_int(r[3]));
        sp.start_ns = stored_time(base, as_int(r[4]));
        sp.end_ns = stored_time(base, as_int(r[5]));
        sp.active_ns = is_null(r[6]) ? sp.end_ns - sp.start_ns : stored_time(as_int(r[6]));
        sp.resumes = static_cast<uint32_t>(as_int(r[7]));
        sp.depth = static_cast<uint32_t>(as_int(r[8]));
        const std::string label = as_text(r[9]);
        sp.label = label.empty() ? 0 : p.functions.strings().intern(label);
        sp.function = function_of(p.functions, function_ids, r, 10);
        if (!is_null(r[17])) sp.resource = p.functions.strings().intern(as_text(r[17]));
        ids.push_back(as_int(r[0]));
        p.spans.push_back(sp);
      }
    }
  }
  // index_of[i]: the span index of the i-th sample in id order.
  std::vector<int32_t> index_of(p.spans.size());
  for (size_t i = 0; i < index_of.size(); ++i) index_of[i] = static_cast<int32_t>(i);
  const auto by_lane_order = [&](const Span& a, const Span& b) { return a.lane < b.lane; };
  if (!std::is_sorted(p.spans.begin(), p.spans.end(),
                      by_lane_order)) {  // sessions whose lanes interleave
    std::stable_sort(index_of.begin(), index_of.end(),
                     [&](int32_t a, int32_t b) { return p.spans[a].lane < p.spans[b].lane; });
    std::vector<Span> by_lane(p.spans.size());
    std::vector<int32_t> inverse(p.spans.size());
    for (size_t k = 0; k < index_of.size(); ++k) {
      by_lane[k] = p.spans[index_of[k]];
      inverse[index_of[k]] = static_cast<int32_t>(k);
    }
    p.spans.swap(by_lane);
    index_of.swap(inverse);
  }
  const bool ids_sorted = std::is_sorted(ids.begin(), ids.end());
  if (!ids_sorted) return Error{Error::Kind::kCorrupt, 0, "the source's sessions overlap"};
  // The span of a sample id; -1 when it is not in this source.
  auto span_of = [&](int64_t sample_id) -> int32_t {
    const auto it = std::lower_bound(ids.begin(), ids.end(), sample_id);
    if (it == ids.end() || *it != sample_id) return -1;
    return index_of[static_cast<size_t>(it - ids.begin())];
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    if (parent_ids[i] < 0) continue;
    const int32_t parent = span_of(parent_ids[i]);
    if (parent < 0) return Error{Error::Kind::kCorrupt, 0, "a span's parent is not in its source"};
    p.spans[index_of[i]].parent = parent;
  }
  auto span_at = [&](const SqlValue& v) {
    const int32_t span = span_of(as_int(v));
    if (span < 0) throw StoreFailure("a row names a span that is not in its source");
    return span;
  };
  for (const auto& r : d.query(std::string("SELECT g.sample_id, g.start_ns, g.end_ns, l.lane_id") +
                                   (has_2_(d, 5) ? ", g.resumes, g.paused_ns" : ", 0, 0") +
                                   " FROM segments g JOIN samples s ON s.sample_id = g.sample_id "
                                   "JOIN lanes l ON l.lane_id = s.lane_id "
                                   "JOIN sessions se ON se.session_id = l.session_id WHERE "
                                   "se.source_id = ? ORDER BY g.sample_id, "
                                   "g.start_ns",
                               {source_id})) {
    const int64_t base = lane_session_start.at(as_int(r[3]));
    p.segments.push_back(Segment{span_at(r[0]), stored_time(base, as_int(r[1])),
                                 stored_time(base, as_int(r[2])),
                                 static_cast<uint32_t>(as_int(r[4])), stored_time(as_int(r[5]))});
  }
  for (const auto& r : d.query("SELECT i.sample_id, i.role, i.name, i.type, i.shape, i.dtype, "
                               "i.length, i.size_bytes, i.device, i.repr "
                               "FROM io_summaries i JOIN samples s ON s.sample_id = i.sample_id "
                               "JOIN lanes l ON l.lane_id = s.lane_id "
                               "JOIN sessions se ON se.session_id = l.session_id WHERE "
                               "se.source_id = ? ORDER BY i.sample_id, i.ordinal",
                               {source_id})) {
    SpanIO io;
    io.span = span_at(r[0]);
    io.role = static_cast<IORole>(as_int(r[1]));
    io.name = as_text(r[2]);
    io.summary.type_name = as_text(r[3]);
    io.summary.has_shape = !is_null(r[4]);
    if (io.summary.has_shape) io.summary.shape = parse_shape(as_text(r[4]));
    io.summary.dtype = as_text(r[5]);
    io.summary.length = as_int(r[6]);
    io.summary.size_bytes = as_int(r[7]);
    io.summary.device = as_text(r[8]);
    io.summary.repr_short = as_text(r[9]);
    p.io.push_back(std::move(io));
  }
  // The document orders both by span; sample ids follow sessions, so sort by span.
  std::stable_sort(p.segments.begin(), p.segments.end(),
                   [](const Segment& a, const Segment& b) { return a.span < b.span; });
  std::stable_sort(p.io.begin(), p.io.end(),
                   [](const SpanIO& a, const SpanIO& b) { return a.span < b.span; });

  // Per-span values, one read for both kinds: the kernel's (when the source
  // has kernel data) and those measured in process ("cpu" is the kernel's
  // where its data is present).
  if (p.kernel.present) p.kernel.spans.assign(p.spans.size(), SpanKernel{});
  bool waiting_rows = false;  // none: stored before running vs waiting, or nothing waited
  for (const auto& r :
       d.query("SELECT v.sample_id, t.type, t.unit, v.value FROM " + values_table(has_2_(d, 4)) +
                   " v JOIN value_types t ON t.type_id = "
                   "v.type_id JOIN samples s ON s.sample_id = v.sample_id JOIN lanes l ON "
                   "l.lane_id = s.lane_id JOIN "
                   "sessions se ON se.session_id = l.session_id WHERE se.source_id = ?",
               {source_id})) {
    const std::string type = as_text(r[1]), unit = as_text(r[2]);
    const auto value = static_cast<uint64_t>(as_int(r[3]));
    if (type == kWaitingType && unit == "ns") {
      p.spans[span_at(r[0])].waiting_ns = stored_time(as_int(r[3]));
      waiting_rows = true;
      continue;
    }
    if (p.kernel.present) {
      for (const auto& vt : kSpanValueTypes) {
        if (type == vt.type && unit == vt.unit) vt.set(p.kernel.spans[span_at(r[0])], value);
      }
    }
    for (const ValueKindName& name : kValueKindNames) {
      if (type != name.type || unit != name.unit ||
          (p.kernel.present && name.kind == ValueKind::kCpuNs))
        continue;
      p.values.push_back({span_at(r[0]), name.kind, value});
    }
  }
  std::stable_sort(p.values.begin(), p.values.end(), [](const SpanValue& a, const SpanValue& b) {
    return a.span != b.span ? a.span < b.span : a.kind < b.kind;
  });
  if (!waiting_rows) compute_waiting(p);  // the suspended time (and the kernel's, if any) is known
  if (p.kernel.present) {
    const bool v2_2 = has_2_2(d);
    const bool v2_3 = v2_2 && has_2_(d, 3);
    for (const auto& r : d.query(
             std::string(
                 "SELECT pid, tid, start_ns, wake_ns, end_ns, blocked, waker_tid, prev_state, ") +
                 (v2_2 ? "syscall, waker_kind, waker_name" : "-1, 0, ''") +
                 (v2_3 ? ", wait" : ", ''") +
                 " FROM off_cpu_intervals WHERE source_id = ? ORDER BY ordinal",
             {source_id})) {
      OffCpuInterval o;
      o.pid = static_cast<uint32_t>(as_int(r[0]));
      o.tid = static_cast<uint64_t>(as_int(r[1]));
      o.start_ns = stored_time(as_int(r[2]));
      o.wake_ns = stored_time(as_int(r[3]));
      o.end_ns = stored_time(as_int(r[4]));
      o.blocked = as_int(r[5]) != 0;
      o.waker_tid = static_cast<uint64_t>(as_int(r[6]));
      o.prev_state = static_cast<uint32_t>(as_int(r[7]));
      o.syscall = static_cast<int32_t>(as_int(r[8]));
      const int64_t kind = as_int(r[9]);
      o.waker_kind = kind >= 0 && kind <= 3 ? static_cast<WakerKind>(kind) : WakerKind::kTask;
      o.waker_name = as_text(r[10]);
      if (!parse_wait_object(as_text(r[11]), o.wait)) o.wait = WaitObject::kNone;
      p.kernel.off_cpu.push_back(std::move(o));
    }
    if (v2_2) {
      for (const auto& r :
           d.query(std::string("SELECT w.sample_id, w.syscall, w.state, w.blocked_ns, w.count, ") +
                       (v2_3 ? "w.wait, w.waker, w.waker_ns" : "'', '', 0") +
                       " FROM span_waits w JOIN samples s ON s.sample_id = w.sample_id JOIN lanes "
                       "l ON l.lane_id = "
                       "s.lane_id JOIN sessions se ON se.session_id = l.session_id WHERE "
                       "se.source_id = ? ORDER BY "
                       "w.sample_id, w.blocked_ns DESC, w.syscall, w.state" +
                       (v2_3 ? ", w.wait" : ""),
                   {source_id})) {
        WaitReason w;
        w.syscall = static_cast<int32_t>(as_int(r[1]));
        const std::string state = as_text(r[2]);
        w.state = state.empty() ? '-' : state[0];
        w.blocked_ns = as_int(r[3]);
        w.count = static_cast<uint32_t>(as_int(r[4]));
        if (!parse_wait_object(as_text(r[5]), w.object)) w.object = WaitObject::kNone;
        w.waker = as_text(r[6]);
        w.waker_ns = as_int(r[7]);
        p.kernel.spans[span_at(r[0])].waits.push_back(w);
      }
    }
    for (const auto& r : d.query("SELECT pid, tid, parent_tid, start_ns, end_ns, name, "
                                 "started_under, exit_code FROM kernel_threads WHERE "
                                 "source_id = ? ORDER BY ordinal",
                                 {source_id})) {
      ThreadLifetime t;
      t.pid = static_cast<uint32_t>(as_int(r[0]));
      t.tid = static_cast<uint64_t>(as_int(r[1]));
      t.parent_tid = static_cast<uint64_t>(as_int(r[2]));
      t.start_ns = stored_time(as_int(r[3]));
      t.end_ns = stored_time(as_int(r[4]));
      t.name = as_text(r[5]);
      t.started_under = is_null(r[6]) ? -1 : span_at(r[6]);
      t.exit_code = static_cast<int32_t>(as_int(r[7]));
      p.kernel.threads.push_back(std::move(t));
    }
  }
  // A damaged store (or one made by hand) must not hand the views a tree
  // they cannot walk: refused in one line.
  if (const std::string defect = profile_defect(p); !defect.empty())
    return Error{Error::Kind::kCorrupt, 0, "source " + std::to_string(source_id) + ": " + defect};
  link_tree(p);
  return p;
}

}  // namespace mlprof
