#include "model/profile_check.h"

namespace mlprof {

namespace {

using Defect = std::optional<ProfileDefect>;

Defect at(const char* table, size_t row, const char* column, std::string what) {
  return ProfileDefect{table, static_cast<int64_t>(row), column, std::move(what)};
}

// `part` within [start, end]'s length, exactly: past 2^53 ns a double
// loses nanoseconds, and in unsigned no difference overflows.
bool within(int64_t part, int64_t start, int64_t end) {
  return part >= 0 && end >= start &&
         static_cast<uint64_t>(part) <= static_cast<uint64_t>(end) - static_cast<uint64_t>(start);
}

// The id is one of `size` rows of `of` (the document reader's words).
Defect id_defect(const char* table, size_t row, const char* column, int64_t id, size_t size,
                 const char* of) {
  if (id >= 0 && static_cast<uint64_t>(id) < size) return std::nullopt;
  return at(table, row, column,
            "id " + std::to_string(id) + " is out of range (" + of + " has " +
                std::to_string(size) + " entries)");
}

// Each named time is_time (the document reader refuses them as it reads).
Defect time_defect(const char* table, size_t row,
                   std::initializer_list<std::pair<const char*, int64_t>> times) {
  for (const auto& [column, ns] : times) {
    if (!is_time(ns)) return at(table, row, column, "is out of range (|t| >= 2^62 ns)");
  }
  return std::nullopt;
}

// A row's start_ns and end_ns: each is_time, and the end not before the start.
Defect interval_defect(const char* table, size_t row, int64_t start, int64_t end) {
  if (Defect d = time_defect(table, row, {{"start_ns", start}, {"end_ns", end}})) return d;
  if (end < start) return at(table, row, nullptr, "ends before it starts");
  return std::nullopt;
}

}  // namespace

std::string ProfileDefect::str() const {
  // Appended piece by piece: gcc 12 warns (-Wrestrict, a false positive) on
  // "[" + std::to_string(row) inlined at -O3.
  std::string s = table;
  if (row >= 0) {
    s += '[';
    s += std::to_string(row);
    s += ']';
  }
  if (column != nullptr) {
    s += '.';
    s += column;
  }
  s += ": ";
  s += what;
  return s;
}

Defect session_defect(const Profile& p) {
  const auto meta = [](const char* column, std::string what) {
    return ProfileDefect{"meta", -1, column, std::move(what)};
  };
  if (p.captured_depth < -1) return meta("captured_depth", "must be -1 (unlimited) or >= 0");
  if (!is_time(p.start_ns)) return meta("start_ns", "is out of range (|t| >= 2^62 ns)");
  if (!is_time(p.end_ns)) return meta("end_ns", "is out of range (|t| >= 2^62 ns)");
  if (p.end_ns < p.start_ns) return meta("end_ns", "is before start_ns");
  return std::nullopt;
}

Defect lane_defect(const Profile& p, size_t i) {
  const int32_t parent = p.lanes[i].parent_lane;
  if (parent < -1 || parent >= static_cast<int64_t>(p.lanes.size())) {
    return at("lanes", i, "parent_lane", std::to_string(parent) + " is neither -1 nor a lane");
  }
  return std::nullopt;
}

Defect span_defect(const Profile& p, size_t i) {
  const Span& s = p.spans[i];
  // A parent comes first: that is what makes the links a tree (no cycles)
  // and what the renderers' single passes rely on.
  if (s.parent < -1 || s.parent >= static_cast<int64_t>(i)) {
    return at("spans", i, nullptr,
              "parent " + std::to_string(s.parent) + " is not an earlier span");
  }
  const uint32_t depth = s.parent < 0 ? 0 : p.spans[s.parent].depth + 1;
  if (s.depth != depth) {
    return at("spans", i, nullptr,
              "depth " + std::to_string(s.depth) + " does not match its parent's (expected " +
                  std::to_string(depth) + ")");
  }
  if (Defect d = id_defect("spans", i, "lane", s.lane, p.lanes.size(), "lanes")) return d;
  if (Defect d = interval_defect("spans", i, s.start_ns, s.end_ns)) return d;
  if (!within(s.waiting_ns, s.start_ns, s.end_ns)) {
    return at("spans", i, "waiting_ns", "is not within the span's wall time");
  }
  return std::nullopt;
}

Defect segment_defect(const Profile& p, size_t i) {
  const Segment& g = p.segments[i];
  if (Defect d = id_defect("segments", i, "span", g.span, p.spans.size(), "spans")) return d;
  // Profile::segments_of looks segments up by binary search on span.
  if (i > 0 && g.span < p.segments[i - 1].span)
    return at("segments", i, nullptr, "not in span order");
  if (Defect d = interval_defect("segments", i, g.start_ns, g.end_ns)) return d;
  if (!within(g.paused_ns, g.start_ns, g.end_ns)) {
    return at("segments", i, "paused_ns", "is not within the segment's length");
  }
  return std::nullopt;
}

Defect io_defect(const Profile& p, size_t i) {
  const SpanIO& io = p.io[i];
  if (Defect d = id_defect("io", i, "span", io.span, p.spans.size(), "spans")) return d;
  if (static_cast<uint32_t>(io.role) > static_cast<uint32_t>(IORole::kReturn)) {
    return at("io", i, "role", "must be 0 (argument) or 1 (return value)");
  }
  // Profile::io_of looks summaries up by binary search on span.
  if (i > 0 && io.span < p.io[i - 1].span) return at("io", i, nullptr, "not in span order");
  return std::nullopt;
}

Defect mark_defect(const Profile& p, size_t i) {
  const Mark& m = p.marks[i];
  if (m.span < -1 || m.span >= static_cast<int64_t>(p.spans.size())) {
    return at("marks", i, "span", "is not -1 or a span");
  }
  if (Defect d = time_defect("marks", i, {{"ts_ns", m.ts_ns}})) return d;
  if (i > 0 && m.ts_ns < p.marks[i - 1].ts_ns) return at("marks", i, nullptr, "not in time order");
  return std::nullopt;
}

Defect off_cpu_defect(const Profile& p, size_t i) {
  const OffCpuInterval& iv = p.kernel.off_cpu[i];
  const char* table = "kernel.off_cpu";
  if (Defect d = time_defect(
          table, i, {{"start_ns", iv.start_ns}, {"wake_ns", iv.wake_ns}, {"end_ns", iv.end_ns}})) {
    return d;
  }
  if (iv.end_ns < iv.start_ns) return at(table, i, nullptr, "ends before it starts");
  if (iv.syscall < -1) return at(table, i, "syscall", "below -1");
  return std::nullopt;
}

Defect thread_defect(const Profile& p, size_t i) {
  const ThreadLifetime& t = p.kernel.threads[i];
  const char* table = "kernel.threads";
  if (t.started_under < -1 || t.started_under >= static_cast<int64_t>(p.spans.size())) {
    return at(table, i, "started_under",
              std::to_string(t.started_under) + " is neither -1 nor a span");
  }
  if (Defect d = time_defect(table, i, {{"start_ns", t.start_ns}, {"end_ns", t.end_ns}})) {
    return d;
  }
  // 0 stands for "before the capture" / "still running", so only two known
  // times can disagree.
  if (t.start_ns != 0 && t.end_ns != 0 && t.end_ns < t.start_ns) {
    return at(table, i, nullptr, "ends before it starts");
  }
  return std::nullopt;
}

std::string profile_defect(const Profile& p) {
  Defect d = session_defect(p);
  const auto each = [&d, &p](size_t n, Defect (*check)(const Profile&, size_t)) {
    for (size_t i = 0; i < n && !d; ++i) d = check(p, i);
  };
  each(p.lanes.size(), lane_defect);
  each(p.spans.size(), span_defect);
  each(p.segments.size(), segment_defect);
  each(p.io.size(), io_defect);
  each(p.marks.size(), mark_defect);
  each(p.kernel.off_cpu.size(), off_cpu_defect);
  each(p.kernel.threads.size(), thread_defect);
  return d ? d->str() : std::string();
}

}  // namespace mlprof
