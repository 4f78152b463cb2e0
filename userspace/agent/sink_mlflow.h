#pragma once
// --sink http://HOST:PORT[/?experiment=NAME]: the continuous agent's items
// as MLflow runs, one per workload and period.

#include <memory>
#include <string>

#include "agent/sink.h"
#include "core/result.h"

namespace mlprof::agent {

// Opens the tracking server at `url`. A malformed URL is an error here; a
// server that is down is not (deliver retries).
Result<std::unique_ptr<Sink>> open_mlflow_sink(const std::string& url);

}  // namespace mlprof::agent
