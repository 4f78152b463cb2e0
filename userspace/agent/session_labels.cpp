#include "agent/session_labels.h"

#include <cstdlib>

namespace mlprof::agent {

namespace {

constexpr int64_t kKeepAfterExitNs = 1'000'000'000;  // the joiner settles for 50 ms
constexpr size_t kMaxPodsShown = 64;
constexpr size_t kMaxPidsPerPod = 64;

std::string pod_path(const std::map<std::string, std::string>& meta) {
  auto ns = meta.find("namespace");
  auto pod = meta.find("pod");
  if (ns == meta.end() || pod == meta.end()) return {};
  std::string out = ns->second + "/" + pod->second;
  if (auto c = meta.find("container"); c != meta.end()) out += "/" + c->second;
  return out;
}

std::string pid_list(const std::set<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

}  // namespace

SessionLabels::SessionLabels(std::map<std::string, std::string> common)
    : common_(std::move(common)) {}

void SessionLabels::started(pid_t pid, std::map<std::string, std::string> labels) {
  by_pid_[pid] = std::move(labels);
  exited_at_.erase(pid);
}

void SessionLabels::exited(pid_t pid, int64_t now_ns) {
  if (by_pid_.count(pid) != 0) exited_at_[pid] = now_ns;
}

void SessionLabels::label(Profile& session, int64_t now_ns) {
  for (const auto& [k, v] : common_) session.meta.emplace(k, v);
  if (auto pid = session.meta.find("pid"); pid != session.meta.end()) {
    auto it = by_pid_.find(static_cast<pid_t>(std::atol(pid->second.c_str())));
    if (it != by_pid_.end()) {
      for (const auto& [k, v] : it->second) session.meta.emplace(k, v);
    }
    const std::string path = pod_path(session.meta);
    if (!path.empty() && (pods_seen_.count(path) != 0 || pods_seen_.size() < kMaxPodsShown)) {
      std::set<pid_t>& pids = pods_seen_[path];
      if (pids.size() < kMaxPidsPerPod)
        pids.insert(static_cast<pid_t>(std::atol(pid->second.c_str())));
    }
  }
  for (auto it = exited_at_.begin(); it != exited_at_.end();) {
    if (now_ns - it->second < kKeepAfterExitNs) {
      ++it;
      continue;
    }
    by_pid_.erase(it->first);
    it = exited_at_.erase(it);
  }
}

std::string SessionLabels::summary_line() const {
  if (pods_seen_.empty()) return {};
  std::string out = pods_seen_.size() == 1 ? "pod " : "pods ";
  bool first = true;
  for (const auto& [path, pids] : pods_seen_) {
    if (!first) out += ", ";
    first = false;
    out += path + (pids.size() == 1 ? " (pid " : " (pids ") + pid_list(pids) + ")";
  }
  if (auto node = common_.find("node"); node != common_.end()) out += ", node " + node->second;
  return out + "\n";
}

void SessionLabels::annotate_combined(Profile& combined) const {
  if (pods_seen_.size() < 2) return;
  std::string out;
  for (const auto& [path, pids] : pods_seen_)
    out += (out.empty() ? "" : " ") + path + "=" + pid_list(pids);
  combined.meta["pods"] = out;
}

}  // namespace mlprof::agent
