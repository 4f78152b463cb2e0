"""mlprof-ebpf --continuous, bounded on disk (issue 40, item 2), with real BPF
and mlprof-usdt-storm as the target: a directory sink never holds more than
--sink-max-mb of the agent's files (watched from outside while the agent
runs), the oldest go first and are counted, files past --sink-max-age go at
start, and nothing else in the directory is touched; a spool item is
delivered only to the sink it was written for, and a run with another sink
says in one line what it left there."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import sqlite3
import subprocess
import time

import pytest

STOPPED = re.compile(
    r"^mlprof-ebpf: stopped: delivered (\d+), spooled (\d+), dropped (\d+); sink (.*)$", re.M
)
RETENTION = re.compile(r"; directory ([\d.]+) MB in (\d+) files? \(bound ([^)]*)\), pruned (\d+)")
# The names the agent gives its items: NODE_WORKLOAD_YYYYMMDDTHHMMSSZ_RUN.N.json.gz.
ITEM = re.compile(r"^[A-Za-z0-9.-]+_[A-Za-z0-9.-]+_\d{8}T\d{6}Z_[0-9a-f]+\.\d+\.json\.gz$")


@pytest.fixture
def storm(usdt_storm_path):
    """mlprof-usdt-storm at a steady rate, for the test's length; its pid."""
    procs = []

    def start(rate: int = 500, spans: int = 37, seconds: int = 120) -> int:
        p = subprocess.Popen(
            [
                usdt_storm_path,
                "--sessions",
                "0",
                "--seconds",
                str(seconds),
                "--rate",
                str(rate),
                "--spans-per-session",
                str(spans),
                "--wait-attached",
                "60",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        return int(p.stdout.readline().split()[1])

    yield start
    for p in procs:
        p.kill()
        p.wait()
        p.stdout.close()


def agent_files(directory) -> dict:
    """name -> size of the files in `directory` named as the agent's items (the oracle's own reading)."""
    out = {}
    for e in os.scandir(directory):
        if e.is_file(follow_symlinks=False) and ITEM.match(e.name):
            out[e.name] = e.stat(follow_symlinks=False).st_size
    return out


def stdout_of(run) -> str:
    with run._cv:
        return "".join(run._out)


def test_the_directory_sink_never_holds_more_than_its_bound_and_counts_what_it_prunes(
    agent, storm, tmp_path
):
    sink, spool = tmp_path / "profiles", tmp_path / "spool"
    sink.mkdir()
    # Not the agent's: a user's file and one named almost like an item.
    (sink / "notes.json.gz").write_bytes(b"n" * 300_000)
    (sink / "node_pid-1_20261128T053000Z.json.gz").write_bytes(b"x" * 1000)
    # A previous run's item, 8 days old, and a fresh one: the first goes at start.
    old, fresh = (
        sink / "node-a_pid-9_20261120T000000Z_1a.1.json.gz",
        sink / "node-a_pid-9_20261128T000000Z_1a.2.json.gz",
    )
    old.write_bytes(b"o" * 1000)
    fresh.write_bytes(b"f" * 1000)
    eight_days = time.time() - 8 * 86400
    os.utime(old, (eight_days, eight_days))
    pid = storm(rate=300)  # items of about 160 KB a second: six fit
    bound = 1 << 20
    run = agent(
        "--pid",
        str(pid),
        "--continuous",
        "--rotate",
        "1s",
        "--sink",
        str(sink),
        "--spool",
        str(spool),
        "--sink-max-mb",
        "1",
        "--sink-max-age",
        "7d",
    )
    run.wait_attached(pid)
    assert not old.exists() and fresh.exists()
    seen, most = set(), 0
    deadline = time.monotonic() + 60
    # Watched from outside while the agent writes: until it has pruned a few.
    while time.monotonic() < deadline:
        files = agent_files(sink)
        seen |= set(files)
        most = max(most, sum(files.values()))
        assert most <= bound, files
        if len(seen - set(files)) >= 4:
            break
        time.sleep(0.02)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    files = agent_files(sink)
    assert sum(files.values()) <= bound and len(seen - set(files)) >= 4, (seen, files)
    # Nothing else was touched.
    assert (sink / "notes.json.gz").stat().st_size == 300_000
    assert (sink / "node_pid-1_20261128T053000Z.json.gz").exists()
    # The final line: delivered, held and pruned, as the directory shows them.
    m = STOPPED.search(result.stdout)
    assert m, result.stdout
    delivered = int(m.group(1))
    kept = RETENTION.search(m.group(4))
    assert kept, m.group(0)
    assert kept.group(3) == "1 MB, 7d"
    assert int(kept.group(2)) == len(files)
    assert abs(float(kept.group(1)) - sum(files.values()) / 2**20) <= 0.05
    # Every item delivered is a file there or was pruned, and so is the old one:
    # pruned = delivered + the two of a previous run - what is there now.
    assert int(kept.group(4)) == delivered + 2 - len(files), (m.group(0), sorted(files))
    # Each rotation's line says it too, the count never going down.
    pruned = [int(x.group(4)) for x in RETENTION.finditer(result.stdout)]
    assert len(pruned) >= 3 and pruned == sorted(pruned) and pruned[0] >= 1


def test_a_store_sink_says_the_directory_bounds_are_ignored(agent, storm, tmp_path):
    """A DaemonSet's --sink changed to a store, its bounds left: one line, and it runs."""
    pid = storm(rate=100, spans=3)
    run = agent(
        "--pid",
        str(pid),
        "--continuous",
        "--sink",
        f"sqlite:///{tmp_path}/p.db",
        "--spool",
        str(tmp_path / "spool"),
        "--sink-max-mb",
        "10",
        "--sink-max-age",
        "1d",
    )
    run.wait_attached(pid)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    said = [l for l in result.stderr.splitlines() if "--sink-max" in l]
    assert said == [
        f"mlprof-ebpf: --sink-max-mb bounds a directory sink; sqlite:///{tmp_path}/p.db keeps what it "
        "is given (its own retention is the store's or server's): ignored"
    ], result.stderr
    assert STOPPED.search(result.stdout) and "; directory " not in result.stdout, result.stdout


def spooled(spool) -> dict:
    """key -> the sink recorded, of every item waiting in a spool directory (its .item files)."""
    out = {}
    for p in glob.glob(os.path.join(str(spool), "*.item")):
        with open(p) as f:
            meta = json.load(f)
        out[meta["key"]] = meta["sink"]
    return out


def test_a_spooled_item_goes_only_to_the_sink_it_was_written_for(agent, storm, tmp_path):
    """A scratch run into a SQLite file leaves an item in the spool (its store's
    directory is not there, and the agent is killed); the next run, given a
    production directory, delivers none of it and says so at start and at
    the end; a run with the scratch store again delivers it there."""
    spool, scratch_dir, prod = tmp_path / "spool", tmp_path / "scratch", tmp_path / "prod"
    prod.mkdir()
    scratch = f"sqlite:///{scratch_dir}/p.db"
    pid = storm(rate=200, spans=5)
    first = agent(
        "--pid",
        str(pid),
        "--continuous",
        "--rotate",
        "1s",
        "--sink",
        scratch,
        "--spool",
        str(spool),
        "--retry-max",
        "1s",
    )
    first.wait_attached(pid)
    deadline = time.monotonic() + 30
    while not spooled(spool) and time.monotonic() < deadline:
        time.sleep(0.1)
    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    left = spooled(spool)
    assert left and set(left.values()) == {f"sqlite:{scratch_dir}/p.db"}, left

    second = agent(
        "--pid",
        str(pid),
        "--continuous",
        "--rotate",
        "1h",
        "--sink",
        str(prod),
        "--spool",
        str(spool),
    )
    second.wait_attached(pid)
    time.sleep(1.5)  # its spool thread runs meanwhile: nothing of the scratch run may go to prod
    result = second.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    n = len(left)
    said = [l for l in result.stderr.splitlines() if l.startswith(f"mlprof-ebpf: spool {spool}:")]
    assert len(said) == 1 and re.fullmatch(
        rf"mlprof-ebpf: spool {re.escape(str(spool))}: 0 items of a previous run to deliver; left there, not for this "
        rf"sink \(dir:{re.escape(str(prod))}\): {n} items? \([\d.]+ MB\) for sqlite:{re.escape(str(scratch_dir))}/p\.db",
        said[0],
    ), result.stderr
    m = STOPPED.search(result.stdout)
    assert m and int(m.group(1)) == 1, result.stdout  # its own partial period only
    assert re.search(
        rf"; left in {re.escape(str(spool))} for other sinks: {n} items? \([\d.]+ MB\) for "
        rf"sqlite:{re.escape(str(scratch_dir))}/p\.db$",
        m.group(4),
    ), m.group(0)
    delivered_to_prod = {f for f in os.listdir(prod)}
    assert len(delivered_to_prod) == 1, delivered_to_prod
    assert not any(k + ".json.gz" in delivered_to_prod for k in left)
    assert set(left) <= set(spooled(spool))  # still waiting for their sink

    scratch_dir.mkdir()
    third = agent(
        "--pid",
        str(pid),
        "--continuous",
        "--rotate",
        "1h",
        "--sink",
        scratch,
        "--spool",
        str(spool),
    )
    third.wait_attached(pid)
    result = third.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    assert (
        f"{n} item{'s' if n > 1 else ''} of a previous run to deliver" in result.stderr
    ), result.stderr
    conn = sqlite3.connect(f"{scratch_dir}/p.db")
    try:
        keys = {
            r[0]
            for r in conn.execute("SELECT value FROM source_labels WHERE key = 'label.agent_item'")
        }
    finally:
        conn.close()
    assert set(left) <= keys, (left, keys)
    assert not set(left) & set(spooled(spool))
