"""The shapes of docs/design/store.md, exactly (issue 41, item 8; docs/store.md "Schema"):
its table names, columns and conventions (sample_values with type and unit,
sample_locations' depth 1 = the innermost frame, samples.source_id,
sources.source_timestamp in seconds) answer its queries over a real store.

docs/design/store.md ("Tables") defines the tables but prints no SQL,
so SPEC_QUERIES are its definitions written as queries, word for word in its
names: each is what a reader of the spec would type. They run unchanged on
SQLite here and on PostgreSQL (test_store_postgres.py), and every answer is
checked against an independent count: the capture's own tree, its document's
values, and the folded file's text."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from test_store import _connect, _encode, _walk

from mlflow_profiler import profiling
from mlflow_profiler.store import open_store

# A folded-stacks file (py-spy --format raw): 19 samples in 3 lines, root
# first. A line is one sample whose samples/count value is its count
# (docs/design/store.md, "Versions and conversion"): `count(*)` counts its
# rows, `sum(value)` of type samples its samples.
FOLDED = "main;predict;encode 6\nmain;load 10\nmain;predict 3\n"

SPEC_QUERIES = {
    # "samples: one row per raw sample ... Foreign key: source_id -> sources"
    "samples_per_source": "SELECT so.source_id, so.source_type, count(*) FROM sources so "
    "JOIN samples s ON s.source_id = so.source_id "
    "GROUP BY so.source_id, so.source_type ORDER BY so.source_id",
    # "sample_locations: depth, position in the stack trace (1 = innermost)"
    "innermost_function": "SELECT s.source_id, f.name, count(*) FROM sample_locations sl "
    "JOIN samples s ON s.sample_id = sl.sample_id "
    "JOIN locations l ON l.location_id = sl.location_id "
    "JOIN functions f ON f.function_id = l.function_id "
    "WHERE sl.depth = 1 GROUP BY s.source_id, f.name ORDER BY s.source_id, f.name",
    # "sample_values: sample_id, type, unit, value" (long form; a time-only
    # profile has one row per sample: type 'samples', unit 'count', value 1)
    "values_by_type": "SELECT s.source_id, v.type, v.unit, count(*), sum(v.value) FROM sample_values v "
    "JOIN samples s ON s.sample_id = v.sample_id "
    "GROUP BY s.source_id, v.type, v.unit ORDER BY s.source_id, v.type, v.unit",
    # "Compound key: (sample_id, type)"
    "values_key": "SELECT sample_id, type, count(*) FROM sample_values GROUP BY sample_id, type HAVING count(*) > 1",
    # Samples per innermost function, weighted: a pre-aggregated sample's count.
    "samples_by_innermost": "SELECT f.name, sum(v.value) FROM sample_values v "
    "JOIN sample_locations sl ON sl.sample_id = v.sample_id AND sl.depth = 1 "
    "JOIN locations l ON l.location_id = sl.location_id "
    "JOIN functions f ON f.function_id = l.function_id "
    "WHERE v.type = 'samples' AND v.unit = 'count' GROUP BY f.name ORDER BY f.name",
    # A stack trace read back, innermost first: the deepest frame has the largest depth.
    "stack_depths": "SELECT s.source_id, max(sl.depth), count(*) FROM sample_locations sl "
    "JOIN samples s ON s.sample_id = sl.sample_id GROUP BY s.source_id ORDER BY s.source_id",
    # "source_timestamp: epoch timestamp (seconds since 1970-01-01 UTC) when
    # the profile was captured, NA if unknown"
    "captured": "SELECT source_id, source_timestamp FROM sources ORDER BY source_id",
    # Time per innermost function: the measurement of each sample at depth 1.
    "wall_by_innermost": "SELECT f.name, sum(v.value) FROM sample_values v "
    "JOIN sample_locations sl ON sl.sample_id = v.sample_id AND sl.depth = 1 "
    "JOIN locations l ON l.location_id = sl.location_id "
    "JOIN functions f ON f.function_id = l.function_id "
    "WHERE v.type = 'wall' AND v.unit = 'ns' GROUP BY f.name ORDER BY f.name",
}


def fill(store, tmp_path):
    """A store holding a capture (spans with cpu_time values) and a folded
    file (sampled stacks); returns (session, its source, the folded source)."""
    with profiling(depth=-1, cpu_time=True) as session:
        _encode([30, 40, 50])
    folded = tmp_path / "spy.folded"
    folded.write_text(FOLDED)
    return session, store.add(session), store.add(folded)


def expected(session, spans_id, folded_id):
    """Every query's answer, from the tree, the document and the file."""
    nodes = list(_walk(session.to_tree()))
    doc = json.loads(session.to_json())
    unix_ns = int(session._built().meta["start_unix_ns"])
    lines = [
        (line.rsplit(" ", 1)[0].split(";"), int(line.rsplit(" ", 1)[1]))
        for line in FOLDED.splitlines()
    ]
    folded_total = sum(n for _, n in lines)
    innermost, weighted = Counter(), Counter()
    for frames, n in lines:
        innermost[frames[-1]] += 1
        weighted[frames[-1]] += n
    span_functions = Counter(n["function"] for n in nodes)
    cpu = [v for _, t, u, v in doc["span_values"] if (t, u) == ("cpu", "ns")]
    waiting = [s.waiting_ns for s in session.spans if s.waiting_ns]  # a row per span that waited
    assert len(cpu) == len(nodes)  # cpu_time: a value per span
    wall = Counter()
    for n in nodes:
        wall[n["function"]] += n["end_ns"] - n["start_ns"]
    return {
        "samples_per_source": [
            (spans_id, "in-process", len(nodes)),
            (folded_id, "folded", len(lines)),
        ],
        "innermost_function": sorted(
            [(spans_id, f, c) for f, c in span_functions.items()]
            + [(folded_id, f, c) for f, c in innermost.items()]
        ),
        "values_by_type": sorted(
            [
                (spans_id, "cpu", "ns", len(cpu), sum(cpu)),
                (
                    spans_id,
                    "self",
                    "ns",
                    len(nodes),
                    sum(n["active_ns"] - sum(c["active_ns"] for c in n["children"]) for n in nodes),
                ),
                (
                    spans_id,
                    "wall",
                    "ns",
                    len(nodes),
                    sum(n["end_ns"] - n["start_ns"] for n in nodes),
                ),
                *([(spans_id, "waiting", "ns", len(waiting), sum(waiting))] if waiting else []),
                (folded_id, "samples", "count", len(lines), folded_total),
            ]
        ),
        "values_key": [],
        "stack_depths": [
            (spans_id, max(n["depth"] for n in nodes) + 1, sum(n["depth"] + 1 for n in nodes)),
            (folded_id, max(len(f) for f, _ in lines), sum(len(f) for f, _ in lines)),
        ],
        "captured": [(spans_id, unix_ns / 1e9), (folded_id, None)],
        "wall_by_innermost": sorted(wall.items()),
        "samples_by_innermost": sorted(weighted.items()),
    }


def check(run, session, spans_id, folded_id):
    """Runs every query with `run(sql) -> rows` and compares (in one order:
    PostgreSQL's collation may sort names otherwise; PostgreSQL's sums are
    numerics, equal to the integers; its seconds are within a rounding)."""
    want = expected(session, spans_id, folded_id)
    for name, sql in SPEC_QUERIES.items():
        got = sorted((tuple(r) for r in run(sql)), key=str)
        if name == "captured":
            got = [(i, t if t is None else pytest.approx(t, abs=1e-6)) for i, t in got]
        assert got == sorted(want[name], key=str), (name, got, want[name])


def test_spec_001s_queries_run_as_written_on_sqlite(tmp_path):
    with open_store(tmp_path / "spec.db") as store:
        session, spans_id, folded_id = fill(store, tmp_path)
    conn = _connect(tmp_path / "spec.db")
    check(lambda sql: conn.execute(sql).fetchall(), session, spans_id, folded_id)


def test_spans_holds_calls_and_the_docs_count_counts_calls_only(tmp_path):
    """docs/store.md's `count(*)` over `spans`: the capture's calls per name,
    none of the folded file's 3 sample rows."""
    with open_store(tmp_path / "calls.db") as store:
        session, _, _ = fill(store, tmp_path)
    conn = _connect(tmp_path / "calls.db")
    got = dict(conn.execute("SELECT name, count(*) AS calls FROM spans GROUP BY name").fetchall())
    assert got == dict(Counter(n["label"] for n in _walk(session.to_tree())))
    assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == sum(got.values()) + 3


def test_spec_001s_queries_run_as_written_in_duckdb(tmp_path):
    """The same text through DuckDB's sqlite extension (docs/store.md, "Ad-hoc SQL")."""
    from _helpers import duckdb_with

    with open_store(tmp_path / "duck.db") as store:
        session, spans_id, folded_id = fill(store, tmp_path)
    con = duckdb_with("sqlite", tmp_path)
    con.execute(f"ATTACH '{tmp_path / 'duck.db'}' AS p (TYPE sqlite, READ_ONLY)")
    con.execute("USE p")
    check(lambda sql: con.execute(sql).fetchall(), session, spans_id, folded_id)
