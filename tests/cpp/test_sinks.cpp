// The continuous agent's PostgreSQL and MLflow sinks, the parts that need
// no server: their URLs, the COPY text, the MLflow metrics of a profile,
// and a server that does not answer (a real refused connection: nothing
// listens on the port) being a retry, not an error. With real servers:
// tests/e2e/test_agent_sinks.py.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/sink_mlflow.h"
#include "agent/sink_postgres.h"
#include "formats/json_doc.h"
#include "profile_builder.h"
#include "store/store_copy.h"
#include "temp_dir.h"
#include "util/file_io.h"

namespace mlprof::agent {
namespace {

using test::TempDir;

// A port nothing listens on: bound, then closed.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

// Three roots of 10, 20 and 30 ms, the second with a child.
Profile three_roots() {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict"), step = test::user_fn(p, "step");
  const int64_t ms = 1'000'000;
  p.lanes.push_back(
      test::make_lane({test::call(0, predict), test::ret(10 * ms), test::call(20 * ms, predict),
                       test::call(21 * ms, step), test::ret(22 * ms), test::ret(40 * ms),
                       test::call(50 * ms, predict), test::ret(80 * ms)}));
  p.end_ns = 90 * ms;
  build_tree(p);
  return p;
}

TEST(CopyText, EscapesWhatCopyReadsAndWritesNullAsBackslashN) {
  const std::vector<SqlRow> rows = {{int64_t{1}, std::string("a\tb\\c\nd\re"), SqlValue{}},
                                    {int64_t{-2}, std::string(""), std::string("\\N")}};
  EXPECT_EQ(copy_text(rows), "1\ta\\tb\\\\c\\nd\\re\t\\N\n-2\t\t\\\\N\n");
}

TEST(CopyText, OnlyAPlainInsertBecomesACopy) {
  EXPECT_EQ(copy_statement("INSERT INTO segments (sample_id, start_ns, end_ns) VALUES (?, ?, ?)"),
            "COPY segments (sample_id, start_ns, end_ns) FROM STDIN");
  EXPECT_EQ(copy_statement("INSERT INTO segments (sample_id) VALUES (?) ON CONFLICT DO NOTHING"),
            "");
  EXPECT_EQ(copy_statement("UPDATE id_counters SET next_id = next_id + ?"), "");
}

TEST(MlflowMetrics, TheRootsWallTimeAndTheKernelTotals) {
  Profile p = three_roots();
  SpoolItem item;
  item.sessions = 3;
  auto m = mlflow_metrics(p, item);
  EXPECT_EQ(m["profile/sessions"], 3);
  EXPECT_EQ(m["profile/spans"], 4);
  EXPECT_EQ(m["profile/roots/count"], 3);
  EXPECT_DOUBLE_EQ(m["profile/roots/mean_ms"], 20.0);
  EXPECT_DOUBLE_EQ(m["profile/roots/p50_ms"], 20.0);  // rank floor(0.5 * 2) = 1
  EXPECT_DOUBLE_EQ(m["profile/roots/p99_ms"], 20.0);  // rank floor(0.99 * 2) = 1
  EXPECT_DOUBLE_EQ(m["profile/roots/max_ms"], 30.0);
  EXPECT_EQ(m.count("profile/off_cpu_ms"), 0u);  // in process: no kernel figures

  p.kernel.present = true;
  p.kernel.spans.assign(p.spans.size(), SpanKernel{});
  for (const int32_t r : p.roots) {
    p.kernel.spans[r].on_cpu_ns = 1'000'000;
    p.kernel.spans[r].off_cpu_ns = 2'000'000;
    p.kernel.spans[r].runq_ns = 500'000;
  }
  p.kernel.spans[p.spans[p.roots[1]].first_child].off_cpu_ns =
      99'000'000;  // inside a root: already counted
  m = mlflow_metrics(p, item);
  EXPECT_DOUBLE_EQ(m["profile/on_cpu_ms"], 3.0);
  EXPECT_DOUBLE_EQ(m["profile/off_cpu_ms"], 6.0);
  EXPECT_DOUBLE_EQ(m["profile/runq_ms"], 1.5);
}

TEST(MlflowSink, AMalformedUrlIsAnErrorAtOpen) {
  EXPECT_FALSE(open_mlflow_sink("ftp://127.0.0.1/").ok());
  EXPECT_FALSE(open_mlflow_sink("http://127.0.0.1:5000/?experimnt=x").ok());
  EXPECT_FALSE(open_mlflow_sink("http://127.0.0.1:5000/?experiment=").ok());
  EXPECT_FALSE(open_mlflow_sink("http://[::1").ok());
}

TEST(MlflowSink, ItsDescriptionHasNoPasswordAndNamesTheExperiment) {
  auto sink = open_mlflow_sink("http://me:secret@127.0.0.1:5000/?experiment=fraud%20models");
  ASSERT_TRUE(sink.ok()) << sink.error().message;
  EXPECT_EQ(sink.value()->describe(), "http://me@127.0.0.1:5000 (experiment fraud models)");
  auto plain = open_mlflow_sink("http://127.0.0.1:5000");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value()->describe(), "http://127.0.0.1:5000 (experiment mlprof-ebpf)");
}

TEST(Sinks, AServerThatRefusesIsARetryAndAnUnreadableDocumentARejection) {
  TempDir dir;
  const std::string doc = dir.path() + "/item.json.gz";
  ASSERT_TRUE(write_file_atomic(doc, gzip_compress(to_json_document(three_roots()))).ok());
  const std::string port = std::to_string(free_port());
  auto pg = open_postgres_sink("postgresql://postgres:pw@127.0.0.1:" + port + "/postgres");
  ASSERT_TRUE(pg.ok()) << pg.error().message;  // down at start: not an error
  EXPECT_EQ(pg.value()->describe(), "postgresql://postgres:***@127.0.0.1:" + port + "/postgres");
  auto mlflow = open_mlflow_sink("http://127.0.0.1:" + port);
  ASSERT_TRUE(mlflow.ok());
  for (Sink* sink : {pg.value().get(), mlflow.value().get()}) {
    SpoolItem item;
    item.path = doc;
    item.key = "node-a/pid-1/1";
    const Delivery down = sink->deliver(item);
    EXPECT_EQ(down.status, DeliveryStatus::kRetry) << down.detail;
    // libpq: "Connection refused"; libcurl: "Couldn't connect to server".
    EXPECT_TRUE(down.detail.find("refused") != std::string::npos ||
                down.detail.find("Couldn't connect") != std::string::npos)
        << down.detail;
    item.path = dir.path() + "/missing.json.gz";
    EXPECT_EQ(sink->deliver(item).status, DeliveryStatus::kReject);
  }
}

TEST(PostgresSink, AMalformedUrlIsAnErrorAtOpen) {
  auto unknown = open_postgres_sink("postgresql://h/db?nosuchoption=1");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("nosuchoption"), std::string::npos)
      << unknown.error().message;
  EXPECT_FALSE(open_postgres_sink("mysql://h/db").ok());
}

}  // namespace
}  // namespace mlprof::agent
