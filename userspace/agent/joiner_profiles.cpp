// The joiner's sessions to Profiles (joiner.h): an ended or cut session
// becomes a core Profile on its process's shared function table, its meta
// and kernel figures filled, then handed out.

#include <linux/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "agent/clock.h"
#include "agent/joiner_state.h"
#include "analysis/sched.h"
#include "mlprof_events.h"
#include "views/group.h"

namespace mlprof::agent {

namespace {

std::string session_flags_text(uint64_t flags) {
  std::string out;
  auto add = [&](uint64_t bit, const char* name) {
    if (!(flags & bit)) return;
    if (!out.empty()) out += ',';
    out += name;
  };
  add(MLPROF_SESSION_CAPTURE_IO, "capture_io");
  add(MLPROF_SESSION_ALL_THREADS, "all_threads");
  add(MLPROF_SESSION_AUTOPROFILE, "autoprofile");
  return out;
}

}  // namespace

// ---- sessions to profiles -------------------------------------------------------

// The profile's meta: the agent's, then the session's own.
void Joiner::State::describe_session(uint32_t tgid, const SessionState& s, bool truncated,
                                     const char* reason, Profile& p) {
  p.meta = meta;
  p.meta["source"] = "ebpf";
  p.meta["pid"] = std::to_string(tgid);
  p.meta["session"] = std::to_string(s.serial);
  if (!p.meta.count("host") && !host.empty()) p.meta["host"] = host;
  p.meta["start_unix_ns"] = std::to_string(s.start_ns + realtime_offset_ns());
  if (const std::string f = session_flags_text(s.flags); !f.empty()) p.meta["session_flags"] = f;
  if (truncated) p.meta["truncated"] = reason;
  if (s.dropped) p.meta["calls_dropped"] = std::to_string(s.dropped);
}

// Process-wide function and label ids -> this profile's tables: the
// process's names (the shared base) keep their ids; a name no earlier
// session used is added in first use order.
// `fmap` holds the function ids this session added itself.
uint32_t Joiner::State::local_function(ProcessState& proc, Profile& p,
                                       std::unordered_map<uint32_t, uint32_t>& fmap, uint32_t id,
                                       uint8_t flags) {
  FunctionKind kind = flags & kEvBlock       ? FunctionKind::kBlock
                      : flags & kEvCFunction ? FunctionKind::kC
                                             : FunctionKind::kPython;
  if (id < proc.named_function.size() && proc.named_function[id] != kNotNamed &&
      proc.named_kind[id] == kind)
    return proc.named_function[id];
  auto known = proc.functions.find(id);
  if (known == proc.functions.end()) ++stats.names_lost;
  if (auto it = fmap.find(id); it != fmap.end()) return it->second;
  uint32_t local;
  if (known == proc.functions.end()) {
    local = p.functions.add("<function " + std::to_string(id) + ">", "", "", 0, kind, false);
  } else {
    const FunctionName& f = known->second;
    const bool user =
        kind == FunctionKind::kBlock || (kind == FunctionKind::kPython && f.user_file);
    local = p.functions.add(f.name, f.module, f.file,
                            static_cast<int32_t>(std::clamp<int64_t>(f.line, 0, INT32_MAX)), kind,
                            user);
  }
  fmap[id] = local;
  return local;
}

// A label id's id in `p`, as local_function (`smap`: the labels it added).
uint32_t Joiner::State::local_label(ProcessState& proc, Profile& p,
                                    std::unordered_map<uint32_t, uint32_t>& smap, uint32_t id) {
  if (id < proc.named_label.size() && proc.named_label[id] != kNotNamed)
    return proc.named_label[id];
  auto known = proc.labels.find(id);
  if (known == proc.labels.end()) ++stats.names_lost;
  if (auto it = smap.find(id); it != smap.end()) return it->second;
  const uint32_t local = p.functions.strings().intern(
      known == proc.labels.end() ? "<label " + std::to_string(id) + ">" : known->second);
  smap[id] = local;
  return local;
}

// The session's lanes into `p`, their ids made p's (fmap, smap: the ones
// this session added), the dropped calls put on a lane.
void Joiner::State::add_lanes(ProcessState& proc, SessionState& s, bool truncated, Profile& p,
                              std::unordered_map<uint32_t, uint32_t>& fmap,
                              std::unordered_map<uint32_t, uint32_t>& smap) {
  // Lanes in the contract's lane order; parent lanes mapped to indices.
  std::unordered_map<uint32_t, int32_t> index_of;
  for (auto& [number, ls] : s.lanes) {
    index_of[number] = static_cast<int32_t>(index_of.size());
    if (!ls.seen_begin) ++stats.lanes_without_begin;
    if (ls.tid_from == LaneState::Tid::kBody) ++stats.lanes_unjoined;
  }
  uint64_t events = 0;
  int32_t marked_lane = -1;  // the first lane that marks a span kEvChildrenDropped
  for (auto& [number, ls] : s.lanes) {
    Lane lane = std::move(ls.lane);
    const int32_t self = index_of[number];
    if (lane.parent_lane >= 0) {
      auto parent = index_of.find(static_cast<uint32_t>(lane.parent_lane));
      lane.parent_lane = parent != index_of.end() && parent->second < self ? parent->second : -1;
    } else {
      lane.parent_lane = -1;  // the body's u32, cast: any other negative is no parent too
    }
    if (truncated) lane.truncated = true;
    for (Event& e : lane.events) {
      if (e.kind == EventKind::kCall)
        e.id = local_function(proc, p, fmap, e.id, e.flags);
      else if (e.kind == EventKind::kLabel || e.kind == EventKind::kMark)
        e.id = local_label(proc, p, smap, e.id);
      if (marked_lane < 0 && (e.flags & kEvChildrenDropped)) marked_lane = self;
    }
    events += lane.events.size();
    lane.trace_id = s.trace_id;  // the session's trace context, as in process
    lane.span_id = s.span_id;
    p.lanes.push_back(std::move(lane));
  }
  // session_end carries the dropped calls of all lanes together: exact for
  // one lane; with several, shown on the lane that marked a span (which keeps
  // build_tree from flagging top-level spans of lanes that lost nothing).
  if (s.lane_dropped) {
    // Contract v2: each lane came with its own count.
  } else if (s.dropped && p.lanes.size() == 1)
    p.lanes[0].dropped = s.dropped;
  else if (s.dropped && marked_lane >= 0)
    p.lanes[static_cast<size_t>(marked_lane)].dropped = s.dropped;
  p.stats.events_captured = events;
}

// p.kernel: what the kernel saw of the session's threads: its lanes' threads
// and the threads they started while it was open.
void Joiner::State::add_kernel_view(uint32_t tgid, ProcessState& proc, const SessionState& s,
                                    Profile& p) {
  KernelData& k = p.kernel;
  k.present = true;
  k.lost_events = lost_total - std::min(lost_total, s.lost_at_begin);
  std::unordered_set<uint64_t> tids;
  for (const Lane& lane : p.lanes) tids.insert(lane.native_tid);
  std::unordered_map<uint64_t, size_t> lifetime_of;
  for (const ThreadEvent& ev : proc.thread_events) {
    if (ev.ts < p.start_ns) continue;
    if (ev.ts > p.end_ns) {
      // CPython's join() returns before the OS thread exits: a thread the
      // session started often exits just after the session ended (records
      // up to the joiner's hold still land here).
      auto started = lifetime_of.find(ev.tid);
      if (ev.start || started == lifetime_of.end() || k.threads[started->second].start_ns == 0)
        continue;
    }
    if (ev.start) {
      if (!tids.count(ev.parent_tid) || lifetime_of.count(ev.tid)) continue;
      ThreadLifetime t;
      t.tid = ev.tid;
      t.pid = tgid;
      t.parent_tid = ev.parent_tid;
      t.start_ns = ev.ts;
      t.name = ev.comm;
      lifetime_of[ev.tid] = k.threads.size();
      k.threads.push_back(std::move(t));
      tids.insert(ev.tid);
    } else if (tids.count(ev.tid)) {
      auto it = lifetime_of.find(ev.tid);
      if (it == lifetime_of.end()) {
        ThreadLifetime t;  // a lane's thread, started before the session
        t.tid = ev.tid;
        t.pid = tgid;
        t.name = ev.comm;
        it = lifetime_of.emplace(ev.tid, k.threads.size()).first;
        k.threads.push_back(std::move(t));
      }
      // A thread exits once and after it starts: an exit before the start
      // or after the first is of another thread that had the tid (reused,
      // or its record delivered late by another CPU), so is not this one's.
      ThreadLifetime& t = k.threads[it->second];
      if (t.end_ns != 0 || (t.start_ns != 0 && ev.ts < t.start_ns)) continue;
      t.end_ns = ev.ts;
      t.exit_code = ev.exit_code;
    }
  }
  for (uint64_t tid : tids) {
    auto it = proc.off_cpu.find(static_cast<uint32_t>(tid));
    if (it == proc.off_cpu.end()) continue;
    for (const OffCpuInterval& iv : it->second) {
      if (iv.end_ns > p.start_ns && iv.start_ns < p.end_ns) k.off_cpu.push_back(iv);
    }
  }
  std::sort(k.off_cpu.begin(), k.off_cpu.end(),
            [](const OffCpuInterval& a, const OffCpuInterval& b) {
              return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
            });
  attribute_kernel(p);
}

void Joiner::State::release(const SessionState& s) {
  events_held -= std::min(events_held, s.events);
  lanes_held -= std::min<uint64_t>(lanes_held, s.lanes.size());
}

void Joiner::State::finalize(uint32_t tgid, ProcessState& proc, uint64_t serial, bool truncated,
                             int64_t now_ns, const char* reason) {
  auto node = proc.sessions.extract(serial);
  if (node.empty()) return;
  SessionState& s = node.mapped();
  proc.by_start.erase({s.start_ns, serial});
  release(s);
  drop_body(proc, s);
  if (s.unreadable &&
      s.lanes.empty()) {  // counted in bodies_unknown_version; an empty tree says nothing
    trim(proc);
    return;
  }
  if (truncated || !s.ended) {
    truncated = true;
    s.end_ns = std::min(std::max(now_ns, s.last_ts), kMaxTimeNs);  // now_ns: the caller's clock
  }
  // Building runs outside on_record's handler (take, finish): an
  // allocation that fails here drops this session, never the agent.
  try {
    Profile p = new_profile(proc.names);
    p.captured_depth = s.ceiling;
    p.start_ns = s.start_ns;
    p.end_ns = std::max(s.end_ns, s.start_ns);
    describe_session(tgid, s, truncated, reason, p);

    std::unordered_map<uint32_t, uint32_t> fmap, smap;  // ids this session added itself
    add_lanes(proc, s, truncated, p, fmap, smap);
    drop_empty_lanes(p);  // as the in-process session does
    build_tree(p);
    group_framework_spans(p,
                          &proc.grouping);  // MLflow's own calls as one node per run, as in process
    learn_names(proc, p, fmap, smap);
    add_kernel_view(tgid, proc, s, p);

    ++stats.sessions_finished;
    if (truncated) ++stats.sessions_truncated;
    finished.push_back(std::move(p));
  } catch (const std::exception&) {
    ++stats.sessions_dropped;
  }
  trim(proc);
}

Profile Joiner::State::new_profile(const std::shared_ptr<const FunctionTable>& names) {
  Profile p;
  p.functions = FunctionTable(names);
  auto reuse = [](auto& to, auto& from) {
    from.clear();  // capacity stays
    std::swap(to, from);
  };
  reuse(p.lanes, spare.lanes);
  reuse(p.spans, spare.spans);
  reuse(p.roots, spare.roots);
  reuse(p.io, spare.io);
  reuse(p.segments, spare.segments);
  reuse(p.values, spare.values);
  reuse(p.kernel.off_cpu, spare.kernel.off_cpu);
  reuse(p.kernel.threads, spare.kernel.threads);
  reuse(p.kernel.spans, spare.kernel.spans);
  return p;
}

void Joiner::State::hand_out(const std::function<void(Profile&)>& each) {
  for (Profile& p : finished) {
    each(p);
    spare = std::move(p);
  }
  finished.clear();
}

void Joiner::State::finalize_all(uint32_t tgid, ProcessState& proc, int64_t now_ns,
                                 const char* reason) {
  std::vector<std::pair<int64_t, uint64_t>> order;  // (start, serial): oldest first
  for (const auto& [serial, s] : proc.sessions) order.emplace_back(s.start_ns, serial);
  std::sort(order.begin(), order.end());
  for (const auto& [start, serial] : order) {
    const bool open = !proc.sessions.at(serial).ended;
    finalize(tgid, proc, serial, open, now_ns, reason);
  }
}

}  // namespace mlprof::agent
