"""The profile store on a real PostgreSQL server (issue 18): the same
schema and queries as SQLite, several writers at once, and a server that
is down is a clear error, fast."""

from __future__ import annotations

import os
import sys
import time

import pytest
from _postgres import free_port, postgres_server
from test_store import (
    DUCKDB_QUERY,
    _document,
    _encode,
    _expected_p95,
    _old_store,
    _predict,
    _walk,
    _writer,
)

from mlflow_profiler import profiling
from mlflow_profiler.store import StoreError, migrate, open_store


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url


def _fresh(pg_url, name):
    """A database of its own for one test."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return pg_url.rsplit("/", 1)[0] + "/" + name


def test_a_profile_read_back_is_the_same_tree(pg_url):
    url = _fresh(pg_url, "roundtrip")
    with profiling(depth=-1, capture_io=True, all_threads=True) as session:
        _predict([3, 4, 5])
    with open_store(url) as store:
        source = store.add(session, labels={"model": "fraud"})
        back = store.load(source)
        assert back.to_tree() == session.to_tree()
        got, want = _document(back), _document(session)
        assert got.pop("meta") == {**want.pop("meta"), "label.model": "fraud"}
        assert got == want
        (row,) = store.sources()
        assert row["model"] == "fraud" and row["spans"] == len(list(_walk(session.to_tree())))
    # Opened again: the schema is there, the version checked, nothing added twice.
    with open_store(url) as store:
        assert [s["source_id"] for s in store.sources()] == [source]


def _named(text):
    return len(text)


def test_texts_that_copy_must_escape_come_back_unchanged(pg_url):
    # Batches of 64 rows or more go to the server as COPY text (made by the
    # core): backslashes, tabs, newlines, NULLs in many io_summaries rows.
    url = _fresh(pg_url, "escapes")
    texts = ["back\\slash", "tab\there", "new\nline", "cr\rhere", "\\N", "", "plain"]
    with profiling(depth=-1, capture_io=True) as session:
        for i in range(120):
            _named(texts[i % len(texts)] + str(i))
    with open_store(url) as store:
        back = store.load(store.add(session))
    assert back.to_tree() == session.to_tree()
    got = [(r.input_summary, r.output_summary) for r in back.spans]
    assert got == [(r.input_summary, r.output_summary) for r in session.spans]
    reprs = {r.input_summary["text"].repr_short for r in back.spans if r.input_summary}
    assert len(reprs) == 120 and any("\\" in r for r in reprs)


def test_several_writers_at_once(pg_url, tmp_path):
    url = _fresh(pg_url, "writers")
    writers = [_writer(tmp_path, url, 5, 20, str(i)) for i in range(4)]
    per_add = []
    for w in writers:
        out, err = w.communicate(timeout=300)
        words = out.split()
        assert w.returncode == 0 and words[:1] == ["ready"] and words[-1:] == ["done"], (out, err)
        per_add.append(
            int(words[1])
        )  # 20 calls of 101 spans, more where a comprehension is a frame
    import psycopg

    with psycopg.connect(url) as conn:
        per_writer = dict(
            conn.execute(
                "SELECT value, count(*) FROM source_labels WHERE key = 'label.writer' GROUP BY value"
            ).fetchall()
        )
        assert per_writer == {str(i): 5 for i in range(4)}
        assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 5 * sum(per_add)
        # Each function and call path once, whoever wrote it first (node,
        # leaf; and the comprehension's frame before 3.12).
        functions = conn.execute("SELECT count(*) FROM functions").fetchone()[0]
        assert functions == (2 if sys.version_info >= (3, 12) else 3)
        assert conn.execute("SELECT count(*) FROM stacks").fetchone()[0] == 1 + functions


def test_a_server_that_is_down_is_a_clear_error_at_once():
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    started = time.monotonic()
    with pytest.raises(StoreError) as err:
        open_store(url)
    assert time.monotonic() - started < 10
    assert err.value.kind == "unreachable"
    assert str(err.value).startswith(url + ": cannot reach the PostgreSQL store: "), str(err.value)


def test_the_password_stays_out_of_messages(pg_url):
    url = pg_url.replace("postgres@", "postgres:hunter2@").rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreError) as err:
        open_store(url)
    assert "hunter2" not in str(err.value) and "postgres:***@" in str(err.value)


def test_sqlite_and_postgres_answer_the_same_query(pg_url, tmp_path):
    """One schema, one set of queries: the spans view over both engines."""
    url = _fresh(pg_url, "same")
    with profiling(depth=-1) as session:
        _encode([3, 4, 5])
    query = "SELECT name, depth, wall_ns, self_ns FROM spans ORDER BY sample_id"
    answers = []
    for target in (tmp_path / "same.db", url):
        with open_store(target) as store:
            store.add(session)
            answers.append([tuple(r) for r in store._driver.query(query, ())])
    assert answers[0] == answers[1] and len(answers[0]) == len(list(_walk(session.to_tree())))
    assert os.path.exists(tmp_path / "same.db")


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_top_by_function_sums_what_sqlite_sums(pg_url, tmp_path):
    """top --by function's GROUP BY per call path on PostgreSQL (sum of a
    bigint is a numeric there, cast back): the same rows as from SQLite."""
    from mlflow_profiler import analysis

    url = _fresh(pg_url, "byfunction")
    sessions = []
    for _ in range(3):
        with profiling(depth=-1) as session:
            _fib(9)
            _encode([3, 4])
        sessions.append(session)
    for target in (tmp_path / "fn.db", url):
        with open_store(target) as store:
            for s in sessions:
                store.add(s)
    for depth in (None, 2):
        rows = analysis.top([url], by="function", depth=depth).rows
        assert (
            rows == analysis.top([tmp_path / "fn.db"], by="function", depth=depth).rows
            and len(rows) >= 3
        )


def test_duckdb_reads_the_postgres_store(pg_url, tmp_path):
    from _helpers import duckdb_with

    url = _fresh(pg_url, "duck")
    sessions = []
    with open_store(url) as store:
        for n in range(3):
            with profiling(depth=-1) as session:
                _encode(list(range(3, 3 + n + 1)))
            store.add(session)
            sessions.append(session)
    con = duckdb_with("postgres", tmp_path)
    host_port = url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    con.execute(
        f"ATTACH 'host={host} port={port} dbname=duck user=postgres' AS p (TYPE postgres, READ_ONLY)"
    )
    assert [tuple(r) for r in con.execute(DUCKDB_QUERY).fetchall()] == _expected_p95(sessions)


def test_migrate_brings_an_older_postgres_store_up_to_date(pg_url):
    import psycopg

    url = _fresh(pg_url, "migrate")
    with profiling(depth=-1) as session:
        _predict([3, 4])
    with psycopg.connect(url, autocommit=True) as conn:
        _old_store(conn, "2.0", "postgres")
    with open_store(url) as store:  # written in 2.0's format
        source = store.add(session, labels={"model": "m"})
        before = store.load(source).to_tree()
    assert migrate(url) == ("2.0", "2.6")
    assert migrate(url) == ("2.6", "2.6")
    spans = len(list(_walk(before)))
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT indexname FROM pg_indexes WHERE indexname = 'source_labels_by_value'"
        ).fetchall()
        assert conn.execute(
            "SELECT source_id, count(*) FROM samples GROUP BY source_id"
        ).fetchall() == [(source, spans)]
        unix_ns = int(session._built().meta["start_unix_ns"])
        # the server divides exactly; unix_ns / 1e9 here rounds twice
        seconds, ns = conn.execute("SELECT source_timestamp, start_unix_ns FROM sources").fetchone()
        assert (seconds, ns) == (pytest.approx(unix_ns / 1e9, abs=1e-6), unix_ns)
        assert conn.execute(
            "SELECT count(*) FROM sample_values WHERE type = 'wall'"
        ).fetchone() == (spans,)
    with open_store(url) as store:
        assert store.source_ids({"model": "m"}) == [source]
        assert store.load(source).to_tree() == before


def test_spec_001s_queries_run_as_written_on_postgres(pg_url, tmp_path):
    import psycopg
    from test_store_spec001 import check, fill

    url = _fresh(pg_url, "spec")
    with open_store(url) as store:
        session, spans_id, folded_id = fill(store, tmp_path)
    with psycopg.connect(url, autocommit=True) as conn:
        check(lambda sql: conn.execute(sql).fetchall(), session, spans_id, folded_id)


def test_rm_and_the_same_file_twice_on_postgres(pg_url, tmp_path):
    import psycopg
    from test_store_hygiene import FOLDED, _mlprof

    url = _fresh(pg_url, "rm")
    folded = tmp_path / "spy.folded"
    folded.write_text(FOLDED)
    with profiling(depth=-1) as threads:
        _predict([3, 4])
    with open_store(url) as store:
        gone = store.add(threads)
        stacks = store.add(folded)
        with pytest.raises(StoreError, match="already in the store as source 2"):
            store.add(folded)
        kept = store.add(folded, allow_duplicate=True)
        want = store.load_stacks(kept).stacks()
    with psycopg.connect(url, autocommit=True) as conn:
        total = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        spans = conn.execute(
            "SELECT count(*) FROM samples WHERE source_id = %s", (gone,)
        ).fetchone()[0]
        assert spans == len(list(_walk(threads.to_tree())))
        run = _mlprof("rm", url, gone, stacks)
        assert run.returncode == 0, run.stderr
        for table in ("sources", "source_labels", "sessions", "samples"):
            assert (
                conn.execute(
                    f"SELECT count(*) FROM {table} WHERE source_id IN (%s, %s)", (gone, stacks)
                ).fetchone()[0]
                == 0
            ), table
        # The folded file's 3 lines are 3 samples, each with its count as a value.
        assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == total - spans - 3
        assert (
            conn.execute("SELECT count(*) FROM lanes").fetchone()[0] == 1
        )  # the kept source's one thread
        assert conn.execute("SELECT count(*), sum(value) FROM sample_value_rows").fetchone() == (
            3,
            18,
        )  # its samples' counts
    with open_store(url) as store:
        assert [r["source_id"] for r in store.sources()] == [kept]
        assert store.load_stacks(kept).stacks() == want
    run = _mlprof("rm", url, gone)
    assert run.returncode == 2 and f"no source {gone}" in run.stderr


def test_a_read_only_command_on_an_empty_database_creates_no_tables(pg_url):
    import psycopg
    from test_store_hygiene import _mlprof

    url = _fresh(pg_url, "empty")
    for argv in (["show", url], ["top", url], ["migrate", url]):
        run = _mlprof(*argv)
        assert run.returncode == 2 and "there is no store here" in run.stderr, run
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone() == (0,)


class _Small:
    def featurize(self, X):
        return X * 2

    def predict(self, X):
        return self.featurize(X)[:, 0]


def test_trend_on_postgres_gives_what_sqlite_gives(pg_url, tmp_path):
    """mlprof trend over the same sessions in SQLite and PostgreSQL: the same
    series, change points, verdicts and I/O drift (the drift query's GROUP
    BY and the paths' names are SQL both engines must read alike)."""
    import numpy as np

    from mlflow_profiler import analysis

    url = _fresh(pg_url, "trend")
    sessions = []
    for version, dtype in (("1", "float64"), ("1", "float64"), ("2", "float32"), ("2", "float32")):
        X, model = np.ones((4, 3), dtype=dtype), _Small()
        with profiling(depth=1, capture_io=True) as session:
            for _ in range(5):
                model.predict(X)
        sessions.append((version, session))
    results = []
    for target in (tmp_path / "t.db", url):
        with open_store(target) as store:
            for version, session in sessions:
                store.add(session, labels={"version": version})
        results.append(analysis.trend(target, permutations=99))
    lite, pg = results
    assert pg.paths == lite.paths and pg.drift == lite.drift and pg.groups == lite.groups
    assert sorted((d["path"][-1], d["role"], d["name"], tuple(d["changed"])) for d in pg.drift) == [
        ("_Small.featurize", "in", "X", ("dtype",)),
        ("_Small.featurize", "out", "", ("dtype",)),
        ("_Small.predict", "in", "X", ("dtype",)),
        ("_Small.predict", "out", "", ("dtype",)),
    ]
