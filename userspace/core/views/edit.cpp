#include "views/edit.h"

#include <algorithm>
#include <utility>

namespace mlprof {

namespace {

Error out_of_range(const char* table, int32_t span, size_t spans) {
  return Error{Error::Kind::kUnsupported, 0,
               std::string("cannot edit the profile: ") + table + " names span " +
                   std::to_string(span) + ", but the profile has " + std::to_string(spans) +
                   " spans (indices 0 to " + std::to_string(static_cast<int64_t>(spans) - 1) + ")"};
}

template <typename Map>
bool all_in_range(const Map& m, size_t spans, int32_t& bad) {
  for (const auto& [span, unused] : m) {
    (void)unused;
    if (span < 0 || static_cast<size_t>(span) >= spans) {
      bad = span;
      return false;
    }
  }
  return true;
}

// Appends the I/O rows of span `to` (arguments first, then the return value).
void append_rows(std::vector<SpanIO>& out, const std::vector<SpanIO>& rows, int32_t to) {
  for (const IORole role : {IORole::kArgument, IORole::kReturn}) {
    for (const SpanIO& row : rows) {
      if (row.role != role) continue;
      out.push_back(row);
      out.back().span = to;
    }
  }
}

}  // namespace

Result<Profile> edit_profile(const Profile& in, const ProfileEdits& edits) {
  const size_t n = in.spans.size();
  int32_t bad = 0;
  if (!all_in_range(edits.labels, n, bad)) return out_of_range("labels", bad, n);
  if (!all_in_range(edits.io, n, bad)) return out_of_range("io", bad, n);
  for (const int32_t s : edits.drop) {
    if (s < 0 || static_cast<size_t>(s) >= n) return out_of_range("drop", s, n);
  }

  // Parents come first (build_tree and the reader guarantee it), so one pass
  // finds every removed subtree and numbers what stays.
  std::vector<bool> gone(n, false);
  for (const int32_t s : edits.drop) gone[static_cast<size_t>(s)] = true;
  std::vector<int32_t> new_index(n, -1);
  int32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const Span& s = in.spans[i];
    if (s.parent < -1 || s.parent >= static_cast<int64_t>(i)) {
      return Error{Error::Kind::kCorrupt, 0,
                   "cannot edit the profile: span " + std::to_string(i) + " has parent " +
                       std::to_string(s.parent) + ", which is not an earlier span"};
    }
    if (s.function >= in.functions.size()) {
      return Error{Error::Kind::kCorrupt, 0,
                   "cannot edit the profile: span " + std::to_string(i) + " names function " +
                       std::to_string(s.function) + ", but the profile has " +
                       std::to_string(in.functions.size())};
    }
    if (s.parent >= 0 && gone[static_cast<size_t>(s.parent)]) gone[i] = true;
    if (!gone[i]) new_index[i] = kept++;
  }

  // What the kept spans still use, so that nothing only a removed span (or a
  // replaced label) used reaches the copy's string table.
  const StringTable& old_strings = in.functions.strings();
  std::vector<bool> string_used(old_strings.size(), false);
  std::vector<bool> function_used(in.functions.size(), false);
  for (size_t i = 0; i < n; ++i) {
    if (gone[i]) continue;
    const Span& s = in.spans[i];
    function_used[s.function] = true;
    const bool relabelled = edits.labels.count(static_cast<int32_t>(i)) != 0;
    if (!relabelled && s.label < old_strings.size()) string_used[s.label] = true;
    if (s.resource < old_strings.size()) string_used[s.resource] = true;
  }
  for (const Mark& m : in.marks) {
    for (const uint32_t id : {m.name, m.resource}) {
      if (id < old_strings.size()) string_used[id] = true;
    }
  }
  for (uint32_t f = 0; f < in.functions.size(); ++f) {
    if (!function_used[f]) continue;
    const FunctionInfo& fn = in.functions.get(f);
    for (const uint32_t id : {fn.name, fn.module, fn.file}) {
      if (id < old_strings.size()) string_used[id] = true;
    }
  }

  Profile out;
  StringTable& strings = out.functions.strings();
  // Old ids in increasing order: the strings that stay keep their order.
  std::vector<uint32_t> string_map(old_strings.size(), 0);
  for (uint32_t id = 1; id < old_strings.size(); ++id) {
    if (string_used[id]) string_map[id] = strings.intern(old_strings.get(id));
  }
  auto new_string = [&](uint32_t id) { return id < string_map.size() ? string_map[id] : 0u; };
  std::vector<uint32_t> function_map(in.functions.size(), 0);
  for (uint32_t f = 0; f < in.functions.size(); ++f) {
    if (!function_used[f]) continue;
    const FunctionInfo& fn = in.functions.get(f);
    function_map[f] = out.functions.add(old_strings.get(fn.name), old_strings.get(fn.module),
                                        old_strings.get(fn.file), fn.line, fn.kind, fn.user_code);
  }

  out.spans.reserve(static_cast<size_t>(kept));
  for (size_t i = 0; i < n; ++i) {
    if (gone[i]) continue;
    Span s = in.spans[i];
    s.parent = s.parent < 0 ? -1 : new_index[static_cast<size_t>(s.parent)];
    s.function = function_map[s.function];
    const auto label = edits.labels.find(static_cast<int32_t>(i));
    s.label = label == edits.labels.end() ? new_string(s.label) : strings.intern(label->second);
    s.resource = new_string(s.resource);
    out.spans.push_back(s);
  }

  // Profile::io and Profile::segments are sorted by span: walk them alongside.
  size_t r = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t first = r;
    while (r < in.io.size() && in.io[r].span <= static_cast<int32_t>(i)) ++r;
    if (gone[i]) continue;
    const int32_t to = new_index[i];
    if (const auto replaced = edits.io.find(static_cast<int32_t>(i)); replaced != edits.io.end()) {
      append_rows(out.io, replaced->second, to);
      continue;
    }
    for (size_t k = first; k < r; ++k) {
      if (in.io[k].span != static_cast<int32_t>(i)) continue;  // a row of no span
      out.io.push_back(in.io[k]);
      out.io.back().span = to;
    }
  }
  for (const Segment& seg : in.segments) {
    if (seg.span < 0 || static_cast<size_t>(seg.span) >= n || gone[seg.span]) continue;
    out.segments.push_back(seg);
    out.segments.back().span = new_index[seg.span];
  }
  for (const SpanValue& v : in.values) {
    if (v.span < 0 || static_cast<size_t>(v.span) >= n || gone[v.span]) continue;
    out.values.push_back({new_index[v.span], v.kind, v.value});
  }
  // A mark under a span that is gone is under the nearest kept span above it.
  for (Mark m : in.marks) {
    int32_t s = m.span;
    while (s >= 0 && static_cast<size_t>(s) < n && gone[s])
      s = in.spans[static_cast<size_t>(s)].parent;
    m.span = s >= 0 && static_cast<size_t>(s) < n ? new_index[s] : -1;
    m.name = new_string(m.name);
    m.resource = new_string(m.resource);
    out.marks.push_back(m);
  }

  out.lanes.reserve(in.lanes.size());
  for (const Lane& lane : in.lanes) {
    Lane copy;
    copy.thread_id = lane.thread_id;
    copy.native_tid = lane.native_tid;
    copy.thread_name = lane.thread_name;
    copy.task = lane.task;
    copy.parent_lane = lane.parent_lane;
    copy.parent_call = lane.parent_call;
    copy.recorded = lane.recorded;
    copy.dropped = lane.dropped;
    copy.truncated = lane.truncated;
    out.lanes.push_back(std::move(copy));
  }

  out.captured_depth = in.captured_depth;
  out.start_ns = in.start_ns;
  out.end_ns = in.end_ns;
  out.stats = in.stats;
  out.meta = in.meta;
  for (const auto& [key, value] : edits.meta) out.meta[key] = value;
  link_tree(out);
  return out;
}

}  // namespace mlprof
