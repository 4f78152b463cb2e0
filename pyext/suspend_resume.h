// Generators and coroutines that yield and resume: a yield detaches the
// generator's frame entry, and the blocks opened in it, from the lane's stack
// into a suspended segment (CaptureLane::suspended) and writes a kSuspend; a
// resume puts the segment back where the generator runs now and writes the
// resume (folded by the core when nothing ran in between). docs/capture.md
// says what a suspension of each kind means. Included by engine.cpp only
// (an unnamed namespace, as before the split): these run per yield and
// resume, and GCC inlines them into its entry points.
#pragma once

#include "engine_internal.h"

namespace mlprof {
namespace {

// Detaches rec[from..] into the segment of generator `key` (one it left
// here before, its address reused, is replaced); `pydepth`: its frame depth.
Suspended& detach_segment(CaptureLane& L, uintptr_t key, size_t from, int32_t pydepth) {
  Suspended* s = nullptr;
  for (Suspended& old : L.suspended) {
    if (old.key == key) s = &old;
  }
  if (!s) {
    L.suspended.emplace_back();
    s = &L.suspended.back();
  }
  const bool kept = s->keeps_hook;
  s->key = key;
  s->frame_pydepth = pydepth;
  s->count = 0;
  s->more.clear();
  s->keeps_hook = false;
  for (size_t i = from; i < L.rec.size(); ++i) {
    s->add(L.rec[i]);
    // Transparent frames only (autoprofile's set_prediction_context): resumed
    // where the hook is out, which is below the ceiling, their callees would
    // be below it too, so missing the resume changes nothing.
    s->keeps_hook |= L.rec[i].kind != EntryKind::kTransparent;
  }
  count_suspended(L, int(s->keeps_hook) - int(kept));
  L.rec.resize(from);
  s->frame_depth = depth_at(L, pydepth);
  return *s;
}

// Removes segment k; first puts its entries back on the lane (if `push_back`)
// with its frame at tree depth `d` and frame depth `pydepth`. Returns the
// call index of its first recorded span, or kNoEvent.
uint32_t reattach_segment(CaptureLane& L, size_t k, int32_t d, int32_t pydepth, bool push_back) {
  Suspended& s = L.suspended[k];
  uint32_t first_recorded = kNoEvent;
  // Transparent frames resumed below the ceiling: a start there, skipped (as
  // the reference engine, which keeps no segment for them, counts it).
  if (!s.keeps_hook && d > L.ceiling) ++L.skipped;
  if (push_back) {
    const int32_t shift = d - s.frame_depth;
    const int32_t pyshift = pydepth - s.frame_pydepth;
    for (uint32_t i = 0; i < s.count; ++i) {
      StackEntry e = s.at(i);
      e.depth += shift;
      e.pydepth += pyshift;
      if (first_recorded == kNoEvent) first_recorded = e.call_index;
      L.rec.push_back(e);
    }
  }
  count_suspended(L, -int(s.keeps_hook));
  // Swap with the last: the segments' order does not matter.
  if (k + 1 != L.suspended.size()) std::swap(L.suspended[k], L.suspended.back());
  L.suspended.pop_back();
  return first_recorded;
}

// The quick paths' detach and reattach, out of line and guarded (the quick
// paths are not): false / kNoEvent when out of memory stopped the sessions.
[[gnu::noinline]] bool detach_guarded(CaptureLane& L, uintptr_t key, size_t from, int32_t pydepth) {
  try {
    detach_segment(L, key, from, pydepth);
    return true;
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    hook_failed();
    return false;
  }
}
[[gnu::noinline]] uint32_t reattach_guarded(CaptureLane& L, size_t k, int32_t d, int32_t pydepth) {
  try {
    return reattach_segment(L, k, d, pydepth, true);
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    hook_failed();
    return kNoEvent;
  }
}

void lane_yield(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame) {
  if (pydepth < L.base_pydepth) return;  // above the frame that entered the session
  const int64_t ts = clock::ticks();
  // Blocks opened deeper, by frames whose yields no hook reported (below the
  // ceiling: a request's block in a client's coroutine under one at the
  // ceiling), are in the chain that suspends with this frame: they leave
  // with it rather than end. Anything else deeper ended unseen.
  size_t chain = L.rec.size();
  while (chain > 0 && L.rec[chain - 1].pydepth > pydepth &&
         L.rec[chain - 1].kind == EntryKind::kBlock)
    --chain;
  if (chain == L.rec.size() || (chain > 0 && L.rec[chain - 1].pydepth > pydepth)) {
    close_ended(L, pydepth + 1, ts);
    chain = L.rec.size();
  }
  // The segment that leaves with the generator: its frame's entry (if the
  // lane tracks it), the blocks opened in it, and those deeper in its chain.
  size_t from = chain;
  while (from > 0 && L.rec[from - 1].pydepth == pydepth) --from;
  if (from == L.rec.size()) return;
  // A coroutine the lane does not track, with only blocks of its own, awaited
  // by one it tracks (3.11 reports such a yield): its blocks wait for the
  // awaiting coroutine's yield, so that one suspend holds the whole chain.
  if ((code->co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE)) &&
      carried_by_tracked(L, from, pydepth))
    return;
  const uintptr_t key =
      frame_like(L.rec[from]) && L.rec[from].key ? L.rec[from].key : generator_key(frame);
  if (!key || L.truncated || !room_for_structure(L)) {
    close_entries(L, from, false, ts);
    return;
  }
  (void)code;
  Suspended* s = &detach_segment(L, key, from, pydepth);
  if (pydepth == L.base_pydepth && is_origin(L)) s->frame_depth = -1;  // the entering coroutine
  uint32_t first_recorded = kNoEvent;
  for (uint32_t i = 0; i < s->count && first_recorded == kNoEvent; ++i)
    first_recorded = s->at(i).call_index;
  if (first_recorded != kNoEvent) {
    const StackEntry& last = s->at(s->count - 1);
    if (!L.last_was_suspend) {
      L.chain_top = last.call_index != kNoEvent ? last.call_index : first_recorded;
      L.chain_top_depth = last.depth;
    }
    L.last_was_suspend = true;
    push(L, EventKind::kSuspend, first_recorded, 0, ts);
    probes::span_suspend(L.engine->serial(), L.index, first_recorded);
  }
}

// Returns true if a suspended segment was pushed back.
bool lane_resume(CaptureLane& L, PyCodeObject* code, int32_t pydepth, PyFrameObject* frame) {
  if (L.suspended.empty()) return false;
  const uintptr_t key = generator_key(frame);
  size_t k = 0;
  while (k < L.suspended.size() && L.suspended[k].key != key) ++k;
  if (!key || k == L.suspended.size()) return false;
  const int32_t d = arrive(L, pydepth, key);
  if (d == INT32_MIN) return false;
  (void)code;
  const bool push_back = !L.truncated && room_for_structure(L);
  const uint32_t first_recorded = reattach_segment(L, k, d, pydepth, push_back);
  if (!push_back) return true;
  if (first_recorded != kNoEvent) {
    push_resume(L, first_recorded, clock::ticks(), code);
    probes::span_resume(L.engine->serial(), L.index, first_recorded);
  }
  L.last_was_suspend = false;
  return true;
}

}  // namespace
}  // namespace mlprof
