#include "core/store_schema.h"

#include <gtest/gtest.h>

#include <string>

namespace mlprof {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(StoreSchema, EveryTableOfSpec001AndItsViewsInOrder) {
  const auto stmts = schema_statements(Dialect::kSqlite);
  std::string names;
  std::string steps;  // migrations() steps come last, from the first index on
  for (const auto& s : stmts) {
    if (starts_with(s, "CREATE INDEX ") || !steps.empty()) {
      steps += s + "\n";
      continue;
    }
    ASSERT_TRUE(starts_with(s, "CREATE TABLE ") || starts_with(s, "CREATE VIEW ")) << s;
    const size_t at = s.find(' ', 7) + 1;
    names += s.substr(at, s.find_first_of(" (", at) - at) + " ";
  }
  EXPECT_EQ(names,
            "meta id_counters sources source_labels sessions lanes functions locations stacks samples value_types "
            "sample_values segments io_summaries off_cpu_intervals kernel_threads sample_locations spans span_values ");
  // Versions 2.1's, 2.2's and 2.3's steps: a new store is what migrating a 2.0 one gives.
  EXPECT_EQ(steps,
            "CREATE INDEX IF NOT EXISTS source_labels_by_value ON source_labels (key, value)\n"
            "CREATE TABLE IF NOT EXISTS session_traces (\n"
            "  session_id INTEGER PRIMARY KEY REFERENCES sessions(session_id),\n"
            "  trace_id TEXT NOT NULL,\n"
            "  span_id TEXT NOT NULL DEFAULT ''\n"
            ") STRICT\n"
            "CREATE INDEX IF NOT EXISTS session_traces_by_trace ON session_traces (trace_id)\n"
            "ALTER TABLE off_cpu_intervals ADD COLUMN syscall INTEGER NOT NULL DEFAULT -1\n"
            "ALTER TABLE off_cpu_intervals ADD COLUMN waker_kind INTEGER NOT NULL DEFAULT 0\n"
            "ALTER TABLE off_cpu_intervals ADD COLUMN waker_name TEXT NOT NULL DEFAULT ''\n"
            "CREATE TABLE IF NOT EXISTS span_waits (\n"
            "  sample_id INTEGER NOT NULL REFERENCES samples(sample_id),\n"
            "  syscall INTEGER NOT NULL,\n"
            "  state TEXT NOT NULL,\n"
            "  blocked_ns INTEGER NOT NULL,\n"
            "  count INTEGER NOT NULL,\n"
            "  PRIMARY KEY (sample_id, syscall, state)\n"
            ") WITHOUT ROWID, STRICT\n"
            "ALTER TABLE off_cpu_intervals ADD COLUMN wait TEXT NOT NULL DEFAULT ''\n"
            "CREATE TABLE span_waits_2_3 (\n"
            "  sample_id INTEGER NOT NULL REFERENCES samples(sample_id),\n"
            "  syscall INTEGER NOT NULL,\n"
            "  state TEXT NOT NULL,\n"
            "  wait TEXT NOT NULL DEFAULT '',\n"
            "  blocked_ns INTEGER NOT NULL,\n"
            "  count INTEGER NOT NULL,\n"
            "  waker TEXT NOT NULL DEFAULT '',\n"
            "  waker_ns INTEGER NOT NULL DEFAULT 0,\n"
            "  PRIMARY KEY (sample_id, syscall, state, wait)\n"
            ") WITHOUT ROWID, STRICT\n"
            "INSERT INTO span_waits_2_3 (sample_id, syscall, state, blocked_ns, count) SELECT sample_id, syscall, "
            "state, blocked_ns, count FROM span_waits\n"
            "DROP TABLE span_waits\n"
            "ALTER TABLE span_waits_2_3 RENAME TO span_waits\n");
  // Keys are declared: every table but the roots (sources, the dictionaries, meta) references another.
  for (const auto& s : stmts) {
    if (!starts_with(s, "CREATE TABLE ")) continue;
    const std::string name = s.substr(13, s.find(' ', 13) - 13);
    const bool standalone =
        name == "meta" || name == "id_counters" || name == "sources" || name == "functions" || name == "value_types";
    EXPECT_EQ(s.find("REFERENCES") == std::string::npos, standalone) << s;
  }
}

TEST(StoreSchema, PostgresGetsBigintsAndNoSqliteTableOptions) {
  const auto sqlite = schema_statements(Dialect::kSqlite);
  const auto pg = schema_statements(Dialect::kPostgres);
  ASSERT_EQ(sqlite.size(), pg.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pg[i].find("INTEGER"), std::string::npos) << pg[i];
    EXPECT_EQ(pg[i].find("STRICT"), std::string::npos) << pg[i];
    EXPECT_EQ(pg[i].find("WITHOUT ROWID"), std::string::npos) << pg[i];
    if (sqlite[i].find("INTEGER") != std::string::npos) EXPECT_NE(pg[i].find("BIGINT"), std::string::npos);
  }
  EXPECT_NE(pg[2].find("source_id BIGINT PRIMARY KEY"), std::string::npos) << pg[2];
}

}  // namespace
}  // namespace mlprof
