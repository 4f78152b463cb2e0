"""Stop signals never lose a capture silently (docs/ebpf.md, "Exit status"):
the first SIGINT/SIGTERM stops the capture, a second skips only what is
left to wait for (the late records in the ring buffer, the sink's
delivery) and still writes what was captured, a third exits at once with
one line saying what it discarded. Real agent, real Python target, a real
SQLite lock held by another connection, a sink that is not there."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

from conftest import Document

EXIT_SIGINT = 128 + signal.SIGINT


def roots_of(doc: Document, pid: int) -> int:
    return len(doc.roots_of(pid))


def test_two_sigints_50_ms_apart_still_write_the_capture(agent, python_target, tmp_out):
    target = python_target()
    out = tmp_out / "p.json"
    run = agent("--pid", str(target.pid), "-o", str(out))
    run.wait_attached(target.pid)
    calls = target.ask("run nested 30")["calls"]
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    result = run.stop(signal.SIGINT)
    assert result.returncode == 0, result.stderr
    assert roots_of(Document(str(out)), target.pid) == len(calls) == 30
    assert "E2EModel._nested" in result.stdout or "_nested" in result.stdout  # the summary too
    assert "wrote " + str(out) in result.stderr


def test_a_third_signal_exits_at_once_and_says_what_it_discarded(agent, python_target, tmp_out):
    """The store is locked by another writer: the add at the end waits for
    it (sqlite's busy timeout). A second SIGINT cannot hurry that; the third
    leaves at once, with one line, and -o (written before the store) is whole."""
    target = python_target()
    db = tmp_out / "s.db"
    out = tmp_out / "p.json"
    run = agent("--pid", str(target.pid), "-o", str(out), "--store", str(db))
    run.wait_attached(target.pid)
    target.ask("run nested 5")
    lock = sqlite3.connect(str(db), isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        run.proc.send_signal(signal.SIGINT)
        run.wait_for("wrote " + str(out))  # then it waits for the store
        time.sleep(0.5)
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        assert run.proc.poll() is None  # a second only hurries: it is still at the store
        t0 = time.monotonic()
        result = run.stop(signal.SIGINT, timeout=10)
        assert time.monotonic() - t0 < 2
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert result.returncode == EXIT_SIGINT, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "mlprof-ebpf: a third stop signal: exiting now; what was not written yet is discarded"
    )
    assert roots_of(Document(str(out)), target.pid) == 5  # -o was written whole before
    with sqlite3.connect(str(db)) as conn:  # nothing of the profile in the store
        assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 0


def test_a_second_sigterm_stops_waiting_for_the_sink_and_keeps_the_items(
    agent, python_target, tmp_path
):
    """--continuous with an MLflow sink that is not there: the first SIGTERM
    spools the partial period and waits up to 10 s for delivery; a second
    one ends the wait, the item stays in the spool for the next run."""
    target = python_target()
    spool = tmp_path / "spool"
    run = agent(
        "--pid",
        str(target.pid),
        "--continuous",
        "--sink",
        "http://127.0.0.1:9/",
        "--spool",
        str(spool),
    )
    run.wait_attached(target.pid)
    target.ask("run nested 5")
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)  # spooled, the delivery retried
    t0 = time.monotonic()
    result = run.stop(signal.SIGTERM, timeout=15)
    assert time.monotonic() - t0 < 3, result.stderr
    assert result.returncode == 0, result.stderr
    assert (
        f"a second SIGTERM: not waiting for the sink; 1 item stays in {spool} for the next run"
        in result.stderr
    )
    items = list(spool.glob("*.item"))
    assert len(items) == 1
    assert json.loads(items[0].read_text())["sessions"] == 5
