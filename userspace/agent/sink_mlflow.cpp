#include "agent/sink_mlflow.h"

namespace mlprof::agent {

Result<std::unique_ptr<Sink>> open_mlflow_sink(const std::string& url) {
  (void)url;
  return Error{Error::Kind::kUnsupported, 0, "the MLflow sink is not built yet"};
}

}  // namespace mlprof::agent
