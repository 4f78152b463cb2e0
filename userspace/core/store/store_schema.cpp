#include "store/store_schema.h"

#include <regex>

namespace mlprof {

namespace {

// SQLite dialect; the PostgreSQL one is derived (schema_statements). Times
// of samples and segments are offsets from their session's start_ns (small
// integers take fewer bytes); kernel intervals stay absolute CLOCK_MONOTONIC.
// Call paths are stored once (stacks) and spans point at them: docs/design/store.md's
// sample_locations is a view of that.
const char* const kSchema = R"SQL(
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID, STRICT;

CREATE TABLE id_counters (
  name TEXT PRIMARY KEY,
  next_id INTEGER NOT NULL
) WITHOUT ROWID, STRICT;

CREATE TABLE sources (
  source_id INTEGER PRIMARY KEY,
  source_type TEXT NOT NULL,
  sample_kind TEXT NOT NULL DEFAULT 'spans' CHECK (sample_kind IN ('spans', 'stacks')),
  source_uri TEXT,
  source_timestamp INTEGER,
  host TEXT,
  pid INTEGER,
  container TEXT,
  pod TEXT,
  python TEXT,
  model_name TEXT,
  model_version TEXT,
  run_id TEXT,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  captured_depth INTEGER NOT NULL,
  events_captured INTEGER NOT NULL DEFAULT 0,
  events_skipped INTEGER NOT NULL DEFAULT 0,
  unmatched_returns INTEGER NOT NULL DEFAULT 0,
  kernel INTEGER NOT NULL DEFAULT 0 CHECK (kernel IN (0, 1)),
  lost_events INTEGER NOT NULL DEFAULT 0,
  added_unix_ns INTEGER NOT NULL
) STRICT;

CREATE TABLE source_labels (
  source_id INTEGER NOT NULL REFERENCES sources(source_id),
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (source_id, key)
) WITHOUT ROWID, STRICT;

CREATE TABLE sessions (
  session_id INTEGER PRIMARY KEY,
  source_id INTEGER NOT NULL REFERENCES sources(source_id),
  pid INTEGER NOT NULL DEFAULT 0,
  serial INTEGER NOT NULL DEFAULT 0,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  first_sample_id INTEGER NOT NULL,
  sample_count INTEGER NOT NULL,
  UNIQUE (source_id, pid, serial)
) STRICT;

CREATE TABLE lanes (
  lane_id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions(session_id),
  ordinal INTEGER NOT NULL,
  thread_id INTEGER NOT NULL,
  native_tid INTEGER NOT NULL DEFAULT 0,
  thread_name TEXT NOT NULL DEFAULT '',
  task INTEGER NOT NULL DEFAULT 0,
  parent_lane_id INTEGER REFERENCES lanes(lane_id),
  parent_call INTEGER NOT NULL DEFAULT 0,
  events INTEGER NOT NULL DEFAULT 0,
  dropped INTEGER NOT NULL DEFAULT 0,
  truncated INTEGER NOT NULL DEFAULT 0 CHECK (truncated IN (0, 1))
) STRICT;

CREATE TABLE functions (
  function_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  system_name TEXT NOT NULL DEFAULT '',
  filename TEXT NOT NULL DEFAULT '',
  start_line INTEGER NOT NULL DEFAULT 0,
  module TEXT NOT NULL DEFAULT '',
  kind INTEGER NOT NULL DEFAULT 0,
  user_code INTEGER NOT NULL DEFAULT 0 CHECK (user_code IN (0, 1)),
  UNIQUE (name, system_name, filename, start_line, module, kind, user_code)
) STRICT;

CREATE TABLE locations (
  location_id INTEGER PRIMARY KEY,
  function_id INTEGER NOT NULL REFERENCES functions(function_id),
  line INTEGER NOT NULL DEFAULT 0,
  label TEXT NOT NULL DEFAULT '',
  UNIQUE (function_id, line, label)
) STRICT;

CREATE TABLE stacks (
  stack_id INTEGER PRIMARY KEY,
  parent_stack_id INTEGER REFERENCES stacks(stack_id),
  location_id INTEGER REFERENCES locations(location_id),
  depth INTEGER NOT NULL,
  UNIQUE (parent_stack_id, location_id),
  CHECK ((stack_id = 0) = (parent_stack_id IS NULL)),
  CHECK ((stack_id = 0) = (location_id IS NULL))
) STRICT;

CREATE TABLE samples (
  sample_id INTEGER PRIMARY KEY,
  lane_id INTEGER NOT NULL REFERENCES lanes(lane_id),
  parent_id INTEGER REFERENCES samples(sample_id),
  stack_id INTEGER NOT NULL REFERENCES stacks(stack_id),
  flags INTEGER NOT NULL DEFAULT 0,
  start_ns INTEGER,
  end_ns INTEGER,
  active_ns INTEGER,
  self_ns INTEGER,
  resumes INTEGER NOT NULL DEFAULT 0,
  CHECK ((start_ns IS NULL) = (end_ns IS NULL)),
  CHECK (end_ns >= start_ns)
) STRICT;

CREATE TABLE value_types (
  type_id INTEGER PRIMARY KEY,
  type TEXT NOT NULL,
  unit TEXT NOT NULL,
  UNIQUE (type, unit)
) STRICT;

CREATE TABLE sample_values (
  sample_id INTEGER NOT NULL REFERENCES samples(sample_id),
  type_id INTEGER NOT NULL REFERENCES value_types(type_id),
  value INTEGER NOT NULL,
  PRIMARY KEY (sample_id, type_id)
) WITHOUT ROWID, STRICT;

CREATE TABLE segments (
  sample_id INTEGER NOT NULL REFERENCES samples(sample_id),
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL CHECK (end_ns >= start_ns),
  PRIMARY KEY (sample_id, start_ns)
) WITHOUT ROWID, STRICT;

CREATE TABLE io_summaries (
  sample_id INTEGER NOT NULL REFERENCES samples(sample_id),
  ordinal INTEGER NOT NULL,
  role INTEGER NOT NULL CHECK (role IN (0, 1)),
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  shape TEXT,
  dtype TEXT NOT NULL DEFAULT '',
  length INTEGER NOT NULL DEFAULT -1,
  size_bytes INTEGER NOT NULL DEFAULT -1,
  device TEXT NOT NULL DEFAULT '',
  repr TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (sample_id, ordinal)
) WITHOUT ROWID, STRICT;

CREATE TABLE off_cpu_intervals (
  source_id INTEGER NOT NULL REFERENCES sources(source_id),
  ordinal INTEGER NOT NULL,
  pid INTEGER NOT NULL,
  tid INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  wake_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  blocked INTEGER NOT NULL CHECK (blocked IN (0, 1)),
  waker_tid INTEGER NOT NULL,
  prev_state INTEGER NOT NULL,
  PRIMARY KEY (source_id, ordinal)
) WITHOUT ROWID, STRICT;

CREATE TABLE kernel_threads (
  source_id INTEGER NOT NULL REFERENCES sources(source_id),
  ordinal INTEGER NOT NULL,
  pid INTEGER NOT NULL,
  tid INTEGER NOT NULL,
  parent_tid INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  name TEXT NOT NULL,
  started_under INTEGER REFERENCES samples(sample_id),
  exit_code INTEGER NOT NULL,
  PRIMARY KEY (source_id, ordinal)
) WITHOUT ROWID, STRICT;

CREATE VIEW sample_locations AS
WITH RECURSIVE frames(sample_id, next_stack, depth, location_id) AS (
  SELECT s.sample_id, k.parent_stack_id, k.depth, k.location_id
    FROM samples s JOIN stacks k ON k.stack_id = s.stack_id WHERE k.stack_id <> 0
  UNION ALL
  SELECT f.sample_id, k.parent_stack_id, k.depth, k.location_id
    FROM frames f JOIN stacks k ON k.stack_id = f.next_stack WHERE k.stack_id <> 0)
SELECT sample_id, depth, location_id FROM frames;

CREATE VIEW spans AS
SELECT s.sample_id, l.session_id, s.lane_id, s.parent_id, s.stack_id, k.depth,
       CASE WHEN lo.label <> '' THEN lo.label ELSE f.name END AS name, f.module, f.filename,
       se.start_ns + s.start_ns AS start_ns, se.start_ns + s.end_ns AS end_ns,
       s.end_ns - s.start_ns AS wall_ns, COALESCE(s.active_ns, s.end_ns - s.start_ns) AS active_ns,
       s.self_ns, s.flags
  FROM samples s JOIN lanes l ON l.lane_id = s.lane_id JOIN sessions se ON se.session_id = l.session_id
  JOIN stacks k ON k.stack_id = s.stack_id JOIN locations lo ON lo.location_id = k.location_id
  JOIN functions f ON f.function_id = lo.function_id;

CREATE VIEW span_values AS
SELECT sample_id, 'wall' AS type, 'ns' AS unit, end_ns - start_ns AS value FROM samples WHERE start_ns IS NOT NULL
UNION ALL SELECT sample_id, 'self', 'ns', self_ns FROM samples WHERE self_ns IS NOT NULL
UNION ALL SELECT v.sample_id, t.type, t.unit, v.value FROM sample_values v JOIN value_types t ON t.type_id = v.type_id;
)SQL";

std::vector<std::string> split_statements(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find(";\n", start);
    const size_t stop = end == std::string::npos ? text.size() : end;
    std::string stmt = text.substr(start, stop - start);
    if (stmt.find_first_not_of(" \n") != std::string::npos)
      out.push_back(stmt.substr(stmt.find_first_not_of(" \n")));
    start = stop + 2;
  }
  return out;
}

}  // namespace

// Long SQL statements are split over lines: adjacent literals are meant.
// NOLINTBEGIN(bugprone-suspicious-missing-comma)
const std::vector<Migration>& migrations() {
  static const std::vector<Migration> steps = {
      // `--where` on a label finds its sources without scanning every label.
      {"2.0",
       "2.1",
       {"CREATE INDEX IF NOT EXISTS source_labels_by_value ON source_labels (key, value)"}},
      // The trace context active where each session started: a profile is
      // found from a trace (`--where trace_id=...`) and a trace from a
      // profile. The agent's wakers and wait reasons: each interval's
      // syscall, waker kind and name, and each span's blocked time by reason.
      {"2.1",
       "2.2",
       {"CREATE TABLE IF NOT EXISTS session_traces (\n"
        "  session_id INTEGER PRIMARY KEY REFERENCES sessions(session_id),\n"
        "  trace_id TEXT NOT NULL,\n"
        "  span_id TEXT NOT NULL DEFAULT ''\n"
        ") STRICT",
        "CREATE INDEX IF NOT EXISTS session_traces_by_trace ON session_traces (trace_id)",
        "ALTER TABLE off_cpu_intervals ADD COLUMN syscall INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE off_cpu_intervals ADD COLUMN waker_kind INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE off_cpu_intervals ADD COLUMN waker_name TEXT NOT NULL DEFAULT ''",
        "CREATE TABLE IF NOT EXISTS span_waits (\n"
        "  sample_id INTEGER NOT NULL REFERENCES samples(sample_id),\n"
        "  syscall INTEGER NOT NULL,\n"
        "  state TEXT NOT NULL,\n"
        "  blocked_ns INTEGER NOT NULL,\n"
        "  count INTEGER NOT NULL,\n"
        "  PRIMARY KEY (sample_id, syscall, state)\n"
        ") WITHOUT ROWID, STRICT"}},
      // What a futex wait waited on (the GIL, a CPython lock, another
      // futex), on each interval and each span's reasons, which it keys
      // (a new table: SQLite cannot change a primary key), and the waker
      // that ended the most of each reason.
      {"2.2",
       "2.3",
       {"ALTER TABLE off_cpu_intervals ADD COLUMN wait TEXT NOT NULL DEFAULT ''",
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
        ") WITHOUT ROWID, STRICT",
        "INSERT INTO span_waits_2_3 (sample_id, syscall, state, blocked_ns, count) "
        "SELECT sample_id, syscall, state, blocked_ns, count FROM span_waits",
        "DROP TABLE span_waits", "ALTER TABLE span_waits_2_3 RENAME TO span_waits"}},
      // docs/design/store.md's tables as it names them (its SQL runs unchanged): the
      // normalised values table makes way for its sample_values (type and
      // unit, spans' wall and self included); sample_locations counts 1 =
      // innermost; samples gets its source_id; source_timestamp is seconds
      // (a REAL), the nanoseconds kept as start_unix_ns; spans holds calls
      // only. Provenance: the producing tool and a content hash (`mlprof add`
      // of the same file again adds nothing). PostgreSQL indexes the keys
      // `mlprof rm` checks row by row (SQLite's rm runs without the checks).
      {"2.3",
       "2.4",
       {"DROP VIEW IF EXISTS span_values",
        "DROP VIEW IF EXISTS spans",
        "DROP VIEW IF EXISTS sample_locations",
        "ALTER TABLE sample_values RENAME TO sample_value_rows",
        "ALTER TABLE sources RENAME COLUMN source_timestamp TO start_unix_ns",
        "ALTER TABLE sources ADD COLUMN source_timestamp REAL",
        "UPDATE sources SET source_timestamp = start_unix_ns / 1e9 WHERE start_unix_ns IS NOT NULL",
        "ALTER TABLE sources ADD COLUMN tool TEXT",
        "ALTER TABLE sources ADD COLUMN content_hash TEXT",
        "CREATE INDEX IF NOT EXISTS sources_by_content_hash ON sources (content_hash)",
        "ALTER TABLE samples ADD COLUMN source_id INTEGER REFERENCES sources(source_id)",
        "UPDATE samples SET source_id = (SELECT se.source_id FROM lanes l JOIN sessions se ON "
        "se.session_id = "
        "l.session_id WHERE l.lane_id = samples.lane_id)",
        std::string(kPostgresOnly) +
            "CREATE INDEX IF NOT EXISTS samples_by_parent ON samples (parent_id)",
        std::string(kPostgresOnly) +
            "CREATE INDEX IF NOT EXISTS samples_by_lane ON samples (lane_id)",
        std::string(kPostgresOnly) +
            "CREATE INDEX IF NOT EXISTS lanes_by_session ON lanes (session_id)",
        std::string(kPostgresOnly) +
            "CREATE INDEX IF NOT EXISTS lanes_by_parent ON lanes (parent_lane_id)",
        std::string(kPostgresOnly) +
            "CREATE INDEX IF NOT EXISTS kernel_threads_by_span ON kernel_threads "
            "(started_under)",
        "CREATE VIEW sample_values AS\n"
        "SELECT sample_id, 'wall' AS type, 'ns' AS unit, end_ns - start_ns AS value,\n"
        "       CAST(NULL AS INTEGER) AS type_id FROM samples WHERE start_ns IS NOT NULL\n"
        "UNION ALL SELECT sample_id, 'self', 'ns', self_ns, CAST(NULL AS INTEGER) FROM samples\n"
        "           WHERE self_ns IS NOT NULL\n"
        "UNION ALL SELECT v.sample_id, t.type, t.unit, v.value, v.type_id\n"
        "            FROM sample_value_rows v JOIN value_types t ON t.type_id = v.type_id",
        "CREATE VIEW sample_locations AS\n"
        "WITH RECURSIVE frames(sample_id, next_stack, depth, location_id) AS (\n"
        "  SELECT s.sample_id, k.parent_stack_id, 1, k.location_id\n"
        "    FROM samples s JOIN stacks k ON k.stack_id = s.stack_id WHERE k.stack_id <> 0\n"
        "  UNION ALL\n"
        "  SELECT f.sample_id, k.parent_stack_id, f.depth + 1, k.location_id\n"
        "    FROM frames f JOIN stacks k ON k.stack_id = f.next_stack WHERE k.stack_id <> 0)\n"
        "SELECT sample_id, depth, location_id FROM frames",
        "CREATE VIEW spans AS\n"
        "SELECT s.sample_id, s.source_id, l.session_id, s.lane_id, s.parent_id, s.stack_id, "
        "k.depth,\n"
        "       CASE WHEN lo.label <> '' THEN lo.label ELSE f.name END AS name, f.module, "
        "f.filename,\n"
        "       se.start_ns + s.start_ns AS start_ns, se.start_ns + s.end_ns AS end_ns,\n"
        "       s.end_ns - s.start_ns AS wall_ns, COALESCE(s.active_ns, s.end_ns - s.start_ns) AS "
        "active_ns,\n"
        "       s.self_ns, s.flags\n"
        "  FROM samples s JOIN lanes l ON l.lane_id = s.lane_id JOIN sessions se ON se.session_id "
        "= l.session_id\n"
        "  JOIN stacks k ON k.stack_id = s.stack_id JOIN locations lo ON lo.location_id = "
        "k.location_id\n"
        "  JOIN functions f ON f.function_id = lo.function_id\n"
        " WHERE s.start_ns IS NOT NULL",
        "CREATE VIEW span_values AS SELECT sample_id, type, unit, value FROM sample_values"}},
      // Coalesced resumes (model/resume.h): a segment counts the resumes folded
      // into it and the time paused within it; older rows are plain segments.
      {"2.4",
       "2.5",
       {"ALTER TABLE segments ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE segments ADD COLUMN paused_ns INTEGER NOT NULL DEFAULT 0"}},
      // The resource a span used (model/resources.h); NULL: none, as in older rows.
      {"2.5", "2.6", {"ALTER TABLE samples ADD COLUMN resource TEXT"}},
  };
  return steps;
}
// NOLINTEND(bugprone-suspicious-missing-comma)

const std::string& schema_text() {
  static const std::string text(kSchema + 1);  // without the leading newline
  return text;
}

std::vector<std::string> schema_statements(Dialect dialect, const std::string& version) {
  // Version 2.0's tables and views, then every migration step's statements
  // (up to `version`'s): a new store is what migrating an old one gives,
  // with each statement written once.
  std::vector<std::string> all = split_statements(schema_text());
  bool reached = version == "2.0";
  for (const Migration& m : migrations()) {
    if (reached) break;
    all.insert(all.end(), m.statements.begin(), m.statements.end());
    reached = !version.empty() && version == m.to;
  }
  if (!version.empty() && !reached) return {};
  std::vector<std::string> out;
  for (auto& s : all) {
    std::string stmt = in_dialect(std::move(s), dialect);
    if (!stmt.empty()) out.push_back(std::move(stmt));
  }
  return out;
}

std::string in_dialect(std::string statement, Dialect dialect) {
  if (statement.starts_with(kPostgresOnly)) {
    if (dialect != Dialect::kPostgres) return {};
    statement.erase(0, std::string(kPostgresOnly).size());
  }
  if (dialect != Dialect::kPostgres) return statement;
  // INTEGER is 32-bit there (64-bit in SQLite), REAL 32-bit (64-bit in
  // SQLite; STRICT tables take no other name); no rowid tables, no STRICT.
  static const std::regex integer("\\bINTEGER\\b");
  static const std::regex real("\\bREAL\\b");
  statement = std::regex_replace(statement, integer, "BIGINT");
  statement = std::regex_replace(statement, real, "DOUBLE PRECISION");
  for (const char* tail : {") WITHOUT ROWID, STRICT", ") STRICT"}) {
    const auto at = statement.rfind(tail);
    if (at != std::string::npos && at + std::string(tail).size() == statement.size()) {
      statement = statement.substr(0, at) + ")";
    }
  }
  return statement;
}

}  // namespace mlprof
