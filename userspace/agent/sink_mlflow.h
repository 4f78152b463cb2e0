#pragma once
// --sink http://HOST:PORT[/PATH][?experiment=NAME] (or https://): each item
// becomes one MLflow run on a tracking server, through its REST API
// (libcurl): in experiment NAME (kDefaultMlflowExperiment; created when
// missing), named after the workload and the period, tagged with the
// item's labels and its key (mlprof.key: a run carrying the key already is
// not made twice), the profile's top-level figures as metrics
// (mlflow_metrics), and the document as the artifact profile/profile.json
// (log_profile's path, so `mlprof diff runs:/ID` and
// mlflow_profiler.load read it), uploaded through the server's artifact
// proxy (`mlflow server`, which serves artifacts by default). Then the run
// is ended FINISHED.

#include <map>
#include <memory>
#include <string>

#include "agent/sink.h"
#include "model/tree.h"
#include "util/result.h"

namespace mlprof::agent {

inline constexpr const char* kDefaultMlflowExperiment = "mlprof-ebpf";
// The tag a run records its item's key under.
inline constexpr const char* kMlflowKeyTag = "mlprof.key";

// The run's metrics for one item (docs/ebpf.md, "Sinks"): profile/sessions,
// profile/spans; the roots' wall time as profile/roots/{count, mean_ms,
// p50_ms, p95_ms, p99_ms, max_ms} (log_profile_summary's statistics; a
// quantile is the sample of rank floor(q(n-1))); and with the agent's
// kernel data the roots' totals profile/{on_cpu_ms, off_cpu_ms,
// blocked_ms, runq_ms}.
std::map<std::string, double> mlflow_metrics(const Profile& profile, const SpoolItem& item);

// Parses the URL (a malformed one, or a query other than experiment=NAME,
// is an error here). Nothing is asked of the server until the first
// delivery: one that is down is retried.
Result<std::unique_ptr<Sink>> open_mlflow_sink(const std::string& url);

}  // namespace mlprof::agent
