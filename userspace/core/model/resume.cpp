#include "model/resume.h"

#include <algorithm>

namespace mlprof {

namespace {

// lane.readings of event `event`: [first, readings.size()) when they are the
// lane's last ones (readings are in event order).
size_t readings_from(const Lane& lane, uint32_t event) {
  size_t k = lane.readings.size();
  while (k > 0 && lane.readings[k - 1].event >= event) --k;
  return k;
}

// Adds to the kFold at `fold` what each counter grew from the kSuspend's
// readings (those from `suspend_first` on) to `now`, then drops the
// kSuspend's readings.
void fold_readings(Lane& lane, uint32_t fold, size_t suspend_first, const Reading* now, size_t n) {
  std::vector<Reading>& r = lane.readings;
  int64_t grew[kValueKinds] = {};
  bool have[kValueKinds] = {};
  for (size_t k = suspend_first; k < r.size(); ++k) {
    const int kind = static_cast<int>(r[k].kind);
    if (kind < 0 || kind >= kValueKinds) continue;
    for (size_t j = 0; j < n; ++j) {
      if (now[j].kind != r[k].kind) continue;
      grew[kind] = std::max<int64_t>(0, now[j].value - r[k].value);
      have[kind] = true;
    }
  }
  r.resize(suspend_first);
  const size_t fold_first = readings_from(lane, fold);
  for (int kind = 0; kind < kValueKinds; ++kind) {
    if (!have[kind]) continue;
    bool added = false;
    for (size_t k = fold_first; k < r.size() && !added; ++k) {
      if (r[k].event == fold && static_cast<int>(r[k].kind) == kind) {
        r[k].value += grew[kind];
        added = true;
      }
    }
    if (!added) r.push_back({fold, static_cast<ValueKind>(kind), grew[kind]});
  }
}

}  // namespace

ResumeWrite append_resume(Lane& lane, uint32_t call, int64_t ts, bool fold, const Reading* now,
                          size_t n) {
  std::vector<Event>& ev = lane.events;
  const size_t size = ev.size();
  const bool after_suspend = fold && size > 0 && ev.back().kind == EventKind::kSuspend &&
                             ev.back().id == call && ev.back().flags == 0;
  if (after_suspend) {
    const auto suspend = static_cast<uint32_t>(size - 1);
    const int64_t paused = std::max<int64_t>(0, ts - ev[suspend].ts_ns);
    const size_t suspend_readings = readings_from(lane, suspend);
    if (size >= 3 && ev[size - 3].kind == EventKind::kFold && ev[size - 3].id == call &&
        ev[size - 2].kind == EventKind::kFoldCount && ev[size - 2].id < UINT32_MAX) {
      Event& first = ev[size - 3];
      Event& count = ev[size - 2];
      const int64_t total = (count.ts_ns - first.ts_ns) + paused;
      const int64_t last = std::max(ts, count.ts_ns);  // the clock does not step back; be sure
      count.id += 1;
      count.ts_ns = last;
      first.ts_ns = last - total;
      ev.pop_back();
      fold_readings(lane, static_cast<uint32_t>(size - 3), suspend_readings, now, n);
      return ResumeWrite::kFolded;
    }
    if (size < UINT32_MAX) {
      ev[suspend].kind = EventKind::kFold;
      ev.push_back(Event{std::max(ts, ev[suspend].ts_ns), 1, EventKind::kFoldCount, 0, 0});
      // The kSuspend's readings become the kFold's: counters, then what they grew.
      for (size_t k = suspend_readings; k < lane.readings.size(); ++k) {
        Reading& r = lane.readings[k];
        int64_t grew = 0;
        for (size_t j = 0; j < n; ++j) {
          if (now[j].kind == r.kind) grew = std::max<int64_t>(0, now[j].value - r.value);
        }
        r.value = grew;
      }
      return ResumeWrite::kFolded;
    }
  }
  ev.push_back(Event{ts, call, EventKind::kResume, 0, 0});
  const auto event = static_cast<uint32_t>(ev.size() - 1);
  for (size_t j = 0; j < n; ++j) lane.readings.push_back({event, now[j].kind, now[j].value});
  return ResumeWrite::kAppended;
}

}  // namespace mlprof
