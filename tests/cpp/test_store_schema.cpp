#include "store/store_schema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "store/store.h"

namespace mlprof {
namespace {

// fuzz_store_read's finding (fuzz/regressions/fuzz_store_read/): a damaged
// store's text column held a byte that is not UTF-8, and the profile read
// from it wrote a document that does not read back. Text comes out UTF-8.
TEST(StoreText, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  EXPECT_EQ(sql_text(SqlValue{std::string("predict")}), "predict");
  EXPECT_EQ(sql_text(SqlValue{std::string("pr\xe9"
                                          "dict")}),
            "pr\xef\xbf\xbd"
            "dict");
  EXPECT_EQ(sql_text(SqlValue{}), "");
  EXPECT_THROW(sql_text(SqlValue{int64_t{3}}), StoreFailure);
}

TEST(StoreSchema, EveryTableOfSpec001AndItsViewsInOrder) {
  const auto stmts = schema_statements(Dialect::kSqlite, "2.3");
  std::string names;
  std::string steps;  // migrations() steps come last, from the first index on
  for (const auto& s : stmts) {
    if (s.starts_with("CREATE INDEX ") || !steps.empty()) {
      steps += s + "\n";
      continue;
    }
    ASSERT_TRUE(s.starts_with("CREATE TABLE ") || s.starts_with("CREATE VIEW ")) << s;
    const size_t at = s.find(' ', 7) + 1;
    names += s.substr(at, s.find_first_of(" (", at) - at) + " ";
  }
  EXPECT_EQ(names,
            "meta id_counters sources source_labels sessions lanes functions locations stacks "
            "samples value_types "
            "sample_values segments io_summaries off_cpu_intervals kernel_threads sample_locations "
            "spans span_values ");
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
            "INSERT INTO span_waits_2_3 (sample_id, syscall, state, blocked_ns, count) SELECT "
            "sample_id, syscall, "
            "state, blocked_ns, count FROM span_waits\n"
            "DROP TABLE span_waits\n"
            "ALTER TABLE span_waits_2_3 RENAME TO span_waits\n");
  // Keys are declared: every table but the roots (sources, the dictionaries, meta) references
  // another.
  for (const auto& s : schema_statements(Dialect::kSqlite)) {
    if (!s.starts_with("CREATE TABLE ")) continue;
    const std::string name = s.substr(13, s.find(' ', 13) - 13);
    const bool standalone = name == "meta" || name == "id_counters" || name == "sources" ||
                            name == "functions" || name == "value_types";
    EXPECT_EQ(s.find("REFERENCES") == std::string::npos, standalone) << s;
  }
}

TEST(StoreSchema, Version2_4GivesSpec001sNamesAfterTheOlderSteps) {
  const auto now = schema_statements(Dialect::kSqlite);
  const auto before = schema_statements(Dialect::kSqlite, "2.3");
  ASSERT_GT(now.size(), before.size());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), now.begin()));  // 2.4 is a step after 2.3's
  EXPECT_TRUE(schema_statements(Dialect::kSqlite, "2.0")
                  .back()
                  .starts_with("CREATE VIEW span_values"));  // no step
  EXPECT_TRUE(schema_statements(Dialect::kSqlite, "9.9").empty());
  std::string views, renames;
  for (size_t i = before.size(); i < now.size(); ++i) {
    const std::string& s = now[i];
    if (s.starts_with("CREATE VIEW ")) views += s.substr(12, s.find(' ', 12) - 12) + " ";
    if (s.find(" RENAME ") != std::string::npos) renames += s + "\n";
  }
  // docs/design/store.md's names: its sample_values is a view, the normalised table renamed.
  EXPECT_EQ(views, "sample_values sample_locations spans span_values ");
  EXPECT_EQ(renames,
            "ALTER TABLE sample_values RENAME TO sample_value_rows\n"
            "ALTER TABLE sources RENAME COLUMN source_timestamp TO start_unix_ns\n");
  const auto has = [&](const std::string& text) {
    return std::any_of(now.begin() + static_cast<long>(before.size()), now.end(),
                       [&](const std::string& s) { return s.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(
      has("SELECT s.sample_id, k.parent_stack_id, 1, k.location_id"));  // depth 1 = innermost
  EXPECT_TRUE(has("f.depth + 1"));
  EXPECT_TRUE(
      has("ALTER TABLE samples ADD COLUMN source_id INTEGER REFERENCES sources(source_id)"));
  EXPECT_TRUE(has("ALTER TABLE sources ADD COLUMN source_timestamp REAL"));
  EXPECT_TRUE(has(" WHERE s.start_ns IS NOT NULL"));  // spans: calls, not sampled stacks
  EXPECT_FALSE(has("samples_by_parent"));             // PostgreSQL's only
}

TEST(StoreSchema, Version2_5GivesSegmentsTheirCoalescedResumes) {
  const auto now = schema_statements(Dialect::kSqlite, "2.5");
  const auto before = schema_statements(Dialect::kSqlite, "2.4");
  ASSERT_EQ(now.size(), before.size() + 2);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), now.begin()));
  EXPECT_EQ(now[before.size()],
            "ALTER TABLE segments ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0");
  EXPECT_EQ(now[before.size() + 1],
            "ALTER TABLE segments ADD COLUMN paused_ns INTEGER NOT NULL DEFAULT 0");
}

TEST(StoreSchema, Version2_6GivesSamplesTheirResource) {
  const auto now = schema_statements(Dialect::kSqlite);
  const auto before = schema_statements(Dialect::kSqlite, "2.5");
  ASSERT_EQ(now.size(), before.size() + 1);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), now.begin()));
  EXPECT_EQ(now.back(), "ALTER TABLE samples ADD COLUMN resource TEXT");
}

TEST(StoreSchema, PostgresGetsBigintsAndNoSqliteTableOptions) {
  const auto sqlite = schema_statements(Dialect::kSqlite);
  const auto pg = schema_statements(Dialect::kPostgres);
  // PostgreSQL's own: the indexes on the keys rm checks row by row, at the end of 2.4's step.
  std::vector<std::string> only_pg;
  size_t j = 0;
  for (size_t i = 0; i < pg.size(); ++i) {
    if (j < sqlite.size() && in_dialect(sqlite[j], Dialect::kPostgres) == pg[i]) {
      ++j;
      continue;
    }
    only_pg.push_back(pg[i]);
  }
  EXPECT_EQ(j, sqlite.size());
  ASSERT_EQ(only_pg.size(), 5u);
  EXPECT_EQ(only_pg[0], "CREATE INDEX IF NOT EXISTS samples_by_parent ON samples (parent_id)");
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pg[i].find("INTEGER"), std::string::npos) << pg[i];
    EXPECT_EQ(pg[i].find("STRICT"), std::string::npos) << pg[i];
    EXPECT_EQ(pg[i].find("WITHOUT ROWID"), std::string::npos) << pg[i];
    EXPECT_EQ(pg[i].find(" REAL"), std::string::npos) << pg[i];  // 32-bit there: DOUBLE PRECISION
  }
  EXPECT_NE(pg[2].find("source_id BIGINT PRIMARY KEY"), std::string::npos) << pg[2];
  EXPECT_EQ(in_dialect("ALTER TABLE sources ADD COLUMN source_timestamp REAL", Dialect::kPostgres),
            "ALTER TABLE sources ADD COLUMN source_timestamp DOUBLE PRECISION");
  EXPECT_EQ(in_dialect(std::string(kPostgresOnly) + "CREATE INDEX x ON t (c)", Dialect::kSqlite),
            "");
}

}  // namespace
}  // namespace mlprof
