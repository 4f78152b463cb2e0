"""mlprof-ebpf --continuous: the node agent's rotation, spool and sinks, with
real BPF, real autoprofiled Python targets (_target.py) and real faults: a
sink directory that appears later, a SQLite store on a tmpfs remounted
read-only, a full tmpfs (ENOSPC), the agent SIGKILLed and OOM-killed by a
real memory cgroup (v1, /sys/fs/cgroup/memory) and restarted, SIGTERM, and
the duty cycle's on and off windows. Every test counts the sessions its own
targets ran: each is delivered once, none is lost once the spool
acknowledged it."""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from typing import Dict, List, Tuple

import pytest
from conftest import require

SUMMARY = re.compile(
    r"^mlprof-ebpf: period (\S+) \+(\S+): (\d+) workloads?, (\d+) sessions?, (\d+) spans?; "
    r"delivered (\d+), spooled (\d+), dropped (\d+); sink (.*)$"
)


# -- helpers ---------------------------------------------------------------------------


def stdout_lines(run) -> List[str]:
    with run._cv:
        return "".join(run._out).splitlines()


def summaries(run) -> List[dict]:
    """The agent's one-line-per-rotation summaries so far, parsed."""
    out = []
    for line in stdout_lines(run):
        m = SUMMARY.match(line)
        if m:
            out.append(
                {
                    "line": line,
                    "start": m.group(1),
                    "length": m.group(2),
                    "workloads": int(m.group(3)),
                    "sessions": int(m.group(4)),
                    "spans": int(m.group(5)),
                    "delivered": int(m.group(6)),
                    "spooled": int(m.group(7)),
                    "dropped": int(m.group(8)),
                    "rest": m.group(9),
                }
            )
    return out


def wait_summary(run, predicate, timeout: float = 40.0) -> dict:
    """Waits for a summary line for which predicate(parsed) holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in summaries(run):
            if predicate(s):
                return s
        if run.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(
        f"no such summary line; stdout:\n{''.join(run._out)}\nstderr:\n{''.join(run.lines)}"
    )


def sessions_of(run) -> int:
    return sum(s["sessions"] for s in summaries(run))


def read_doc(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def doc_sessions(doc: dict) -> set:
    """(pid, session) of every session in a document, from its lanes."""
    return {(int(lane.get("pid", 0)), int(lane.get("session", 0))) for lane in doc["lanes"]}


def dir_items(sink) -> Dict[str, dict]:
    return {
        os.path.basename(p): read_doc(p)
        for p in sorted(glob.glob(os.path.join(str(sink), "*.json.gz")))
    }


def store_items(db) -> List[Tuple[str, str, int]]:
    """(agent_item, label.pid, sessions) of every source in a SQLite store, read with sqlite3."""
    conn = sqlite3.connect(str(db))
    try:
        rows = conn.execute(
            "SELECT k.value, p.value, (SELECT COUNT(*) FROM sessions s WHERE s.source_id = k.source_id) "
            "FROM source_labels k JOIN source_labels p ON p.source_id = k.source_id AND p.key = 'label.pid' "
            "WHERE k.key = 'label.agent_item'"
        ).fetchall()
    finally:
        conn.close()
    return [(r[0], r[1], r[2]) for r in rows]


def spooled_keys(spool) -> Dict[str, int]:
    """The items waiting in a spool directory: key -> sessions (its .item files)."""
    out = {}
    for p in glob.glob(os.path.join(str(spool), "*.item")):
        with open(p) as f:
            meta = json.load(f)
        out[meta["key"]] = meta["sessions"]
    return out


def predicts(target, n: int, mode: str = "nested") -> int:
    target.ask(f"run {mode} {n}")
    return n


def continuous(agent, pids, sink, spool, *extra: str, wrapper=None):
    args = []
    for pid in pids:
        args += ["--pid", str(pid)]
    run = agent(
        *args, "--continuous", "--sink", str(sink), "--spool", str(spool), *extra, wrapper=wrapper
    )
    for pid in pids:
        run.wait_attached(pid)
    return run


@pytest.fixture
def tmpfs(tmp_path):
    """mount -t tmpfs -o size=SIZE at a fresh directory; unmounted at the end."""
    mounted: List[str] = []

    def mount(size: str) -> str:
        path = str(tmp_path / f"tmpfs{len(mounted)}")
        os.mkdir(path)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
            capture_output=True,
            text=True,
        )
        require(r.returncode == 0, f"cannot mount a tmpfs: {r.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], capture_output=True)


# -- rotation and the sinks --------------------------------------------------------------


def test_every_period_is_one_item_per_workload_in_a_directory_sink(agent, python_target, tmp_path):
    a, b = python_target(), python_target()
    sink = tmp_path / "sink"
    sink.mkdir()
    run = continuous(agent, [a.pid, b.pid], sink, tmp_path / "spool", "--rotate", "2s")
    ran = {a.pid: predicts(a, 3), b.pid: predicts(b, 2)}
    wait_summary(run, lambda s: sessions_of(run) >= 5)
    ran[a.pid] += predicts(a, 4)
    wait_summary(run, lambda s: sessions_of(run) >= 9)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr

    items = dir_items(sink)
    per_workload_period: Dict[Tuple[int, str], int] = {}
    delivered: Dict[int, List[tuple]] = {a.pid: [], b.pid: []}
    for name, doc in items.items():
        meta = doc["meta"]
        assert name == meta["agent_item"] + ".json.gz", (name, meta)
        pid = int(meta["pid"])
        assert meta["node"] and meta["process"], meta
        start, end = int(meta["period_start_unix_ns"]), int(meta["period_end_unix_ns"])
        assert 0 < end - start <= 2_000_000_000, meta
        key = (pid, meta["period_start_unix_ns"])
        per_workload_period[key] = per_workload_period.get(key, 0) + 1
        delivered[pid] += sorted(doc_sessions(doc))
    assert all(n == 1 for n in per_workload_period.values()), per_workload_period
    # Every session of each target once: none lost, none twice.
    for pid, n in ran.items():
        assert len(delivered[pid]) == n and len(set(delivered[pid])) == n, (pid, delivered[pid])
    assert (
        len({start for (pid, start) in per_workload_period if pid == a.pid}) >= 2
    )  # a's came in two periods

    lines = summaries(run)
    assert sum(s["sessions"] for s in lines) == sum(ran.values()), result.stdout
    # The directory's retention (the defaults) after the sink on each line.
    held = re.compile(
        rf"{re.escape(str(sink))}; directory [\d.]+ MB in \d+ files? \(bound 1024 MB, 7d\), pruned 0"
    )
    assert all(held.fullmatch(s["rest"]) for s in lines), result.stdout
    # One line per rotation and the end's: nothing else on stdout.
    assert len(result.stdout.splitlines()) == len(lines) + 1, result.stdout
    size = sum(os.path.getsize(sink / name) for name in items) / 2**20
    assert result.stdout.splitlines()[-1] == (
        f"mlprof-ebpf: stopped: delivered {len(items)}, spooled 0, dropped 0; sink {sink}; "
        f"directory {size:.1f} MB in {len(items)} file{'s' if len(items) != 1 else ''} (bound 1024 MB, 7d), pruned 0"
    )


def test_a_spans_resource_reaches_the_agents_documents(agent, python_target, tmp_path):
    """profile_block(resource=) in the target: each delivered call names its
    resource, through the session data the agent reads (docs/capture.md,
    "Resources"), and the instant marked inside it (rate_limit_hit,
    "Instants") is in the document, inside the call."""
    a = python_target()
    sink = tmp_path / "sink"
    sink.mkdir()
    run = continuous(agent, [a.pid], sink, tmp_path / "spool", "--rotate", "2s")
    ran = predicts(a, 3, "resource")
    wait_summary(run, lambda s: sessions_of(run) >= ran)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    calls, marks = [], []
    for doc in dir_items(sink).values():
        fields = doc["span_fields"]
        spans = [dict(zip(fields, row)) for row in doc["spans"]]
        for span in spans:
            if span["resource"]:
                calls.append(
                    (
                        doc["strings"][span["resource"]],
                        doc["strings"][span["label"]]
                        if span["label"]
                        else doc["strings"][doc["functions"][span["function"]][0]],
                        span["end_ns"] - span["start_ns"],
                    )
                )
        for row in doc.get("marks", []):
            m = dict(zip(doc["mark_fields"], row))
            inside = spans[m["span"]] if m["span"] >= 0 else None
            marks.append(
                (
                    doc["strings"][m["name"]],
                    doc["strings"][m["resource"]],
                    inside is not None
                    and inside["resource"] != 0
                    and inside["start_ns"] <= m["ts_ns"] <= inside["end_ns"],
                )
            )
    assert [c[:2] for c in calls] == [("llm", "ask llm")] * ran, calls
    assert all(5_000_000 <= c[2] < 50_000_000 for c in calls), calls
    assert marks == [("rate limited, retry after 0.5s", "llm", True)] * ran, marks


def test_sigterm_spools_and_delivers_the_partial_period_to_a_sqlite_store(
    agent, python_target, tmp_path
):
    from mlflow_profiler.store import open_store

    target = python_target()
    db = tmp_path / "profiles.db"
    run = continuous(
        agent,
        [target.pid],
        f"sqlite:///{db}",
        tmp_path / "spool",
        "--rotate",
        "1h",
        "--label",
        "model=churn",
    )
    n = predicts(target, 3)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    (line,) = summaries(run)  # the partial period, written at SIGTERM
    assert (line["workloads"], line["sessions"]) == (1, n), line
    assert (
        result.stdout.splitlines()[-1]
        == f"mlprof-ebpf: stopped: delivered 1, spooled 0, dropped 0; sink sqlite:///{db}"
    )
    with open_store(str(db)) as store:
        (source,) = store.sources()
        assert source["source_type"] == "ebpf" and source["sessions"] == n, source
        labels = store.labels(source["source_id"])
        assert labels["label.model"] == "churn" and labels["label.pid"] == str(target.pid), labels
        assert labels["label.agent_item"].endswith(".1"), labels
        assert store.source_ids(where={"agent_item": labels["label.agent_item"]}) == [
            source["source_id"]
        ]
    assert not glob.glob(str(tmp_path / "spool" / "*"))  # delivered: nothing left in the spool


# -- the sink down -----------------------------------------------------------------------


def test_a_directory_sink_that_appears_later_gets_every_spooled_item(
    agent, python_target, tmp_path
):
    target = python_target()
    sink = tmp_path / "later"
    run = continuous(
        agent, [target.pid], sink, tmp_path / "spool", "--rotate", "1s", "--retry-max", "1s"
    )
    n = predicts(target, 2)
    wait_summary(
        run, lambda s: s["spooled"] >= 1 and "retrying" in s["rest"] and "is not there" in s["rest"]
    )
    n += predicts(target, 2)
    waiting = wait_summary(run, lambda s: sessions_of(run) >= n and s["spooled"] >= 2)
    assert waiting["delivered"] == 0, waiting
    sink.mkdir()
    wait_summary(run, lambda s: s["spooled"] == 0 and s["delivered"] >= 2)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    got = [sess for doc in dir_items(sink).values() for sess in doc_sessions(doc)]
    assert len(got) == n == len(set(got)), got


def test_a_sqlite_store_on_a_read_only_filesystem_is_retried_until_it_is_writable(
    agent, python_target, tmp_path, tmpfs
):
    from mlflow_profiler.store import open_store

    mnt = tmpfs("16m")
    db = os.path.join(mnt, "p.db")
    with open_store(db) as store:
        assert store.sources() == []
    subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
    target = python_target()
    run = continuous(
        agent,
        [target.pid],
        f"sqlite:///{db}",
        tmp_path / "spool",
        "--rotate",
        "1s",
        "--retry-max",
        "1s",
    )
    n = predicts(target, 3)
    wait_summary(
        run, lambda s: sessions_of(run) >= n and s["spooled"] >= 1 and "retrying" in s["rest"]
    )
    subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
    wait_summary(run, lambda s: s["spooled"] == 0 and s["delivered"] >= 1)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    items = store_items(db)
    assert sum(sessions for _, _, sessions in items) == n, items
    assert len({key for key, _, _ in items}) == len(items)


def test_the_sinks_disk_full_is_retried_counted_and_loses_nothing(
    agent, python_target, tmp_path, tmpfs
):
    mnt = tmpfs("256k")
    sink = os.path.join(mnt, "sink")
    os.mkdir(sink)
    # Fill it: the real ENOSPC.
    filler = os.path.join(mnt, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == 28, e  # ENOSPC
    finally:
        os.close(fd)
    target = python_target()
    run = continuous(
        agent, [target.pid], sink, tmp_path / "spool", "--rotate", "1s", "--retry-max", "1s"
    )
    n = predicts(target, 3)
    full = wait_summary(
        run, lambda s: sessions_of(run) >= n and s["spooled"] >= 1 and "No space left" in s["rest"]
    )
    assert full["dropped"] == 0, full
    os.unlink(filler)
    wait_summary(run, lambda s: s["spooled"] == 0 and s["delivered"] >= 1)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    got = [sess for doc in dir_items(sink).values() for sess in doc_sessions(doc)]
    assert len(got) == n == len(set(got)), got
    assert not [
        f for f in os.listdir(sink) if f.startswith(".")
    ]  # no temporary left by a failed write


# -- the agent killed and restarted ----------------------------------------------------------


def _restart_and_deliver(agent, target, db, spool, acknowledged: Dict[str, int]):
    """Starts the agent again on the same spool with the sink back; returns its result."""
    os.makedirs(os.path.dirname(db), exist_ok=True)
    waiting = len(spooled_keys(spool))
    run = continuous(
        agent, [target.pid], f"sqlite:///{db}", spool, "--rotate", "1h", "--retry-max", "1s"
    )
    run.wait_for(f"{waiting} item{'s' if waiting != 1 else ''} of a previous run to deliver")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and set(acknowledged) - {k for k, _, _ in store_items(db)}:
        time.sleep(0.2)
    return run.stop(signal.SIGTERM)


def test_after_sigkill_a_restart_delivers_every_spooled_item_exactly_once(
    agent, python_target, tmp_path
):
    target = python_target()
    db, spool = (
        tmp_path / "later" / "p.db",
        tmp_path / "spool",
    )  # the store's directory is not there yet
    run = continuous(
        agent, [target.pid], f"sqlite:///{db}", spool, "--rotate", "1s", "--retry-max", "1s"
    )
    predicts(target, 2)
    wait_summary(run, lambda s: s["spooled"] >= 1)
    predicts(target, 2)
    wait_summary(run, lambda s: s["spooled"] >= 2)
    run.proc.kill()  # what the OOM killer sends
    run.wait()
    acknowledged = spooled_keys(spool)
    assert len(acknowledged) >= 2, acknowledged

    result = _restart_and_deliver(agent, target, db, spool, acknowledged)
    assert result.returncode == 0, result.stderr
    items = store_items(db)
    keys = [k for k, _, _ in items]
    assert len(keys) == len(set(keys)), keys  # each once
    assert set(acknowledged) <= set(keys), (acknowledged, keys)
    assert all(sessions == acknowledged[k] for k, _, sessions in items if k in acknowledged), items


def _memory_cgroup(tmp_path) -> str:
    root = "/sys/fs/cgroup/memory"
    require(
        os.path.exists(os.path.join(root, "memory.limit_in_bytes")),
        "no cgroup v1 memory controller at /sys/fs/cgroup/memory (the OOM test needs one)",
    )
    path = os.path.join(root, f"mlprof-e2e-{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(path)
    return path


def test_the_agent_oom_killed_by_its_memory_cgroup_and_restarted_loses_nothing_acknowledged(
    agent, python_target, tmp_path
):
    target = python_target()
    db, spool = tmp_path / "later" / "p.db", tmp_path / "spool"
    # Items acknowledged by the spool while the sink is down.
    run = continuous(
        agent, [target.pid], f"sqlite:///{db}", spool, "--rotate", "1s", "--retry-max", "1s"
    )
    predicts(target, 3)
    wait_summary(run, lambda s: s["spooled"] >= 1)
    assert run.stop(signal.SIGTERM).returncode == 0
    acknowledged = spooled_keys(spool)
    assert acknowledged

    # The real OOM killer: the agent in a v1 memory cgroup whose limit is
    # set just above what it uses, then a burst of sessions held in its
    # (hour-long) period.
    cg = _memory_cgroup(tmp_path)
    try:
        wrapper = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"]
        run = continuous(
            agent,
            [target.pid],
            f"sqlite:///{db}",
            spool,
            "--rotate",
            "1h",
            "--retry-max",
            "1s",
            wrapper=wrapper,
        )
        predicts(target, 5)
        with open(os.path.join(cg, "memory.usage_in_bytes")) as f:
            usage = int(f.read())
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(usage + (4 << 20)))
        deadline = time.monotonic() + 120
        while run.proc.poll() is None and time.monotonic() < deadline:
            target.ask("run nested 200")
        assert run.proc.poll() is not None, "the agent outlived its memory limit"
        killed = run.wait()
        assert killed.returncode == -signal.SIGKILL, killed
        with open(os.path.join(cg, "memory.oom_control")) as f:
            oom = dict(line.split() for line in f)
        assert int(oom["oom_kill"]) >= 1, oom  # the kernel's OOM killer did it
    finally:
        with open(os.path.join(cg, "cgroup.procs")) as f:
            assert f.read().strip() == ""
        os.rmdir(cg)
    assert set(acknowledged) <= set(spooled_keys(spool))  # still there after the kill

    result = _restart_and_deliver(agent, target, db, spool, acknowledged)
    assert result.returncode == 0, result.stderr
    items = store_items(db)
    keys = [k for k, _, _ in items]
    assert len(keys) == len(set(keys)) and set(acknowledged) <= set(keys), (acknowledged, keys)


# -- the duty cycle -------------------------------------------------------------------------------


def _other_agents(mine: int) -> bool:
    """Whether an mlprof-ebpf other than `mine` runs here (it would hold the target's semaphores up)."""
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            with open(comm) as f:
                if f.read().strip() == "mlprof-ebpf" and int(comm.split("/")[2]) != mine:
                    return True
        except OSError:
            pass
    return False


def test_the_duty_cycle_switches_capture_off_and_on(agent, python_target, tmp_path):
    target = python_target()
    sink = tmp_path / "sink"
    sink.mkdir()
    on_s, period_s = 2.0, 4.0
    run = agent(
        "--pid",
        str(target.pid),
        "--continuous",
        "--sink",
        str(sink),
        "--spool",
        str(tmp_path / "spool"),
        "--rotate",
        "4s",
        "--duty-cycle",
        "2s/4s",
    )
    offset = time.time_ns() - time.monotonic_ns()  # CLOCK_REALTIME - CLOCK_MONOTONIC
    states = []  # (unix s, semaphore up), while no other agent runs on this machine
    deadline = time.monotonic() + 13
    while time.monotonic() < deadline:
        target.ask("run nested 1")
        up = target.ask("attached")["attached"]
        if not _other_agents(run.proc.pid):  # another engineer's --all agent raises it too
            states.append((time.time(), up))
        time.sleep(0.05)
    result = run.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr

    def phase(t: float) -> float:
        return t % period_s

    edge = 0.7  # attaching and detaching take a few hundred ms
    # From its start the agent attaches only in the on time: the off windows
    # are checked from the first state on. The on windows are checked from
    # the first attach on (the first, which loads the BPF programs, took
    # about 1 s on CI's loaded machine at 76f17ac).
    first_up = next((i for i, (_, up) in enumerate(states) if up), len(states))
    assert first_up < len(states), states
    assert any(not up for _, up in states[first_up:]), states
    for i, (t, up) in enumerate(states):
        p = phase(t)
        if edge < p < on_s - 0.05 and i >= first_up:
            assert up, (t, p, states)
        elif on_s + edge < p < period_s - 0.05:
            assert not up, (t, p, states)
    starts = []
    for doc in dir_items(sink).values():
        assert doc["meta"]["duty_cycle"] == "2s/4s", doc["meta"]
        sf = {n: i for i, n in enumerate(doc["span_fields"])}
        starts += [
            (row[sf["start_ns"]] + offset) / 1e9 for row in doc["spans"] if row[sf["parent"]] < 0
        ]
    assert starts
    # Sessions that began in the off time are not kept, however long detaching takes.
    late = sorted(round(phase(t), 3) for t in starts if phase(t) >= on_s + 0.05)
    assert not late, (late, len(starts))
    lines = summaries(run)
    assert any(
        "profiled" in s["rest"] and "duty cycle 2s/4s" in s["rest"] for s in lines
    ), result.stdout
    assert re.search(
        r"profiled \d+ s of \d+ s \(\d+%, duty cycle 2s/4s\)", result.stderr
    ), result.stderr
