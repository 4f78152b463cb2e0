"""Targets that come and go: two at once, one that starts after the agent,
one that dies mid-capture; stopping the agent writes its output atomically;
killing it leaves the target running and untraced."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time

import pytest
from conftest import SPAN_OPEN_AT_END, SPAN_TRUNCATED, TARGET_PY, Document


def test_two_target_processes_at_once(agent, python_target, tmp_out):
    a, b = python_target(), python_target()
    out = tmp_out / "two.json"
    run = agent("--pid", str(a.pid), "--pid", str(b.pid), "-o", str(out))
    run.wait_attached(a.pid)
    run.wait_attached(b.pid)
    calls_a = a.ask("run nested 3")["calls"]
    calls_b = b.ask("run sleep 2")["calls"]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    doc = Document(str(out))
    roots_a, roots_b = doc.roots_of(a.pid), doc.roots_of(b.pid)
    assert [[r.shape()] for r in roots_a] == [c["tree"] for c in calls_a]
    assert [[r.shape()] for r in roots_b] == [c["tree"] for c in calls_b]
    assert "5 sessions of 2 processes" in result.stdout, result.stdout


def test_the_agent_started_before_the_target_finds_it_in_its_cgroup(
    agent, python_target, cgroup_dir, tmp_out
):
    out = tmp_out / "later.json"
    run = agent("--cgroup", cgroup_dir, "-o", str(out))
    run.wait_for("watching cgroup")

    def into_cgroup() -> None:
        with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    target = python_target(preexec_fn=into_cgroup)
    run.wait_attached(target.pid)
    calls = target.ask("run nested 3")["calls"]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert [[r.shape()] for r in Document(str(out)).roots_of(target.pid)] == [
        c["tree"] for c in calls
    ]


def test_a_pid_that_loads_the_extension_after_the_agent_started(agent, python_target, tmp_out):
    target = python_target("--late-import")
    out = tmp_out / "late.json"
    run = agent("--pid", str(target.pid), "-o", str(out))
    run.wait_for("has not loaded mlflow_profiler yet, waiting")
    target.ask("import")
    run.wait_attached(target.pid)
    calls = target.ask("run nested 2")["calls"]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert [[r.shape()] for r in Document(str(out)).roots_of(target.pid)] == [
        c["tree"] for c in calls
    ]


def test_a_target_killed_mid_predict_leaves_its_spans_truncated(agent, python_target, tmp_out):
    target = python_target()
    out = tmp_out / "killed.json"
    run = agent("--pid", str(target.pid), "-o", str(out))
    run.wait_attached(target.pid)
    target.proc.stdin.write("run hang 1\n")  # a predict that sleeps 60 s
    target.proc.stdin.flush()
    time.sleep(1.0)
    killed_at = time.monotonic_ns()
    os.kill(target.pid, signal.SIGKILL)
    # The only target is gone: the agent ends by itself and writes its output.
    result = run.wait(30)
    assert result.returncode == 0, result.stderr
    assert "every target process has exited" in result.stderr
    doc = Document(str(out))
    roots = doc.roots_of(target.pid)
    assert len(roots) == 1
    root = roots[0]
    assert root.flags & (SPAN_TRUNCATED | SPAN_OPEN_AT_END), root.flags
    hang = [s for s in root.walk() if s.name.endswith("_hang")]
    assert hang and hang[0].flags & (SPAN_TRUNCATED | SPAN_OPEN_AT_END)
    # Closed when the process died, not 60 s later.
    assert root.end_ns - killed_at < 2_000_000_000 and root.end_ns >= root.start_ns


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_writes_the_output_whole_and_only_then(agent, python_exe, tmp_out, sig):
    loop = subprocess.Popen(
        [python_exe, TARGET_PY, "--loop", "nested", "--interval", "0.005"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert loop.stdout.readline().startswith('{"ready"')
        out_dir = tmp_out / "out"
        out_dir.mkdir()
        out = out_dir / "capture.json.gz"
        run = agent("--pid", str(loop.pid), "-o", str(out))
        run.wait_attached(loop.pid)
        time.sleep(1.5)
        assert list(out_dir.iterdir()) == []  # nothing written while capturing
        result = run.stop(sig)
        assert result.returncode == 0, result.stderr
        assert ("SIGINT" if sig == signal.SIGINT else "SIGTERM") in result.stderr
        # Exactly the file (no temporary left), complete: it reads back.
        assert [p.name for p in out_dir.iterdir()] == ["capture.json.gz"]
        doc = json.loads(gzip.decompress(out.read_bytes()))
        assert len(doc["spans"]) >= 10
        assert loop.poll() is None  # the target keeps serving
    finally:
        loop.kill()
        loop.wait()
        loop.stdout.close()


def test_killing_the_agent_leaves_the_target_running_and_untraced(agent, python_target):
    target = python_target()
    run = agent("--pid", str(target.pid))
    run.wait_attached(target.pid)
    assert target.ask("attached") == {"attached": True}
    assert all(c["tree"] is not None for c in target.ask("run nested 2")["calls"])
    run.proc.kill()  # SIGKILL: no cleanup of its own; the kernel drops the uprobes
    run.wait()
    deadline = time.monotonic() + 5
    while target.ask("attached")["attached"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.ask("attached") == {"attached": False}
    calls = target.ask("run nested 3")["calls"]
    assert [c["tree"] for c in calls] == [
        None,
        None,
        None,
    ]  # sampling off again, and it still serves
    assert target.alive()
