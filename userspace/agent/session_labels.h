#pragma once
// Where each session ran: the labels of its process (Target::labels, the
// pod and container from k8s.h) copied into the session's Profile meta when
// the joiner hands it over, so the JSON document, the store's source labels
// and the text output carry them. Keys: docs/ebpf.md "Choosing targets".

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "model/tree.h"

namespace mlprof::agent {

class SessionLabels {
 public:
  // `common`: labels of every session (node).
  explicit SessionLabels(std::map<std::string, std::string> common = {});

  // A target was attached: its labels, until its sessions are labeled.
  void started(pid_t pid, std::map<std::string, std::string> labels);
  // It exited at `now_ns`: its labels are kept a while, for sessions the
  // joiner still holds (they are handed over after a settling delay).
  void exited(pid_t pid, int64_t now_ns);
  // Adds the labels of the session's pid (meta "pid") to its meta; a key
  // the meta already has stays. Forgets processes that exited over a
  // second before `now_ns`.
  void label(Profile& session, int64_t now_ns);

  // For the text summary: "pod ml/scorer-6c5d8/model (pid 4242), node n1\n",
  // one entry per pod path seen; "" when no session ran in a pod.
  std::string summary_line() const;
  // A document of several sessions keeps the meta keys they share; when
  // they ran in different pods, meta "pods" says which pids ran where:
  // "ml/a/model=4242 ml/b/model=4250,4251".
  void annotate_combined(Profile& combined) const;

 private:
  std::map<std::string, std::string> common_;
  std::map<pid_t, std::map<std::string, std::string>> by_pid_;
  std::map<pid_t, int64_t> exited_at_;
  std::map<std::string, std::set<pid_t>> pods_seen_;  // "ns/pod[/container]" -> pids (bounded)
};

}  // namespace mlprof::agent
