// The joiner (joiner.h): its public API, a process's exit, and taking the
// ended sessions. The records are joined in joiner_records.cpp, a
// session becomes a Profile in joiner_profiles.cpp; the state they share is
// joiner_state.h.

#include "agent/joiner.h"

#include <linux/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <deque>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "agent/joiner_state.h"
#include "analysis/sched.h"
#include "mlprof_events.h"
#include "views/group.h"

namespace mlprof::agent {

Joiner::Joiner(std::map<std::string, std::string> meta, JoinerLimits limits)
    : state_(std::make_unique<State>()) {
  state_->limits = limits;
  state_->meta = std::move(meta);
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) state_->host = host;
}
Joiner::~Joiner() = default;
Joiner::Joiner(Joiner&&) noexcept = default;
Joiner& Joiner::operator=(Joiner&&) noexcept = default;

JoinerStats Joiner::stats() const { return state_->stats; }
void Joiner::set_lost_events(uint64_t total) { state_->lost_total = total; }

void Joiner::on_record(const void* data, size_t size) {
  try {
    state_->record(data, size);
  } catch (const std::exception&) {
    // Only allocation can throw here: the record is lost, the capture goes on.
    ++state_->stats.malformed;
  }
}

void Joiner::on_process_exit(uint32_t tgid, int64_t now_ns) {
  try {
    state_->close_process(tgid, now_ns);
  } catch (const std::exception&) {
    // What its open sessions held goes back to the agent-wide caps.
    auto it = state_->processes.find(tgid);
    if (it != state_->processes.end()) state_->erase_process(it);
  }
}

void Joiner::finish(int64_t now_ns) {
  std::vector<uint32_t> tgids;
  for (const auto& [tgid, proc] : state_->processes) tgids.push_back(tgid);
  std::sort(tgids.begin(), tgids.end());
  for (uint32_t tgid : tgids) {
    state_->finalize_all(tgid, state_->processes.at(tgid), now_ns, "capture ended");
  }
  state_->ended.clear();
}

std::vector<Profile> Joiner::take_finished() {
  return take_finished(std::numeric_limits<int64_t>::max());
}

std::vector<Profile> Joiner::take_finished(int64_t ended_before_ns) {
  state_->take(ended_before_ns);
  std::vector<Profile> out = std::move(state_->finished);
  state_->finished.clear();
  return out;
}

void Joiner::drain_finished(int64_t ended_before_ns, const std::function<void(Profile&)>& each) {
  state_->hand_out(each);  // finalized by records (evicted, begun again, exited)
  state_->take(ended_before_ns, &each);
}

void Joiner::State::close_process(uint32_t tgid, int64_t now_ns) {
  auto it = processes.find(tgid);
  if (it == processes.end()) return;
  finalize_all(tgid, it->second, now_ns, "process exited");
  erase_process(it);
}

void Joiner::State::erase_process(std::unordered_map<uint32_t, ProcessState>::iterator it) {
  for (const auto& [serial, s] : it->second.sessions) release(s);
  bytes_held -= std::min(bytes_held, it->second.bytes);
  processes.erase(it);
}

bool Joiner::State::charge(ProcessState& proc, size_t n) {
  if (bytes_held + n > limits.max_bytes_total) {
    ++stats.bytes_over_cap;
    return false;
  }
  bytes_held += n;
  proc.bytes += n;
  return true;
}

void Joiner::State::discharge(ProcessState& proc, size_t n) {
  n = std::min<uint64_t>(n, proc.bytes);
  proc.bytes -= n;
  bytes_held -= std::min<uint64_t>(bytes_held, n);
}

void Joiner::State::drop_body(ProcessState& proc, SessionState& s) {
  discharge(proc, s.body.size());
  s.body = std::string();
}

uint64_t Joiner::State::recount(const ProcessState& proc) {
  uint64_t n = 0;
  for (const auto& [id, f] : proc.functions) n += held_bytes(f);
  for (const auto& [id, text] : proc.labels) n += held_label_bytes(text);
  for (const auto& [tid, q] : proc.off_cpu)
    for (const OffCpuInterval& iv : q) n += held_bytes(iv);
  for (const ThreadEvent& ev : proc.thread_events) n += held_bytes(ev);
  for (const auto& [serial, s] : proc.sessions) n += s.body.size();
  return n;
}

uint64_t Joiner::bytes_held() const { return state_->bytes_held; }

std::string Joiner::check_bytes_held() const {
  uint64_t sum = 0;
  for (const auto& [tgid, proc] : state_->processes) {
    const uint64_t n = State::recount(proc);
    if (n != proc.bytes) {
      return "process " + std::to_string(tgid) + " holds " + std::to_string(n) +
             " bytes, charged " + std::to_string(proc.bytes);
    }
    sum += n;
  }
  if (sum != state_->bytes_held) {
    return "the processes hold " + std::to_string(sum) + " bytes, bytes_held says " +
           std::to_string(state_->bytes_held);
  }
  return {};
}

// A session that added names of its own: the process's names become its
// whole table (a copy with the same ids, then shared), so later sessions
// add none of them. Names lost (<function N>) are not kept: they may come
// later.
void Joiner::State::learn_names(ProcessState& proc, const Profile& p,
                                const std::unordered_map<uint32_t, uint32_t>& fmap,
                                const std::unordered_map<uint32_t, uint32_t>& smap) {
  // Names (functions and strings) the session added past its base. The
  // table is copied only when they are an eighth of it or more: it grows
  // geometrically, so copying costs O(1) per name learnt, even for a
  // process that adds a name or two per session (a label per request).
  const size_t base = proc.names ? proc.names->size() + proc.names->strings().size() : 0;
  const size_t added = p.functions.size() + p.functions.strings().size() - base;
  if (added == 0 || added * 8 < base) return;
  proc.names = std::make_shared<const FunctionTable>(p.functions.flattened());
  for (const auto& [id, local] : fmap) {
    if (id >= kMaxCachedId || !proc.functions.count(id)) continue;
    if (proc.named_function.size() <= id) {
      proc.named_function.resize(id + 1, kNotNamed);
      proc.named_kind.resize(id + 1, FunctionKind::kPython);
    }
    proc.named_function[id] = local;
    proc.named_kind[id] = p.functions.get(local).kind;
  }
  for (const auto& [id, local] : smap) {
    if (id >= kMaxCachedId || !proc.labels.count(id)) continue;
    if (proc.named_label.size() <= id) proc.named_label.resize(id + 1, kNotNamed);
    proc.named_label[id] = local;
  }
}

void Joiner::State::trim(ProcessState& proc) {
  if (proc.sessions.empty()) {
    for (const auto& [tid, q] : proc.off_cpu)
      for (const OffCpuInterval& iv : q) discharge(proc, held_bytes(iv));
    for (const ThreadEvent& ev : proc.thread_events) discharge(proc, held_bytes(ev));
    proc.off_cpu.clear();
    proc.thread_events.clear();
    return;
  }
  // Nothing that ended before the oldest held session began can land in one.
  const int64_t horizon = proc.by_start.begin()->first;
  for (auto it = proc.off_cpu.begin(); it != proc.off_cpu.end();) {
    auto& q = it->second;
    while (!q.empty() && q.front().end_ns <= horizon) {
      discharge(proc, held_bytes(q.front()));
      q.pop_front();
    }
    it = q.empty() ? proc.off_cpu.erase(it) : std::next(it);
  }
  while (!proc.thread_events.empty() && proc.thread_events.front().ts < horizon) {
    discharge(proc, held_bytes(proc.thread_events.front()));
    proc.thread_events.pop_front();
  }
}

void Joiner::State::take(int64_t ended_before_ns, const std::function<void(Profile&)>* each) {
  std::deque<std::pair<uint32_t, uint64_t>> keep;
  while (!ended.empty()) {
    auto [tgid, serial] = ended.front();
    ended.pop_front();
    auto p = processes.find(tgid);
    if (p == processes.end()) continue;
    auto s = p->second.sessions.find(serial);
    if (s == p->second.sessions.end() || !s->second.ended) continue;  // finalized meanwhile
    if (s->second.end_ns < ended_before_ns) {
      finalize(tgid, p->second, serial, false, s->second.end_ns, "");
      if (each) hand_out(*each);
    } else {
      keep.emplace_back(tgid, serial);
    }
  }
  ended = std::move(keep);
}

}  // namespace mlprof::agent
