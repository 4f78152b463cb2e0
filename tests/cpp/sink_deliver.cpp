// sink_deliver URL: the agent's PostgreSQL or MLflow sink (agent/sink_*.h),
// driven line by line from stdin by tests/e2e/test_agent_sinks.py, so one
// sink (and its connection) lives across deliveries, as in the agent.
//
//   stdin:  deliver PATH KEY START_NS END_NS SESSIONS [LABEL=VALUE ...]
//   stdout: delivered|retry|reject <TAB> detail
//
// At start it prints "open <TAB> describe()", or "error <TAB> message" and
// exits 1 when the URL cannot be opened.

#include <iostream>
#include <sstream>
#include <string>

#include "agent/sink_mlflow.h"
#include "agent/sink_postgres.h"

using namespace mlprof::agent;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: sink_deliver URL\n";
    return 2;
  }
  const std::string url = argv[1];
  const bool postgres = url.starts_with("postgres");
  auto opened = postgres ? open_postgres_sink(url) : open_mlflow_sink(url);
  if (!opened) {
    std::cout << "error\t" << opened.error().message << std::endl;
    return 1;
  }
  Sink& sink = *opened.value();
  std::cout << "open\t" << sink.describe() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string verb;
    SpoolItem item;
    words >> verb >> item.path >> item.key >> item.period_start_unix_ns >>
        item.period_end_unix_ns >> item.sessions;
    if (verb != "deliver" || !words) {
      std::cout << "error\tcannot read '" << line << "'" << std::endl;
      continue;
    }
    for (std::string pair; words >> pair;) {
      const auto eq = pair.find('=');
      if (eq != std::string::npos) item.labels[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    const Delivery d = sink.deliver(item);
    const char* status = d.status == DeliveryStatus::kDelivered ? "delivered"
                         : d.status == DeliveryStatus::kRetry   ? "retry"
                                                                : "reject";
    std::cout << status << '\t' << d.detail << std::endl;
  }
  return 0;
}
