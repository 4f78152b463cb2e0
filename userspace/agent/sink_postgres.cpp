#include "agent/sink_postgres.h"

namespace mlprof::agent {

Result<std::unique_ptr<Sink>> open_postgres_sink(const std::string& url) {
  (void)url;
  return Error{Error::Kind::kUnsupported, 0, "the PostgreSQL sink is not built yet"};
}

}  // namespace mlprof::agent
