// The joiner against records built from the mlprof_events.h structs, the way
// the BPF programs write them: the lanes the extension records in process are
// written by hand (or at random), turned into the records its USDT probes
// make the BPF side emit, and the joiner must give back the same span tree
// that core's build_tree gives for the in-process lanes.

#include "agent/joiner.h"

#include <gtest/gtest.h>
#include <linux/types.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "mlprof_events.h"
#include "model/profile_check.h"
#include "model/resume.h"
#include "profile_builder.h"
#include "sanitized.h"
#include "views/merge.h"

namespace mlprof::agent {
namespace {

using test::call;
using test::label;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

// One ring-buffer record and the thread that produced it.
struct Rec {
  uint32_t tid = 0;
  std::vector<uint8_t> bytes;
};

template <typename T>
Rec rec_of(const T& body) {
  Rec r;
  r.tid = body.h.tid;
  r.bytes.resize(sizeof(T));
  std::memcpy(r.bytes.data(), &body, sizeof(T));
  return r;
}

mlprof_ev_header header(uint16_t kind, uint32_t tgid, uint32_t tid, int64_t ts) {
  mlprof_ev_header h{};
  h.ts_ns = static_cast<__u64>(ts);
  h.tgid = tgid;
  h.tid = tid;
  h.kind = kind;
  return h;
}

template <size_t N>
void put(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}

Rec session_rec(uint16_t kind, uint32_t tgid, uint32_t tid, int64_t ts, uint64_t serial,
                int64_t ceiling, uint64_t flags) {
  mlprof_ev_session r{};
  r.h = header(kind, tgid, tid, ts);
  r.session = serial;
  r.ceiling = ceiling;
  r.flags = flags;
  return rec_of(r);
}

Rec span_rec(uint16_t kind, uint32_t tgid, uint32_t tid, int64_t ts, uint64_t serial, uint32_t lane,
             uint32_t index, uint32_t function = 0, uint32_t label_id = 0, uint32_t depth = 0,
             uint32_t flags = 0) {
  mlprof_ev_span r{};
  r.h = header(kind, tgid, tid, ts);
  r.session = serial;
  r.lane = lane;
  r.index = index;
  r.function = function;
  r.label = label_id;
  r.depth = depth;
  r.flags = flags;
  return rec_of(r);
}

Rec off_cpu_rec(uint32_t tgid, uint32_t tid, int64_t start, int64_t end, bool blocked,
                int64_t wake = 0, uint32_t waker = 0) {
  mlprof_ev_off_cpu r{};
  r.h = header(MLPROF_EV_OFF_CPU, tgid, tid, end);
  r.start_ns = static_cast<__u64>(start);
  r.wake_ns = static_cast<__u64>(blocked ? wake : start);
  r.waker_tid = waker;
  r.waker_tgid = tgid;
  r.prev_state = blocked ? 1 : 0;
  r.blocked = blocked ? 1 : 0;
  return rec_of(r);
}

Rec thread_rec(uint16_t kind, uint32_t tgid, uint32_t tid, int64_t ts, uint32_t parent,
               const std::string& comm, uint32_t exit_code = 0) {
  mlprof_ev_thread r{};
  r.h = header(kind, tgid, tid, ts);
  r.parent_tid = parent;
  r.exit_code = exit_code;
  put(r.comm, comm);
  return rec_of(r);
}

Rec name_rec(uint32_t tgid, uint32_t tid, int64_t ts, uint32_t id, bool is_label,
             const std::string& name, const std::string& module = "", const std::string& file = "",
             int64_t line = 0) {
  mlprof_ev_name r{};
  r.h = header(MLPROF_EV_NAME, tgid, tid, ts);
  r.id = id;
  r.is_label = is_label ? 1 : 0;
  r.line = line;
  put(r.name, name);
  put(r.module, module);
  put(r.file, file);
  return rec_of(r);
}

// What the probes of one process let the BPF side emit: function and label
// ids are process-wide (the extension's registry), and a NAME record goes
// out once per (process, id), before the first span that uses it.
struct Process {
  uint32_t tgid = 100;
  uint32_t id_offset = 1000;  // process-wide ids differ from the profile's local ones
  std::set<std::pair<bool, uint32_t>> named;
  bool send_names = true;
};

// The records the probes of session `serial` fire for the lanes of `p` (as
// the extension recorded them: build_tree'd or not). Each thread's records
// are in that thread's order (the lanes of one thread, asyncio tasks, merged
// by time); threads are concatenated, to be interleaved by the caller.
std::vector<Rec> records_of(const Profile& p, Process& proc, uint64_t serial, uint64_t flags = 0) {
  std::vector<Rec> out;
  const uint32_t tgid = proc.tgid;
  const auto main_tid = static_cast<uint32_t>(p.lanes.empty() ? tgid : p.lanes[0].native_tid);
  out.push_back(session_rec(MLPROF_EV_SESSION_BEGIN, tgid, main_tid, p.start_ns, serial,
                            p.captured_depth, flags));
  struct Item {
    int64_t ts;
    uint32_t lane;
    size_t seq;
    Rec rec;
  };
  std::map<uint64_t, std::vector<Item>> by_thread;
  size_t seq = 0;
  for (uint32_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& lane = p.lanes[li];
    const auto tid = static_cast<uint32_t>(lane.native_tid);
    auto& items = by_thread[lane.native_tid];
    auto add = [&](int64_t ts, Rec r) { items.push_back(Item{ts, li, seq++, std::move(r)}); };
    const int64_t first_ts = lane.events.empty() ? p.start_ns : lane.events.front().ts_ns;
    mlprof_ev_lane lb{};
    lb.h = header(MLPROF_EV_LANE_BEGIN, tgid, tid, first_ts);
    lb.session = serial;
    lb.lane = li;
    lb.parent_lane =
        lane.parent_lane < 0 ? MLPROF_NO_PARENT_LANE : static_cast<uint32_t>(lane.parent_lane);
    lb.parent_call = lane.parent_call;
    lb.task = lane.task;
    lb.thread_ident = lane.thread_id;
    put(lb.thread_name, lane.thread_name);
    add(first_ts, rec_of(lb));
    std::vector<uint32_t> stack;
    std::map<uint32_t, std::vector<uint32_t>> parked;
    uint32_t pending_label = 0;
    for (uint32_t i = 0; i < lane.events.size(); ++i) {
      const Event& e = lane.events[i];
      switch (e.kind) {
        case EventKind::kLabel:
          pending_label = e.id;
          break;
        case EventKind::kCall: {
          const uint32_t fid = e.id + proc.id_offset;
          const uint32_t lid = pending_label ? pending_label + proc.id_offset : 0;
          if (proc.send_names && proc.named.insert({false, fid}).second) {
            const FunctionInfo& f = p.functions.get(e.id);
            const auto& s = p.functions.strings();
            add(e.ts_ns, name_rec(tgid, tid, e.ts_ns, fid, false, s.get(f.name), s.get(f.module),
                                  s.get(f.file), f.line));
          }
          if (lid && proc.send_names && proc.named.insert({true, lid}).second) {
            add(e.ts_ns,
                name_rec(tgid, tid, e.ts_ns, lid, true, p.functions.strings().get(pending_label)));
          }
          add(e.ts_ns, span_rec(MLPROF_EV_SPAN_ENTER, tgid, tid, e.ts_ns, serial, li, i, fid, lid,
                                static_cast<uint32_t>(stack.size()), e.flags));
          stack.push_back(i);
          pending_label = 0;
          break;
        }
        case EventKind::kReturn:
          if (stack.empty()) break;  // the builder ignores it; the probe does not fire
          add(e.ts_ns, span_rec(MLPROF_EV_SPAN_EXIT, tgid, tid, e.ts_ns, serial, li, stack.back(),
                                0, 0, 0, e.flags));
          stack.pop_back();
          break;
        case EventKind::kSuspend: {
          auto at = std::find(stack.begin(), stack.end(), e.id);
          if (at == stack.end()) break;
          parked[e.id].assign(at, stack.end());
          stack.erase(at, stack.end());
          add(e.ts_ns, span_rec(MLPROF_EV_SPAN_SUSPEND, tgid, tid, e.ts_ns, serial, li, e.id, 0, 0,
                                0, e.flags));
          break;
        }
        case EventKind::kResume: {
          auto it = parked.find(e.id);
          if (it == parked.end()) break;
          stack.insert(stack.end(), it->second.begin(), it->second.end());
          parked.erase(it);
          add(e.ts_ns, span_rec(MLPROF_EV_SPAN_RESUME, tgid, tid, e.ts_ns, serial, li, e.id));
          break;
        }
      }
    }
    for (const IORecord& io : lane.io) {
      // After the enter (an argument) or the exit (the return value) of its call.
      const int64_t at = lane.events[io.call].ts_ns;
      mlprof_ev_io r{};
      r.h = header(MLPROF_EV_SPAN_IO, tgid, tid, at);
      r.session = serial;
      r.lane = li;
      r.index = io.call;
      r.role = static_cast<__u32>(io.role);
      put(r.name, io.name);
      put(r.summary, format_io(io.summary));
      // Placed right after the record of its call (arguments) or its return.
      size_t pos = 0;
      for (; pos < items.size(); ++pos) {
        const Rec& q = items[pos].rec;
        mlprof_ev_span s{};
        if (q.bytes.size() != sizeof(s)) continue;
        std::memcpy(&s, q.bytes.data(), sizeof(s));
        if (items[pos].lane != li || s.index != io.call) continue;
        if (io.role == IORole::kArgument ? s.h.kind == MLPROF_EV_SPAN_ENTER
                                         : s.h.kind == MLPROF_EV_SPAN_EXIT)
          break;
      }
      items.insert(items.begin() + static_cast<long>(std::min(pos + 1, items.size())),
                   Item{at, li, seq++, rec_of(r)});
    }
  }
  for (auto& [tid, items] : by_thread) {
    // Lanes of one thread (asyncio tasks) in time order; a lane's own records keep their order.
    std::vector<std::vector<Item>> per_lane;
    std::map<uint32_t, size_t> slot;
    for (Item& it : items) {
      auto [s, added] = slot.try_emplace(it.lane, per_lane.size());
      if (added) per_lane.emplace_back();
      per_lane[s->second].push_back(std::move(it));
    }
    std::vector<size_t> next(per_lane.size(), 0);
    while (true) {
      int best = -1;
      for (size_t k = 0; k < per_lane.size(); ++k) {
        if (next[k] == per_lane[k].size()) continue;
        if (best < 0 ||
            per_lane[k][next[k]].ts <
                per_lane[static_cast<size_t>(best)][next[static_cast<size_t>(best)]].ts) {
          best = static_cast<int>(k);
        }
      }
      if (best < 0) break;
      out.push_back(
          std::move(per_lane[static_cast<size_t>(best)][next[static_cast<size_t>(best)]++].rec));
    }
  }
  uint64_t dropped = 0;
  for (const Lane& lane : p.lanes) dropped += lane.dropped;
  out.push_back(session_rec(MLPROF_EV_SESSION_END, tgid, main_tid, p.end_ns, serial, 0, dropped));
  return out;
}

// Interleaves the records of different threads at random, each thread's in
// its own order, as one ring buffer filled from several CPUs delivers them.
// The session's begin stays first and its end last (the GIL orders them
// around the other threads' probes in a real process).
std::vector<Rec> interleave(std::vector<Rec> recs, uint32_t seed) {
  if (recs.size() < 3) return recs;
  Rec first = std::move(recs.front());
  Rec last = std::move(recs.back());
  std::map<uint32_t, std::vector<Rec>> per_tid;
  for (size_t i = 1; i + 1 < recs.size(); ++i) per_tid[recs[i].tid].push_back(std::move(recs[i]));
  std::vector<Rec> out{std::move(first)};
  std::mt19937 rng(seed);
  std::map<uint32_t, size_t> next;
  while (true) {
    std::vector<uint32_t> ready;
    for (auto& [tid, v] : per_tid) {
      if (next[tid] < v.size()) ready.push_back(tid);
    }
    if (ready.empty()) break;
    const uint32_t tid = ready[rng() % ready.size()];
    out.push_back(std::move(per_tid[tid][next[tid]++]));
  }
  out.push_back(std::move(last));
  return out;
}

void feed(Joiner& j, const std::vector<Rec>& recs) {
  for (const Rec& r : recs) j.on_record(r.bytes.data(), r.bytes.size());
}

std::string function_text(const Profile& p, uint32_t id) {
  const FunctionInfo& f = p.functions.get(id);
  const auto& s = p.functions.strings();
  return s.get(f.name) + "|" + s.get(f.module) + "|" + s.get(f.file) + "|" +
         std::to_string(f.line) + "|" + std::to_string(static_cast<int>(f.kind)) + "|" +
         std::to_string(f.user_code);
}

// The joiner's profile `got` has the tree, lanes and I/O of the in-process `want`.
void expect_same_tree(const Profile& want, const Profile& got) {
  EXPECT_EQ(got.captured_depth, want.captured_depth);
  EXPECT_EQ(got.start_ns, want.start_ns);
  EXPECT_EQ(got.end_ns, want.end_ns);
  ASSERT_EQ(got.lanes.size(), want.lanes.size());
  for (size_t l = 0; l < want.lanes.size(); ++l) {
    const Lane& a = want.lanes[l];
    const Lane& b = got.lanes[l];
    SCOPED_TRACE("lane " + std::to_string(l));
    EXPECT_EQ(b.thread_id, a.thread_id);
    EXPECT_EQ(b.native_tid, a.native_tid);
    EXPECT_EQ(b.thread_name, a.thread_name);
    EXPECT_EQ(b.task, a.task);
    EXPECT_EQ(b.parent_lane, a.parent_lane);
    EXPECT_EQ(b.parent_call, a.parent_call);
    EXPECT_EQ(b.dropped, a.dropped);
    EXPECT_EQ(b.truncated, a.truncated);
    ASSERT_EQ(b.events.size(), a.events.size());
    for (size_t i = 0; i < a.events.size(); ++i) {
      const Event& x = a.events[i];
      const Event& y = b.events[i];
      SCOPED_TRACE("event " + std::to_string(i));
      ASSERT_EQ(y.kind, x.kind);
      EXPECT_EQ(y.flags, x.flags);
      if (x.kind == EventKind::kCall) {
        EXPECT_EQ(function_text(got, y.id), function_text(want, x.id));
      } else if (x.kind == EventKind::kLabel || x.kind == EventKind::kMark) {
        EXPECT_EQ(got.functions.strings().get(y.id), want.functions.strings().get(x.id));
      } else {
        EXPECT_EQ(y.id, x.id);
      }
      if (x.kind != EventKind::kLabel) {
        EXPECT_EQ(y.ts_ns, x.ts_ns);  // a label's time is unused
      }
    }
  }
  ASSERT_EQ(got.spans.size(), want.spans.size());
  for (size_t i = 0; i < want.spans.size(); ++i) {
    const Span& a = want.spans[i];
    const Span& b = got.spans[i];
    SCOPED_TRACE("span " + std::to_string(i) + " " + want.display_name(a));
    EXPECT_EQ(got.display_name(b), want.display_name(a));
    EXPECT_EQ(function_text(got, b.function), function_text(want, a.function));
    EXPECT_EQ(b.parent, a.parent);
    EXPECT_EQ(b.lane, a.lane);
    EXPECT_EQ(b.depth, a.depth);
    EXPECT_EQ(b.flags, a.flags);
    EXPECT_EQ(b.start_ns, a.start_ns);
    EXPECT_EQ(b.end_ns, a.end_ns);
    EXPECT_EQ(b.active_ns, a.active_ns);
    EXPECT_EQ(b.resumes, a.resumes);
    EXPECT_EQ(b.first_child, a.first_child);
    EXPECT_EQ(b.next_sibling, a.next_sibling);
  }
  EXPECT_EQ(got.roots, want.roots);
  EXPECT_EQ(got.segments, want.segments);
  ASSERT_EQ(got.io.size(), want.io.size());
  for (size_t i = 0; i < want.io.size(); ++i) {
    EXPECT_EQ(got.io[i].span, want.io[i].span);
    EXPECT_EQ(got.io[i].role, want.io[i].role);
    EXPECT_EQ(got.io[i].name, want.io[i].name);
    EXPECT_EQ(format_io(got.io[i].summary), format_io(want.io[i].summary));
  }
}

// The rich session of the issue: nested calls with labels, a profile_block,
// a C call, an exception, a generator suspended and resumed, a thread lane
// (all_threads) and an asyncio-task lane hung under predict, I/O summaries.
Profile rich_session() {
  Profile p;
  const uint32_t predict = test::user_fn(p, "Model.predict");
  const uint32_t prep = test::user_fn(p, "preprocess");
  const uint32_t scale = test::lib_fn(p, "StandardScaler.transform", "sklearn.preprocessing._data");
  const uint32_t len = test::c_fn(p, "len");
  const uint32_t block = p.functions.add("load weights", "", "", 0, FunctionKind::kBlock, true);
  const uint32_t gen = test::user_fn(p, "batches");
  const uint32_t work = test::user_fn(p, "worker_run", "app.workers");
  const uint32_t task = test::user_fn(p, "fetch_features", "app.io");
  const uint32_t stdlib =
      p.functions.add("sleep", "asyncio.tasks", "/usr/lib/python3.11/asyncio/tasks.py", 600,
                      FunctionKind::kPython, false);
  const uint32_t lab = p.functions.strings().intern("prep stage");
  std::vector<Event> main = {
      call(1000, predict),            // 0
      label(lab),                     // 1
      call(1100, prep),               // 2
      call(1200, scale),              // 3
      call(1250, len, kEvCFunction),  // 4
      ret(1260),                      // 5
      ret(1400, kEvException),        // 6
      ret(1500),                      // 7
      call(1600, block, kEvBlock),    // 8
      ret(2600),                      // 9
      call(2700, gen),                // 10
      suspend(2800, 10),              // 11
      resume(3000, 10),               // 12
      suspend(3100, 10),              // 13
      resume(3300, 10),               // 14
      ret(3400),                      // 15
      ret(9000),                      // 16
  };
  p.captured_depth = 3;
  p.start_ns = 900;
  p.end_ns = 9100;
  p.lanes.push_back(make_lane(main, "MainThread"));
  p.lanes[0].thread_id = 140001;
  p.lanes[0].native_tid = 100;
  // A worker thread (all_threads) started inside predict: its roots hang
  // under predict (lane 0, call 0). Its timestamps interleave with lane 0's.
  p.lanes.push_back(
      make_lane({call(1150, work), call(1300, stdlib), ret(2900), ret(3050)}, "worker-1", 0, 0, 0));
  p.lanes[1].thread_id = 140002;
  p.lanes[1].native_tid = 101;
  // An asyncio task in the main thread (task 1), created under predict.
  p.lanes.push_back(make_lane({call(2750, task), suspend(2760, 0), resume(3350, 0), ret(3380)},
                              "MainThread", 1, 0, 0));
  p.lanes[2].thread_id = 140001;
  p.lanes[2].native_tid = 100;
  IOSummary df;
  df.type_name = "pandas.core.frame.DataFrame";
  df.has_shape = true;
  df.shape = {64, 12};
  df.dtype = "float64";
  df.size_bytes = 6144;
  IOSummary arr;
  arr.type_name = "numpy.ndarray";
  arr.has_shape = true;
  arr.shape = {64};
  arr.dtype = "int64";
  arr.size_bytes = 512;
  p.lanes[0].io.push_back(IORecord{0, IORole::kArgument, "X", df});
  p.lanes[0].io.push_back(IORecord{0, IORole::kReturn, "", arr});
  build_tree(p);
  return p;
}

// The in-process profile as the joiner can know it: a type keeps only its
// short name in the probe's text.
Profile as_seen(Profile p) {
  for (Lane& lane : p.lanes) {
    for (IORecord& io : lane.io) io.summary.type_name = short_type_name(io.summary.type_name);
  }
  build_tree(p);
  return p;
}

TEST(Joiner, RebuildsTheInProcessTreeOfARichSession) {
  const Profile want = as_seen(rich_session());
  Process proc;
  Joiner j(std::map<std::string, std::string>{{"container", "serving-1"}});
  feed(j, records_of(want, proc, 7, MLPROF_SESSION_CAPTURE_IO | MLPROF_SESSION_ALL_THREADS));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  expect_same_tree(want, got[0]);
  const Profile& p = got[0];
  // The tree really is the rich one (not two empty ones agreeing).
  ASSERT_EQ(p.spans.size(), 9u);
  EXPECT_EQ(p.display_name(p.spans[1]), "prep stage");
  EXPECT_TRUE(p.spans[1].flags & kSpanLabelled);
  EXPECT_TRUE(p.spans[2].flags & kSpanException);
  EXPECT_TRUE(p.spans[3].flags & kSpanCFunction);
  EXPECT_TRUE(p.spans[4].flags & kSpanBlock);
  EXPECT_EQ(p.spans[5].resumes, 2u);
  EXPECT_EQ(p.spans[5].active_ns, 700 - 200 - 200);
  EXPECT_EQ(p.spans[6].parent, 0);  // worker thread's root under predict
  EXPECT_EQ(p.spans[8].parent, 0);  // asyncio task's root under predict
  EXPECT_EQ(p.lanes[1].native_tid, 101u);
  EXPECT_EQ(p.lanes[2].task, 1u);
  EXPECT_EQ(format_io(p.io[0].summary), "(DataFrame, shape=(64, 12), dtype=float64, 6.0KB)");
  EXPECT_EQ(p.io[0].summary.size_bytes, 6144);
  EXPECT_EQ(p.io[0].summary.shape, (std::vector<int64_t>{64, 12}));
  // Kinds and user code from the flags and the file paths.
  EXPECT_EQ(p.functions.get(p.spans[3].function).kind, FunctionKind::kC);
  EXPECT_EQ(p.functions.get(p.spans[4].function).kind, FunctionKind::kBlock);
  EXPECT_FALSE(p.functions.get(p.spans[2].function).user_code);  // site-packages
  EXPECT_FALSE(p.functions.get(p.spans[7].function).user_code);  // the standard library
  EXPECT_TRUE(p.functions.get(p.spans[0].function).user_code);
  // Provenance.
  EXPECT_EQ(p.meta.at("source"), "ebpf");
  EXPECT_EQ(p.meta.at("pid"), "100");
  EXPECT_EQ(p.meta.at("session"), "7");
  EXPECT_EQ(p.meta.at("container"), "serving-1");
  EXPECT_EQ(p.meta.at("session_flags"), "capture_io,all_threads");
  EXPECT_FALSE(p.meta.at("host").empty());
  EXPECT_EQ(p.meta.count("truncated"), 0u);
  for (const Lane& lane : p.lanes) {
    EXPECT_EQ(lane.pid, 100u);
    EXPECT_EQ(lane.session, 7u);
  }
  EXPECT_TRUE(p.kernel.present);
  EXPECT_EQ(p.kernel.spans.size(), p.spans.size());
  const JoinerStats st = j.stats();
  EXPECT_EQ(st.sessions_finished, 1u);
  EXPECT_EQ(st.sessions_truncated, 0u);
  EXPECT_EQ(st.index_mismatches, 0u);
  EXPECT_EQ(st.names_lost, 0u);
  EXPECT_EQ(st.malformed, 0u);
  EXPECT_EQ(st.unmatched, 0u);
}

TEST(Joiner, ThreadsInterleavedInAnyOrderGiveTheSameTree) {
  const Profile want = as_seen(rich_session());
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Process proc;
    Joiner j;
    feed(j, interleave(records_of(want, proc, 1), seed));
    std::vector<Profile> got = j.take_finished();
    ASSERT_EQ(got.size(), 1u);
    expect_same_tree(want, got[0]);
    EXPECT_EQ(j.stats().index_mismatches, 0u);
  }
}

TEST(Joiner, RandomCapturesWithGeneratorsRoundTrip) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Profile want = test::random_profile(seed, 300, 6, true);
    want.start_ns = 500;
    want.lanes[0].native_tid = 100;
    build_tree(want);
    Process proc;
    Joiner j;
    feed(j, records_of(want, proc, seed));
    std::vector<Profile> got = j.take_finished();
    ASSERT_EQ(got.size(), 1u);
    expect_same_tree(want, got[0]);
    EXPECT_EQ(j.stats().index_mismatches, 0u);
  }
}

// A one-lane session: predict(0) { load(1) { read(2) } } with a second root
// call after it; main thread tid 100.
Profile small_session(int64_t t0 = 1000) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t load = test::user_fn(p, "load");
  const uint32_t read = test::user_fn(p, "read", "app.io");
  p.lanes.push_back(make_lane({call(t0, predict), call(t0 + 1000, load), call(t0 + 2000, read),
                               ret(t0 + 30000), ret(t0 + 40000), ret(t0 + 50000)}));
  p.lanes[0].native_tid = 100;
  p.captured_depth = 2;
  p.start_ns = t0 - 100;
  p.end_ns = t0 + 50100;
  build_tree(p);
  return p;
}

// drain_finished hands each session out as it is built and builds the next
// in the memory of the last one: sessions of other sizes and kinds in turn
// (300 random spans with generators, three with sleeps and wakers, a rich
// one with threads, tasks and I/O) come out exactly as take_finished gives
// them, with nothing left over from the session before.
// `p` moved later by `by` ns (its events and session times).
Profile shifted(Profile p, int64_t by) {
  for (Lane& lane : p.lanes) {
    for (Event& e : lane.events) e.ts_ns += by;
  }
  p.start_ns += by;
  p.end_ns += by;
  build_tree(p);
  return p;
}

TEST(Joiner, SessionsHandedOutOneAtATimeEqualThoseTakenTogether) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Process proc;
    std::vector<std::vector<Rec>> sessions;
    for (uint64_t serial = 1; serial <= 8; ++serial) {
      // Sessions 100 ms apart (none lasts 2 ms): each gets only its own sleeps.
      const auto at = static_cast<int64_t>(serial) * 100'000'000;
      auto off_cpu = [&](int64_t start, int64_t end, bool blocked, int64_t wake = 0,
                         uint32_t waker = 0) {
        return off_cpu_rec(100, 100, at + start, at + end, blocked, wake ? at + wake : 0, waker);
      };
      switch (serial % 4) {
        case 1: {
          Profile big =
              test::random_profile(seed * 10 + static_cast<uint32_t>(serial), 300, 6, true);
          big.start_ns = 500;
          big.lanes[0].native_tid = 100;
          build_tree(big);
          std::vector<Rec> recs = records_of(shifted(std::move(big), at), proc, serial);
          recs.insert(recs.end() - 1, off_cpu(600, 900, true, 850, 105));
          sessions.push_back(std::move(recs));
          break;
        }
        case 2: {
          std::vector<Rec> recs = records_of(small_session(at + 1000), proc, serial);
          mlprof_ev_off_cpu r{};
          std::memcpy(&r, off_cpu(5000, 25000, true, 23000, 105).bytes.data(), sizeof(r));
          r.syscall = 202;
          std::memcpy(r.waker_comm, "a-waker-with-a-long-name", 16);
          recs.insert(recs.end() - 1, rec_of(r));
          recs.insert(recs.end() - 1, off_cpu(33000, 35000, false));
          sessions.push_back(std::move(recs));
          break;
        }
        case 3:
          sessions.push_back(records_of(shifted(as_seen(rich_session()), at), proc, serial,
                                        MLPROF_SESSION_CAPTURE_IO | MLPROF_SESSION_ALL_THREADS));
          break;
        default:
          sessions.push_back(records_of(small_session(at + 1000), proc, serial));
      }
    }
    Joiner together, one_by_one;
    std::vector<std::string> handed;
    for (const std::vector<Rec>& recs : sessions) {
      feed(together, recs);
      feed(one_by_one, recs);
      one_by_one.drain_finished(std::numeric_limits<int64_t>::max(), [&](Profile& p) {
        p.meta.erase("start_unix_ns");  // the wall clock at finalize
        handed.push_back(to_json_document(p));
      });
    }
    std::vector<Profile> taken = together.take_finished();
    ASSERT_EQ(taken.size(), sessions.size());
    ASSERT_EQ(handed.size(), sessions.size());
    for (size_t i = 0; i < taken.size(); ++i) {
      SCOPED_TRACE("session " + std::to_string(i + 1));
      taken[i].meta.erase("start_unix_ns");
      EXPECT_GT(taken[i].spans.size(), 2u);
      EXPECT_FALSE(taken[i].kernel.spans.empty());
      EXPECT_EQ(handed[i], to_json_document(taken[i]));
    }
    EXPECT_EQ(together.stats().sessions_finished, one_by_one.stats().sessions_finished);
  }
}

TEST(Joiner, OffCpuRecordsCarryTheWakersNameAndKindAndTheSyscall) {
  const Profile want = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(want, proc, 1);
  Rec end = recs.back();
  recs.pop_back();
  // read() sleeps in futex (S), woken by thread 105 whose comm is then
  // "renamed-waker"; then a sleep ended by a timer (the record's waker_tid is
  // the task the interrupt hit), and a kind past the known ones.
  mlprof_ev_off_cpu r{};
  std::memcpy(&r, off_cpu_rec(100, 100, 5000, 25000, true, 23000, 105).bytes.data(), sizeof(r));
  r.syscall = 202;
  r.waker_kind = MLPROF_WAKER_TASK;
  std::memcpy(r.waker_comm, "renamed-waker", 14);
  recs.push_back(rec_of(r));
  r.h = header(MLPROF_EV_OFF_CPU, 100, 100, 29000);
  r.start_ns = 26000;
  r.wake_ns = 28000;
  r.waker_tid = 31337;
  r.waker_kind = MLPROF_WAKER_TIMER;
  recs.push_back(rec_of(r));
  r.h = header(MLPROF_EV_OFF_CPU, 100, 100, 30500);
  r.start_ns = 30000;
  r.wake_ns = 30100;
  r.waker_kind = 77;
  r.syscall = -5;
  recs.push_back(rec_of(r));
  recs.push_back(end);
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const auto& iv = got[0].kernel.off_cpu;
  ASSERT_EQ(iv.size(), 3u);
  EXPECT_EQ(iv[0].syscall, 202);
  EXPECT_EQ(iv[0].waker_kind, WakerKind::kTask);
  EXPECT_EQ(iv[0].waker_name, "renamed-waker");
  EXPECT_EQ(iv[0].state_letter(), 'S');
  EXPECT_EQ(iv[1].waker_kind, WakerKind::kTimer);
  EXPECT_EQ(iv[1].waker_name, "");                // an interrupt's: not the hit task's comm
  EXPECT_EQ(iv[2].waker_kind, WakerKind::kTask);  // unknown kinds read as a task
  EXPECT_EQ(iv[2].syscall, -1);
  const SpanKernel& read = got[0].kernel.spans[2];
  EXPECT_EQ(read.top_waker_tid, 105u);
  EXPECT_EQ(read.top_waker_name, "renamed-waker");
  ASSERT_FALSE(read.waits.empty());
  EXPECT_EQ(read.waits[0].syscall, 202);
  EXPECT_EQ(read.waits[0].blocked_ns, 18000 + 2000);  // both sleeps in futex S
  EXPECT_EQ(read.waits[0].count, 2u);
}

TEST(Joiner, OffCpuIntervalLandsOnTheInnermostOpenSpan) {
  const Profile want = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(want, proc, 1);
  Rec end = recs.back();
  recs.pop_back();
  // read() (3000..31000) sleeps 20 us, woken by thread 105 after 18 us; then
  // one preemption of 2 us inside load() after read returned.
  recs.push_back(off_cpu_rec(100, 100, 5000, 25000, true, 23000, 105));
  recs.push_back(off_cpu_rec(100, 100, 33000, 35000, false));
  // Another process with the same tid numbers must not count.
  recs.push_back(off_cpu_rec(200, 100, 4000, 30000, true, 29000, 7));
  recs.push_back(end);
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& p = got[0];
  ASSERT_EQ(p.kernel.off_cpu.size(), 2u);
  EXPECT_EQ(p.kernel.off_cpu[0].start_ns, 5000);
  EXPECT_EQ(p.kernel.off_cpu[0].end_ns, 25000);
  EXPECT_EQ(p.kernel.off_cpu[0].wake_ns, 23000);
  EXPECT_EQ(p.kernel.off_cpu[0].waker_tid, 105u);
  EXPECT_TRUE(p.kernel.off_cpu[0].blocked);
  EXPECT_EQ(p.kernel.off_cpu[0].pid, 100u);
  EXPECT_FALSE(p.kernel.off_cpu[1].blocked);
  ASSERT_EQ(p.spans.size(), 3u);
  ASSERT_EQ(p.kernel.spans.size(), 3u);
  const SpanKernel& read = p.kernel.spans[2];
  EXPECT_EQ(read.off_cpu_ns, 20000);
  EXPECT_EQ(read.blocked_ns, 18000);
  EXPECT_EQ(read.runq_ns, 2000);
  EXPECT_EQ(read.voluntary_switches, 1u);
  EXPECT_EQ(read.top_waker_tid, 105u);
  EXPECT_EQ(read.on_cpu_ns, p.spans[2].duration_ns() - 20000);
  const SpanKernel& load = p.kernel.spans[1];  // inclusive: read's sleep and its own preemption
  EXPECT_EQ(load.off_cpu_ns, 22000);
  EXPECT_EQ(load.runq_ns, 4000);
  EXPECT_EQ(load.involuntary_switches, 1u);
  EXPECT_EQ(p.kernel.spans[0].off_cpu_ns, 22000);
}

// session_begin carries the interpreter's GIL range: a futex sleep on an
// address in it is a GIL wait; the BPF side's lock flag is a lock wait;
// any other futex stays a futex.
TEST(Joiner, FutexWaitsAreToldApartByTheGilRangeAndTheLockFlag) {
  const Profile want = small_session();
  Process proc;
  std::vector<Rec> recs = records_of(want, proc, 1);
  mlprof_ev_session begin{};
  std::memcpy(&begin, recs.front().bytes.data(), sizeof(begin));
  begin.gil = 0x7f0000001000;
  begin.gil_bytes = 208;
  recs.front() = rec_of(begin);
  Rec end = recs.back();
  recs.pop_back();
  auto wait = [&](int64_t start, uint64_t addr, uint32_t object) {
    mlprof_ev_off_cpu r{};
    std::memcpy(&r, off_cpu_rec(100, 100, start, start + 2000, true, start + 1500, 7).bytes.data(),
                sizeof(r));
    r.syscall = 202;
    r.futex_addr = addr;
    r.wait_object = object;
    return rec_of(r);
  };
  recs.push_back(wait(4000, 0x7f0000001000 + 40, MLPROF_WAIT_FUTEX));   // the GIL's cond
  recs.push_back(wait(7000, 0x7f0000001000 + 208, MLPROF_WAIT_FUTEX));  // just past it
  recs.push_back(wait(10000, 0x55aa00, MLPROF_WAIT_LOCK));
  recs.push_back(wait(13000, 0x7f0000001000 + 8, MLPROF_WAIT_NONE));  // not in futex
  recs.push_back(end);
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const auto& iv = got[0].kernel.off_cpu;
  ASSERT_EQ(iv.size(), 4u);
  EXPECT_EQ(iv[0].wait, WaitObject::kGil);
  EXPECT_EQ(iv[1].wait, WaitObject::kFutex);
  EXPECT_EQ(iv[2].wait, WaitObject::kLock);
  EXPECT_EQ(iv[3].wait, WaitObject::kNone);
  EXPECT_EQ(got[0].kernel.spans[0].own_gil_ns, 1500);
  EXPECT_EQ(got[0].kernel.spans[0].own_lock_ns, 1500);
}

TEST(Joiner, ProcessExitMidSessionTruncatesItsOpenSpans) {
  const Profile full = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(full, proc, 3);
  // Stop after read() was entered: predict, load and read stay open.
  recs.resize(1 + 1 + 2 + 2 + 2);  // begin, lane_begin, (name, enter) x 3
  feed(j, recs);
  EXPECT_TRUE(j.take_finished().empty());
  j.on_process_exit(100, 80000);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& p = got[0];
  ASSERT_EQ(p.spans.size(), 3u);
  for (const Span& s : p.spans) {
    EXPECT_TRUE(s.flags & kSpanTruncated) << p.display_name(s);
    EXPECT_TRUE(s.flags & kSpanOpenAtEnd) << p.display_name(s);
    EXPECT_EQ(s.end_ns, 80000);
  }
  EXPECT_EQ(p.end_ns, 80000);
  EXPECT_TRUE(p.lanes[0].truncated);
  EXPECT_EQ(p.meta.at("truncated"), "process exited");
  EXPECT_EQ(j.stats().sessions_truncated, 1u);
  // Forgotten: the pid's next process starts with no names and no session.
  feed(j, {span_rec(MLPROF_EV_SPAN_EXIT, 100, 100, 90000, 3, 0, 2)});
  EXPECT_EQ(j.stats().unmatched, 1u);
}

TEST(Joiner, MainThreadExitRecordEndsTheProcessSessions) {
  const Profile full = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(full, proc, 3);
  recs.resize(6);  // predict and load open
  recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 100, 70000, 0, "python3", 9));
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].spans.size(), 2u);
  EXPECT_TRUE(got[0].spans[1].flags & kSpanTruncated);
  EXPECT_EQ(got[0].end_ns, 70000);
  ASSERT_EQ(got[0].kernel.threads.size(), 1u);  // the lane's thread, seen exiting
  EXPECT_EQ(got[0].kernel.threads[0].end_ns, 70000);
  EXPECT_EQ(got[0].kernel.threads[0].exit_code, 9);
  EXPECT_EQ(got[0].kernel.threads[0].start_ns, 0);  // started before the capture
}

TEST(Joiner, FinishEndsOpenSessionsAtTheGivenTime) {
  const Profile full = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(full, proc, 3);
  recs.resize(6);
  feed(j, recs);
  j.finish(60000);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].meta.at("truncated"), "capture ended");
  EXPECT_EQ(got[0].spans[0].end_ns, 60000);
  EXPECT_TRUE(got[0].spans[0].flags & kSpanTruncated);
  EXPECT_EQ(j.stats().sessions_truncated, 1u);
  EXPECT_EQ(j.stats().sessions_finished, 1u);
}

// The NAME record of process-wide function id `id` lost.
void drop_name(std::vector<Rec>& recs, uint32_t id) {
  std::erase_if(recs, [id](const Rec& r) {
    mlprof_ev_name n{};
    if (r.bytes.size() != sizeof(n)) return false;
    std::memcpy(&n, r.bytes.data(), sizeof(n));
    return n.h.kind == MLPROF_EV_NAME && n.id == id;
  });
}

TEST(Joiner, ALostNameRecordGivesAPlaceholderNameAndIsCounted) {
  const Profile want = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(want, proc, 1);
  drop_name(recs, 1001);  // load()'s
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].spans.size(), 3u);
  EXPECT_EQ(got[0].display_name(got[0].spans[0]), "predict");
  EXPECT_EQ(got[0].display_name(got[0].spans[1]), "<function 1001>");
  EXPECT_EQ(got[0].display_name(got[0].spans[2]), "read");
  EXPECT_EQ(j.stats().names_lost, 1u);
}

TEST(Joiner, NamesThatAreNotUtf8BecomeUtf8) {
  // A target sends any bytes, and a name cut at its field's size ends
  // mid-character: one bad byte once made the whole document unreadable.
  Profile want;
  const uint32_t f = test::user_fn(want, "caf\xe9");
  const uint32_t g = test::user_fn(want, "\xe6\x97\xa5\xe6");  // a character, then a cut one
  want.lanes.push_back(make_lane({call(1000, f), call(2000, g), ret(3000), ret(4000)}));
  want.lanes[0].native_tid = 100;
  want.captured_depth = 2;
  want.start_ns = 900;
  want.end_ns = 4100;
  build_tree(want);
  Process proc;
  Joiner j;
  feed(j, records_of(want, proc, 1));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].spans.size(), 2u);
  EXPECT_EQ(got[0].display_name(got[0].spans[0]), "caf\xef\xbf\xbd");
  EXPECT_EQ(got[0].display_name(got[0].spans[1]), "\xe6\x97\xa5\xef\xbf\xbd");
}

TEST(Joiner, NamesArePerProcessAndOutliveSessions) {
  Process proc;
  Joiner j;
  feed(j, records_of(small_session(1000), proc, 1));
  // The second session's records carry no NAME (sent once per process).
  feed(j, records_of(small_session(100000), proc, 2));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].display_name(got[1].spans[1]), "load");
  EXPECT_EQ(j.stats().names_lost, 0u);
}

// A process's sessions start on its names (FunctionTable's shared base), so
// a session interns no name an earlier one used. A name whose NAME record
// was lost is not learnt as its placeholder: when it comes, later sessions
// show it.
TEST(Joiner, SessionsStartOnTheirProcesssNamesAndALateNameIsLearnt) {
  Process proc;
  Joiner j;
  std::vector<Rec> first = records_of(small_session(1000), proc, 1);
  drop_name(first, 1001);  // load()'s NAME lost
  feed(j, first);
  std::vector<Profile> got = j.take_finished();
  proc.named.erase({false, 1001});  // sent again with the next session
  feed(j, records_of(small_session(100000), proc, 2));
  feed(j, records_of(small_session(200000), proc, 3));
  feed(j, records_of(small_session(300000), proc, 4));
  for (Profile& p : j.take_finished()) got.push_back(std::move(p));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].display_name(got[0].spans[1]), "<function 1001>");
  for (size_t i = 1; i < got.size(); ++i) {
    ASSERT_EQ(got[i].spans.size(), 3u);
    EXPECT_EQ(got[i].display_name(got[i].spans[0]), "predict");
    EXPECT_EQ(got[i].display_name(got[i].spans[1]), "load");
    EXPECT_EQ(got[i].display_name(got[i].spans[2]), "read");
    EXPECT_EQ(got[i].functions.module(got[i].spans[2].function), "app.io");
    EXPECT_TRUE(got[i].functions.get(got[i].spans[1].function).user_code);
    EXPECT_NE(got[i].functions.base(), nullptr);
  }
  // Sessions 3 and 4 added no name: they share one base, and their own tables are empty.
  EXPECT_EQ(got[2].functions.base(), got[3].functions.base());
  EXPECT_EQ(got[3].functions.size(), got[3].functions.base()->size());
  EXPECT_EQ(got[3].spans[1].function, got[2].spans[1].function);
  EXPECT_EQ(j.stats().names_lost, 1u);
  // Combined, the sessions name each function once (the placeholder too, as used).
  Profile all;
  append_profiles(all, {&got[0], &got[1], &got[2], &got[3]});
  EXPECT_EQ(all.functions.size(), 4u);
}

// A process that labels each session with a new name (a request id in a
// profile_span label): the table of names is copied when what sessions
// added is an eighth of it, so it is copied about log(n) times, not n.
TEST(Joiner, ANewNameEverySessionDoesNotCopyTheNamesEverySession) {
  Process proc;
  Joiner j;
  std::vector<const FunctionTable*> bases;
  std::vector<Profile> kept;  // alive, so that no two bases share an address
  for (int i = 0; i < 200; ++i) {
    Profile p;
    const uint32_t predict = test::user_fn(p, "predict");
    // The extension's label ids are its registry's: a new text, a new id.
    for (int k = 0; k < i; ++k) p.functions.strings().intern("unused " + std::to_string(k));
    const uint32_t request = p.functions.strings().intern("request " + std::to_string(i));
    const int64_t t0 = 1000 + i * 100000;
    p.lanes.push_back(make_lane({call(t0, predict), test::label(request), call(t0 + 10, predict),
                                 ret(t0 + 20), ret(t0 + 30)}));
    p.lanes[0].native_tid = 100;
    p.start_ns = t0 - 1;
    p.end_ns = t0 + 40;
    build_tree(p);
    feed(j, records_of(p, proc, static_cast<uint64_t>(i + 1)));
    for (Profile& got : j.take_finished()) {
      ASSERT_EQ(got.spans.size(), 2u);
      EXPECT_EQ(got.display_name(got.spans[1]), "request " + std::to_string(i));
      bases.push_back(got.functions.base());
      kept.push_back(std::move(got));
    }
  }
  ASSERT_EQ(bases.size(), 200u);
  std::sort(bases.begin(), bases.end());
  const auto copies = std::unique(bases.begin(), bases.end()) - bases.begin();
  EXPECT_LE(copies, 30) << "the names were copied " << copies << " times in 200 sessions";
  EXPECT_EQ(j.stats().names_lost, 0u);
}

TEST(Joiner, TwoProcessesWithEqualTidsAndSessionNumbersStayApart) {
  // Process 100 runs predict/load/read; process 200 (the same tid numbers,
  // session serial and function ids, other names) runs its own tree.
  Profile a = small_session();
  Profile b;
  const uint32_t f0 = test::user_fn(b, "score");
  const uint32_t f1 = test::user_fn(b, "featurize");
  const uint32_t f2 = test::user_fn(b, "lookup");
  b.lanes.push_back(
      make_lane({call(1500, f0), call(1600, f1), ret(1700), call(1800, f2), ret(1900), ret(2000)}));
  b.lanes[0].native_tid = 100;
  b.captured_depth = 2;
  b.start_ns = 1400;
  b.end_ns = 2100;
  build_tree(b);
  Process pa, pb;
  pb.tgid = 200;
  std::vector<Rec> ra = records_of(a, pa, 1);
  std::vector<Rec> rb = records_of(b, pb, 1);
  // One ring buffer: the two processes' records interleaved.
  std::vector<Rec> all;
  for (size_t i = 0; i < std::max(ra.size(), rb.size()); ++i) {
    if (i < rb.size()) all.push_back(rb[i]);
    if (i < ra.size()) all.push_back(ra[i]);
  }
  Joiner j;
  feed(j, all);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 2u);
  const Profile& gb = got[0].meta.at("pid") == "200" ? got[0] : got[1];
  const Profile& ga = got[0].meta.at("pid") == "200" ? got[1] : got[0];
  EXPECT_EQ(ga.meta.at("pid"), "100");
  expect_same_tree(a, ga);
  expect_same_tree(b, gb);
  EXPECT_EQ(j.stats().index_mismatches, 0u);
}

TEST(Joiner, AnIndexMismatchStopsTheLaneInsteadOfBuildingAWrongTree) {
  // predict { load { read } } then a second call after load: losing read's
  // exit would make the builder close load at read's exit time and hang the
  // next call under the wrong parent; the joiner must stop the lane there.
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t load = test::user_fn(p, "load");
  const uint32_t read = test::user_fn(p, "read");
  const uint32_t post = test::user_fn(p, "post");
  p.lanes.push_back(make_lane({call(1000, predict), call(2000, load), call(3000, read), ret(4000),
                               ret(5000), call(6000, post), ret(7000), ret(8000)}));
  p.lanes[0].native_tid = 100;
  p.start_ns = 900;
  p.end_ns = 9000;
  p.captured_depth = 3;
  build_tree(p);
  Process proc;
  std::vector<Rec> recs = records_of(p, proc, 1);
  // Lose read's exit (index 2).
  auto lost = std::find_if(recs.begin(), recs.end(), [](const Rec& r) {
    mlprof_ev_span s{};
    if (r.bytes.size() != sizeof(s)) return false;
    std::memcpy(&s, r.bytes.data(), sizeof(s));
    return s.h.kind == MLPROF_EV_SPAN_EXIT && s.index == 2;
  });
  ASSERT_NE(lost, recs.end());
  recs.erase(lost);
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& g = got[0];
  EXPECT_EQ(j.stats().index_mismatches, 1u);
  EXPECT_TRUE(g.lanes[0].truncated);
  // The three spans seen before the loss, all open at the end and flagged;
  // no "post" span under the wrong parent.
  ASSERT_EQ(g.spans.size(), 3u);
  for (const Span& s : g.spans) {
    EXPECT_TRUE(s.flags & kSpanTruncated) << g.display_name(s);
    EXPECT_NE(g.display_name(s), "post");
  }
  EXPECT_EQ(g.spans[2].start_ns, 3000);
}

TEST(Joiner, ResumeOfASpanNeverSuspendedIsAMismatch) {
  Profile p = small_session();
  Process proc;
  std::vector<Rec> recs = records_of(p, proc, 1);
  recs.insert(recs.end() - 1, span_rec(MLPROF_EV_SPAN_RESUME, 100, 100, 50050, 1, 0, 1));
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(j.stats().index_mismatches, 1u);
  EXPECT_TRUE(got[0].lanes[0].truncated);
  EXPECT_EQ(got[0].spans.size(), 3u);  // everything before it stands
}

TEST(Joiner, ALaneWhoseBeginWasLostIsRebuiltFromItsSpans) {
  Profile p = as_seen(rich_session());
  Process proc;
  std::vector<Rec> recs = records_of(p, proc, 1);
  std::erase_if(recs, [](const Rec& r) {
    mlprof_ev_lane l{};
    if (r.bytes.size() != sizeof(l)) return false;
    std::memcpy(&l, r.bytes.data(), sizeof(l));
    return l.h.kind == MLPROF_EV_LANE_BEGIN && l.lane == 1;
  });
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(j.stats().lanes_without_begin, 1u);
  ASSERT_EQ(got[0].lanes.size(), 3u);
  EXPECT_EQ(got[0].lanes[1].native_tid, 101u);
  EXPECT_EQ(got[0].lanes[1].parent_lane, -1);  // the link was in the lost record
  EXPECT_EQ(got[0].spans.size(), p.spans.size());
}

TEST(Joiner, ThreadsStartedInTheSessionBecomeLifetimes) {
  const Profile want = small_session();
  Process proc;
  std::vector<Rec> recs = records_of(want, proc, 1);
  Rec end = recs.back();
  recs.pop_back();
  // load() (2000..41000) starts thread 150, which starts 151; 150 exits.
  // Thread 160 is started by a thread outside the session: not its own.
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 150, 2500, 100, "worker-a"));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 151, 2700, 150, "worker-b"));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 160, 2800, 999, "other"));
  recs.push_back(off_cpu_rec(100, 150, 3000, 13000, true, 12000, 100));
  recs.push_back(off_cpu_rec(100, 160, 3000, 13000, true, 12000, 100));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 150, 20000, 100, "worker-a", 0));
  recs.push_back(end);
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const KernelData& k = got[0].kernel;
  ASSERT_EQ(k.threads.size(), 2u);
  EXPECT_EQ(k.threads[0].tid, 150u);
  EXPECT_EQ(k.threads[0].parent_tid, 100u);
  EXPECT_EQ(k.threads[0].start_ns, 2500);
  EXPECT_EQ(k.threads[0].end_ns, 20000);
  EXPECT_EQ(k.threads[0].name, "worker-a");
  EXPECT_EQ(k.threads[0].started_under, 1);  // load(), innermost open on thread 100 at 2500
  EXPECT_EQ(k.threads[1].tid, 151u);
  EXPECT_EQ(k.threads[1].end_ns, 0);  // still running
  ASSERT_EQ(k.off_cpu.size(), 1u);    // 160 is not the session's
  EXPECT_EQ(k.off_cpu[0].tid, 150u);
  // The started thread's off-CPU counts for load() (and predict), not for read().
  EXPECT_EQ(k.spans[1].off_cpu_ns, 10000);
  EXPECT_EQ(k.spans[2].off_cpu_ns, 0);
}

// Thread 150 starts in the session, exits, and two more exits of the tid
// follow: a later thread's that reused it, and an earlier one's, delivered
// late (fuzz/regressions/fuzz_agent_records/thread-exit-before-start).
std::vector<Rec> reused_tid_records() {
  Process proc;
  std::vector<Rec> recs = records_of(small_session(), proc, 1);
  Rec end = recs.back();
  recs.pop_back();
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 150, 3000, 100, "worker-a"));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 150, 20000, 100, "worker-a", 0));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 150, 30000, 100, "reused", 2));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 150, 2600, 100, "older", 1));
  recs.push_back(end);
  return recs;
}

TEST(Joiner, AThreadEndsOnceAndNotBeforeItStarts) {
  // The fuzzer's finding (fuzz_agent_records, CI of 1fd1038): the last
  // exit record of the tid ended the lifetime, here before it began, and
  // the document did not read back.
  Joiner j;
  feed(j, reused_tid_records());
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const KernelData& k = got[0].kernel;
  ASSERT_EQ(k.threads.size(), 1u);
  EXPECT_EQ(k.threads[0].start_ns, 3000);
  EXPECT_EQ(k.threads[0].end_ns, 20000);
  EXPECT_EQ(k.threads[0].exit_code, 0);
  EXPECT_EQ(profile_defect(got[0]), "");
}

TEST(Joiner, AThreadTheSessionStartedMayExitJustAfterItEnds) {
  // CPython's join() returns before the OS thread exits, so the exit record
  // of a worker comes after session_end; it still belongs to the session.
  // A lane's own thread (started before the session) exiting later does not.
  const Profile want = small_session();
  Process proc;
  std::vector<Rec> recs = records_of(want, proc, 1);
  Rec end = recs.back();
  recs.pop_back();
  mlprof_ev_header end_h{};
  std::memcpy(&end_h, end.bytes.data(), sizeof(end_h));
  const auto end_ns = static_cast<int64_t>(end_h.ts_ns);
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 150, 2500, 100, "worker-a"));
  recs.push_back(end);
  recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 150, end_ns + 300, 100, "worker-a", 0));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 170, end_ns + 400, 100, "after"));
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const KernelData& k = got[0].kernel;
  ASSERT_EQ(k.threads.size(), 1u);  // 170 started after the end: not the session's
  EXPECT_EQ(k.threads[0].tid, 150u);
  EXPECT_EQ(k.threads[0].end_ns, end_ns + 300);
}

TEST(Joiner, ConcurrentSessionsTakeOnlyThreadsStartedWhileTheyWereOpen) {
  // Session 1 on thread 100 (900..51100) and session 2 on thread 200 of the
  // same process (40000..90000). Thread 150 is started by 200 before session
  // 2 began, 151 while it was open: only 151 is session 2's.
  Process proc;
  std::vector<Rec> recs = records_of(small_session(), proc, 1);
  Profile second;
  const uint32_t f = test::user_fn(second, "predict");
  second.lanes.push_back(make_lane({call(41000, f), ret(89000)}));
  second.lanes[0].native_tid = 200;
  second.captured_depth = 2;
  second.start_ns = 40000;
  second.end_ns = 90000;
  build_tree(second);
  std::vector<Rec> recs2 = records_of(second, proc, 2);
  std::vector<Rec> all(recs.begin(), recs.end() - 1);  // session 1 still open
  all.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 150, 30000, 200, "early"));
  all.insert(all.end(), recs2.begin(), recs2.end() - 1);
  all.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 151, 45000, 200, "inside"));
  all.push_back(recs2.back());  // session 2 ends first: session 1 still holds 150's record
  all.push_back(recs.back());
  Joiner j;
  feed(j, all);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].meta.at("session"), "2");
  ASSERT_EQ(got[0].kernel.threads.size(), 1u);
  EXPECT_EQ(got[0].kernel.threads[0].tid, 151u);
  EXPECT_EQ(got[0].kernel.threads[0].started_under, 0);
  EXPECT_TRUE(got[1].kernel.threads.empty());  // neither was started by session 1's thread
}

TEST(Joiner, ParentLanesAreMappedPastALaneLostEntirely) {
  // Lanes 0, 2 and 3 arrive (every record of lane 1 was lost); lane 3 was
  // started under lane 2's call, which is profile lane 1 now.
  Joiner j;
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 100, 1, -1, MLPROF_SESSION_ALL_THREADS),
           name_rec(100, 100, 100, 7, false, "predict", "app", "/app/m.py", 1),
           name_rec(100, 100, 100, 8, false, "work", "app", "/app/m.py", 9),
           span_rec(MLPROF_EV_SPAN_ENTER, 100, 100, 200, 1, 0, 0, 7)});
  mlprof_ev_lane l2{};
  l2.h = header(MLPROF_EV_LANE_BEGIN, 100, 102, 300);
  l2.session = 1;
  l2.lane = 2;
  l2.parent_lane = 0;
  l2.parent_call = 0;
  mlprof_ev_lane l3 = l2;
  l3.h.tid = 103;
  l3.lane = 3;
  l3.parent_lane = 2;
  l3.parent_call = 0;
  feed(j, {rec_of(l2), span_rec(MLPROF_EV_SPAN_ENTER, 100, 102, 310, 1, 2, 0, 8), rec_of(l3),
           span_rec(MLPROF_EV_SPAN_ENTER, 100, 103, 320, 1, 3, 0, 8),
           span_rec(MLPROF_EV_SPAN_EXIT, 100, 103, 330, 1, 3, 0),
           span_rec(MLPROF_EV_SPAN_EXIT, 100, 102, 340, 1, 2, 0),
           span_rec(MLPROF_EV_SPAN_EXIT, 100, 100, 350, 1, 0, 0),
           session_rec(MLPROF_EV_SESSION_END, 100, 100, 400, 1, 0, 0)});
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& p = got[0];
  ASSERT_EQ(p.lanes.size(), 3u);
  EXPECT_EQ(p.lanes[1].parent_lane, 0);
  EXPECT_EQ(p.lanes[2].parent_lane, 1);
  ASSERT_EQ(p.spans.size(), 3u);
  EXPECT_EQ(p.spans[1].parent, 0);
  EXPECT_EQ(p.spans[2].parent, 1);  // lane 3's root under lane 2's work()
  EXPECT_EQ(p.spans[2].depth, 2u);
}

TEST(Joiner, HeldSessionsCatchOffCpuIntervalsThatEndAfterThem) {
  const Profile want = small_session();  // ends at 51100
  Process proc;
  std::vector<Rec> recs = records_of(want, proc, 1);
  recs.insert(recs.end() - 1, thread_rec(MLPROF_EV_THREAD_START, 100, 150, 2500, 100, "pool"));
  Joiner j;
  feed(j, recs);
  // The pool thread blocks from 40000 to after the session's end: its
  // interval is shipped when it ends, after session_end.
  EXPECT_TRUE(j.take_finished(51100).empty());
  feed(j, {off_cpu_rec(100, 150, 40000, 70000, true, 69000, 100)});
  std::vector<Profile> got = j.take_finished(51101);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].kernel.off_cpu.size(), 1u);
  EXPECT_EQ(got[0].kernel.off_cpu[0].tid, 150u);
  // Without holding, the same interval arrives too late.
  Joiner k;
  feed(k, recs);
  ASSERT_EQ(k.take_finished().size(), 1u);
  feed(k, {off_cpu_rec(100, 150, 40000, 70000, true, 69000, 100)});
  EXPECT_TRUE(k.take_finished().empty());
}

TEST(Joiner, LostEventsAreTheIncreaseDuringTheSession) {
  Process proc;
  std::vector<Rec> recs = records_of(small_session(), proc, 1);
  Joiner j;
  j.set_lost_events(5);
  feed(j, {recs.front()});
  j.set_lost_events(12);
  feed(j, std::vector<Rec>(recs.begin() + 1, recs.end()));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kernel.lost_events, 7u);
}

TEST(Joiner, DroppedCallsOfTheSessionGoToItsLane) {
  Profile p = small_session();
  p.lanes[0].dropped = 4;
  build_tree(p);
  Process proc;
  Joiner j;
  feed(j, records_of(p, proc, 1));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  expect_same_tree(p, got[0]);
  EXPECT_EQ(got[0].meta.at("calls_dropped"), "4");
}

TEST(Joiner, MalformedRecordsAreCountedNotTrusted) {
  Joiner j;
  const uint8_t tiny[4] = {1, 2, 3, 4};
  j.on_record(tiny, sizeof(tiny));
  j.on_record(nullptr, 0);
  Rec r = session_rec(MLPROF_EV_SESSION_BEGIN, 1, 1, 10, 1, 2, 0);
  j.on_record(r.bytes.data(), sizeof(mlprof_ev_header));  // a begin cut after its header
  mlprof_ev_header h = header(77, 1, 1, 10);
  j.on_record(&h, sizeof(h));
  // A name not terminated within its field: cut at the field's end.
  mlprof_ev_name n{};
  n.h = header(MLPROF_EV_NAME, 1, 1, 10);
  std::memset(n.name, 'x', sizeof(n.name));
  j.on_record(&n, sizeof(n));
  EXPECT_EQ(j.stats().records, 5u);
  EXPECT_EQ(j.stats().malformed, 4u);
}

// fuzz_agent_records' finding (CI, stop 58): an off-CPU interval starting
// near int64's low end made the Chrome export's time differences overflow.
// bpf_ktime_get_ns() never passes 2^62 (146 years up): such a record is
// malformed, whichever of its times is out of range.
TEST(Joiner, RecordsWithTimesPastTwoToThe62AreMalformed) {
  const Profile want = small_session();
  Process proc;
  Joiner j;
  std::vector<Rec> recs = records_of(want, proc, 1);
  Rec end = recs.back();
  recs.pop_back();
  const int64_t wrapped = std::numeric_limits<int64_t>::min() + 2000;  // a u64 past 2^63
  recs.push_back(off_cpu_rec(100, 100, wrapped, 25000, true, 23000, 105));
  recs.push_back(off_cpu_rec(100, 100, 5000, 25000, true, kMaxTimeNs + 1, 105));
  recs.push_back(off_cpu_rec(100, 100, 5000, kMaxTimeNs + 1, false));
  recs.push_back(thread_rec(MLPROF_EV_THREAD_START, 100, 101, wrapped, 100, "w"));
  recs.push_back(off_cpu_rec(100, 100, 33000, 35000, false));  // in range: kept
  recs.push_back(end);
  feed(j, recs);
  EXPECT_EQ(j.stats().malformed, 4u);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].kernel.off_cpu.size(), 1u);
  EXPECT_EQ(got[0].kernel.off_cpu[0].start_ns, 33000);
  EXPECT_TRUE(got[0].kernel.threads.empty());
  EXPECT_EQ(profile_defect(got[0]), "");
}

TEST(Joiner, RecordsOfSessionsNeverBegunAreUnmatched) {
  Process proc;
  std::vector<Rec> recs = records_of(small_session(), proc, 1);
  recs.erase(recs.begin());  // the agent attached after session_begin
  Joiner j;
  feed(j, recs);
  EXPECT_TRUE(j.take_finished().empty());
  EXPECT_EQ(j.stats().unmatched, 8u);  // lane_begin, 3 enters, 3 exits, session_end
}

TEST(Joiner, ASessionThatNeverEndsIsBoundedByTheEventCap) {
  JoinerLimits limits;
  limits.max_events_per_session = 100;
  limits.max_off_cpu_per_thread = 16;
  Joiner j({}, limits);
  Process proc;
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 10, 1, -1, 0),
           name_rec(100, 100, 10, 5, false, "tick", "app", "/app/x.py", 1)});
  int64_t ts = 100;
  for (uint32_t i = 0; i < 1000; ++i) {
    feed(j, {span_rec(MLPROF_EV_SPAN_ENTER, 100, 100, ts, 1, 0, 2 * i, 5),
             span_rec(MLPROF_EV_SPAN_EXIT, 100, 100, ts + 5, 1, 0, 2 * i),
             off_cpu_rec(100, 100, ts + 1, ts + 3, false)});
    ts += 10;
  }
  EXPECT_GT(j.stats().events_over_cap, 0u);
  EXPECT_EQ(j.stats().off_cpu_dropped, 1000u - 16u);
  j.finish(ts);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].lanes[0].events.size(), 100u);
  EXPECT_TRUE(got[0].lanes[0].truncated);
  EXPECT_LE(got[0].kernel.off_cpu.size(), 16u);
}

TEST(Joiner, ManyOpenSessionsTogetherAreBoundedByTheTotalCap) {
  // Ten sessions that never end, 40 events each at most: the total cap of
  // 100 stops the later ones; a finished session gives its room back.
  JoinerLimits limits;
  limits.max_events_total = 100;
  Joiner j({}, limits);
  for (uint64_t s = 1; s <= 10; ++s) {
    const auto tid = static_cast<uint32_t>(100 + s);
    feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, tid, 10, s, -1, 0)});
    for (uint32_t i = 0; i < 20; ++i) {
      feed(j, {span_rec(MLPROF_EV_SPAN_ENTER, 100, tid, 20 + i, s, 0, 2 * i, 5),
               span_rec(MLPROF_EV_SPAN_EXIT, 100, tid, 21 + i, s, 0, 2 * i)});
    }
  }
  EXPECT_EQ(j.stats().events_over_cap, 8u);  // session 3 stopped at 20 events, 4 .. 10 at once
  feed(j, {session_rec(MLPROF_EV_SESSION_END, 100, 101, 100, 1, 0, 0)});
  ASSERT_EQ(j.take_finished().size(), 1u);
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 200, 200, 11, -1, 0),
           span_rec(MLPROF_EV_SPAN_ENTER, 100, 200, 210, 11, 0, 0, 5),
           span_rec(MLPROF_EV_SPAN_EXIT, 100, 200, 220, 11, 0, 0),
           session_rec(MLPROF_EV_SESSION_END, 100, 200, 230, 11, 0, 0)});
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].spans.size(), 1u);  // room again after session 1 finished
  EXPECT_FALSE(got[0].lanes[0].truncated);
  j.finish(1000);
  got = j.take_finished();
  ASSERT_EQ(got.size(), 9u);
  EXPECT_EQ(got[0].lanes[0].events.size(), 40u);  // session 2
  EXPECT_EQ(got[1].lanes[0].events.size(), 20u);  // session 3: stopped at the cap
  EXPECT_TRUE(got[1].lanes[0].truncated);
  EXPECT_TRUE(got[2].lanes[0].events.empty());  // session 4: nothing fitted
}

TEST(Joiner, NewLaneNumbersInALoopAreBoundedByTheLaneCaps) {
  // Issue 44's audit, F2: a target sending lane_begin (or span or I/O
  // records) with a new lane number each time grew a session without end.
  JoinerLimits limits;
  limits.max_lanes_per_session = 8;
  limits.max_lanes_total = 12;
  Joiner j({}, limits);
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 10, 1, -1, 0),
           session_rec(MLPROF_EV_SESSION_BEGIN, 100, 101, 10, 2, -1, 0)});
  for (uint64_t serial = 1; serial <= 2; ++serial) {
    const auto tid = static_cast<uint32_t>(99 + serial);
    for (uint32_t lane = 0; lane < 1000; ++lane)
      feed(j, {span_rec(MLPROF_EV_SPAN_ENTER, 100, tid, 20 + lane, serial, lane, 0, 5)});
  }
  // Session 1 took 8 lanes, session 2 the 4 left of the 12.
  EXPECT_EQ(j.stats().lanes_over_cap, 2000u - 12u);
  j.finish(5000);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].lanes.size(), 8u);
  EXPECT_EQ(got[1].lanes.size(), 4u);
  // Finished sessions give their lanes back.
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 102, 6000, 3, -1, 0)});
  for (uint32_t lane = 0; lane < 8; ++lane)
    feed(j, {span_rec(MLPROF_EV_SPAN_ENTER, 100, 102, 6010 + lane, 3, lane, 0, 5)});
  j.finish(7000);
  got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].lanes.size(), 8u);
}

// This process's address space now, in bytes (VmSize).
size_t address_space_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  size_t kb = 0;
  while (status >> key) {
    if (key == "VmSize:") {
      status >> kb;
      break;
    }
  }
  return kb * 1024;
}

// Session 1 of process 100 through span records (contract v1): `depth`
// nested calls, then the bottom one suspended and resumed `pairs` times,
// then its end. `*end_ts` (if given): the time of its last record.
std::vector<Rec> deep_suspend_records(uint32_t depth, uint32_t pairs, int64_t* end_ts = nullptr) {
  std::vector<Rec> recs{session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 10, 1, -1, 0)};
  int64_t ts = 100;
  for (uint32_t d = 0; d < depth; ++d)
    recs.push_back(span_rec(MLPROF_EV_SPAN_ENTER, 100, 100, ts++, 1, 0, d, 5));
  for (uint32_t k = 0; k < pairs; ++k) {
    recs.push_back(span_rec(MLPROF_EV_SPAN_SUSPEND, 100, 100, ts++, 1, 0, 0));
    recs.push_back(span_rec(MLPROF_EV_SPAN_RESUME, 100, 100, ts++, 1, 0, 0));
  }
  recs.push_back(session_rec(MLPROF_EV_SESSION_END, 100, 100, ts++, 1, 0, 0));
  if (end_ts) *end_ts = ts;
  return recs;
}

TEST(Joiner, ASessionTooLargeToBuildIsDroppedAndTheJoinerGoesOn) {
  // Issue 44's audit, F9: a stack 2,048 deep suspended and resumed 1,000
  // times (within stack_move_budget) makes build_tree push 2 M segments
  // (80 MB). In a child whose address space is capped 32 MB above what it
  // maps (a real allocation failure, not a mock), the session is dropped
  // and counted, and the next session is built.
  if (MLPROF_SANITIZED)
    GTEST_SKIP() << "a sanitizer's operator new dies rather than throw bad_alloc";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlim_t cap = address_space_bytes() + (rlim_t{32} << 20);
    const rlimit rl{cap, cap};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    Joiner j;
    int64_t ts = 0;
    feed(j, deep_suspend_records(2048, 1000, &ts));
    const bool dropped = j.take_finished().empty() && j.stats().sessions_dropped == 1;
    feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, ts + 10, 2, -1, 0),
             span_rec(MLPROF_EV_SPAN_ENTER, 100, 100, ts + 20, 2, 0, 0, 5),
             span_rec(MLPROF_EV_SPAN_EXIT, 100, 100, ts + 30, 2, 0, 0),
             session_rec(MLPROF_EV_SESSION_END, 100, 100, ts + 40, 2, 0, 0)});
    const std::vector<Profile> next = j.take_finished();
    _exit(!dropped ? 1 : next.size() == 1 && next[0].spans.size() == 1 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: not dropped; 2: the next session not built; 3: no rlimit";
}

TEST(Joiner, SuspendsOfADeepStackStopTheLaneAtTheMoveBudget) {
  // Audit F1 through span records (contract v1): each suspend and resume
  // copies the stack above the span. 8,192 deep and 20,000 pairs is 3.3e8
  // spans copied; past stack_move_budget the lane stops, truncated.
  constexpr uint32_t kDepth = 8192, kPairs = 20000;
  Joiner j;
  feed(j, deep_suspend_records(kDepth, kPairs));
  const std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(j.stats().events_over_cap, 1u);
  EXPECT_TRUE(got[0].lanes[0].truncated);
  ASSERT_EQ(got[0].spans.size(), kDepth);
  const size_t events = got[0].lanes[0].events.size();
  EXPECT_LT(events, kDepth + 2 * kPairs);
  EXPECT_LE(size_t{2} * kDepth * ((events - kDepth) / 2), stack_move_budget(events) + 2 * kDepth);
  EXPECT_LE(got[0].segments.size(), stack_move_budget(events) / 2 + kDepth);
}

TEST(Joiner, AProcessWithNoSessionHoldsNoSchedulerRecords) {
  JoinerLimits limits;
  limits.max_names_per_process = 10;
  Joiner j({}, limits);
  for (uint32_t i = 0; i < 50; ++i) {
    std::string name = "f";  // appended: `"f" + std::string` trips GCC 12's -Wrestrict
    name += std::to_string(i);
    feed(j, {name_rec(100, 100, 10, i, false, name)});
  }
  for (int64_t i = 0; i < 1000; ++i) {
    feed(j, {off_cpu_rec(100, 100, i * 10, i * 10 + 5, true, i * 10 + 4, 1)});
  }
  // A session that starts later sees none of the earlier intervals, and only
  // the names that fit.
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 20000, 1, 2, 0),
           span_rec(MLPROF_EV_SPAN_ENTER, 100, 100, 20010, 1, 0, 0, 3),
           span_rec(MLPROF_EV_SPAN_ENTER, 100, 100, 20020, 1, 0, 1, 30),
           span_rec(MLPROF_EV_SPAN_EXIT, 100, 100, 20030, 1, 0, 1),
           span_rec(MLPROF_EV_SPAN_EXIT, 100, 100, 20040, 1, 0, 0),
           session_rec(MLPROF_EV_SESSION_END, 100, 100, 20050, 1, 0, 0)});
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].kernel.off_cpu.empty());
  EXPECT_EQ(got[0].display_name(got[0].spans[0]), "f3");
  EXPECT_EQ(got[0].display_name(got[0].spans[1]), "<function 30>");
  EXPECT_EQ(j.stats().off_cpu_dropped, 0u);  // not dropped: outside any session
}

TEST(Joiner, TooManyOpenSessionsCloseTheOldestFirst) {
  JoinerLimits limits;
  limits.max_open_sessions = 3;
  Joiner j({}, limits);
  for (uint64_t s = 1; s <= 5; ++s) {
    feed(j,
         {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, static_cast<int64_t>(s * 100), s, 2, 0)});
  }
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].meta.at("session"), "1");
  EXPECT_EQ(got[1].meta.at("session"), "2");
  EXPECT_EQ(got[0].meta.at("truncated"), "too many open sessions");
  EXPECT_EQ(j.stats().sessions_evicted, 2u);
  j.finish(1000);
  EXPECT_EQ(j.take_finished().size(), 3u);
}

// Past the bound, sessions that ended and wait out the settle delay go out
// first (whole, early); an open session is closed only when none ended. A
// busy thread's many short sessions must not cut another thread's long one.
TEST(Joiner, TooManySessionsFinishEndedOnesBeforeAnOpenOne) {
  JoinerLimits limits;
  limits.max_open_sessions = 3;
  Joiner j({}, limits);
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 101, 50, 1, 2, 0)});  // thread 101: long, open
  for (uint64_t s = 2; s <= 6; ++s) {  // thread 100: short ones, each ended
    const auto t = static_cast<int64_t>(s * 100);
    feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, t, s, 2, 0),
             session_rec(MLPROF_EV_SESSION_END, 100, 100, t + 10, s, 0, 0)});
  }
  std::vector<Profile> got =
      j.take_finished(0);  // nothing has settled: only what the bound pushed out
  ASSERT_EQ(got.size(), 3u);
  for (const Profile& p : got) {
    EXPECT_NE(p.meta.at("session"), "1");
    EXPECT_EQ(p.meta.count("truncated"), 0u) << p.meta.at("session");
  }
  EXPECT_EQ(j.stats().sessions_evicted, 0u);
  feed(j, {session_rec(MLPROF_EV_SESSION_END, 100, 101, 900, 1, 0, 0)});
  got = j.take_finished();
  ASSERT_EQ(got.size(), 3u);  // sessions 5, 6 and the long one, whole
  EXPECT_EQ(got.back().meta.at("session"), "1");
  EXPECT_EQ(got.back().meta.count("truncated"), 0u);
}

TEST(Joiner, ASessionBegunAgainClosesTheOneWhoseEndWasLost) {
  Joiner j;
  feed(j, {session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 100, 1, 2, 0),
           session_rec(MLPROF_EV_SESSION_BEGIN, 100, 100, 500, 1, 2, 0),
           session_rec(MLPROF_EV_SESSION_END, 100, 100, 900, 1, 0, 0)});
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].start_ns, 100);
  EXPECT_EQ(got[0].end_ns, 500);
  EXPECT_EQ(got[0].meta.count("truncated"), 1u);
  EXPECT_EQ(got[1].start_ns, 500);
  EXPECT_EQ(got[1].end_ns, 900);
  EXPECT_EQ(got[1].captured_depth, 2);
}

// ---- USDT contract v2: a session's spans in one session_spans body -----------

// The records the v2 probes let the BPF side emit for session `serial` of
// `p`: SESSION_BEGIN, the NAME records of its ids, the body (as the
// extension writes it, mlprof_usdt.h) in MLPROF_CHUNK_BYTES pieces, then
// SESSION_END (none for a checkpoint: final false).
std::vector<Rec> body_records_of(const Profile& p, Process& proc, uint64_t serial, uint64_t flags,
                                 const std::string& trace_id, const std::string& span_id,
                                 bool begin = true, bool final = true) {
  std::vector<Rec> out;
  const uint32_t tgid = proc.tgid;
  const auto tid = static_cast<uint32_t>(p.lanes[0].native_tid);
  if (begin) {
    out.push_back(session_rec(MLPROF_EV_SESSION_BEGIN, tgid, tid, p.start_ns, serial,
                              p.captured_depth, flags));
  }
  std::string body(sizeof(mlprof_spans_head), '\0');
  mlprof_spans_head head{};
  head.version = MLPROF_USDT_VERSION;
  head.lanes = static_cast<uint32_t>(p.lanes.size());
  head.session = serial;
  head.start_ns = p.start_ns;
  head.end_ns = p.end_ns;
  head.ceiling = p.captured_depth;
  head.flags = flags;
  put(head.trace_id, trace_id);
  put(head.span_id, span_id);
  for (uint32_t li = 0; li < p.lanes.size(); ++li) {
    const Lane& lane = p.lanes[li];
    head.dropped += lane.dropped;
    mlprof_spans_lane ml{};
    ml.lane = li;
    ml.parent_lane =
        lane.parent_lane < 0 ? MLPROF_NO_PARENT_LANE : static_cast<uint32_t>(lane.parent_lane);
    ml.parent_call = lane.parent_call;
    ml.task = lane.task;
    ml.thread_ident = lane.thread_id;
    ml.native_tid = lane.native_tid;
    ml.dropped = lane.dropped;
    ml.events = static_cast<uint32_t>(lane.events.size());
    ml.ios = static_cast<uint32_t>(lane.io.size());
    put(ml.thread_name, lane.thread_name);
    body.append(reinterpret_cast<const char*>(&ml), sizeof(ml));
    for (const Event& e : lane.events) {
      mlprof_spans_event me{};
      me.ts_ns = e.ts_ns;
      me.kind = static_cast<uint8_t>(e.kind);
      me.flags = e.flags;
      const bool label = e.kind == EventKind::kLabel || e.kind == EventKind::kMark;
      me.id = e.kind == EventKind::kCall || label ? e.id + proc.id_offset : e.id;
      body.append(reinterpret_cast<const char*>(&me), sizeof(me));
      // As session_spans.cpp: a body with coalesced resumes or instants says so.
      if (e.kind == EventKind::kFold && head.version < MLPROF_SPANS_FOLDS_VERSION) {
        head.version = MLPROF_SPANS_FOLDS_VERSION;
      }
      if (e.kind == EventKind::kMark) head.version = MLPROF_SPANS_MARKS_VERSION;
      if ((e.kind == EventKind::kCall || label) && proc.send_names &&
          proc.named.insert({label, me.id}).second) {
        const auto& s = p.functions.strings();
        if (label) {
          out.push_back(name_rec(tgid, tid, p.end_ns, me.id, true, s.get(e.id)));
        } else {
          const FunctionInfo& f = p.functions.get(e.id);
          out.push_back(name_rec(tgid, tid, p.end_ns, me.id, false, s.get(f.name), s.get(f.module),
                                 s.get(f.file), f.line));
        }
      }
    }
    for (const IORecord& io : lane.io) {
      mlprof_spans_io mi{};
      mi.call = io.call;
      mi.role = static_cast<uint32_t>(io.role);
      put(mi.name, io.name);
      put(mi.summary, format_io(io.summary));
      body.append(reinterpret_cast<const char*>(&mi), sizeof(mi));
    }
  }
  std::memcpy(body.data(), &head, sizeof(head));
  for (size_t off = 0; off < body.size(); off += MLPROF_CHUNK_BYTES) {
    mlprof_ev_chunk c{};
    c.h = header(MLPROF_EV_SPANS_CHUNK, tgid, tid, p.end_ns);
    c.session = serial;
    c.offset = static_cast<uint32_t>(off);
    c.total = static_cast<uint32_t>(body.size());
    c.bytes = static_cast<uint32_t>(std::min<size_t>(MLPROF_CHUNK_BYTES, body.size() - off));
    std::memcpy(c.data, body.data() + off, c.bytes);
    out.push_back(rec_of(c));
  }
  if (final) out.push_back(session_rec(MLPROF_EV_SESSION_END, tgid, tid, p.end_ns, serial, 0, 0));
  return out;
}

TEST(JoinerV2, ASessionSpansBodyGivesTheInProcessTreeAndTheTraceIds) {
  const Profile want = as_seen(rich_session());
  Process proc;
  Joiner j;
  feed(j, body_records_of(want, proc, 7, MLPROF_SESSION_CAPTURE_IO | MLPROF_SESSION_ALL_THREADS,
                          "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  expect_same_tree(want, got[0]);
  const Profile& p = got[0];
  ASSERT_EQ(p.spans.size(), 9u);
  EXPECT_EQ(p.display_name(p.spans[1]), "prep stage");
  EXPECT_EQ(p.spans[5].resumes, 2u);
  EXPECT_EQ(p.spans[6].parent, 0);  // the worker thread's root under predict
  EXPECT_EQ(p.lanes[1].native_tid, 101u);
  EXPECT_EQ(format_io(p.io[0].summary), "(DataFrame, shape=(64, 12), dtype=float64, 6.0KB)");
  for (const Lane& lane : p.lanes) {  // on the lanes, as in process (d0f2cca)
    EXPECT_EQ(lane.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(lane.span_id, "00f067aa0ba902b7");
  }
  EXPECT_EQ(p.meta.count("truncated"), 0u);
  const JoinerStats st = j.stats();
  EXPECT_EQ(st.bodies_applied, 1u);
  EXPECT_EQ(st.bodies_incomplete, 0u);
  EXPECT_EQ(st.names_lost, 0u);
  EXPECT_EQ(st.malformed, 0u);
}

// A busy generator's resumes, folded by the engine (model/resume.h), arrive in
// a body of version 3: the agent's tree is the in-process one, and a version
// 2 body holding a fold is malformed (an older writer cannot have made it).
// The records of a body, rewritten to say contract `version` in its head.
void set_body_version(std::vector<Rec>& recs, uint32_t version) {
  for (Rec& r : recs) {
    mlprof_ev_chunk c{};
    if (r.bytes.size() < offsetof(mlprof_ev_chunk, data)) continue;
    std::memcpy(&c, r.bytes.data(), offsetof(mlprof_ev_chunk, data));
    if (c.h.kind != MLPROF_EV_SPANS_CHUNK || c.offset != 0) continue;
    std::memcpy(
        r.bytes.data() + offsetof(mlprof_ev_chunk, data) + offsetof(mlprof_spans_head, version),
        &version, sizeof(version));
  }
}

TEST(JoinerV2, ABodyWithFoldedResumesGivesTheInProcessTree) {
  Profile p;
  p.start_ns = 1000;
  p.end_ns = 900000;
  p.captured_depth = 2;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t gen = test::user_fn(p, "<genexpr>");
  Lane lane = test::make_lane({call(1000, predict), call(1100, gen)});
  int64_t ts = 1100;
  for (int i = 0; i < 20000; ++i) {
    lane.events.push_back(test::suspend(ts + 20, 1));
    append_resume(lane, 1, ts + 30, true);
    ts += 30;
  }
  lane.events.push_back(ret(ts + 20));
  lane.events.push_back(ret(ts + 40));
  ASSERT_EQ(lane.events.size(), 6u);
  p.lanes.push_back(lane);
  build_tree(p);
  const Profile want = as_seen(std::move(p));
  Process proc;
  Joiner j;
  feed(j, body_records_of(want, proc, 3, 0, "", ""));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  expect_same_tree(want, got[0]);
  EXPECT_EQ(got[0].spans[1].resumes, 20000u);
  EXPECT_EQ(got[0].spans[1].active_ns, int64_t{20} * 20001);
  ASSERT_EQ(got[0].segments.size(), 1u);
  EXPECT_EQ(got[0].segments[0].resumes, 20000u);
  EXPECT_EQ(j.stats().malformed, 0u);

  // The same events under version 2: read up to the fold, the lane truncated.
  std::vector<Rec> recs = body_records_of(want, proc, 4, 0, "", "");
  set_body_version(recs, MLPROF_USDT_VERSION);
  feed(j, recs);
  got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(j.stats().malformed, 1u);
  EXPECT_TRUE(got[0].lanes[0].truncated);
}

// Instants (kMark, a body of MLPROF_SPANS_MARKS_VERSION): joined with their
// names and resources, under the span open then, as in process; an agent
// reading the body as version 3 stops at the mark (the lane truncated).
TEST(JoinerV2, ABodyWithMarksGivesThemBack) {
  Profile p;
  p.start_ns = 1000;
  p.end_ns = 90000;
  p.captured_depth = 2;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t name = p.functions.strings().intern("rate limited, retry after 2s");
  const uint32_t host = p.functions.strings().intern("api.example:8443");
  Lane lane = test::make_lane({call(1000, predict)});
  lane.events.push_back(Event{5000, host, EventKind::kLabel, kEvResource, 0});
  lane.events.push_back(Event{5000, name, EventKind::kMark, 0, 0});
  lane.events.push_back(ret(8000));
  p.lanes.push_back(lane);
  build_tree(p);
  ASSERT_EQ(p.marks.size(), 1u);
  const Profile want = as_seen(std::move(p));
  Process proc;
  Joiner j;
  feed(j, body_records_of(want, proc, 3, 0, "", ""));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  expect_same_tree(want, got[0]);
  ASSERT_EQ(got[0].marks.size(), 1u);
  const Mark& m = got[0].marks[0];
  const StringTable& strings = got[0].functions.strings();
  EXPECT_EQ(strings.get(m.name), "rate limited, retry after 2s");
  EXPECT_EQ(strings.get(m.resource), "api.example:8443");
  EXPECT_EQ(m.span, 0);
  EXPECT_EQ(m.ts_ns, want.marks[0].ts_ns);
  EXPECT_EQ(j.stats().malformed, 0u);

  std::vector<Rec> recs = body_records_of(want, proc, 4, 0, "", "");
  set_body_version(recs, MLPROF_SPANS_FOLDS_VERSION);
  feed(j, recs);
  got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(j.stats().malformed, 1u);
  EXPECT_TRUE(got[0].marks.empty());
}

// A newer extension's body (a contract version this agent does not read):
// counted with its process, and no Profile (an empty tree would say nothing).
TEST(JoinerV2, ABodyOfANewerContractIsCountedAndShowsNoSession) {
  Process proc;
  Joiner j;
  std::vector<Rec> recs = body_records_of(small_session(), proc, 3, 0, "", "");
  set_body_version(recs, MLPROF_SPANS_MARKS_VERSION + 1);
  feed(j, recs);
  EXPECT_TRUE(j.take_finished().empty());
  const JoinerStats st = j.stats();
  EXPECT_EQ(st.bodies_unknown_version, 1u);
  EXPECT_EQ(st.unknown_version, MLPROF_SPANS_MARKS_VERSION + 1);
  EXPECT_EQ(st.unknown_version_pid, proc.tgid);
  EXPECT_EQ(st.bodies_applied, 0u);
  // The same process's next session, of this contract, is read as usual.
  feed(j, body_records_of(small_session(100000), proc, 4, 0, "", ""));
  EXPECT_EQ(j.take_finished().size(), 1u);
}

TEST(JoinerV2, NoTraceContextWritesNoKeys) {
  const Profile want = as_seen(rich_session());
  Process proc;
  Joiner j;
  feed(j, body_records_of(want, proc, 3, 0, "", ""));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  for (const Lane& lane : got[0].lanes) {
    EXPECT_EQ(lane.trace_id, "");
    EXPECT_EQ(lane.span_id, "");
  }
  EXPECT_EQ(got[0].meta.count("trace_id"), 0u);
}

// One lane of 400 calls of step(): its body takes two pieces.
Profile two_piece_session() {
  Profile p;
  const uint32_t f = p.functions.add("step", "m", "/app/m.py", 1, FunctionKind::kPython, true);
  std::vector<Event> ev;
  for (int i = 0; i < 400; ++i) {
    ev.push_back(call(1000 + 10 * i, f));
    ev.push_back(ret(1005 + 10 * i));
  }
  p.start_ns = 900;
  p.end_ns = 6000;
  p.captured_depth = 2;
  p.lanes.push_back(make_lane(ev, "MainThread"));
  p.lanes[0].native_tid = 100;
  build_tree(p);
  return p;
}

TEST(JoinerV2, ALostPieceFlagsTheSessionTruncatedAndIsCounted) {
  // A body over one piece (a long lane), its second piece lost in a full ring.
  const Profile p = two_piece_session();
  Process proc;
  std::vector<Rec> recs = body_records_of(p, proc, 1, 0, "", "");
  size_t chunks = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    mlprof_ev_header h{};
    std::memcpy(&h, recs[i].bytes.data(), sizeof(h));
    if (h.kind == MLPROF_EV_SPANS_CHUNK && ++chunks == 2) {
      recs.erase(recs.begin() + static_cast<long>(i));
      break;
    }
  }
  ASSERT_EQ(chunks, 2u);
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(j.stats().bodies_incomplete, 1u);
  EXPECT_EQ(j.stats().bodies_applied, 0u);
  for (const Lane& lane : got[0].lanes) EXPECT_TRUE(lane.truncated);
}

// Issue 44's audit, F7: the per-process and per-thread caps multiply
// (65,536 processes of a million names each), so one byte cap bounds
// names, buffered scheduler records and partial bodies of all processes
// together. What is past it is counted and not kept; a process's exit
// gives its share back.
TEST(JoinerV2, OneByteCapBoundsWhatAllProcessesHoldTogether) {
  JoinerLimits limits;
  limits.max_bytes_total = 24 << 10;
  Joiner j({}, limits);
  const auto fed = [&](const std::vector<Rec>& recs) {
    for (const Rec& r : recs) {
      j.on_record(r.bytes.data(), r.bytes.size());
      ASSERT_EQ(j.check_bytes_held(), "");
      ASSERT_LE(j.bytes_held(), limits.max_bytes_total);
    }
  };
  // Eight processes, 100 long names each (about 800 bytes a name held).
  for (uint32_t tgid = 200; tgid < 208; ++tgid) {
    for (uint32_t i = 0; i < 100; ++i) {
      std::string name(120, 'n');
      name += std::to_string(i);
      fed({name_rec(tgid, tgid, 10, i, false, name, std::string(90, 'm'), std::string(150, 'f'),
                    1)});
    }
  }
  const uint64_t names_over = j.stats().bytes_over_cap;
  EXPECT_GT(names_over, 700u);
  EXPECT_GT(j.bytes_held(), limits.max_bytes_total - 1024);
  // Full: a session's body of two pieces keeps neither, as a lost piece.
  const Profile p = two_piece_session();
  Process proc;
  fed(body_records_of(p, proc, 1, 0, "", ""));
  EXPECT_GT(j.stats().bytes_over_cap, names_over);
  EXPECT_EQ(j.stats().bodies_incomplete, 1u);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].lanes.empty() || got[0].lanes[0].truncated);
  ASSERT_EQ(j.check_bytes_held(), "");
  // The processes exit: all is given back, and the next session is whole,
  // with an off-CPU interval of its own held until it is built.
  for (uint32_t tgid = 200; tgid < 208; ++tgid) j.on_process_exit(tgid, 10'000);
  j.on_process_exit(proc.tgid, 10'000);
  EXPECT_EQ(j.bytes_held(), 0u);
  Process again;
  std::vector<Rec> recs = body_records_of(p, again, 2, 0, "", "");
  recs.insert(recs.begin() + 1, off_cpu_rec(100, 100, 1002, 1004, false));
  fed(recs);
  EXPECT_EQ(j.stats().bodies_applied, 1u);
  got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].spans.size(), 400u);
  EXPECT_FALSE(got[0].lanes[0].truncated);
  EXPECT_EQ(got[0].kernel.off_cpu.size(), 1u);
  ASSERT_EQ(j.check_bytes_held(), "");
  EXPECT_GT(j.bytes_held(), 0u);  // its one name stays for its later sessions
  j.on_process_exit(again.tgid, 20'000);
  EXPECT_EQ(j.bytes_held(), 0u);
}

TEST(JoinerV2, ACheckpointOfAnOpenSessionStandsWhenTheProcessDies) {
  // predict -> load, both open: the extension's checkpoint of a session
  // still running, then the process exits (no final body, no end).
  Profile p;
  const uint32_t predict =
      p.functions.add("predict", "m", "/app/m.py", 1, FunctionKind::kPython, true);
  const uint32_t load = p.functions.add("load", "m", "/app/m.py", 9, FunctionKind::kPython, true);
  p.start_ns = 1000;
  p.end_ns = 0;
  p.captured_depth = 2;
  p.lanes.push_back(make_lane({call(1100, predict), call(1200, load)}, "MainThread"));
  p.lanes[0].native_tid = 100;
  Process proc;
  Joiner j;
  feed(j, body_records_of(p, proc, 5, 0, "", "", true, false));
  EXPECT_TRUE(j.take_finished().empty());  // still open
  j.on_process_exit(proc.tgid, 900000);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& q = got[0];
  ASSERT_EQ(q.spans.size(), 2u);
  EXPECT_EQ(q.functions.strings().get(q.functions.get(q.spans[1].function).name), "load");
  EXPECT_TRUE(q.spans[0].flags & (kSpanTruncated | kSpanOpenAtEnd));
  EXPECT_TRUE(q.spans[1].flags & (kSpanTruncated | kSpanOpenAtEnd));
  EXPECT_EQ(q.meta.at("truncated"), "process exited");
}

// A target in its own pid namespace (a container, a pod): the body names
// its threads by gettid() there (1, 7), the kernel's records by the host's
// (5001, 5007). Off-CPU time joins by the host's tids: lane 0's from
// session_begin, lane 1's from its lane_begin; a later session whose
// lane_begin was lost finds the worker's host tid from the first; a thread
// no kernel record ever named is counted.
std::vector<Rec> namespaced_session(const Profile& p, Process& proc, uint64_t serial,
                                    bool lane_begin, uint32_t worker_host_tid) {
  std::vector<Rec> recs = body_records_of(p, proc, serial, 0, "", "");
  for (Rec& r : recs) {  // every record of the BPF side names the host's tid
    mlprof_ev_header h{};
    std::memcpy(&h, r.bytes.data(), sizeof(h));
    h.tid = 5001;
    std::memcpy(r.bytes.data(), &h, sizeof(h));
  }
  std::vector<Rec> out;
  out.push_back(recs.front());  // session_begin
  if (lane_begin) {
    mlprof_ev_lane lb{};
    lb.h =
        header(MLPROF_EV_LANE_BEGIN, proc.tgid, worker_host_tid, p.lanes[1].events.front().ts_ns);
    lb.session = serial;
    lb.lane = 1;
    lb.parent_lane = 0;
    lb.parent_call = p.lanes[1].parent_call;
    out.push_back(rec_of(lb));
  }
  const int64_t t0 = p.start_ns;
  out.push_back(
      off_cpu_rec(proc.tgid, 5001, t0 + 2000, t0 + 12000, true, t0 + 11000, worker_host_tid));
  out.push_back(
      off_cpu_rec(proc.tgid, worker_host_tid, t0 + 3000, t0 + 8000, true, t0 + 7500, 5001));
  // A namespace tid as the host's: another host thread of the same number must not count.
  out.push_back(off_cpu_rec(proc.tgid, 1, t0 + 2000, t0 + 30000, true, t0 + 29000, 0));
  out.insert(out.end(), recs.begin() + 1, recs.end());
  return out;
}

Profile namespaced_profile(int64_t t0) {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t wait = test::user_fn(p, "wait_for_worker");
  const uint32_t work = test::user_fn(p, "worker_run", "app.workers");
  p.lanes.push_back(make_lane(
      {call(t0, predict), call(t0 + 1000, wait), ret(t0 + 20000), ret(t0 + 21000)}, "MainThread"));
  p.lanes.push_back(make_lane({call(t0 + 2500, work), ret(t0 + 9000)}, "worker"));
  p.lanes[0].native_tid = 1;  // gettid() in the target's pid namespace
  p.lanes[1].native_tid = 7;
  p.lanes[1].parent_lane = 0;
  p.lanes[1].parent_call = 1;
  p.captured_depth = 2;
  p.start_ns = t0 - 100;
  p.end_ns = t0 + 21100;
  build_tree(p);
  return p;
}

TEST(JoinerV2, AProcessInItsOwnPidNamespaceJoinsByTheHostsTids) {
  Process proc;
  Joiner j;
  feed(j, namespaced_session(namespaced_profile(100000), proc, 1, true, 5007));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  auto check = [](const Profile& p) {
    ASSERT_EQ(p.lanes.size(), 2u);
    EXPECT_EQ(p.lanes[0].native_tid, 5001u);
    EXPECT_EQ(p.lanes[1].native_tid, 5007u);
    ASSERT_EQ(p.spans.size(), 3u);
    ASSERT_EQ(p.kernel.spans.size(), 3u);
    EXPECT_EQ(p.kernel.spans[0].own_off_cpu_ns, 10000);  // predict's thread slept 10 us
    EXPECT_EQ(p.kernel.spans[0].off_cpu_ns, 15000);      // and the worker lane under it 5 us
    EXPECT_EQ(p.kernel.spans[1].own_blocked_ns, 9000);   // wait_for_worker, woken by the worker
    EXPECT_EQ(p.kernel.spans[1].top_waker_tid, 5007u);
    EXPECT_EQ(p.kernel.spans[2].own_off_cpu_ns, 5000);  // worker_run on the worker's thread
    EXPECT_EQ(p.kernel.off_cpu.size(), 2u);
  };
  check(got[0]);
  EXPECT_EQ(j.stats().lanes_unjoined, 0u);
  // The worker's lane_begin lost: the thread is known from the first session.
  feed(j, namespaced_session(namespaced_profile(200000), proc, 2, false, 5007));
  got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  check(got[0]);
  EXPECT_EQ(j.stats().lanes_unjoined, 0u);
  // A new worker thread whose lane_begin was lost: not joined, and counted.
  Profile fresh = namespaced_profile(300000);
  fresh.lanes[1].native_tid = 9;
  feed(j, namespaced_session(fresh, proc, 3, false, 5009));
  got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].lanes[1].native_tid, 9u);
  EXPECT_EQ(got[0].kernel.spans[2].off_cpu_ns, 0);
  EXPECT_EQ(j.stats().lanes_unjoined, 1u);
}

// Two findings of fuzz_agent_body (fuzz/regressions/fuzz_agent_body/):
// a body's times are the target's, and its parent_lane a u32 the joiner
// cast. A time going back is taken as the last one before it (no span ends
// before it starts), and any parent lane other than a known earlier lane
// is none: the session's document reads back.
TEST(JoinerV2, ATargetsTimesGoingBackAndABadParentLaneStillReadBack) {
  Profile want;
  const uint32_t f = test::user_fn(want, "f");
  want.lanes.push_back(make_lane({call(5000, f), call(6000, f), ret(4000), ret(7000)}));
  want.lanes[0].native_tid = 100;
  want.lanes.push_back(make_lane({call(5500, f), ret(5600)}));
  want.lanes[1].native_tid = 100;
  want.start_ns = 1000;
  want.end_ns = 9000;
  Process proc;
  std::vector<Rec> recs = body_records_of(want, proc, 3, 0, "", "");
  for (Rec& r : recs) {  // lane 1's parent_lane: 0xffffff00 (-256 as int32)
    mlprof_ev_chunk c{};
    if (r.bytes.size() != sizeof(c)) continue;
    std::memcpy(&c, r.bytes.data(), sizeof(c));
    if (c.h.kind != MLPROF_EV_SPANS_CHUNK) continue;
    const size_t lane1 = sizeof(mlprof_spans_head) + sizeof(mlprof_spans_lane) +
                         4 * sizeof(mlprof_spans_event) + offsetof(mlprof_spans_lane, parent_lane);
    const uint32_t bad = 0xffffff00u;
    std::memcpy(c.data + lane1, &bad, sizeof(bad));
    std::memcpy(r.bytes.data(), &c, sizeof(c));
  }
  Joiner j;
  feed(j, recs);
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& p = got[0];
  ASSERT_EQ(p.lanes.size(), 2u);
  EXPECT_EQ(p.lanes[1].parent_lane, -1);
  ASSERT_EQ(p.spans.size(), 3u);
  for (const Span& sp : p.spans) EXPECT_GE(sp.end_ns, sp.start_ns);
  EXPECT_EQ(p.spans[1].start_ns, 6000);
  EXPECT_EQ(p.spans[1].end_ns, 6000);  // its return at 4000, taken as 6000
  const Result<Profile> back = read_json_document(to_json_document(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().spans.size(), 3u);
}

// A finding of fuzz_agent_records (fuzz/regressions/fuzz_agent_records/
// span-longer-than-2e62): a session begun at kernel time 900 ns and ended at
// kMaxTimeNs, whose body put a call 70 s before the kernel's clock began.
// The call was kept at -59.99 s, each time in range but the span lasting
// more than kMaxTimeNs, and its active_ns did not read back. A target's
// times stay within the kernel clock's range [0, kMaxTimeNs].
TEST(JoinerV2, ATargetsTimesStayWithinTheKernelClocksRange) {
  Profile want;
  const uint32_t f = test::user_fn(want, "f");
  want.lanes.push_back(make_lane({call(-70'000'000'000, f), ret(kMaxTimeNs)}));
  want.lanes[0].native_tid = 100;
  want.start_ns = 900;
  want.end_ns = kMaxTimeNs;
  Process proc;
  Joiner j;
  feed(j, body_records_of(want, proc, 3, 0, "", ""));
  std::vector<Profile> got = j.take_finished();
  ASSERT_EQ(got.size(), 1u);
  const Profile& p = got[0];
  ASSERT_EQ(p.spans.size(), 1u);
  EXPECT_EQ(p.spans[0].start_ns, 0);  // not before the kernel's clock began
  EXPECT_EQ(p.spans[0].end_ns, kMaxTimeNs);
  EXPECT_EQ(p.spans[0].active_ns, kMaxTimeNs);
  const Result<Profile> back = read_json_document(to_json_document(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().spans[0].active_ns, kMaxTimeNs);
}

// ---- the fuzz targets' seeds (fuzz/corpus/fuzz_agent_records, _body) ------

// A stream as fuzz_agent_records reads it: [u16 length][record] each.
std::string fuzz_stream(const std::vector<Rec>& recs) {
  std::string out;
  for (const Rec& r : recs) {
    const auto len = static_cast<uint16_t>(r.bytes.size());
    out.append(reinterpret_cast<const char*>(&len), 2);
    out.append(reinterpret_cast<const char*>(r.bytes.data()), r.bytes.size());
  }
  return out;
}

// The body the CHUNK records of `recs` carry, in order.
std::string body_of(const std::vector<Rec>& recs) {
  std::string body;
  for (const Rec& r : recs) {
    mlprof_ev_chunk c{};
    if (r.bytes.size() != sizeof(c)) continue;
    std::memcpy(&c, r.bytes.data(), sizeof(c));
    if (c.h.kind != MLPROF_EV_SPANS_CHUNK) continue;
    body.append(reinterpret_cast<const char*>(c.data), c.bytes);
  }
  return body;
}

// The committed seeds are the records of the sessions these tests check,
// byte for byte: a change of a record's or the body's layout fails here
// until they are written again (MLPROF_WRITE_FUZZ_SEEDS=1 ctest -R Seeds).
TEST(JoinerFuzzSeeds, TheCommittedSeedsAreTheseSessionsRecords) {
  const std::string dir = MLPROF_FUZZ_CORPUS;
  std::map<std::string, std::string> seeds;
  {
    Process proc;
    seeds["fuzz_agent_records/v1-rich-interleaved"] =
        fuzz_stream(interleave(records_of(as_seen(rich_session()), proc, 1), 1));
  }
  std::vector<Rec> v2;
  {
    Process proc;
    v2 = body_records_of(as_seen(rich_session()), proc, 7,
                         MLPROF_SESSION_CAPTURE_IO | MLPROF_SESSION_ALL_THREADS,
                         "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    seeds["fuzz_agent_records/v2-rich-body"] = fuzz_stream(v2);
    seeds["fuzz_agent_body/rich"] = body_of(v2);
  }
  {
    Process proc;
    std::vector<Rec> recs = records_of(small_session(), proc, 3);
    recs.insert(recs.begin() + 2,
                thread_rec(MLPROF_EV_THREAD_START, 100, 101, 1500, 100, "worker"));
    recs.insert(recs.end() - 1, off_cpu_rec(100, 100, 3200, 29000, true, 28000, 101));
    recs.insert(recs.end() - 1, off_cpu_rec(100, 101, 2000, 2500, false));
    recs.push_back(thread_rec(MLPROF_EV_THREAD_EXIT, 100, 101, 60000, 100, "worker"));
    seeds["fuzz_agent_records/v1-small-sched"] = fuzz_stream(recs);
    seeds["fuzz_agent_body/small"] = body_of(body_records_of(small_session(), proc, 4, 0, "", ""));
  }
  seeds["../regressions/fuzz_agent_records/thread-exit-before-start"] =
      fuzz_stream(reused_tid_records());
  const bool write = std::getenv("MLPROF_WRITE_FUZZ_SEEDS") != nullptr;
  for (const auto& [name, bytes] : seeds) {
    const std::string path = dir + "/" + name;
    ASSERT_FALSE(bytes.empty()) << name;
    if (write) {
      std::ofstream(path, std::ios::binary) << bytes;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    const std::string committed((std::istreambuf_iterator<char>(in)), {});
    EXPECT_TRUE(committed == bytes)
        << path << " differs from the records these tests make (" << committed.size() << " vs "
        << bytes.size() << " bytes): write them again with MLPROF_WRITE_FUZZ_SEEDS=1";
  }
}

}  // namespace
}  // namespace mlprof::agent
