#include "formats/export_util.h"

#include <algorithm>
#include <charconv>
#include <tuple>

namespace mlprof::export_util {

int64_t time_origin(const Profile& p) {
  int64_t origin = p.start_ns;
  for (const Span& s : p.spans) origin = std::min(origin, s.start_ns);
  for (const Segment& seg : p.segments) origin = std::min(origin, seg.start_ns);
  return origin;
}

std::vector<int64_t> self_times(const Profile& p) {
  std::vector<int64_t> self(p.spans.size());
  for (size_t i = 0; i < p.spans.size(); ++i) self[i] = p.spans[i].active_ns;
  for (const Span& s : p.spans) {
    if (s.parent >= 0 && static_cast<size_t>(s.parent) < p.spans.size() &&
        p.spans[s.parent].lane == s.lane) {
      self[s.parent] -= s.active_ns;
    }
  }
  for (int64_t& v : self) v = std::max<int64_t>(v, 0);
  return self;
}

std::vector<std::vector<RunInterval>> lane_intervals(const Profile& p) {
  std::vector<std::vector<RunInterval>> lanes(p.lanes.size());
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    if (s.lane >= lanes.size()) continue;
    auto& out = lanes[s.lane];
    const auto span = static_cast<int32_t>(i);
    const auto [first, last] = p.segments_of(span);
    if ((s.flags & kSpanGenerator) && first != last) {
      const auto n = static_cast<uint32_t>(last - first);
      uint32_t k = 0;
      for (const Segment* seg = first; seg != last; ++seg) {
        out.push_back({span, seg->start_ns, seg->end_ns, ++k, n, seg->resumes, seg->paused_ns});
      }
    } else {
      out.push_back({span, s.start_ns, s.end_ns, 0, 0});
    }
  }
  std::vector<const RunInterval*> stack;
  for (auto& lane : lanes) {
    for (RunInterval& iv : lane) iv.end_ns = std::max(iv.end_ns, iv.start_ns);
    // A total order, so the output does not depend on the sort algorithm.
    std::sort(lane.begin(), lane.end(), [&](const RunInterval& a, const RunInterval& b) {
      return std::make_tuple(a.start_ns, b.end_ns, p.spans[a.span].depth, a.span, a.segment) <
             std::make_tuple(b.start_ns, a.end_ns, p.spans[b.span].depth, b.span, b.segment);
    });
    // Nesting repair; a no-op on a profile built from events.
    stack.clear();
    for (RunInterval& iv : lane) {
      while (!stack.empty() && !stays_open(*stack.back(), iv)) stack.pop_back();
      if (!stack.empty()) iv.end_ns = std::min(iv.end_ns, stack.back()->end_ns);
      stack.push_back(&iv);
    }
  }
  return lanes;
}

std::vector<bool> lanes_with_spans(const Profile& p) {
  std::vector<bool> has(p.lanes.size(), false);
  for (const Span& s : p.spans) {
    if (s.lane < has.size()) has[s.lane] = true;
  }
  return has;
}

std::string flag_text(uint32_t flags) {
  std::string out;
  for (const SpanFlagName& f : kSpanFlagNames) {
    if (!f.listed || !(flags & f.bit)) continue;
    if (!out.empty()) out += ", ";
    out += f.words;
  }
  return out;
}

void append_us(std::string& out, int64_t ns) {
  const bool negative = ns < 0;
  const uint64_t v = negative ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  char buf[32];
  char* end = buf;
  if (negative) *end++ = '-';
  end = std::to_chars(end, buf + sizeof(buf), v / 1000).ptr;
  const auto frac = static_cast<unsigned>(v % 1000);
  if (frac != 0) {
    *end++ = '.';
    *end++ = static_cast<char>('0' + frac / 100);
    *end++ = static_cast<char>('0' + frac / 10 % 10);
    *end++ = static_cast<char>('0' + frac % 10);
    // n / 1000.0 is the double a reader parses from the text (both are the
    // correctly rounded n/1000).
    const double parsed = static_cast<double>(v) / 1000.0;
    if (static_cast<uint64_t>(parsed * 1000.0) != v) {
      *end++ = '1';
    } else {
      while (end[-1] == '0') --end;
    }
  }
  out.append(buf, end);
}

uint32_t display_name_id(const Profile& p, const Span& s) {
  if (s.label != 0) return s.label;
  if (s.function < p.functions.size()) return p.functions.get(s.function).name;
  return 0;
}

}  // namespace mlprof::export_util
