// The joiner's records (joiner.h): each record kind of the ring buffer
// (mlprof_events.h) into its process, session and lane; session_spans
// bodies into lanes; scheduler records kept for the sessions they overlap.

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
#include "util/utf8.h"
#include "views/group.h"

namespace mlprof::agent {

namespace {

// The flags a kCall/kReturn/kSuspend carries, as the extension pushes them.
constexpr uint8_t kCallFlags = kEvCFunction | kEvBlock | kEvContinued;
constexpr uint8_t kReturnFlags = kEvException | kEvChildrenDropped;

static_assert(MLPROF_SPAN_EXCEPTION == kEvException && MLPROF_SPAN_C_FUNCTION == kEvCFunction &&
                  MLPROF_SPAN_BLOCK == kEvBlock && MLPROF_SPAN_CONTINUED == kEvContinued &&
                  MLPROF_SPAN_CHILDREN_DROPPED == kEvChildrenDropped,
              "the contract's span flags are core's event flags");
static_assert(MLPROF_IO_ARGUMENT == static_cast<unsigned>(IORole::kArgument) &&
                  MLPROF_IO_RETURN == static_cast<unsigned>(IORole::kReturn),
              "the contract's I/O roles are core's");

// A fixed-size char field of a record: up to its first NUL (the BPF side
// always terminates, but a record is not trusted), as UTF-8 (a name cut at
// the field's size can end mid-character; a target can send any bytes).
template <size_t N>
std::string field(const char (&s)[N]) {
  return to_valid_utf8(std::string_view(s, strnlen(s, N)));
}

Event make_event(EventKind kind, int64_t ts, uint32_t id, uint8_t flags) {
  Event e;
  e.kind = kind;
  e.ts_ns = ts;
  e.id = id;
  e.flags = flags;
  return e;
}

// The standard library of any CPython install: ".../lib/python3.N/" not
// followed by site-packages (classify_user_code catches those). The agent
// cannot ask the target's interpreter for sysconfig's paths, so the
// in-process PathRules are approximated by this shape.
bool under_stdlib(std::string_view file) {
  size_t at = 0;
  while ((at = file.find("/lib/python", at)) != std::string_view::npos) {
    at += 11;
    size_t end = file.find('/', at);
    if (end == std::string_view::npos) return false;
    std::string_view version = file.substr(at, end - at);  // "3.11", "3.13t"
    if (!version.empty() && version.front() >= '2' && version.front() <= '3' &&
        version.find('.') != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

bool user_code_of(const std::string& file) {
  return classify_user_code(file, PathRules{}) && !under_stdlib(file);
}

}  // namespace

// ---- records --------------------------------------------------------------------

void Joiner::State::record(const void* data, size_t size) {
  ++stats.records;
  mlprof_ev_header h{};
  if (!data || size < sizeof(h)) {
    ++stats.malformed;
    return;
  }
  std::memcpy(&h, data, sizeof(h));
  // bpf_ktime_get_ns() reaches kMaxTimeNs after 146 years up.
  if (h.ts_ns > static_cast<uint64_t>(kMaxTimeNs)) {
    ++stats.malformed;
    return;
  }
  // Copies the record into its struct (the ring buffer's data is only
  // 8-byte aligned, and a short record must not be read past its end).
  auto as = [&](auto& rec) {
    if (size < sizeof(rec)) return false;
    std::memcpy(&rec, data, sizeof(rec));
    return true;
  };
  switch (h.kind) {
    case MLPROF_EV_SESSION_BEGIN:
    case MLPROF_EV_SESSION_END: {
      mlprof_ev_session r{};
      if (!as(r)) break;
      h.kind == MLPROF_EV_SESSION_BEGIN ? session_begin(r) : session_end(r);
      return;
    }
    case MLPROF_EV_LANE_BEGIN: {
      mlprof_ev_lane r{};
      if (!as(r)) break;
      lane_begin(r);
      return;
    }
    case MLPROF_EV_SPAN_ENTER:
    case MLPROF_EV_SPAN_EXIT:
    case MLPROF_EV_SPAN_SUSPEND:
    case MLPROF_EV_SPAN_RESUME: {
      mlprof_ev_span r{};
      if (!as(r)) break;
      span(r);
      return;
    }
    case MLPROF_EV_SPAN_IO: {
      mlprof_ev_io r{};
      if (!as(r)) break;
      io(r);
      return;
    }
    case MLPROF_EV_NAME: {
      mlprof_ev_name r{};
      if (!as(r)) break;
      name(r);
      return;
    }
    case MLPROF_EV_SPANS_CHUNK: {
      // Large (4 KiB of data): the fields are copied, the bytes read in place.
      constexpr size_t kFields = offsetof(mlprof_ev_chunk, data);
      if (size < kFields) break;
      thread_local mlprof_ev_chunk r;
      std::memcpy(&r, data, kFields);
      if (r.bytes > sizeof(r.data) || kFields + r.bytes > size) break;
      chunk(r, static_cast<const char*>(data) + kFields);
      return;
    }
    case MLPROF_EV_OFF_CPU: {
      mlprof_ev_off_cpu r{};
      if (!as(r)) break;
      off_cpu(r);
      return;
    }
    case MLPROF_EV_THREAD_START:
    case MLPROF_EV_THREAD_EXIT: {
      mlprof_ev_thread r{};
      if (!as(r)) break;
      thread(r, h.kind == MLPROF_EV_THREAD_START);
      return;
    }
    default:
      break;
  }
  ++stats.malformed;
}

ProcessState* Joiner::State::find_process(uint32_t tgid) {
  auto it = processes.find(tgid);
  if (it == processes.end()) return nullptr;
  it->second.last_use = stats.records;
  return &it->second;
}

ProcessState& Joiner::State::process(uint32_t tgid) {
  if (ProcessState* p = find_process(tgid)) return *p;
  if (processes.size() >= limits.max_processes && !processes.empty()) {
    // Forget the least recently used process, preferring one with no session
    // (typically one that exited without the agent noticing).
    auto victim = processes.end();
    for (auto it = processes.begin(); it != processes.end(); ++it) {
      if (victim == processes.end() ||
          (it->second.sessions.empty() && !victim->second.sessions.empty()) ||
          (it->second.sessions.empty() == victim->second.sessions.empty() &&
           it->second.last_use < victim->second.last_use)) {
        victim = it;
      }
    }
    int64_t now = 0;
    for (const auto& [serial, s] : victim->second.sessions) now = std::max(now, s.last_ts);
    close_process(victim->first, now);
  }
  ProcessState& p = processes[tgid];
  p.last_use = stats.records;
  return p;
}

SessionState* Joiner::State::open_session(uint32_t tgid, uint64_t serial, ProcessState** proc) {
  ProcessState* p = find_process(tgid);
  if (!p) return nullptr;
  auto it = p->sessions.find(serial);
  if (it == p->sessions.end() || it->second.ended) return nullptr;
  if (proc) *proc = p;
  return &it->second;
}

// What an I/O record costs against the events caps: about its memory in
// events (16 bytes each), so that I/O records in a loop meet the same bound
// as spans (issue 44's audit, F2).
constexpr size_t kIoCost = 8;

bool Joiner::State::admit(SessionState& s, size_t cost) {
  if (s.events + cost > limits.max_events_per_session ||
      events_held + cost > limits.max_events_total) {
    ++stats.events_over_cap;
    return false;
  }
  s.events += cost;
  events_held += cost;
  return true;
}

LaneState* Joiner::State::lane_at(SessionState& s, uint32_t lane) {
  if (auto it = s.lanes.find(lane); it != s.lanes.end()) return &it->second;
  if (s.lanes.size() >= limits.max_lanes_per_session || lanes_held >= limits.max_lanes_total) {
    ++stats.lanes_over_cap;
    return nullptr;
  }
  ++lanes_held;
  return &s.lanes[lane];
}

LaneState* Joiner::State::lane_of(SessionState& s, uint32_t lane, const mlprof_ev_header& h) {
  const bool added = !s.lanes.count(lane);
  LaneState* ls = lane_at(s, lane);
  if (ls && added) {
    // A span record before any lane_begin of its lane: the lane_begin was
    // lost. The thread is known from the record; the parent link is not.
    ls->lane.pid = s.tgid;
    ls->lane.session = s.serial;
    ls->lane.native_tid = h.tid;
    ls->tid_from = LaneState::Tid::kRecord;
  }
  return ls;
}

void Joiner::State::mismatch(LaneState& ls) {
  ++stats.index_mismatches;
  ls.stopped = true;
  ls.lane.truncated = true;
}

// A lane whose suspends and resumes moved more spans than its events allow
// (model/tree.h): stopped, truncated, and counted with the records over caps.
void Joiner::State::over_budget(LaneState& ls) {
  ++stats.events_over_cap;
  ls.stopped = true;
  ls.lane.truncated = true;
}

void Joiner::State::session_begin(const mlprof_ev_session& r) {
  ProcessState& p = process(r.h.tgid);
  const auto ts = static_cast<int64_t>(r.h.ts_ns);
  if (auto it = p.sessions.find(r.session); it != p.sessions.end()) {
    // The same serial again: the earlier one's end was lost (or it ended and
    // waits for take_finished). Close it before the new one starts.
    finalize(r.h.tgid, p, r.session, !it->second.ended, ts, "begun again (its end was lost)");
  }
  while (p.sessions.size() >= limits.max_open_sessions && !p.by_start.empty()) {
    // The oldest session that ended (waiting out the settle delay: whole, so
    // it goes out early, not truncated); an open one only if none ended.
    uint64_t victim = p.by_start.begin()->second;
    for (const auto& [start, serial] : p.by_start) {
      if (p.sessions.at(serial).ended) {
        victim = serial;
        break;
      }
    }
    const bool open = !p.sessions.at(victim).ended;
    if (open) ++stats.sessions_evicted;
    finalize(r.h.tgid, p, victim, open, ts, "too many open sessions");
  }
  SessionState& s = p.sessions[r.session];
  s.tgid = r.h.tgid;
  s.serial = r.session;
  s.begin_tid = r.h.tid;
  if (r.gil_bytes != 0) {
    p.gil = r.gil;
    p.gil_bytes = r.gil_bytes;
  }
  s.start_ns = ts;
  p.by_start.emplace(ts, r.session);
  s.last_ts = ts;
  s.ceiling = r.ceiling < 0 ? -1 : static_cast<int32_t>(std::min<int64_t>(r.ceiling, INT32_MAX));
  s.flags = r.flags;
  s.lost_at_begin = lost_total;
}

void Joiner::State::session_end(const mlprof_ev_session& r) {
  ProcessState* p = nullptr;
  SessionState* s = open_session(r.h.tgid, r.session, &p);
  if (!s) {
    ++stats.unmatched;
    return;
  }
  s->ended = true;
  s->end_ns = static_cast<int64_t>(r.h.ts_ns);
  s->last_ts = std::max(s->last_ts, s->end_ns);
  s->dropped = r.flags;
  if (s->delivered && (s->body_gap || !s->body.empty())) {
    // The final body did not arrive whole: the last whole one (a
    // checkpoint's), or nothing, stands, flagged truncated.
    ++stats.bodies_incomplete;
    for (auto& [number, ls] : s->lanes) ls.lane.truncated = true;
    drop_body(*p, *s);
  }
  ended.emplace_back(r.h.tgid, r.session);
}

void Joiner::State::chunk(const mlprof_ev_chunk& r, const char* data) {
  ProcessState* p = nullptr;
  SessionState* s = open_session(r.h.tgid, r.session, &p);
  if (!s) {
    ++stats.unmatched;
    return;
  }
  s->delivered = true;
  s->last_ts = std::max(s->last_ts, static_cast<int64_t>(r.h.ts_ns));
  if (r.offset == 0) {  // a new body (a checkpoint's, or the final one): it replaces the last
    drop_body(*p, *s);
    s->body_gap = false;
  }
  if (s->body_gap) return;
  if (r.offset != s->body.size() || r.total > MLPROF_SPANS_MAX_BYTES ||
      r.offset + r.bytes > r.total) {
    s->body_gap = true;  // a piece before this one was lost
    return;
  }
  s->body_total = r.total;
  const std::string_view piece(data, r.bytes);
  if (r.offset == 0 && r.bytes == r.total)
    return apply_body(*p, *s, piece);  // one piece: read in place
  if (r.offset == 0) s->body.reserve(r.total);
  if (!charge(*p, piece.size())) {
    s->body_gap = true;  // incomplete, as a lost piece leaves it
    return;
  }
  s->body.append(piece);
  if (s->body.size() == s->body_total) apply_body(*p, *s, s->body);
}

// A body lane's thread by the host's tid, which the scheduler records carry:
// lane 0's is session_begin's, another lane's its lane_begin's. The body's
// `ns_tid` is gettid() in the target's pid namespace: the same number only
// in the host's. Without a kernel record of the lane (lost), a tid learnt
// from an earlier lane of the same thread stands, else the body's, counted.
void Joiner::State::join_thread(ProcessState& p, SessionState& s, uint32_t lane, LaneState& ls,
                                uint64_t ns_tid) {
  using Tid = LaneState::Tid;
  if (ls.tid_from != Tid::kRecord && lane == 0 && s.begin_tid != 0) {
    ls.lane.native_tid = s.begin_tid;
    ls.tid_from = Tid::kRecord;
  }
  if (ls.tid_from == Tid::kRecord) {
    if (ns_tid != ls.lane.native_tid) {
      if (p.host_tid_of.size() >= limits.max_threads_per_process) p.host_tid_of.clear();
      p.host_tid_of[ns_tid] = static_cast<uint32_t>(ls.lane.native_tid);
    }
    return;
  }
  auto it = p.host_tid_of.find(ns_tid);
  ls.lane.native_tid = it != p.host_tid_of.end() ? it->second : ns_tid;
  ls.tid_from = it != p.host_tid_of.end() ? Tid::kLearnt : Tid::kBody;
}

// The session_spans body (mlprof_usdt.h) into the session's lanes: the
// extension's own events, so build_tree gives its tree. Every read is
// bounds-checked; what does not fit stops the lane (flagged truncated).
void Joiner::State::apply_body(ProcessState& p, SessionState& s, std::string_view b) {
  size_t at = 0;
  auto read = [&](auto& out) {
    if (b.size() - at < sizeof(out)) return false;
    std::memcpy(&out, b.data() + at, sizeof(out));
    at += sizeof(out);
    return true;
  };
  mlprof_spans_head head{};
  if (!read(head)) return;
  if (head.version != MLPROF_USDT_VERSION && head.version != MLPROF_SPANS_FOLDS_VERSION &&
      head.version != MLPROF_SPANS_MARKS_VERSION) {
    ++stats.bodies_unknown_version;
    stats.unknown_version = std::max(stats.unknown_version, head.version);
    if (stats.unknown_version_pid == 0) stats.unknown_version_pid = s.tgid;
    s.unreadable = true;
    drop_body(p, s);
    return;
  }
  ++stats.bodies_applied;
  // A later body (the final one after checkpoints) replaces what came before.
  events_held -= std::min(events_held, s.events);
  s.events = 0;
  for (auto& [number, ls] : s.lanes) {
    ls.lane.events.clear();
    ls.lane.io.clear();
  }
  s.dropped = head.dropped;
  s.lane_dropped = true;
  s.trace_id = field(head.trace_id);
  s.span_id = field(head.span_id);
  for (uint32_t i = 0; i < head.lanes; ++i) {
    mlprof_spans_lane ml{};
    if (!read(ml)) break;
    apply_body_lane(p, s, ml, head.version, b, at);
  }
  drop_body(p, s);  // the next body (a later checkpoint's) starts afresh
}

void Joiner::State::apply_body_lane(ProcessState& p, SessionState& s, const mlprof_spans_lane& ml,
                                    uint32_t version, std::string_view b, size_t& at) {
  LaneState* slot = lane_at(s, ml.lane);
  if (!slot) {  // over the caps: the rest of the body is not read
    at = b.size();
    return;
  }
  LaneState& ls = *slot;
  Lane& lane = ls.lane;
  ls.seen_begin = true;  // the body describes it whole
  lane.pid = s.tgid;
  lane.session = s.serial;
  join_thread(p, s, ml.lane, ls, ml.native_tid);
  lane.thread_id = ml.thread_ident;
  lane.thread_name = field(ml.thread_name);
  lane.task = ml.task;
  lane.parent_lane =
      ml.parent_lane == MLPROF_NO_PARENT_LANE ? -1 : static_cast<int32_t>(ml.parent_lane);
  lane.parent_call = ml.parent_call;
  lane.dropped = ml.dropped;
  lane.truncated = ml.truncated != 0;
  lane.events.clear();
  const size_t fit = (b.size() - at) / sizeof(mlprof_spans_event);
  size_t n = std::min<size_t>(ml.events, fit);
  if (n < ml.events) lane.truncated = true;
  if (s.events + n > limits.max_events_per_session || events_held + n > limits.max_events_total) {
    ++stats.events_over_cap;
    n = std::min(limits.max_events_per_session - std::min(limits.max_events_per_session, s.events),
                 limits.max_events_total - std::min(limits.max_events_total, events_held));
    lane.truncated = true;
  }
  lane.events.resize(n);
  // The target writes these times. One going back is taken as the last (a
  // span must not end before it starts), and each is kept within a minute
  // of the kernel's times of the session (its begin, the body's arrival)
  // and within the kernel clock's range [0, kMaxTimeNs], so that every span
  // lasts at most kMaxTimeNs and no difference of two overflows.
  constexpr int64_t kSlackNs = 60'000'000'000;
  const int64_t lo = std::max<int64_t>(0, s.start_ns - kSlackNs);
  const int64_t hi = std::min(kMaxTimeNs, std::max(s.last_ts, s.start_ns) + kSlackNs);
  int64_t last_ts = lo;
  for (size_t k = 0; k < n; ++k) {
    mlprof_spans_event e{};
    std::memcpy(&e, b.data() + at + k * sizeof(e), sizeof(e));
    const auto newest = version == MLPROF_SPANS_MARKS_VERSION   ? EventKind::kMark
                        : version == MLPROF_SPANS_FOLDS_VERSION ? EventKind::kFoldCount
                                                                : EventKind::kLabel;
    if (e.kind < static_cast<uint8_t>(EventKind::kCall) || e.kind > static_cast<uint8_t>(newest)) {
      ++stats.malformed;
      lane.events.resize(k);
      lane.truncated = true;
      break;
    }
    last_ts = std::clamp<int64_t>(e.ts_ns, last_ts, hi);
    lane.events[k] = make_event(static_cast<EventKind>(e.kind), last_ts, e.id, e.flags);
  }
  at += std::min<size_t>(ml.events, fit) * sizeof(mlprof_spans_event);
  s.events += lane.events.size();
  events_held += lane.events.size();
  for (uint32_t k = 0; k < ml.ios; ++k) {
    mlprof_spans_io io{};
    if (b.size() - at < sizeof(io)) {
      lane.truncated = true;
      break;
    }
    if (!admit(s, kIoCost)) {  // the rest of the body is not read
      lane.truncated = true;
      at = b.size();
      return;
    }
    std::memcpy(&io, b.data() + at, sizeof(io));
    at += sizeof(io);
    IORecord rec;
    rec.call = io.call;  // build_tree drops a record whose call is not a kCall of the lane
    rec.role = io.role == MLPROF_IO_RETURN ? IORole::kReturn : IORole::kArgument;
    rec.name = field(io.name);
    rec.summary = parse_io_text(field(io.summary));
    lane.io.push_back(std::move(rec));
  }
}

void Joiner::State::lane_begin(const mlprof_ev_lane& r) {
  SessionState* s = open_session(r.h.tgid, r.session, nullptr);
  if (!s) {
    ++stats.unmatched;
    return;
  }
  LaneState* slot = lane_at(*s, r.lane);
  if (!slot) return;
  LaneState& ls = *slot;
  if (ls.tid_from != LaneState::Tid::kRecord) {  // the scheduler's name of it, even after a body
    ls.lane.native_tid = r.h.tid;
    ls.tid_from = LaneState::Tid::kRecord;
  }
  if (ls.seen_begin || !ls.lane.events.empty()) return;  // a repeat: the first one stands
  ls.seen_begin = true;
  ls.lane.pid = r.h.tgid;
  ls.lane.session = r.session;
  ls.lane.thread_id = r.thread_ident;
  ls.lane.thread_name = field(r.thread_name);
  ls.lane.task = r.task;
  // Kept as the contract's lane number until finalize maps it to an index.
  ls.lane.parent_lane =
      r.parent_lane == MLPROF_NO_PARENT_LANE ? -1 : static_cast<int32_t>(r.parent_lane);
  ls.lane.parent_call = r.parent_call;
  s->last_ts = std::max(s->last_ts, static_cast<int64_t>(r.h.ts_ns));
}

void Joiner::State::span(const mlprof_ev_span& r) {
  SessionState* s = open_session(r.h.tgid, r.session, nullptr);
  if (!s) {
    ++stats.unmatched;
    return;
  }
  LaneState* slot = lane_of(*s, r.lane, r.h);
  if (!slot) return;
  LaneState& ls = *slot;
  auto ts = static_cast<int64_t>(r.h.ts_ns);
  s->last_ts = std::max(s->last_ts, ts);
  if (ls.stopped) return;
  // One thread's records come in its order; a time going back (records of
  // a lane from two threads) is taken as the last.
  if (!ls.lane.events.empty()) ts = std::max(ts, ls.lane.events.back().ts_ns);
  const size_t needed = r.h.kind == MLPROF_EV_SPAN_ENTER && r.label ? 2 : 1;
  if (s->events + needed > limits.max_events_per_session ||
      events_held + needed > limits.max_events_total) {
    ++stats.events_over_cap;
    ls.stopped = true;
    ls.lane.truncated = true;
    return;
  }
  std::vector<Event>& events = ls.lane.events;
  const size_t before = events.size();
  switch (r.h.kind) {
    case MLPROF_EV_SPAN_ENTER: {
      // index is the kCall's position in the lane, after its kLabel.
      if (r.index != events.size() + (r.label ? 1 : 0)) return mismatch(ls);
      if (r.label) events.push_back(make_event(EventKind::kLabel, ts, r.label, 0));
      events.push_back(
          make_event(EventKind::kCall, ts, r.function, static_cast<uint8_t>(r.flags) & kCallFlags));
      ls.stack.push_back(r.index);
      break;
    }
    case MLPROF_EV_SPAN_EXIT: {
      if (ls.stack.empty() || ls.stack.back() != r.index) return mismatch(ls);
      events.push_back(
          make_event(EventKind::kReturn, ts, 0, static_cast<uint8_t>(r.flags) & kReturnFlags));
      ls.stack.pop_back();
      break;
    }
    case MLPROF_EV_SPAN_SUSPEND: {
      ls.moves += ls.stack.size();  // the find, then the spans above it
      if (ls.moves > stack_move_budget(events.size())) return over_budget(ls);
      auto at = std::find(ls.stack.begin(), ls.stack.end(), r.index);
      if (at == ls.stack.end()) return mismatch(ls);
      ls.suspended[r.index].assign(at, ls.stack.end());
      ls.stack.erase(at, ls.stack.end());
      events.push_back(make_event(EventKind::kSuspend, ts, r.index,
                                  static_cast<uint8_t>(r.flags) & kEvChildrenDropped));
      break;
    }
    case MLPROF_EV_SPAN_RESUME: {
      auto it = ls.suspended.find(r.index);
      if (it == ls.suspended.end()) return mismatch(ls);
      ls.moves += it->second.size();
      if (ls.moves > stack_move_budget(events.size())) return over_budget(ls);
      ls.stack.insert(ls.stack.end(), it->second.begin(), it->second.end());
      ls.suspended.erase(it);
      // Not folded (model/resume.h): the engine folds no resume while a v1
      // tracer is attached, and an extension that speaks v1 only never does.
      events.push_back(make_event(EventKind::kResume, ts, r.index, 0));
      break;
    }
    default:
      break;
  }
  s->events += events.size() - before;
  events_held += events.size() - before;
}

void Joiner::State::io(const mlprof_ev_io& r) {
  SessionState* s = open_session(r.h.tgid, r.session, nullptr);
  if (!s) {
    ++stats.unmatched;
    return;
  }
  LaneState* slot = lane_of(*s, r.lane, r.h);
  if (!slot || slot->stopped) return;
  LaneState& ls = *slot;
  if (!admit(*s, kIoCost)) {
    ls.lane.truncated = true;
    return;
  }
  IORecord rec;
  rec.call = r.index;  // build_tree drops a record whose call is not a kCall of the lane
  rec.role = r.role == MLPROF_IO_RETURN ? IORole::kReturn : IORole::kArgument;
  rec.name = field(r.name);
  rec.summary = parse_io_text(field(r.summary));
  ls.lane.io.push_back(std::move(rec));
}

void Joiner::State::name(const mlprof_ev_name& r) {
  ProcessState& p = process(r.h.tgid);
  if (p.functions.size() + p.labels.size() >= limits.max_names_per_process)
    return;  // "<function N>"
  if (r.is_label) {
    std::string text = field(r.name);
    const auto old = p.labels.find(r.id);
    const size_t before = old == p.labels.end() ? 0 : held_label_bytes(old->second);
    if (!charge(p, held_label_bytes(text))) return;
    discharge(p, before);
    p.labels[r.id] = std::move(text);
  } else {
    FunctionName f;
    f.name = field(r.name);
    f.module = field(r.module);
    f.file = field(r.file);
    f.line = r.line;
    f.user_file = user_code_of(f.file);
    const auto old = p.functions.find(r.id);
    const size_t before = old == p.functions.end() ? 0 : held_bytes(old->second);
    if (!charge(p, held_bytes(f))) return;
    discharge(p, before);
    p.functions[r.id] = std::move(f);
  }
}

void Joiner::State::off_cpu(const mlprof_ev_off_cpu& r) {
  ProcessState* p = find_process(r.h.tgid);
  // With no session of its process open or waiting, an interval has nothing
  // to land in: intervals are shipped when they end, so none of a later
  // session can come before that session's begin.
  if (!p || p->sessions.empty()) return;
  OffCpuInterval iv;
  iv.tid = r.h.tid;
  iv.pid = r.h.tgid;
  iv.start_ns = static_cast<int64_t>(r.start_ns);
  iv.end_ns = static_cast<int64_t>(r.h.ts_ns);
  iv.wake_ns = static_cast<int64_t>(r.wake_ns);
  iv.blocked = r.blocked != 0;
  iv.waker_tid = r.waker_tid;
  iv.prev_state = r.prev_state;
  iv.syscall = r.syscall < 0 ? -1 : r.syscall;
  iv.waker_kind = r.waker_kind <= static_cast<uint32_t>(WakerKind::kHardirq)
                      ? static_cast<WakerKind>(r.waker_kind)
                      : WakerKind::kTask;
  if (iv.blocked && iv.waker_kind == WakerKind::kTask) iv.waker_name = field(r.waker_comm);
  if (iv.blocked && r.wait_object == MLPROF_WAIT_LOCK) {
    iv.wait = WaitObject::kLock;
  } else if (iv.blocked && r.wait_object == MLPROF_WAIT_FUTEX) {
    iv.wait = r.futex_addr - p->gil < p->gil_bytes ? WaitObject::kGil : WaitObject::kFutex;
  }
  if (r.start_ns > static_cast<uint64_t>(kMaxTimeNs) ||
      r.wake_ns > static_cast<uint64_t>(kMaxTimeNs) || iv.end_ns < iv.start_ns) {
    ++stats.malformed;
    return;
  }
  auto it = p->off_cpu.find(r.h.tid);
  if (it == p->off_cpu.end()) {
    if (p->off_cpu.size() >= limits.max_threads_per_process) trim(*p);
    if (p->off_cpu.size() >= limits.max_threads_per_process) {
      ++stats.off_cpu_dropped;
      return;
    }
  } else if (it->second.size() >= limits.max_off_cpu_per_thread) {
    discharge(*p, held_bytes(it->second.front()));
    it->second.pop_front();
    ++stats.off_cpu_dropped;
  }
  if (!charge(*p, held_bytes(iv))) {  // a thread's queue is made only for an interval it holds
    if (it != p->off_cpu.end() && it->second.empty()) p->off_cpu.erase(it);
    return;
  }
  p->off_cpu[r.h.tid].push_back(std::move(iv));
}

void Joiner::State::thread(const mlprof_ev_thread& r, bool start) {
  ProcessState* p = find_process(r.h.tgid);
  if (!p) return;
  const auto ts = static_cast<int64_t>(r.h.ts_ns);
  if (!p->sessions.empty()) {
    if (p->thread_events.size() >= limits.max_thread_events) {
      discharge(*p, held_bytes(p->thread_events.front()));
      p->thread_events.pop_front();
      ++stats.off_cpu_dropped;
    }
    ThreadEvent ev;
    ev.start = start;
    ev.ts = ts;
    ev.tid = r.h.tid;
    ev.parent_tid = r.parent_tid;
    ev.exit_code = static_cast<int32_t>(r.exit_code);
    ev.comm = field(r.comm);
    if (charge(*p, held_bytes(ev))) p->thread_events.push_back(std::move(ev));
  }
  // The main thread's exit is the process's: its sessions end there.
  if (!start && r.h.tid == r.h.tgid) close_process(r.h.tgid, ts);
}

}  // namespace mlprof::agent
