// profile_block and profile_span support: blocks (spans the user names
// around a with-block or a callable), marks (instants), the selector waits
// the loop watch reports, and the labels profile_span gives the next start
// of a code or a generator.
#include "engine_internal.h"

#include <algorithm>

namespace mlprof {

namespace {
// An open span of the lane names a resource: its kCall follows a kLabel
// flagged kEvResource (lane_start and block_enter write them in that order).
bool open_span_names_resource(const CaptureLane& L) {
  const std::vector<Event>& ev = L.out.events;
  return std::any_of(L.rec.begin(), L.rec.end(), [&ev](const StackEntry& e) {
    return e.call_index != kNoEvent && e.call_index > 0 && e.call_index < ev.size() &&
           ev[e.call_index - 1].kind == EventKind::kLabel &&
           (ev[e.call_index - 1].flags & kEvResource);
  });
}
}  // namespace

int block_enter(uint32_t function, uint32_t resource, BlockToken* out, int max, bool automatic) {
  const CurrentLanes& cl = current_lanes();
  if (cl.n == 0) return 0;
  const int pydepth = capture::frame_depth();  // the frame that opens the block
  // A generator's block: its resumes are not the end of the block (arrive).
  PyFrameObject* opener = PyEval_GetFrame();
  const uintptr_t generator = opener ? compat::frame_generator(opener) : 0;
  int n = 0;
  for (int i = 0; i < cl.n && n < max; ++i) {
    CaptureLane& L = *cl.lanes[i];
    // A task lane with nothing open took its base from the last frame that
    // arrived, which may have returned since (a semaphore's acquire): the
    // frame opening the block is the lane's base then.
    if (!is_origin(L) && L.rec.empty() && pydepth < L.base_pydepth) L.base_pydepth = pydepth - 1;
    if (L.truncated || pydepth < L.base_pydepth) continue;
    close_ended_now(L, pydepth + 1);
    const int32_t d = depth_at(L, pydepth) + 1;
    // A block that names a resource is a call the user asked to see: below
    // the ceiling too, as a leaf (nothing under it is deeper than d).
    if (d < 0 || (d > L.ceiling && !resource)) continue;
    if (automatic && open_span_names_resource(L)) continue;  // the user's name wins
    if (L.out.events.size() >= L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    const int64_t ts = clock::ticks();
    if (resource) push(L, EventKind::kLabel, resource, kEvResource, ts);
    auto idx = static_cast<uint32_t>(L.out.events.size());
    push(L, EventKind::kCall, function, kEvBlock, ts);
    L.rec.push_back(StackEntry{idx, d, pydepth, EntryKind::kBlock, generator, nullptr});
    probes::span_enter(L.engine->serial(), L.index, idx, function, 0, d, kEvBlock);
    L.last_was_suspend = false;
    out[n++] = BlockToken{L.engine->serial(), L.index, idx, d <= L.io_ceiling};
  }
  update_window(cl, pydepth);
  return n;
}

void block_exit(const BlockToken* tokens, int n, bool exception) {
  for (int t = 0; t < n; ++t) {
    auto it = g_by_serial.find(tokens[t].serial);
    if (it == g_by_serial.end()) continue;
    Engine* e = it->second;
    if (tokens[t].lane >= e->lanes().size()) continue;
    CaptureLane& L = *e->lanes()[tokens[t].lane];
    for (size_t j = L.rec.size(); j > 0; --j) {
      if (L.rec[j - 1].kind == EntryKind::kBlock &&
          L.rec[j - 1].call_index == tokens[t].call_index) {
        close_entries(L, j - 1, exception, clock::ticks());
        break;
      }
    }
  }
  if (n > 0) update_window(current_lanes(), capture::frame_depth());
}

int mark(uint32_t name, uint32_t resource) {
  const CurrentLanes& cl = current_lanes();
  int n = 0;
  for (int i = 0; i < cl.n; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (L.truncated) continue;
    if (L.out.events.size() >= L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    const int64_t ts = clock::ticks();
    if (resource) push(L, EventKind::kLabel, resource, kEvResource, ts);
    push(L, EventKind::kMark, name, 0, ts);
    ++n;
  }
  return n;
}

int wait_begin(WaitToken* out, int max) {
  const CurrentLanes& cl = current_lanes();
  if (cl.n == 0) return 0;
  const int pydepth = capture::frame_depth();  // the loop's frame that calls select
  int n = 0;
  for (int i = 0; i < cl.n && n < max; ++i) {
    CaptureLane& L = *cl.lanes[i];
    if (L.truncated || pydepth < L.base_pydepth) continue;
    close_ended_now(L, pydepth + 1);
    // Nothing open: no span waited (the loop runs outside the session's roots).
    const bool open = std::any_of(L.rec.begin(), L.rec.end(),
                                  [](const StackEntry& e) { return e.call_index != kNoEvent; });
    if (!open) continue;
    out[n++] = WaitToken{L.engine->serial(), L.index, L.out.events.size(), L.rec.back().depth + 1};
  }
  return n;
}

void wait_end(const WaitToken* tokens, int n, uint32_t function, int64_t start, int64_t end) {
  for (int t = 0; t < n; ++t) {
    auto it = g_by_serial.find(tokens[t].serial);
    if (it == g_by_serial.end() || tokens[t].lane >= it->second->lanes().size()) continue;
    CaptureLane& L = *it->second->lanes()[tokens[t].lane];
    std::vector<Event>& ev = L.out.events;
    if (L.truncated) continue;
    if (ev.size() > tokens[t].events) {
      // The select frame itself was recorded (within the ceiling): it is the wait.
      Event& first = ev[tokens[t].events];
      if (first.kind == EventKind::kCall && first.id == function) first.flags |= kEvWait;
      continue;  // else something else ran in between (a signal handler): no leaf
    }
    if (ev.size() + 2 > L.soft_cap) {
      ++L.out.dropped;
      continue;
    }
    const auto idx = static_cast<uint32_t>(ev.size());
    push(L, EventKind::kCall, function, kEvWait, start);
    push(L, EventKind::kReturn, 0, 0, end);
    probes::span_enter(L.engine->serial(), L.index, idx, function, 0, tokens[t].depth, kEvWait);
    probes::span_exit(L.engine->serial(), L.index, idx, 0);
    L.last_was_suspend = false;
  }
}

void set_pending_label(PyObject* code, uint32_t label, uint32_t resource) {
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) {
    cl.lanes[i]->pending_code = code;
    cl.lanes[i]->pending_label = label;
    cl.lanes[i]->pending_resource = resource;
  }
}

void clear_pending_label(PyObject* code) {
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) {
    if (cl.lanes[i]->pending_code == code) cl.lanes[i]->pending_code = nullptr;
  }
}

void label_generator(PyObject* gen, PyObject* code, uint32_t label, uint32_t resource) {
  const CurrentLanes& cl = current_lanes();
  for (int i = 0; i < cl.n; ++i) {
    cl.lanes[i]->engine->gen_labels_[reinterpret_cast<uintptr_t>(gen)] =
        Engine::GenLabel{label, code, resource};
  }
}

}  // namespace mlprof
