#pragma once
// The joiner's state (Joiner::State), shared by the files that work on it:
// joiner.cpp (the public API, a process's exit, handing sessions out),
// joiner_records.cpp (each record kind into sessions and lanes) and
// joiner_profiles.cpp (an ended session into a Profile). Internal to the
// joiner: nothing outside those files includes it.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/joiner.h"
#include "analysis/sched.h"
#include "mlprof_events.h"
#include "views/group.h"

namespace mlprof::agent {

struct LaneState {
  Lane lane;
  bool seen_begin = false;
  // Where lane.native_tid came from. A session body's native_tid is gettid()
  // in the target's own pid namespace, which in a container is not the tid
  // the scheduler records carry; a kernel record's is the host's.
  enum class Tid : uint8_t { kBody, kLearnt, kRecord } tid_from = Tid::kBody;
  bool stopped = false;         // an index mismatch or the event cap: ignore the rest
  std::vector<uint32_t> stack;  // open spans: their kCall indices, innermost last
  // Segments detached by a kSuspend, by the suspended span's kCall index.
  std::unordered_map<uint32_t, std::vector<uint32_t>> suspended;
  size_t moves = 0;  // spans suspended or resumed: past stack_move_budget, stopped
};

struct SessionState {
  uint32_t tgid = 0;
  uint64_t serial = 0;
  uint32_t begin_tid = 0;  // the host tid session_begin fired in: lane 0's thread
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t last_ts = 0;
  int32_t ceiling = -1;
  uint64_t flags = 0;
  uint64_t dropped = 0;
  uint64_t lost_at_begin = 0;
  uint64_t events = 0;
  bool ended = false;
  std::map<uint32_t, LaneState> lanes;  // by lane number (lane 0 began the session)
  // Contract v2: the session_spans body as its pieces arrive (in order).
  bool delivered = false;  // a piece arrived: the body, not span records, fills the lanes
  bool body_gap = false;   // a piece is missing
  uint32_t body_total = 0;
  std::string body;
  bool lane_dropped = false;  // the lanes carry their own dropped counts (the body's)
  bool unreadable = false;    // its body is of a newer contract: it is not shown
  std::string trace_id, span_id;
};

struct FunctionName {
  std::string name, module, file;
  int64_t line = 0;
  bool user_file = false;  // user_code_of(file), once per name rather than per session
};

constexpr uint32_t kNotNamed = UINT32_MAX;
// Process-wide ids past this are not cached in ProcessState's names (the
// ids are the extension's registry indexes: dense; a bad record's is not).
constexpr uint32_t kMaxCachedId = 1u << 20;

struct ThreadEvent {
  bool start = false;
  int64_t ts = 0;
  uint32_t tid = 0;
  uint32_t parent_tid = 0;
  int32_t exit_code = 0;
  std::string comm;
};

struct ProcessState {
  std::unordered_map<uint32_t, FunctionName>
      functions;                                     // function id -> strings (process-wide ids)
  std::unordered_map<uint32_t, std::string> labels;  // label id -> text
  std::map<uint64_t, SessionState> sessions;         // open or ended-not-finished, by serial
  std::set<std::pair<int64_t, uint64_t>> by_start;   // the same sessions: (start, serial)
  std::unordered_map<uint32_t, std::deque<OffCpuInterval>> off_cpu;  // by tid, arrival order
  std::deque<ThreadEvent> thread_events;
  // A thread's tid in the process's own pid namespace -> the host's, learnt
  // from lanes whose body and kernel records both named it: the fallback for
  // a lane whose lane_begin record was lost (a thread pool's threads recur).
  std::unordered_map<uint64_t, uint32_t> host_tid_of;
  // The interpreter's GIL state (session_begin): a futex in it is the GIL.
  uint64_t gil = 0, gil_bytes = 0;
  // The names its sessions used, as the table every session Profile of it
  // starts on (FunctionTable's shared base): a session interns only names
  // no session before it used. By process-wide id, the id in `names`
  // (kNotNamed: not there yet).
  std::shared_ptr<const FunctionTable> names;
  std::vector<uint32_t> named_function;
  std::vector<FunctionKind> named_kind;  // the kind it was added with
  std::vector<uint32_t> named_label;
  GroupCache grouping;    // the framework grouping's classes of `names`
  uint64_t last_use = 0;  // the joiner's record count when last touched (eviction order)
  uint64_t bytes = 0;     // held against max_bytes_total (names, buffers, partial bodies)
};

// What each kind of content costs against max_bytes_total: its text and
// its struct, with a map node's overhead for names (and their copy in the
// process's FunctionTable: twice the text).
inline size_t held_bytes(const OffCpuInterval& iv) {
  return sizeof(OffCpuInterval) + iv.waker_name.size();
}
inline size_t held_bytes(const ThreadEvent& ev) { return sizeof(ThreadEvent) + ev.comm.size(); }
inline size_t held_bytes(const FunctionName& f) {
  return sizeof(FunctionName) + 64 + 2 * (f.name.size() + f.module.size() + f.file.size());
}
inline size_t held_label_bytes(const std::string& text) {
  return sizeof(std::string) + 64 + 2 * text.size();
}

struct Joiner::State {
  JoinerLimits limits;
  JoinerStats stats;
  std::map<std::string, std::string> meta;
  std::unordered_map<uint32_t, ProcessState> processes;
  // Ended sessions not yet turned into Profiles (tgid, serial), in end order.
  std::deque<std::pair<uint32_t, uint64_t>> ended;
  std::vector<Profile> finished;
  // The last Profile drain_finished handed out: the next session's arrays
  // take their memory (new_profile).
  Profile spare;
  uint64_t lost_total = 0;
  uint64_t events_held = 0;  // events of the sessions not yet finalized
  uint64_t lanes_held = 0;   // lanes of the sessions not yet finalized
  uint64_t bytes_held = 0;   // the processes' ProcessState::bytes together
  std::string host;

  void record(const void* data, size_t size);
  void session_begin(const mlprof_ev_session& r);
  void session_end(const mlprof_ev_session& r);
  void lane_begin(const mlprof_ev_lane& r);
  void span(const mlprof_ev_span& r);
  void io(const mlprof_ev_io& r);
  void name(const mlprof_ev_name& r);
  // r's fields before `data`; the piece's bytes are at `data` (read in place).
  void chunk(const mlprof_ev_chunk& r, const char* data);
  void apply_body(ProcessState& p, SessionState& s, std::string_view b);
  // One lane of a body: its events and I/O records from b at `at`, which
  // ends past them.
  void apply_body_lane(ProcessState& p, SessionState& s, const mlprof_spans_lane& ml,
                       uint32_t version, std::string_view b, size_t& at);
  void join_thread(ProcessState& p, SessionState& s, uint32_t lane, LaneState& ls, uint64_t ns_tid);
  void off_cpu(const mlprof_ev_off_cpu& r);
  void thread(const mlprof_ev_thread& r, bool start);

  ProcessState* find_process(uint32_t tgid);
  ProcessState& process(uint32_t tgid);
  SessionState* open_session(uint32_t tgid, uint64_t serial, ProcessState** proc);
  // Charges `cost` events to the session and to all sessions held, or
  // counts events_over_cap and returns false when either cap would pass.
  bool admit(SessionState& s, size_t cost);
  // The session's lane, added if new; nullptr (counted in lanes_over_cap)
  // when a new one would pass max_lanes_per_session or max_lanes_total.
  LaneState* lane_at(SessionState& s, uint32_t lane);
  // lane_at for a span or I/O record: a new lane takes the record's thread.
  LaneState* lane_of(SessionState& s, uint32_t lane, const mlprof_ev_header& h);
  void mismatch(LaneState& lane);
  void over_budget(LaneState& lane);
  // Gives back what a session held against max_events_total and max_lanes_total.
  void release(const SessionState& s);
  // Turns a session into a Profile (appended to `finished`) and forgets it.
  // truncated: it did not end by its session_end; it ends at now_ns and its
  // open spans are flagged truncated.
  void finalize(uint32_t tgid, ProcessState& proc, uint64_t serial, bool truncated, int64_t now_ns,
                const char* reason);
  void finalize_all(uint32_t tgid, ProcessState& proc, int64_t now_ns, const char* reason);
  // finalize's steps, in order: the profile's meta, its lanes (their ids
  // made the profile's: local_function, local_label), the kernel's view.
  void describe_session(uint32_t tgid, const SessionState& s, bool truncated, const char* reason,
                        Profile& p);
  void add_lanes(ProcessState& proc, SessionState& s, bool truncated, Profile& p,
                 std::unordered_map<uint32_t, uint32_t>& fmap,
                 std::unordered_map<uint32_t, uint32_t>& smap);
  uint32_t local_function(ProcessState& proc, Profile& p,
                          std::unordered_map<uint32_t, uint32_t>& fmap, uint32_t id, uint8_t flags);
  uint32_t local_label(ProcessState& proc, Profile& p, std::unordered_map<uint32_t, uint32_t>& smap,
                       uint32_t id);
  void add_kernel_view(uint32_t tgid, ProcessState& proc, const SessionState& s, Profile& p);
  // A session's Profile on the process's names, every member new except
  // the arrays' memory, taken from `spare`.
  Profile new_profile(const std::shared_ptr<const FunctionTable>& names);
  // Hands each of `finished` to `each`, in order; the last is kept as `spare`.
  void hand_out(const std::function<void(Profile&)>& each);
  void close_process(uint32_t tgid, int64_t now_ns);
  // Forgets a process and gives back what it held.
  void erase_process(std::unordered_map<uint32_t, ProcessState>::iterator it);
  // Charges `n` bytes to the process, or counts bytes_over_cap and returns
  // false when max_bytes_total would pass; discharge gives them back. Done
  // before storing: an allocation failing in between over-counts until the
  // process is forgotten, never under.
  bool charge(ProcessState& proc, size_t n);
  void discharge(ProcessState& proc, size_t n);
  // A session's partial body, given back.
  void drop_body(ProcessState& proc, SessionState& s);
  // What a process holds, counted from scratch (check_bytes_held).
  static uint64_t recount(const ProcessState& proc);
  void trim(ProcessState& proc);
  void learn_names(ProcessState& proc, const Profile& p,
                   const std::unordered_map<uint32_t, uint32_t>& fmap,
                   const std::unordered_map<uint32_t, uint32_t>& smap);
  // Finalizes the sessions that ended before ended_before_ns; with `each`,
  // hands each out as it is built (hand_out).
  void take(int64_t ended_before_ns, const std::function<void(Profile&)>* each = nullptr);
};

}  // namespace mlprof::agent
