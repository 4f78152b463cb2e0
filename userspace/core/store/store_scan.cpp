#include "store/store_scan.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "model/tree.h"
#include "store/sql_batch.h"
#include "store/store_paths.h"
#include "views/waiting.h"

namespace mlprof {

namespace {

using sql_batch::kIdsPerQuery;
using sql_batch::kRowsPerRead;
using sql_batch::placeholders;

struct Range {
  int64_t first = 0, count = 0, source = 0;
  bool kernel = false;
};

}  // namespace

Result<uint64_t> add_store_paths(StoreDriver& d, const std::vector<int64_t>& source_ids, int depth,
                                 CallPathStats& stats, const ScanHooks* hooks) {
  // The selected span sources and their sessions' sample ranges (one add's
  // samples are contiguous, so a source's ranges are too).
  std::vector<int64_t> sources;
  std::vector<Range> ranges;
  std::unordered_map<int64_t, uint64_t> sessions_of;  // by source: an agent's item holds many
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
    for (const auto& r : d.query(
             "SELECT se.first_sample_id, se.sample_count, se.source_id, so.kernel FROM sessions se "
             "JOIN sources so ON so.source_id = se.source_id WHERE so.sample_kind = 'spans' AND "
             "se.source_id IN (" +
                 placeholders(n) + ")",
             ids)) {
      ++sessions_of[sql_int(r[2])];
      if (sql_int(r[1]) > 0)
        ranges.push_back({sql_int(r[0]), sql_int(r[1]), sql_int(r[2]), sql_int(r[3]) != 0});
    }
  }
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.first < b.first; });

  // Call paths: each stack's path, made from its parent's.
  StorePaths stacks;
  if (!ranges.empty()) stacks.load(d);
  std::unordered_map<int64_t, uint32_t> path_of{{0, CallPathStats::kRoot}};
  std::vector<int64_t> chain;
  auto path_for = [&](int64_t stack) {
    if (const auto it = path_of.find(stack); it != path_of.end()) return it->second;
    stacks.chain(
        stack, [&](int64_t s) { return path_of.count(s) > 0; }, &chain);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const StorePaths::Stack& k = stacks.at(*it);
      path_of[*it] = stats.path(path_of.at(k.parent), k.name);
    }
    return path_of.at(stack);
  };

  // The kernel figures a call's row carries (store_write.cpp writes the
  // kSpanValueTypes of json_doc.cpp; a type never written has no id).
  using CallKernel = CallPathStats::CallKernel;
  static const std::pair<const char*, int64_t CallKernel::*> kKernelTypes[] = {
      {"off_cpu", &CallKernel::off_cpu_ns},
      {"cpu", &CallKernel::on_cpu_ns},
      {"own_blocked", &CallKernel::blocked_ns},
      {"own_runq", &CallKernel::runq_ns},
      {"gil_wait", &CallKernel::gil_ns}};
  std::unordered_map<int64_t, int64_t CallKernel::*> field_of;
  SqlRow type_ids;
  SqlRow cpu_type;  // hooks->want_cpu: the in-process sources' cpu_time too
  for (const auto& [type, field] : kKernelTypes) {
    for (const auto& r : d.query("SELECT type_id FROM value_types WHERE type = ? AND unit = 'ns'",
                                 {std::string(type)})) {
      field_of[sql_int(r[0])] = field;
      type_ids.push_back(sql_int(r[0]));
      if (field == &CallKernel::on_cpu_ns && hooks && hooks->want_cpu)
        cpu_type.push_back(sql_int(r[0]));
    }
  }

  // Running vs waiting (views/waiting.h): a row per span that waited, none
  // for one that did not (0).
  SqlRow waiting_type;
  for (const auto& r : d.query("SELECT type_id FROM value_types WHERE type = ? AND unit = 'ns'",
                               {std::string(kWaitingType)})) {
    waiting_type.push_back(sql_int(r[0]));
  }

  // The stored values' table (not docs/design/store.md's sample_values view: its spans'
  // wall and self rows would be read and dropped).
  const std::string values = value_rows_table(d);
  uint64_t added = 0;
  std::unordered_set<int64_t> begun;
  int64_t current = -1;
  std::unordered_map<int64_t, CallKernel> kernel_of;
  std::unordered_map<int64_t, int64_t> cpu_of;
  std::unordered_map<int64_t, int64_t> waiting_of;
  // A session's kept calls, recorded at its end: a call's self time is its
  // running time less its same-lane children's, and a child's row may come
  // in a later read than its parent's. Memory: one entry per call of one
  // session (RunPathValues holds as much).
  struct Pending {
    int64_t lane = 0;
    int64_t parent = -1;  // index into pending, -1: none kept
    uint32_t path = 0;
    bool incomplete = false;
    bool at_cut = false;
    int64_t wall = 0, waiting = 0, children_running = 0;
    CallKernel kernel;
  };
  std::vector<Pending> pending;
  std::unordered_map<int64_t, size_t> pending_of;  // sample id -> index
  const auto record_pending = [&] {
    for (const Pending& c : pending) {
      if (c.parent < 0) continue;
      Pending& parent = pending[static_cast<size_t>(c.parent)];
      if (parent.lane == c.lane && !parent.at_cut) parent.children_running += c.wall - c.waiting;
    }
    for (const Pending& c : pending) {
      const int64_t self = std::max<int64_t>(c.wall - c.waiting - c.children_running, 0);
      stats.record(c.path, c.incomplete, c.wall, self, c.waiting, c.kernel);
    }
    pending.clear();
    pending_of.clear();
  };
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& range = ranges[i];
    if (range.source != current) {
      stats.begin_profile(sessions_of[range.source]);
      ++added;
      current = range.source;
      begun.insert(current);
    }
    for (int64_t lo = range.first; lo < range.first + range.count; lo += kRowsPerRead) {
      const int64_t hi = std::min(lo + kRowsPerRead, range.first + range.count) - 1;
      kernel_of.clear();
      cpu_of.clear();
      waiting_of.clear();
      if (!range.kernel && !cpu_type.empty() && hooks && hooks->on_call) {
        for (const auto& r : d.query("SELECT sample_id, value FROM " + values +
                                         " WHERE type_id = ? AND sample_id BETWEEN ? AND ?",
                                     {cpu_type[0], lo, hi})) {
          cpu_of[sql_int(r[0])] = sql_int(r[1]);
        }
      }
      if (!waiting_type.empty()) {
        for (const auto& r : d.query("SELECT sample_id, value FROM " + values +
                                         " WHERE type_id = ? AND sample_id BETWEEN ? AND ?",
                                     {waiting_type[0], lo, hi})) {
          waiting_of[sql_int(r[0])] = sql_int(r[1]);
        }
      }
      if (range.kernel && !type_ids.empty()) {
        SqlRow params = type_ids;
        params.insert(params.end(), {lo, hi});
        for (const auto& r :
             d.query("SELECT sample_id, type_id, value FROM " + values + " WHERE type_id IN (" +
                         placeholders(type_ids.size()) + ") AND sample_id BETWEEN ? AND ?",
                     params)) {
          // No row: 0 (store_write.cpp writes non-zero values only).
          auto [it, added_now] = kernel_of.try_emplace(sql_int(r[0]), CallKernel{0, 0, 0, 0, 0});
          it->second.*field_of.at(sql_int(r[1])) = sql_int(r[2]);
        }
      }
      for (const auto& r :
           d.query("SELECT sample_id, stack_id, flags, end_ns - start_ns, parent_id, lane_id "
                   "FROM samples WHERE sample_id BETWEEN ? AND ?",
                   {lo, hi})) {
        const int64_t stack = sql_int(r[1]);
        // Depth 0 is a root; a span at the cut keeps its children's time.
        const int64_t span_depth = stacks.at(stack).depth;
        if (depth >= 0 && span_depth > depth) continue;
        const auto flags = static_cast<uint32_t>(sql_int(r[2]));
        const int64_t sample_id = sql_int(r[0]);
        const int64_t wall = sql_int(r[3]);
        CallKernel k;  // off_cpu_ns -1: no kernel data
        if (range.kernel) {
          const auto it = kernel_of.find(sample_id);
          k = it == kernel_of.end() ? CallKernel{0, 0, 0, 0, 0} : it->second;
        }
        const uint32_t path = path_for(stack);
        const bool incomplete = (flags & (kSpanOpenAtEnd | kSpanSuspendedAtEnd)) != 0;
        const bool has_parent = !std::holds_alternative<std::monostate>(r[4]);
        Pending c;
        c.lane = sql_int(r[5]);
        if (has_parent) {
          const auto it = pending_of.find(sql_int(r[4]));
          if (it != pending_of.end()) c.parent = static_cast<int64_t>(it->second);
        }
        c.path = path;
        c.incomplete = incomplete;
        c.at_cut = depth >= 0 && span_depth == depth;
        c.wall = wall;
        if (const auto it = waiting_of.find(sample_id); it != waiting_of.end()) {
          c.waiting = std::clamp<int64_t>(it->second, 0, std::max<int64_t>(wall, 0));
        }
        c.kernel = k;
        pending_of[sample_id] = pending.size();
        pending.push_back(c);
        if (hooks && hooks->on_call) {
          ScanCall call{range.source, sample_id, -1, span_depth, path,
                        incomplete,   wall,      -1, c.waiting};
          if (has_parent) call.parent_id = sql_int(r[4]);
          if (range.kernel) {
            call.cpu_ns = k.on_cpu_ns;
          } else if (const auto it = cpu_of.find(call.sample_id); it != cpu_of.end()) {
            call.cpu_ns = it->second;
          }
          hooks->on_call(call);
        }
      }
    }
    record_pending();
    if (hooks && hooks->on_session_end) hooks->on_session_end();
  }
  // Sources without spans are profiles too (CallPathStats::add counts them).
  for (const int64_t source : sources) {
    if (begun.count(source)) continue;
    stats.begin_profile(std::max<uint64_t>(1, sessions_of[source]));
    ++added;
  }
  return added;
}

}  // namespace mlprof
