#include "analysis/run_values.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/span_value.h"

namespace mlprof {

size_t RunPathValues::run(const std::string& key) {
  const auto [it, added] = run_index_.try_emplace(key, run_keys_.size());
  if (added) run_keys_.push_back(key);
  return it->second;
}

void RunPathValues::flush(size_t run, std::vector<Call>& calls) {
  // A call's root call: its own (a complete root) or its parent's. Parents
  // are usually read first, but a thread's lane may come before the lane that
  // started it, so unresolved calls are resolved by walking up.
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  std::unordered_map<int64_t, size_t> index;
  index.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) index.emplace(calls[i].id, i);
  std::vector<uint64_t> root_of(calls.size(), kNone - 1);  // kNone - 1: not resolved yet
  std::vector<size_t> chain;
  for (size_t i = 0; i < calls.size(); ++i) {
    chain.clear();
    size_t at = i;
    uint64_t root = kNone;
    while (true) {
      if (root_of[at] != kNone - 1) {
        root = root_of[at];
        break;
      }
      chain.push_back(at);
      const Call& c = calls[at];
      if (c.root) {
        if (!c.incomplete && c.path != CallPathStats::kDropped) {
          root = root_calls_.size();
          root_calls_.push_back({run, c.path});
        }
        root_of[at] = root;
        chain.pop_back();
        break;
      }
      const auto parent = index.find(c.parent);
      if (parent == index.end() || chain.size() > calls.size())
        break;  // an orphan (or a cycle): no root call
      at = parent->second;
    }
    for (const size_t c : chain) root_of[c] = root;
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    if (c.path == CallPathStats::kDropped || c.path == CallPathStats::kRoot) continue;
    if (root_of[i] == kNone || c.incomplete) {
      ++dropped_;
      continue;
    }
    Cell& cell = cells_[root_of[i] << 32 | c.path];
    cell.wall_ns += std::max<int64_t>(c.wall_ns, 0);
    cell.waiting_ns += std::max<int64_t>(c.waiting_ns, 0);
    ++cell.calls;
    if (c.cpu_ns >= 0) {
      cell.cpu_ns += c.cpu_ns;
      cell.has_cpu = true;
    }
  }
  calls.clear();
}

void RunPathValues::add(const Profile& p, size_t run, int depth) {
  std::vector<uint32_t> span_paths;
  paths_.add(p, depth, &span_paths);
  const bool kernel = p.kernel.present && p.kernel.spans.size() == p.spans.size();
  pending_.clear();
  for (size_t s = 0; s < p.spans.size(); ++s) {
    if (span_paths[s] == 0) continue;  // cut by depth or past the cap
    const Span& span = p.spans[s];
    Call c;
    c.id = static_cast<int64_t>(s);
    c.parent = span.parent;
    c.path = span_paths[s];
    c.root = span.parent < 0;
    c.incomplete = (span.flags & (kSpanOpenAtEnd | kSpanSuspendedAtEnd)) != 0;
    c.wall_ns = span.duration_ns();
    c.waiting_ns = span.waiting_ns;
    if (kernel) {
      c.cpu_ns = p.kernel.spans[s].on_cpu_ns;
    } else if (const uint64_t* v = p.value_of(static_cast<int32_t>(s), ValueKind::kCpuNs)) {
      c.cpu_ns = static_cast<int64_t>(*v);
    }
    pending_.push_back(c);
  }
  flush(run, pending_);
}

Result<uint64_t> RunPathValues::add_store(StoreDriver& driver,
                                          const std::vector<int64_t>& source_ids,
                                          const std::vector<size_t>& run_of, int depth) {
  std::unordered_map<int64_t, size_t> run_by_source;
  for (size_t i = 0; i < source_ids.size() && i < run_of.size(); ++i)
    run_by_source[source_ids[i]] = run_of[i];
  size_t current = 0;
  pending_.clear();
  ScanHooks hooks;
  hooks.want_cpu = true;
  hooks.on_call = [&](const ScanCall& call) {
    current = run_by_source.at(call.source);
    pending_.push_back(Call{call.sample_id, call.parent_id, call.path, call.depth == 0,
                            call.incomplete, call.wall_ns, call.cpu_ns, call.waiting_ns});
  };
  hooks.on_session_end = [&] {
    if (!pending_.empty()) flush(current, pending_);
  };
  return add_store_paths(driver, source_ids, depth, paths_, &hooks);
}

std::vector<uint64_t> RunPathValues::root_calls() const {
  std::vector<uint64_t> out(run_keys_.size(), 0);
  for (const RootCall& rc : root_calls_) ++out[rc.run];
  return out;
}

std::vector<RunPathValues::PathRuns> RunPathValues::values(Statistic statistic,
                                                           Quantity quantity) const {
  const std::vector<PathSummary> summary = paths_.summary();
  const size_t runs = run_keys_.size();
  // Root calls per run and root path; whether a run has any cpu value.
  std::unordered_map<uint32_t, std::vector<uint64_t>> roots;  // root path -> per run
  for (const RootCall& rc : root_calls_) {
    auto& per_run = roots[rc.root_path];
    per_run.resize(runs, 0);
    ++per_run[rc.run];
  }
  std::vector<bool> run_has_cpu(runs, false);
  // Per path and run: the non-zero per-root-call values, and the calls.
  std::vector<std::vector<std::vector<int64_t>>> seen(summary.size(),
                                                      std::vector<std::vector<int64_t>>(runs));
  std::vector<std::vector<uint64_t>> calls(summary.size(), std::vector<uint64_t>(runs, 0));
  for (const auto& [key, cell] : cells_) {
    const RootCall& rc = root_calls_[key >> 32];
    const size_t path = static_cast<size_t>(key & 0xffffffffu) - 1;
    if (cell.has_cpu) run_has_cpu[rc.run] = true;
    calls[path][rc.run] += cell.calls;
    seen[path][rc.run].push_back(quantity == Quantity::kCpu       ? cell.cpu_ns
                                 : quantity == Quantity::kWaiting ? cell.waiting_ns
                                                                  : cell.wall_ns);
  }
  // A path's root: the summary entry of its first name alone.
  std::unordered_map<std::string, uint32_t> root_path_of;
  for (size_t i = 0; i < summary.size(); ++i) {
    if (summary[i].path.size() == 1)
      root_path_of.emplace(summary[i].path[0], static_cast<uint32_t>(i + 1));
  }
  std::vector<PathRuns> out(summary.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 0; i < summary.size(); ++i) {
    PathRuns& pr = out[i];
    pr.path = summary[i].path;
    pr.values.assign(runs, nan);
    pr.calls = calls[i];
    const auto root = root_path_of.find(pr.path.front());
    const auto per_run = root == root_path_of.end() ? roots.end() : roots.find(root->second);
    if (per_run == roots.end()) continue;
    for (size_t r = 0; r < runs; ++r) {
      const uint64_t n = per_run->second[r];
      if (n == 0 || (quantity == Quantity::kCpu && !run_has_cpu[r])) continue;
      std::vector<int64_t>& v = seen[i][r];
      if (statistic == Statistic::kMean) {
        double sum = 0;
        for (const int64_t x : v) sum += static_cast<double>(x);
        pr.values[r] = sum / static_cast<double>(n);
        continue;
      }
      // The root calls without a call of the path count as 0.
      std::sort(v.begin(), v.end());
      const double q = statistic == Statistic::kP50 ? 0.50 : 0.95;
      const auto rank = static_cast<uint64_t>(q * static_cast<double>(n - 1));
      const uint64_t zeros = n - std::min<uint64_t>(n, v.size());
      pr.values[r] = rank < zeros ? 0.0 : static_cast<double>(v[static_cast<size_t>(rank - zeros)]);
    }
  }
  return out;
}

}  // namespace mlprof
