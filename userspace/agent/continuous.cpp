#include "agent/continuous.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdlib>

#include "formats/export.h"
#include "util/file_io.h"
#include "views/merge.h"

namespace mlprof::agent {

namespace {

constexpr int64_t kSecond = 1'000'000'000;

// "2026-11-28T05:30:00Z"; compact: "20261128T053000Z".
std::string utc_text(int64_t unix_ns, bool compact) {
  const time_t t = static_cast<time_t>(unix_ns / kSecond);
  tm parts{};
  gmtime_r(&t, &parts);
  char buf[32];
  std::strftime(buf, sizeof buf, compact ? "%Y%m%dT%H%M%SZ" : "%Y-%m-%dT%H:%M:%SZ", &parts);
  return buf;
}

// "60s", "1.5s", "250ms"
std::string seconds_text(int64_t ns) {
  char buf[32];
  if (ns % kSecond == 0) {
    std::snprintf(buf, sizeof buf, "%" PRId64 "s", ns / kSecond);
  } else if (ns < kSecond) {
    std::snprintf(buf, sizeof buf, "%" PRId64 "ms", ns / 1'000'000);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ns) / kSecond);
  }
  return buf;
}

// A key part: [A-Za-z0-9.-] kept, anything else '-'.
std::string slug(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '-'))
      c = '-';
  }
  return out.empty() ? "-" : out;
}

std::string read_comm(uint32_t pid) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/comm");
  if (!text) return {};
  std::string s = text.value();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

const std::string* find(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() || it->second.empty() ? nullptr : &it->second;
}

}  // namespace

// ---- durations and the duty cycle -------------------------------------------------

bool DutyCycle::on_at(int64_t unix_ns) const {
  if (!enabled()) return true;
  return unix_ns % period_ns < on_ns;
}

int64_t DutyCycle::next_change(int64_t unix_ns) const {
  if (!enabled()) return INT64_MAX;
  const int64_t start = unix_ns - unix_ns % period_ns;
  return on_at(unix_ns) ? start + on_ns : start + period_ns;
}

std::string DutyCycle::text() const { return seconds_text(on_ns) + "/" + seconds_text(period_ns); }

// ---- the rotation ---------------------------------------------------------------

Continuous::Continuous(ContinuousOptions opts, Spool& spool, Sink& sink, std::FILE* out,
                       int64_t now_unix_ns)
    : opts_(std::move(opts)), spool_(spool), sink_(sink), out_(out) {
  if (opts_.rotate_ns <= 0) opts_.rotate_ns = 60 * kSecond;
  char id[32];
  std::snprintf(id, sizeof id, "%" PRIx64, static_cast<uint64_t>(now_unix_ns / 1000));
  run_id_ = id;
  period_start_ = now_unix_ns;
  period_end_ = next_boundary(now_unix_ns);
  capture_on_ = opts_.duty.on_at(now_unix_ns);
  on_since_ = now_unix_ns;
}

int64_t Continuous::next_boundary(int64_t unix_ns) const {
  // Aligned to the wall clock: every node's periods are the same minutes.
  return (unix_ns / opts_.rotate_ns + 1) * opts_.rotate_ns;
}

std::pair<std::string, std::map<std::string, std::string>> Continuous::workload_of(
    const Profile& s) const {
  std::map<std::string, std::string> labels = opts_.labels;
  labels["node"] = opts_.node;
  const std::string* ns = find(s.meta, "namespace");
  const std::string* pod = find(s.meta, "pod");
  const std::string* container = find(s.meta, "container");
  if (pod != nullptr) {
    // A pod's container, whichever of its processes ran the session.
    if (ns != nullptr) labels["namespace"] = *ns;
    labels["pod"] = *pod;
    if (container != nullptr) labels["container"] = *container;
    return {"pod/" + (ns ? *ns : "") + "/" + *pod + "/" + (container ? *container : ""),
            std::move(labels)};
  }
  const std::string* pid = find(s.meta, "pid");
  const std::string p = pid != nullptr ? *pid : "0";
  labels["pid"] = p;
  if (container != nullptr) labels["container"] = *container;
  const uint32_t n = static_cast<uint32_t>(std::strtoul(p.c_str(), nullptr, 10));
  auto it = comm_.find(n);
  if (it == comm_.end()) it = comm_.emplace(n, read_comm(n)).first;
  if (!it->second.empty()) labels["process"] = it->second;
  return {"pid/" + p, std::move(labels)};
}

void Continuous::add(Profile&& session) {
  auto [key, labels] = workload_of(session);
  Workload& w = workloads_[key];
  if (w.sessions.empty()) w.labels = std::move(labels);
  const uint64_t spans = session.spans.size();
  w.spans += spans;
  w.sessions.push_back(std::move(session));
  ++held_sessions_;
  held_spans_ += spans;
}

void Continuous::capture_changed(bool on, int64_t unix_ns) {
  if (on == capture_on_) return;
  if (capture_on_) profiled_ns_ += unix_ns - std::max(on_since_, period_start_);
  capture_on_ = on;
  on_since_ = unix_ns;
}

bool Continuous::tick(int64_t now_unix_ns) {
  if (now_unix_ns >= period_end_) {
    const int64_t end = period_end_;
    rotate(end);
    period_start_ = end;
    period_end_ = next_boundary(std::max(now_unix_ns, end));
    return true;
  }
  // The memory bound: the period is cut here. A session counts as a span
  // at least (its lanes and meta), or a target ending empty sessions in a
  // loop would grow memory for a whole period.
  if (held_spans_ + held_sessions_ > opts_.max_held_spans) {
    rotate(now_unix_ns);
    period_start_ = now_unix_ns;
    return true;
  }
  return false;
}

void Continuous::finish(int64_t now_unix_ns) {
  rotate(std::max(now_unix_ns, period_start_));
  period_start_ = now_unix_ns;
}

void Continuous::rotate(int64_t end) {
  RotationSummary r;
  r.start_unix_ns = period_start_;
  r.end_unix_ns = end;
  if (capture_on_) {
    profiled_ns_ += end - std::max(on_since_, period_start_);
    on_since_ = end;
  }
  r.profiled_ns = opts_.duty.enabled() ? profiled_ns_ : end - period_start_;
  profiled_ns_ = 0;
  r.lost = lost_total_ - std::min(lost_total_, lost_reported_);
  r.shed = shed_total_ - std::min(shed_total_, shed_reported_);
  lost_reported_ = std::max(lost_reported_, lost_total_);
  shed_reported_ = std::max(shed_reported_, shed_total_);
  ++rotations_;
  for (auto& [key, w] : workloads_) {
    if (w.sessions.empty()) continue;
    SpoolItem item;
    item.labels = w.labels;
    item.period_start_unix_ns = r.start_unix_ns;
    item.period_end_unix_ns = end;
    item.sessions = w.sessions.size();
    item.spans = w.spans;
    item.key = slug(opts_.node) + "_" + slug(key.starts_with("pod/") ? key.substr(4) : key) + "_" +
               utc_text(r.start_unix_ns, true) + "_" + run_id_ + "." + std::to_string(rotations_);
    ++r.workloads;
    r.sessions += item.sessions;
    r.spans += item.spans;
    Profile combined;
    {
      std::vector<const Profile*> parts;
      parts.reserve(w.sessions.size());
      for (const Profile& s : w.sessions) parts.push_back(&s);
      append_profiles(combined,
                      parts);  // linear in the sessions (stall_report.h, combine_sessions)
    }
    std::vector<Profile>().swap(w.sessions);  // the sessions' memory goes now, before the export's
    combined.kernel.present = true;
    // The document says what it is without the spool's metadata.
    for (const auto& [k, v] : item.labels) combined.meta[k] = v;
    combined.meta["agent_item"] = item.key;
    combined.meta["period_start_unix_ns"] = std::to_string(r.start_unix_ns);
    combined.meta["period_end_unix_ns"] = std::to_string(end);
    if (opts_.duty.enabled()) {
      combined.meta["duty_cycle"] = opts_.duty.text();
      combined.meta["profiled_ns"] = std::to_string(r.profiled_ns);
    }
    const std::string document = export_profile(combined, ExportFormat::kJsonGz);
    combined = Profile();
    if (auto put = spool_.put(std::move(item), document)) {
      ++r.items;
    } else {
      ++r.items_failed;
      r.spool_error = put.error().message;
    }
  }
  workloads_.clear();
  comm_.clear();
  held_sessions_ = 0;
  held_spans_ = 0;
  last_ = r;
  sink_.maintain(end);
  const std::string line = summary_line(r) + "\n";
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
}

std::string Continuous::summary_line(const RotationSummary& r) const {
  const SpoolStats st = spool_.stats();
  std::string line = "mlprof-ebpf: period " + utc_text(r.start_unix_ns, false) + " +" +
                     seconds_text(r.end_unix_ns - r.start_unix_ns) + ": " +
                     std::to_string(r.workloads) +
                     (r.workloads == 1 ? " workload, " : " workloads, ") +
                     std::to_string(r.sessions) + (r.sessions == 1 ? " session, " : " sessions, ") +
                     std::to_string(r.spans) + (r.spans == 1 ? " span" : " spans");
  line += "; delivered " + std::to_string(st.delivered) + ", spooled " +
          std::to_string(st.pending) + ", dropped " + std::to_string(st.dropped()) + "; sink " +
          sink_.describe();
  if (const auto kept = sink_.retention()) line += "; " + retention_text(*kept);
  if (opts_.duty.enabled()) {
    const int64_t len = std::max<int64_t>(r.end_unix_ns - r.start_unix_ns, 1);
    line += "; profiled " + seconds_text(r.profiled_ns / 1'000'000 * 1'000'000) + " of " +
            seconds_text(len / 1'000'000 * 1'000'000) + " (" +
            std::to_string(std::lround(100.0 * static_cast<double>(r.profiled_ns) / len)) +
            "%, duty cycle " + opts_.duty.text() + ")";
  }
  if (r.shed > 0) {
    line += "; " + std::to_string(r.shed) + (r.shed == 1 ? " session" : " sessions") +
            " shed (the agent was behind)";
  }
  if (r.lost > 0)
    line += "; " + std::to_string(r.lost) + (r.lost == 1 ? " record" : " records") + " lost";
  if (r.items_failed > 0) {
    line += "; " + std::to_string(r.items_failed) + (r.items_failed == 1 ? " item" : " items") +
            " not spooled (" + r.spool_error + ")";
  }
  if (st.pending > 0 && !st.last_error.empty()) {
    line += "; retrying (" + std::to_string(st.failures) + " failed attempts): " + st.last_error;
  }
  return line;
}

}  // namespace mlprof::agent
