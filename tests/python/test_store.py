"""The profile store (issue 18, docs/store.md), SQLite: a profile added and
read back is the same tree, with its provenance; the schema's keys are
enforced; versions are checked; one add is all there or not there, also
when its writer is killed, and two processes can add at once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import mlflow_profiler
from mlflow_profiler import profile_span, profiling
from mlflow_profiler._files import loads
from mlflow_profiler.store import StoreError, open_store

ENGINES = ["native", "reference"]
_connections: list = []


def _connect(path, **kw) -> sqlite3.Connection:
    """A connection of the test's own, closed when the test ends (3.13 warns
    of a connection left open, and warnings are errors here)."""
    conn = sqlite3.connect(path, **kw)
    _connections.append(conn)
    return conn


@pytest.fixture(autouse=True)
def _close_connections():
    yield
    while _connections:
        _connections.pop().close()


def _document(session) -> dict:
    """The session's document with string and function ids resolved, so two
    documents of one tree compare equal whatever order their tables are in."""
    doc = json.loads(session.to_json())
    strings = doc.pop("strings")
    fields = doc.pop("function_fields")
    functions = []
    for row in doc.pop("functions"):
        f = dict(zip(fields, row))
        for key in ("name", "module", "file"):
            f[key] = strings[f[key]]
        functions.append(f)
    spans = []
    for row in doc["spans"]:
        span = dict(zip(doc["span_fields"], row))
        span["function"] = functions[span["function"]]
        span["label"] = strings[span["label"]] if span["label"] else ""
        spans.append(span)
    doc["spans"] = spans
    return doc


def _work(n):
    return sum(i * i for i in range(n))


@profile_span("encode step")
def _encode(x):
    return [_work(v) for v in x]


def _gen(k):
    for i in range(k):
        yield _work(i + 10)


def _predict(x):
    out = _encode(x)
    out.append(sum(_gen(3)))
    try:
        {}["missing"]
    except KeyError:
        pass
    worker = threading.Thread(target=_work, args=(2000,), name="worker-1")
    worker.start()
    worker.join()

    async def fan_out():
        return await asyncio.gather(*(asyncio.sleep(0, result=_work(v)) for v in x))

    out.extend(asyncio.run(fan_out()))
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_a_profile_read_back_is_the_same_tree(tmp_path, engine):
    """Threads, asyncio tasks, a generator's segments, a label, a caught
    exception, I/O summaries, meta and statistics all come back."""
    with profiling(depth=-1, engine=engine, capture_io=True, all_threads=True) as session:
        expected = _predict([3, 4, 5])
    assert expected[:3] == [5, 14, 30]
    with open_store(tmp_path / "profiles.db") as store:
        source = store.add(session, labels={"model": "fraud", "version": "3"})
        back = store.load(source)
        assert back.to_tree() == session.to_tree()
        got, want = _document(back), _document(session)
        # Its labels are part of its provenance now.
        assert got.pop("meta") == {**want.pop("meta"), "label.model": "fraud", "label.version": "3"}
        assert got == want
        assert back.format_tree() == session.format_tree()
        (row,) = store.sources()
        assert row["source_id"] == source and row["model"] == "fraud" and row["version"] == "3"
        assert row["source_type"] == "in-process" and row["pid"] == os.getpid()
        assert row["spans"] == len(json.loads(session.to_json())["spans"]) and row["sessions"] == 1
        labels = store.labels(source)
        assert (
            labels["label.model"] == "fraud" and labels["engine"] == session.statistics()["engine"]
        )
    # The keys are declared and enforced: nothing dangles.
    conn = _connect(tmp_path / "profiles.db")
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(
            "INSERT INTO samples (sample_id, lane_id, stack_id) VALUES (999999, 424242, 0)"
        )


def test_the_label_prefix_and_the_copy_statement_are_the_cores():
    """The store's "label." prefix and which INSERTs go as COPY are defined
    once, in the core (store/store.h, store/store_copy.h); Python reads them
    from _core rather than writing them again."""
    from mlflow_profiler import _core, store

    assert store.LABEL_PREFIX == _core.STORE_LABEL_PREFIX == "label."
    assert (
        _core.store_copy_statement("INSERT INTO t (a, b) VALUES (?, ?)")
        == "COPY t (a, b) FROM STDIN"
    )
    assert _core.store_copy_statement("INSERT INTO t (a) VALUES (?) ON CONFLICT DO NOTHING") == ""


def test_sources_share_functions_and_call_paths(tmp_path):
    """Ten captures of one predict: ten sources, each span a row, but each
    function, location and call path stored once."""
    with open_store(tmp_path / "s.db") as store:
        for _ in range(10):
            with profiling(depth=-1) as session:
                _encode([3, 4])
            store.add(session)
        spans = sum(s["spans"] for s in store.sources())
    nodes = list(_walk(session.to_tree()))
    paths = {
        tuple(n["call_path"]) if isinstance(n["call_path"], list) else n["call_path"] for n in nodes
    }
    conn = _connect(tmp_path / "s.db")
    count = lambda table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: E731
    assert count("sources") == 10 and count("samples") == spans == 10 * len(nodes)
    assert count("functions") == len({(n["function"], n["module"]) for n in nodes})
    assert count("stacks") == 1 + len(paths)  # the empty stack, then one per call path
    # docs/design/store.md's sample_locations: the stack of each sample, depth 1 its innermost frame (the span itself).
    assert (
        conn.execute("SELECT max(depth) FROM sample_locations").fetchone()[0]
        == max(n["depth"] for n in nodes) + 1
    )
    assert conn.execute("SELECT count(*) FROM sample_locations").fetchone()[0] == 10 * sum(
        n["depth"] + 1 for n in nodes
    )
    names = {r[0] for r in conn.execute("SELECT name FROM spans")}
    assert names == {n["label"] for n in nodes} and "encode step" in names


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n["children"])


def test_kernel_data_of_an_agent_document_comes_back(tmp_path):
    """An agent's document: per-span kernel values, raw off-CPU intervals,
    thread lifetimes, lanes of two processes."""
    with profiling(depth=-1) as session:
        _encode([3, 4])
    doc = json.loads(session.to_json())
    doc["meta"]["source"] = "ebpf"
    doc["lanes"][0]["pid"], doc["lanes"][0]["session"] = 777, 2
    doc["span_value_fields"] = ["span", "type", "unit", "value"]
    doc["span_values"] = [
        [0, "cpu", "ns", 1000],
        [0, "off_cpu", "ns", 3000],
        [0, "blocked", "ns", 2250],
        [0, "runq", "ns", 750],
        [0, "voluntary_switches", "count", 3],
        [1, "waker", "tid", 4242],
        [1, "waker_blocked", "ns", 1550],
    ]
    start = doc["meta"]["start_ns"]
    doc["kernel"] = {
        "lost_events": 2,
        "off_cpu_fields": [
            "tid",
            "pid",
            "start_ns",
            "wake_ns",
            "end_ns",
            "blocked",
            "waker_tid",
            "prev_state",
        ],
        "off_cpu": [[4242, 777, start + 10, start + 20, start + 30, True, 5000, 1]],
        "thread_fields": [
            "tid",
            "pid",
            "parent_tid",
            "start_ns",
            "end_ns",
            "name",
            "started_under",
            "exit_code",
        ],
        "threads": [[6000, 777, 4242, start + 11, start + 40, "helper", 1, 0]],
    }
    agent = loads(json.dumps(doc))
    with open_store(tmp_path / "k.db") as store:
        source = store.add(agent)
        back = store.load(source)
        assert store.sources()[0]["source_type"] == "ebpf"
    got, want = _document(back), _document(agent)
    assert got["span_values"] == want["span_values"] and got["kernel"] == want["kernel"]
    assert got == want


def _old_store(conn, version, dialect="sqlite"):
    """Makes the empty store mlflow-profiler `version` ("2.0" ...) created,
    in an empty database (an autocommit sqlite3 or psycopg connection): that
    version's tables and views (the core keeps every step's statements), its
    meta, id counters and empty stack, as prepare_store writes them."""
    from mlflow_profiler import _core

    statements = _core.store_schema(dialect, version)
    assert statements, version
    for statement in statements:
        conn.execute(statement)
    conn.execute(
        f"INSERT INTO meta (key, value) VALUES ('format', 'mlflow-profiler-store'), ('version', '{version}')"
    )
    for table in (
        "sources",
        "sessions",
        "lanes",
        "samples",
        "functions",
        "locations",
        "stacks",
        "value_types",
    ):
        conn.execute(f"INSERT INTO id_counters (name, next_id) VALUES ('{table}', 1)")
    conn.execute(
        "INSERT INTO stacks (stack_id, parent_stack_id, location_id, depth) VALUES (0, NULL, NULL, -1)"
    )


def _waiting_agent_document():
    """An agent's document whose predict waited for a lock, for the GIL and
    in another futex (kernel.off_cpu's and kernel.waits' `wait`), and in
    fsync (D) until a kernel worker's I/O completion (`waker`)."""
    with profiling(depth=-1) as session:
        _encode([3, 4])
    doc = json.loads(session.to_json())
    doc["meta"]["source"] = "ebpf"
    doc["lanes"][0]["pid"], doc["lanes"][0]["session"] = 777, 2
    tid = doc["lanes"][0]["native_tid"]
    start = doc["meta"]["start_ns"]
    doc["span_value_fields"] = ["span", "type", "unit", "value"]
    doc["span_values"] = [
        [0, "blocked", "ns", 70],
        [0, "own_blocked", "ns", 70],
        [0, "gil_wait", "ns", 20],
        [0, "lock_wait", "ns", 30],
    ]
    fields = [
        "tid",
        "pid",
        "start_ns",
        "wake_ns",
        "end_ns",
        "blocked",
        "waker_tid",
        "prev_state",
        "syscall",
        "waker_kind",
        "waker_name",
        "wait",
    ]
    doc["kernel"] = {
        "lost_events": 0,
        "off_cpu_fields": fields,
        "off_cpu": [
            [
                tid,
                777,
                start + 10,
                start + 40,
                start + 41,
                True,
                5000,
                1,
                202,
                "task",
                "worker",
                "lock",
            ],
            [
                tid,
                777,
                start + 50,
                start + 70,
                start + 71,
                True,
                5000,
                1,
                202,
                "task",
                "worker",
                "gil",
            ],
            [
                tid,
                777,
                start + 80,
                start + 85,
                start + 86,
                True,
                5000,
                1,
                202,
                "task",
                "worker",
                "futex",
            ],
            [
                tid,
                777,
                start + 90,
                start + 105,
                start + 106,
                True,
                0,
                2,
                74,
                "task",
                "kworker/u4:1",
                "",
            ],
        ],
        "wait_fields": [
            "span",
            "syscall",
            "syscall_name",
            "state",
            "blocked_ns",
            "count",
            "wait",
            "waker",
            "waker_ns",
        ],
        "waits": [
            [0, 202, "futex", "S", 30, 1, "lock", "worker", 30],
            [0, 202, "futex", "S", 20, 1, "gil", "worker", 20],
            [0, 74, "fsync", "D", 15, 1, "", "kworker", 15],
            [0, 202, "futex", "S", 5, 1, "futex", "worker", 5],
        ],
        "thread_fields": [
            "tid",
            "pid",
            "parent_tid",
            "start_ns",
            "end_ns",
            "name",
            "started_under",
            "exit_code",
        ],
        "threads": [],
    }
    return doc


def test_wait_objects_and_wakers_come_back_and_a_2_2_store_keeps_working(tmp_path):
    doc = _waiting_agent_document()
    agent = loads(json.dumps(doc))
    with open_store(tmp_path / "w.db") as store:
        back = _document(store.load(store.add(agent)))
    assert back["kernel"]["off_cpu"] == _document(agent)["kernel"]["off_cpu"]
    assert back["kernel"]["waits"] == _document(agent)["kernel"]["waits"]
    assert [0, "gil_wait", "ns", 20] in back["span_values"] and [0, "lock_wait", "ns", 30] in back[
        "span_values"
    ]
    # A store 2.2 wrote: written in its own format (a futex's objects as one
    # reason, no objects, no wakers), read back so, then migrated to 2.4.
    db = tmp_path / "old.db"
    conn = _connect(db, isolation_level=None)
    _old_store(conn, "2.2")
    with open_store(db) as store:
        source = store.add(agent)
        old = _document(store.load(source))
    waits = {(w[2], w[3]): w[4] for w in old["kernel"]["waits"]}
    assert waits == {("futex", "S"): 55, ("fsync", "D"): 15}
    assert all(iv[-1] == "" for iv in old["kernel"]["off_cpu"])
    done = _mlprof("migrate", db)
    assert done.returncode == 0 and done.stdout == f"{db}: store version 2.2 -> 2.6\n"
    with open_store(db) as store:
        assert _document(store.load(source))["kernel"]["waits"] == old["kernel"]["waits"]
    conn.close()


def test_mlprof_migrate_brings_an_older_store_up_to_date(tmp_path):
    db = tmp_path / "old.db"
    with profiling(depth=-1) as session:
        _predict([200, 300])
    conn = _connect(db, isolation_level=None)
    _old_store(conn, "2.0")
    # A 2.0 store is still read and written, in its own format (minor steps only add).
    with open_store(db) as store:
        source = store.add(session, labels={"model": "m"})
        folded = tmp_path / "spy.folded"
        folded.write_text("main;load 3\nmain;predict 2\n")
        stacks = store.add(folded)
        before = store.load(source).to_tree()
        assert store.source_ids({"model": "m"}) == [source]
        assert store.sources()[0]["tool"] is None  # kept from 2.4 on
    done = _mlprof("migrate", db)
    assert done.returncode == 0 and done.stdout == f"{db}: store version 2.0 -> 2.6\n"
    assert conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == ("2.6",)
    plan = " ".join(
        r[-1]
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT source_id FROM source_labels WHERE key = 'label.model' AND value = 'm'"
        )
    )
    assert "source_labels_by_value" in plan
    # 2.4's step on rows an older version wrote: docs/design/store.md's shapes over them.
    spans = len(list(_walk(before)))
    assert conn.execute(
        "SELECT source_id, count(*) FROM samples GROUP BY source_id ORDER BY 1"
    ).fetchall() == [(source, spans), (stacks, 2)]  # a folded line is one sample
    unix_ns = int(session._built().meta["start_unix_ns"])
    assert conn.execute(
        "SELECT source_timestamp, start_unix_ns FROM sources WHERE source_id = ?", (source,)
    ).fetchone() == (unix_ns / 1e9, unix_ns)
    assert conn.execute("SELECT count(*) FROM spans").fetchone() == (spans,)  # calls only
    assert conn.execute("SELECT count(*) FROM sample_values WHERE type = 'wall'").fetchone() == (
        spans,
    )
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    with open_store(db) as store:
        assert store.load(source).to_tree() == before
        assert [s[1:] for s in store.load_stacks(stacks).stacks()] == [
            (["main", "load"], [3]),
            (["main", "predict"], [2]),
        ]
    again = _mlprof("migrate", db)
    assert again.returncode == 0 and again.stdout == f"{db}: already at store version 2.6\n"
    # No step starts at 1.0: the store is left as it was, and both messages say so.
    conn.execute("UPDATE meta SET value = '1.0' WHERE key = 'version'")
    refused = _mlprof("migrate", db)
    assert refused.returncode == 2 and "no `mlprof migrate` step" in refused.stderr
    assert conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == ("1.0",)
    conn.close()


def test_a_newer_or_older_store_or_another_database_is_refused(tmp_path):
    with open_store(tmp_path / "v.db"):
        pass
    conn = _connect(tmp_path / "v.db", isolation_level=None)
    conn.execute("UPDATE meta SET value = '2.7' WHERE key = 'version'")
    with pytest.raises(StoreError, match="newer mlflow-profiler.*upgrade") as err:
        open_store(tmp_path / "v.db")
    assert err.value.kind == "version"
    conn.execute("UPDATE meta SET value = '1.0' WHERE key = 'version'")
    with pytest.raises(StoreError, match="mlprof migrate") as err:
        open_store(tmp_path / "v.db")
    assert err.value.kind == "version"
    other = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
    other.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    other.close()
    with pytest.raises(StoreError, match="not an mlflow-profiler store") as err:
        open_store(tmp_path / "other.db")
    assert err.value.kind == "corrupt"
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 200)
    with pytest.raises(StoreError) as err:
        open_store(tmp_path / "junk.db")
    assert err.value.kind == "corrupt" and "junk.db" in str(err.value)


def test_rows_the_core_cannot_read_raise_store_error_from_the_api(tmp_path):
    """A store whose rows the core refuses (a function of a kind no version
    wrote; stacks gone that spans name; id_counters emptied, on add) raises
    StoreError, kind 'corrupt', saying the store is damaged, from load(),
    analysis and add(), as SQLite's own refusals do: callers catch one type.
    It was _core.StoreFailure, a RuntimeError."""
    from mlflow_profiler import analysis

    with profiling(depth=-1) as session:
        _encode([3, 4])
    db = tmp_path / "s.db"
    with open_store(db) as store:
        source = store.add(session)
    conn = _connect(db, isolation_level=None)
    conn.execute("UPDATE functions SET kind = 99")
    with open_store(db) as store, pytest.raises(StoreError, match="kind 99 is unknown") as err:
        store.load(source)
    assert err.value.kind == "corrupt" and "\n" not in str(err.value)
    assert str(err.value).startswith("the store is damaged: a function's kind 99")
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("DELETE FROM stacks WHERE stack_id > 0")
    conn.execute("DELETE FROM id_counters")
    conn.close()
    with pytest.raises(StoreError, match="has no path to a root") as err:
        analysis.top(str(db))
    assert err.value.kind == "corrupt"
    with open_store(db) as store, pytest.raises(StoreError, match="id_counters has no row") as err:
        store.add(session)
    assert err.value.kind == "corrupt" and str(err.value).startswith("the store is damaged: ")


def test_every_reader_of_call_paths_names_them_alike_and_refuses_a_loop(tmp_path):
    """One rule names a stack's call path (store/store_paths.h): the
    scans of top() by path and by function, and _core.store_stack_paths
    (the trend's I/O drift). A loop of parents in a damaged store is one
    StoreError from each, not an endless walk (by path it was one: the
    scan's walk had no bound)."""
    from mlflow_profiler import _core, analysis

    with profiling(depth=-1) as session:
        _encode([3, 4])
    db = tmp_path / "s.db"
    with open_store(db) as store:
        store.add(session)
        deepest = store._driver.query("SELECT max(depth) FROM stacks", ())[0][0]
        ids = [
            r[0] for r in store._driver.query("SELECT stack_id FROM stacks WHERE stack_id > 0", ())
        ]
        paths = _core.store_stack_paths(store._driver, store._driver.dialect, ids)
    by_path = {tuple(p["path"]) for p in json.loads(analysis.top(str(db)).to_json())["paths"]}
    assert deepest >= 2 and {tuple(v) for v in paths.values()} == by_path
    # A location's label before its function's name (3.11 and older: a
    # list comprehension is a frame between).
    assert any(p[0] == "encode step" and p[-1] == "_work" for p in by_path)
    conn = _connect(db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = OFF")
    # The root's callee's parent becomes the deepest stack: a loop.
    conn.execute(
        "UPDATE stacks SET parent_stack_id = (SELECT max(stack_id) FROM stacks WHERE depth = ?) "
        "WHERE depth = 0",
        (deepest,),
    )
    conn.close()
    for by in ("path", "function"):
        with pytest.raises(StoreError, match="has no path to a root") as err:
            analysis.top(str(db), by=by)
        assert err.value.kind == "corrupt"
    with open_store(db) as store, pytest.raises(StoreError, match="has no path to a root") as err:
        _core.store_stack_paths(store._driver, store._driver.dialect, ids)
    assert err.value.kind == "corrupt" and str(err.value).startswith("the store is damaged: ")


def test_a_sampled_stack_that_is_its_own_parent_is_one_refusal(tmp_path):
    """Reading an imported source's sampled stacks walks each stack up to
    the root. A damaged store whose stack names itself as its parent (a
    corrupted index did it: fuzz/regressions/fuzz_store_read/) is one
    StoreError from load_stacks(). The walk recursed a level per parent, up
    to 100,000: it overflowed the C stack and ended the process."""
    folded = tmp_path / "spy.folded"
    folded.write_text("main;predict;encode 6\nmain;load 10\n")
    db = tmp_path / "s.db"
    with open_store(db) as store:
        source = store.add(folded)
        assert len(store.load_stacks(source).stacks()) == 2
    conn = _connect(db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("UPDATE stacks SET parent_stack_id = stack_id WHERE depth = 2")
    conn.close()
    with open_store(db) as store, pytest.raises(StoreError, match="a call path is a cycle") as err:
        store.load_stacks(source)
    assert err.value.kind == "corrupt" and "\n" not in str(err.value)


_WRITER = textwrap.dedent("""
    import sys, time
    from mlflow_profiler import profiling
    from mlflow_profiler.store import open_store

    def leaf(i):
        return i
    def node(n):
        return [leaf(i) for i in range(n)]
    with profiling(depth=-1, max_events=10_000_000) as session:
        for _ in range(int(sys.argv[3])):
            node(100)
    store = open_store(sys.argv[1])
    print("ready", session._built().span_count, flush=True)
    for _ in range(int(sys.argv[2])):
        store.add(session, labels={"writer": sys.argv[4]})
    print("done", flush=True)
""")


def _writer(tmp_path, db, adds, loops, name):
    # Written aside and renamed: a writer starting meanwhile reads the whole
    # script (an in-place rewrite could be read empty), and every writer
    # runs the same file, so they share their functions.
    script = tmp_path / "writer.py"
    staged = tmp_path / f"writer-{name}.tmp"
    staged.write_text(_WRITER)
    os.replace(staged, script)
    return subprocess.Popen(
        [sys.executable, str(script), str(db), str(adds), str(loops), name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def test_two_processes_add_at_once_and_nothing_is_lost(tmp_path):
    db = tmp_path / "shared.db"
    open_store(db).close()
    writers = [_writer(tmp_path, db, 5, 20, name) for name in ("a", "b")]
    per_add = []
    for w in writers:
        out, err = w.communicate(timeout=300)
        words = out.split()
        assert w.returncode == 0 and words[:1] == ["ready"] and words[-1:] == ["done"], (out, err)
        per_add.append(
            int(words[1])
        )  # 20 calls of 101 spans, more where a comprehension is a frame (< 3.12)
    conn = _connect(db)
    per_writer = dict(
        conn.execute(
            "SELECT value, count(*) FROM source_labels WHERE key = 'label.writer' GROUP BY value"
        )
    )
    assert per_writer == {"a": 5, "b": 5}
    spans = conn.execute("SELECT sum(sample_count) FROM sessions").fetchone()[0]
    assert spans == conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 5 * sum(per_add)
    assert min(per_add) >= 20 * 101
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


def test_a_writer_killed_mid_add_leaves_the_store_as_it_was(tmp_path):
    """SIGKILL while a large add is in its transaction: the store keeps the
    adds that committed and none of the one that did not."""
    db = tmp_path / "killed.db"
    with open_store(db) as store, profiling(depth=-1) as session:
        _encode([3])
    with open_store(db) as store:
        store.add(session)
    writer = _writer(tmp_path, db, 1000, 3000, "killed")
    assert writer.stdout.readline().split()[0] == "ready"
    wal = tmp_path / "killed.db-wal"
    deadline = time.monotonic() + 120
    base = wal.stat().st_size if wal.exists() else 0
    while time.monotonic() < deadline and (
        not wal.exists() or wal.stat().st_size < base + 1_000_000
    ):
        time.sleep(0.005)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    writer.stderr.close()
    conn = _connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    # Every source there is whole: its sessions hold exactly its samples.
    for source, claimed in conn.execute(
        "SELECT se.source_id, sum(se.sample_count) FROM sessions se GROUP BY se.source_id"
    ).fetchall():
        stored = conn.execute(
            "SELECT count(*) FROM samples s JOIN lanes l ON l.lane_id = s.lane_id "
            "JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id = ?",
            (source,),
        ).fetchone()[0]
        assert stored == claimed, source
    killed = conn.execute(
        "SELECT count(*) FROM source_labels WHERE key = 'label.writer'"
    ).fetchone()[0]
    assert killed < 1000  # it did not finish: the kill landed mid-way
    with open_store(db) as store:
        assert store.load(1).to_tree() == session.to_tree()  # the first add is intact


def _mlprof(*args):
    return subprocess.run(
        [sys.executable, "-m", "mlflow_profiler._cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_mlprof_add_and_show(tmp_path):
    """A good file is added with its labels; a cut-off one is named with its
    cause, adds nothing, and makes the exit status 2; show lists the sources
    and prints one as the tree it was."""
    with profiling(depth=-1) as session:
        _encode([3, 4])
    good = tmp_path / "predict.json.gz"
    session.save(good)
    bad = tmp_path / "cut.json"
    bad.write_text(session.to_json()[:200])
    db = tmp_path / "cli.db"
    run = _mlprof("add", db, good, bad, "--label", "model=fraud", "--label", "version=3")
    assert run.returncode == 2, run
    spans = len(list(_walk(session.to_tree())))
    assert run.stdout == f"{good}: source 1 (in-process), {spans} spans in 1 session\n"
    assert f"{bad}: not added:" in run.stderr and "truncated" in run.stderr
    run = _mlprof("show", db)
    assert run.returncode == 0, run
    lines = run.stdout.splitlines()
    assert lines[0] == f"{db}: 1 source, {spans} spans"
    assert lines[1].split() == [
        "id",
        "type",
        "tool",
        "captured",
        "model",
        "version",
        "host",
        "pid",
        "spans",
        "duration",
    ]
    assert lines[2].split()[:3] == [
        "1",
        "in-process",
        f"mlflow-profiler@{mlflow_profiler.__version__}",
    ]
    assert "fraud" in lines[2].split()
    run = _mlprof("show", db, 1)
    assert run.returncode == 0 and run.stdout == session.format_tree().rstrip("\n") + "\n", run
    run = _mlprof("show", db, 7)
    assert run.returncode == 2 and "no source 7" in run.stderr, run
    run = _mlprof("add", db, good, "--label", "oops")
    assert run.returncode == 2 and "KEY=VALUE" in run.stderr, run


# The query docs/store.md shows: DuckDB reading the store for ad-hoc SQL.
DUCKDB_QUERY = """
SELECT name, count(*) AS calls, quantile_disc(wall_ns, 0.95) AS p95_ns
FROM p.spans GROUP BY name ORDER BY name
"""


def _expected_p95(sessions):
    """The docs query's answer, from the trees: per name, calls and the
    lower 95th percentile (quantile_disc) of the wall time."""
    walls = {}
    for session in sessions:
        for node in _walk(session.to_tree()):
            walls.setdefault(node["label"], []).append(node["end_ns"] - node["start_ns"])
    out = []
    for name in sorted(walls):
        values = sorted(walls[name])
        out.append((name, len(values), values[max(0, -(-95 * len(values) // 100) - 1)]))
    return out


def test_duckdb_reads_the_store(tmp_path):
    from _helpers import duckdb_with

    sessions = []
    with open_store(tmp_path / "duck.db") as store:
        for n in range(5):
            with profiling(depth=-1) as session:
                _encode(list(range(3, 3 + n + 1)))
            store.add(session)
            sessions.append(session)
    con = duckdb_with("sqlite", tmp_path)
    con.execute(f"ATTACH '{tmp_path / 'duck.db'}' AS p (TYPE sqlite, READ_ONLY)")
    assert [tuple(r) for r in con.execute(DUCKDB_QUERY).fetchall()] == _expected_p95(sessions)


def test_mlprof_combine_keeps_provenance_and_convert_writes_any_format(tmp_path):
    with profiling(depth=-1) as one:
        _encode([3])
    with profiling(depth=-1) as two:
        _encode([4, 5])
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with open_store(a) as store:
        store.add(one, labels={"model": "fraud", "version": "1"}, uri="runs:/abc/profile")
    loose = two.save(tmp_path / "two.json.gz")
    # Sampled stacks too: one in the store, one a loose file of another tool's.
    folded = tmp_path / "py-spy.folded"
    folded.write_text("main;predict;encode 6\nmain;load 10\n")
    with open_store(a) as store:
        sampled = store.add(folded, labels={"model": "fraud"})
        want_stacks = store.load_stacks(sampled).stacks()
    # A loose file of another tool's; the folded file again is the content a.db has: not copied twice.
    other = tmp_path / "other.folded"
    other.write_text("main;load 4\n")
    run = _mlprof("combine", b, a, loose, other, folded)
    assert run.returncode == 0 and run.stdout == (
        f"{b}: 4 sources added, 4 sources in all; 1 source already there (the same content), not added\n"
    ), run
    with open_store(b) as store:
        first, stacks, second, loose_stacks = store.sources()
        assert (first["model"], first["version"], first["uri"]) == (
            "fraud",
            "1",
            "runs:/abc/profile",
        )
        assert store.labels(first["source_id"])["label.model"] == "fraud"
        assert second["uri"] == str(loose) and second["source_type"] == "in-process"
        assert store.load(first["source_id"]).to_tree() == one.to_tree()
        assert store.load(second["source_id"]).to_tree() == two.to_tree()
        assert (stacks["kind"], stacks["source_type"], stacks["model"]) == (
            "stacks",
            "folded",
            "fraud",
        )
        assert store.load_stacks(stacks["source_id"]).stacks() == want_stacks
        assert loose_stacks["kind"] == "stacks" and loose_stacks["uri"] == str(other)
        assert (
            stacks["content_hash"] == hashlib.sha256(folded.read_bytes()).hexdigest()
        )  # copied with it
    out = tmp_path / "one.speedscope.json"
    run = _mlprof("convert", a, out, "--source", 1)
    assert run.returncode == 0 and run.stdout.strip() == str(out), run
    assert json.loads(out.read_text())["$schema"].startswith("https://www.speedscope.app")
    run = _mlprof("convert", a, tmp_path / "x.json")
    assert run.returncode == 2 and "--source" in run.stderr
