"""mlprof-ebpf --store: the agent adds its capture to a SQLite profile store
itself (libsqlite3), which Python's open_store then reads as the same tree
the agent's -o document holds; a store it cannot use fails before anything
attaches, and a failed add still leaves -o and stdout written."""

from __future__ import annotations

import json
import sqlite3

from conftest import run_agent


def _sources(db):
    from mlflow_profiler.store import open_store

    with open_store(str(db)) as store:
        return store.sources()


def test_the_capture_is_one_ebpf_source_with_its_labels_and_the_tree_of_the_o_document(
    agent, python_target, tmp_out
):
    from mlflow_profiler import load
    from mlflow_profiler.store import open_store

    target = python_target()
    out, db = tmp_out / "out.json", tmp_out / "s.db"
    run = agent("--pid", str(target.pid), "-o", str(out), "--store", str(db), "--label", "model=m")
    run.wait_attached(target.pid)
    target.ask("run sleep 3")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert f"added to the store {db}: source 1 (ebpf, 3 sessions)" in result.stderr, result.stderr
    assert (
        "3 sessions of 1 process" in result.stdout
    ), result.stdout  # the summary still goes to stdout

    with open_store(str(db)) as store:
        (source,) = store.sources()
        assert source["source_type"] == "ebpf" and source["model"] == "m", source
        assert source["sessions"] == 3, source
        assert store.source_ids(where={"model": "m"}) == [source["source_id"]]
        assert store.labels(source["source_id"])["label.model"] == "m"
        from_store = store.load(source["source_id"])
    from_file = load(str(out))
    assert from_store.to_tree() == from_file.to_tree()
    got, want = json.loads(from_store.to_json()), json.loads(from_file.to_json())
    # The kernel's figures: per-span values and the raw off-CPU intervals of the 20 ms sleeps.
    assert got["span_values"] == want["span_values"] and got["kernel"] == want["kernel"]
    assert any(row[1] == "off_cpu" for row in want["span_values"]), want["span_values"][:5]
    assert len(want["kernel"]["off_cpu"]) >= 3


def test_with_stream_each_session_is_a_source_as_it_finishes(agent, python_target, tmp_out):
    target = python_target()
    db = tmp_out / "s.db"
    run = agent("--pid", str(target.pid), "--stream", "--store", f"sqlite:///{db}")
    run.wait_attached(target.pid)
    target.ask("run nested 2")
    target.ask("run nested 1")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert (
        f"added to the store sqlite:///{db}: sources 1 to 3 (ebpf, 3 sessions)" in result.stderr
    ), result.stderr
    sources = _sources(db)
    assert [s["sessions"] for s in sources] == [1, 1, 1]
    assert all(s["source_type"] == "ebpf" for s in sources)


def test_a_store_of_a_newer_version_fails_before_attaching_naming_the_store(
    agent_path, python_target, tmp_out
):
    db = tmp_out / "new.db"
    assert _sources(db) == []  # created by Python's open_store
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE meta SET value = '9.0' WHERE key = 'version'")
    conn.close()
    target = python_target()
    r = run_agent(agent_path, "--pid", str(target.pid), "--store", str(db))
    assert r.returncode == 1, r.stderr
    # One line, and the only one: nothing was resolved or attached before it.
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(
        f"mlprof-ebpf: cannot use the store {db}: store version 9.0 was written by a newer "
        "mlflow-profiler; this one reads up to "
    ), line
    assert line.endswith(": upgrade mlflow-profiler"), line
    assert target.ask("attached") == {"attached": False}


def test_a_failed_add_is_one_line_and_exit_1_and_the_other_outputs_are_written(
    agent, python_target, tmp_out
):
    db, out = tmp_out / "s.db", tmp_out / "out.json"
    assert _sources(db) == []
    # A real failure inside the add's transaction: sqlite aborts the spans' insert.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "CREATE TRIGGER no_spans BEFORE INSERT ON samples BEGIN SELECT RAISE(ABORT, 'disk quota'); END"
        )
    conn.close()
    target = python_target()
    run = agent("--pid", str(target.pid), "-o", str(out), "--store", str(db))
    run.wait_attached(target.pid)
    target.ask("run nested 2")
    result = run.stop()
    assert result.returncode == 1, result.stderr
    failures = [line for line in result.stderr.splitlines() if "store" in line]
    assert len(failures) == 1 and failures[0].startswith(
        f"mlprof-ebpf: adding to the store {db} failed: disk quota"
    ), result.stderr
    assert "2 sessions of 1 process" in result.stdout, result.stdout
    assert len(json.loads(out.read_text())["spans"]) > 0
    assert _sources(db) == []  # nothing half-added
