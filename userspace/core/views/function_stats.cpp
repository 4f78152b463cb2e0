#include "views/function_stats.h"

#include <algorithm>

#include "formats/export_util.h"
#include "store/sql_batch.h"
#include "store/store_paths.h"
#include "views/path_stats.h"
#include "views/waiting.h"

namespace mlprof {

namespace {

constexpr uint32_t kNoNode = UINT32_MAX;
using sql_batch::kIdsPerQuery;
using sql_batch::kRowsPerRead;
using sql_batch::placeholders;

}  // namespace

uint32_t FunctionTotals::function(std::string_view name, std::string_view file, int32_t line) {
  std::string key;
  key.reserve(name.size() + file.size() + 16);
  key.append(name).push_back('\0');
  key.append(file).push_back('\0');
  key += std::to_string(line);
  const auto [it, inserted] =
      function_index_.try_emplace(std::move(key), static_cast<uint32_t>(functions_.size()));
  if (inserted) functions_.push_back({std::string(name), std::string(file), line});
  return it->second;
}

uint32_t FunctionTotals::node(uint32_t parent, uint32_t function) {
  const uint64_t key = static_cast<uint64_t>(parent) << 32 | function;
  const auto [it, inserted] =
      children_.try_emplace(key, static_cast<uint32_t>(parents_.size() + 1));
  if (inserted) {
    parents_.push_back(parent);
    function_of_.push_back(function);
    values_.resize(values_.size() + slots_, 0);
  }
  return it->second;
}

void FunctionTotals::add_slot() {
  std::vector<int64_t> grown(parents_.size() * (slots_ + 1), 0);
  for (size_t p = 0; p < parents_.size(); ++p) {
    std::copy_n(values_.begin() + static_cast<std::ptrdiff_t>(p * slots_), slots_,
                grown.begin() + static_cast<std::ptrdiff_t>(p * (slots_ + 1)));
  }
  values_.swap(grown);
  ++slots_;
}

std::vector<FunctionTotals::Row> FunctionTotals::rows() const {
  const size_t n = parents_.size();
  // A path is made after its parent, so index order is parents first: the
  // totals at or under each path sum up in one pass backwards.
  std::vector<int64_t> under(values_);
  for (size_t i = n; i-- > 0;) {
    if (parents_[i] == 0) continue;
    for (size_t s = 0; s < slots_; ++s) {
      int64_t& sum = under[(parents_[i] - 1) * slots_ + s];
      sum = saturating_add(sum, under[i * slots_ + s]);
    }
  }
  // Which paths are the outermost of their function (no ancestor of the same
  // function): a walk down the tree counting the functions above.
  std::vector<uint32_t> first_child(n + 1, 0), order(n);  // children by parent, as offsets
  for (size_t i = 0; i < n; ++i) ++first_child[parents_[i]];
  for (size_t p = 0, sum = 0; p <= n; ++p) {
    const size_t c = first_child[p];
    first_child[p] = static_cast<uint32_t>(sum);
    sum += c;
  }
  std::vector<uint32_t> fill(first_child);
  for (size_t i = 0; i < n; ++i) order[fill[parents_[i]]++] = static_cast<uint32_t>(i + 1);
  const auto children = [&](uint32_t node) {
    const uint32_t end = node < n ? first_child[node + 1] : static_cast<uint32_t>(n);
    return std::pair<uint32_t, uint32_t>(first_child[node], end);
  };
  std::vector<uint32_t> on_path(functions_.size(), 0);
  std::vector<bool> outermost(n, false);
  std::vector<std::pair<uint32_t, bool>> stack;  // (node, leaving)
  const auto [r0, r1] = children(0);
  for (uint32_t k = r1; k-- > r0;) stack.emplace_back(order[k], false);
  while (!stack.empty()) {
    const auto [node, leaving] = stack.back();
    stack.pop_back();
    const uint32_t f = function_of_[node - 1];
    if (leaving) {
      --on_path[f];
      continue;
    }
    outermost[node - 1] = on_path[f] == 0;
    ++on_path[f];
    stack.emplace_back(node, true);
    const auto [c0, c1] = children(node);
    for (uint32_t k = c1; k-- > c0;) stack.emplace_back(order[k], false);
  }

  std::vector<Row> out(functions_.size());
  std::vector<bool> seen(functions_.size(), false);
  for (size_t f = 0; f < functions_.size(); ++f) {
    out[f].function = functions_[f];
    out[f].flat.assign(slots_, 0);
    out[f].cum.assign(slots_, 0);
  }
  for (size_t i = 0; i < n; ++i) {
    Row& r = out[function_of_[i]];
    seen[function_of_[i]] = true;
    for (size_t s = 0; s < slots_; ++s) {
      r.flat[s] = saturating_add(r.flat[s], values_[i * slots_ + s]);
      if (outermost[i]) r.cum[s] = saturating_add(r.cum[s], under[i * slots_ + s]);
    }
  }
  std::vector<Row> kept;
  for (size_t f = 0; f < out.size(); ++f) {
    if (seen[f]) kept.push_back(std::move(out[f]));
  }
  return kept;
}

void FunctionStats::add(const Profile& p, int depth) {
  ++profiles_;
  sessions_ += profile_sessions(p);
  // Running and waiting self times: the span's less its same-lane children's.
  std::vector<int64_t> self(p.spans.size()), waiting(p.spans.size());
  for (size_t i = 0; i < p.spans.size(); ++i) {
    self[i] = p.spans[i].running_ns();
    waiting[i] = p.spans[i].waiting_ns;
  }
  for (const Span& s : p.spans) {
    if (s.parent >= 0 && static_cast<size_t>(s.parent) < p.spans.size() &&
        p.spans[s.parent].lane == s.lane) {
      self[s.parent] -= s.running_ns();
      waiting[s.parent] -= s.waiting_ns;
    }
  }
  const auto& strings = p.functions.strings();
  const auto text = [&](uint32_t id) -> std::string_view {
    return id < strings.size() ? std::string_view(strings.get(id)) : std::string_view();
  };
  std::unordered_map<uint64_t, uint32_t> function_of;  // label << 32 | function -> id
  const auto function_id = [&](const Span& s) {
    const uint64_t key = static_cast<uint64_t>(s.label) << 32 | s.function;
    auto [it, inserted] = function_of.try_emplace(key, 0);
    if (inserted) {
      if (s.function < p.functions.size()) {
        const FunctionInfo& f = p.functions.get(s.function);
        it->second = spans_.function(text(s.label != 0 ? s.label : f.name), text(f.file), f.line);
      } else {
        it->second = spans_.function(text(s.label), "", 0);
      }
    }
    return it->second;
  };
  // Each span's path, parents first (a walk up covers a parent stored after
  // its child; a cycle in a hand-edited profile ends at the spans' count).
  const auto n = static_cast<int32_t>(p.spans.size());
  std::vector<uint32_t> node_of(p.spans.size(), kNoNode);
  std::vector<int32_t> chain;
  const auto node_for = [&](int32_t i) {
    chain.clear();
    int32_t j = i;
    while (j >= 0 && j < n && node_of[j] == kNoNode && chain.size() <= p.spans.size()) {
      chain.push_back(j);
      j = p.spans[j].parent;
    }
    uint32_t node = j >= 0 && j < n && node_of[j] != kNoNode ? node_of[j] : FunctionTotals::kRoot;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      node = node_of[*it] = spans_.node(node, function_id(p.spans[*it]));
    return node_of[i];
  };
  for (int32_t i = 0; i < n; ++i) {
    const Span& s = p.spans[i];
    if (depth >= 0 && s.depth > static_cast<uint32_t>(depth)) continue;
    const uint32_t node = node_for(i);
    const bool at_cut = depth >= 0 && s.depth == static_cast<uint32_t>(depth);
    spans_.add(node, kSelf, std::max<int64_t>(at_cut ? s.running_ns() : self[i], 0));
    spans_.add(node, kCalls, 1);
    // Not clamped per call: a child's waits can exceed its parent's by a
    // reading's placement (views/waiting.h), and the store's sums per path
    // (add_store) must come out the same.
    spans_.add(node, kWaiting, at_cut ? s.waiting_ns : waiting[i]);
  }
}

void FunctionStats::add(const StackSamples& ss, int depth) {
  ++sampled_sources_;
  std::vector<size_t> slot;  // this source's value types in the union
  for (const auto& t : ss.value_types) {
    auto it = std::find(types_.begin(), types_.end(), t);
    if (it == types_.end()) {
      types_.push_back(t);
      sampled_.add_slot();
      it = types_.end() - 1;
    }
    slot.push_back(static_cast<size_t>(it - types_.begin()));
  }
  const auto& strings = ss.functions.strings();
  std::vector<uint32_t> function_of(ss.functions.size(), kNoNode);
  const auto function_id = [&](uint32_t f) {
    if (f >= ss.functions.size()) return sampled_.function("", "", 0);
    if (function_of[f] == kNoNode) {
      const FunctionInfo& info = ss.functions.get(f);
      function_of[f] = sampled_.function(strings.get(info.name), strings.get(info.file), info.line);
    }
    return function_of[f];
  };
  const int counted = ss.count_type();
  for (const StackSamples::Sample& s : ss.samples) {
    samples_ += StackSamples::weight(s, counted);
    size_t frames = s.frames.size();
    if (depth >= 0) frames = std::min(frames, static_cast<size_t>(depth) + 1);
    if (frames == 0) continue;
    uint32_t node = FunctionTotals::kRoot;
    for (size_t f = 0; f < frames; ++f)
      node = sampled_.node(node, function_id(s.frames[f].function));
    for (size_t v = 0; v < s.values.size() && v < slot.size(); ++v)
      sampled_.add(node, slot[v], s.values[v]);
  }
}

Result<uint64_t> FunctionStats::add_store(StoreDriver& d, const std::vector<int64_t>& source_ids,
                                          int depth) {
  // The selected span sources, their sessions and those sessions' sample
  // ranges (one add's samples are contiguous).
  std::vector<int64_t> sources;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // (first, count)
  std::unordered_map<int64_t, uint64_t> sessions_of;
  for (size_t at = 0; at < source_ids.size(); at += kIdsPerQuery) {
    const size_t n = std::min(kIdsPerQuery, source_ids.size() - at);
    SqlRow ids(source_ids.begin() + static_cast<std::ptrdiff_t>(at),
               source_ids.begin() + static_cast<std::ptrdiff_t>(at + n));
    for (const auto& r :
         d.query("SELECT source_id FROM sources WHERE sample_kind = 'spans' AND source_id IN (" +
                     placeholders(n) + ")",
                 ids)) {
      sources.push_back(sql_int(r[0]));
    }
    for (const auto& r : d.query("SELECT se.first_sample_id, se.sample_count, se.source_id FROM "
                                 "sessions se JOIN sources "
                                 "so ON so.source_id = se.source_id WHERE so.sample_kind = 'spans' "
                                 "AND se.source_id IN (" +
                                     placeholders(n) + ")",
                                 ids)) {
      ++sessions_of[sql_int(r[2])];
      if (sql_int(r[1]) > 0) ranges.emplace_back(sql_int(r[0]), sql_int(r[1]));
    }
  }
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  std::sort(ranges.begin(), ranges.end());
  // Adjacent ranges read as one: the sums are per call path, not per source.
  std::vector<std::pair<int64_t, int64_t>> merged;  // (first, last)
  for (const auto& [first, count] : ranges) {
    if (!merged.empty() && merged.back().second + 1 == first) {
      merged.back().second = first + count - 1;
    } else {
      merged.emplace_back(first, first + count - 1);
    }
  }

  // Every call path's function, interned in the store's order.
  StorePaths stacks;
  std::unordered_map<int64_t, uint32_t> function_of;
  if (!merged.empty()) {
    stacks.load(d);
    for (const int64_t id : stacks.ids()) {
      const StorePaths::Stack& k = stacks.at(id);
      function_of[id] = spans_.function(k.name, k.filename, k.start_line);
    }
  }
  std::unordered_map<int64_t, uint32_t> node_of{{0, FunctionTotals::kRoot}};
  // Running vs waiting (views/waiting.h): the store's waiting rows (a span
  // without one did not wait); no such type yet: no row matches -1.
  int64_t waiting_type = -1;
  for (const auto& r : d.query("SELECT type_id FROM value_types WHERE type = ? AND unit = 'ns'",
                               {std::string(kWaitingType)})) {
    waiting_type = sql_int(r[0]);
  }
  const std::string values = value_rows_table(d);
  // Per stack (a call path), summed over its calls, in first-seen order.
  struct Sums {
    int64_t calls = 0, self = 0, running = 0, waiting = 0;
    int64_t off_cpu = 0;         // waiting less the suspended time
    int64_t parent_off_cpu = 0;  // of the calls whose parent is in their lane
    int64_t parent_waiting = 0;  // the same
  };
  std::unordered_map<int64_t, Sums> sums;
  std::vector<int64_t> seen_stacks;
  std::vector<int64_t> chain;
  const auto node_for = [&](int64_t stack) {
    if (const auto it = node_of.find(stack); it != node_of.end()) return it->second;
    stacks.chain(
        stack, [&](int64_t s) { return node_of.count(s) > 0; }, &chain);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      node_of[*it] = spans_.node(node_of.at(stacks.at(*it).parent), function_of.at(*it));
    }
    return node_of.at(stack);
  };

  // Summed by the database: a row per call path and read, not per call. In
  // reads of kRowsPerRead ids: SQLite sorts to group, and 1.5M rows sort in
  // 1.0 s at once against 0.65 s in reads of 32,768 (bench_top_functions.py).
  for (const auto& [first, last] : merged) {
    for (int64_t lo = first; lo <= last; lo += kRowsPerRead) {
      const int64_t hi = std::min(last, lo + kRowsPerRead - 1);
      // The parent's lane is looked up only for a call that waited.
      for (const auto& r : d.query(
               "SELECT s.stack_id, count(*), CAST(sum(s.self_ns) AS BIGINT), "
               "CAST(sum(s.end_ns - s.start_ns - COALESCE(w.value, 0)) AS BIGINT), "
               "CAST(sum(COALESCE(w.value, 0)) AS BIGINT), "
               "CAST(sum(CASE WHEN w.value IS NULL THEN 0 ELSE w.value - (s.end_ns - s.start_ns - "
               "COALESCE(s.active_ns, s.end_ns - s.start_ns)) END) AS BIGINT), "
               "CAST(sum(CASE WHEN w.value IS NOT NULL AND s.lane_id = (SELECT pa.lane_id FROM "
               "samples pa "
               "WHERE pa.sample_id = s.parent_id) THEN w.value - (s.end_ns - s.start_ns - "
               "COALESCE(s.active_ns, s.end_ns - s.start_ns)) ELSE 0 END) AS BIGINT), "
               "CAST(sum(CASE WHEN w.value IS NOT NULL AND s.lane_id = (SELECT pa.lane_id FROM "
               "samples pa "
               "WHERE pa.sample_id = s.parent_id) THEN w.value ELSE 0 END) AS BIGINT) "
               "FROM samples s LEFT JOIN " +
                   values +
                   " w ON w.sample_id = s.sample_id AND w.type_id = ? "
                   "WHERE s.sample_id BETWEEN ? AND ? GROUP BY s.stack_id",
               {waiting_type, lo, hi})) {
        const int64_t stack = sql_int(r[0]);
        // Depth 0 is a root; a span at the cut keeps its children's time.
        if (depth >= 0 && stacks.at(stack).depth > depth) continue;
        node_for(stack);
        auto [it, added] = sums.try_emplace(stack);
        if (added) seen_stacks.push_back(stack);
        Sums& t = it->second;
        t.calls += sql_int(r[1]);
        t.self += sql_int(r[2]);
        t.running += sql_int(r[3]);
        t.waiting += sql_int(r[4]);
        t.off_cpu += sql_int(r[5]);
        t.parent_off_cpu += sql_int(r[6]);
        t.parent_waiting += sql_int(r[7]);
      }
    }
  }
  // A call's running self time is its self_ns (active time less its
  // same-lane children's) less its off-CPU time plus its same-lane
  // children's; its self waiting, its waiting less theirs.
  std::unordered_map<int64_t, std::pair<int64_t, int64_t>>
      from_children;  // parent stack -> (off-CPU, waiting)
  for (const int64_t stack : seen_stacks) {
    const Sums& t = sums.at(stack);
    auto& c = from_children[stacks.at(stack).parent];
    c.first += t.parent_off_cpu;
    c.second += t.parent_waiting;
  }
  for (const int64_t stack : seen_stacks) {
    const Sums& t = sums.at(stack);
    const bool at_cut = depth >= 0 && stacks.at(stack).depth == depth;
    const auto it = from_children.find(stack);
    const int64_t child_off_cpu = it == from_children.end() ? 0 : it->second.first;
    const int64_t child_waiting = it == from_children.end() ? 0 : it->second.second;
    const uint32_t node = node_of.at(stack);
    spans_.add(node, kSelf,
               std::max<int64_t>(at_cut ? t.running : t.self - t.off_cpu + child_off_cpu, 0));
    spans_.add(node, kCalls, t.calls);
    spans_.add(node, kWaiting,
               at_cut ? t.waiting : t.waiting - child_waiting);  // not clamped, as add's
  }
  for (const int64_t source : sources) {
    ++profiles_;
    sessions_ += std::max<uint64_t>(1, sessions_of[source]);
  }
  return static_cast<uint64_t>(sources.size());
}

std::vector<FunctionStats::SpanRow> FunctionStats::span_rows() const {
  std::vector<SpanRow> out;
  for (FunctionTotals::Row& r : spans_.rows()) {
    out.push_back({std::move(r.function), static_cast<uint64_t>(r.flat[kCalls]), r.flat[kSelf],
                   r.cum[kSelf], r.flat[kWaiting], r.cum[kWaiting]});
  }
  return out;
}

std::vector<FunctionStats::SampledRow> FunctionStats::sampled_rows() const {
  std::vector<SampledRow> out;
  for (FunctionTotals::Row& r : sampled_.rows())
    out.push_back({std::move(r.function), std::move(r.flat), std::move(r.cum)});
  return out;
}

}  // namespace mlprof
