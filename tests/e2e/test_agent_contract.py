"""The USDT contract's versions on both sides (docs/usdt.md, "Versions on both
sides"): against an extension with session_spans (v2) the agent takes a
session in one piece and says nothing about versions; against a binary with
the per-span probes only (v1: tests/cpp's usdt_target) it falls back to them
and says so in one line, and the tree still arrives."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import Document

OLDER = "is older (USDT contract v1"


def test_an_older_extension_is_named_in_one_line_and_still_captured(agent, native_target, tmp_out):
    target = native_target()
    out = tmp_out / "v1.json"
    run = agent("--pid", str(target.pid), "-o", str(out))
    run.wait_attached(target.pid)
    run.wait_for(OLDER)
    target.ask("run storm 50")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stderr.splitlines() if OLDER in l]
    assert len(lines) == 1 and lines[0].startswith(
        f"mlprof-ebpf: pid {target.pid}: "
    ), result.stderr
    assert "per-span probes" in lines[0] and "upgrade mlflow_profiler" in lines[0]
    assert len(Document(str(out)).roots_of(target.pid)) >= 1  # captured through the per-span probes


def test_a_v2_extension_is_taken_whole_with_no_version_line(agent, python_target, tmp_out):
    target = python_target()
    out = tmp_out / "v2.json"
    run = agent("--pid", str(target.pid), "-o", str(out), "-v")
    run.wait_attached(target.pid)
    calls = target.ask("run nested 3")["calls"]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert OLDER not in result.stderr
    assert [[r.shape()] for r in Document(str(out)).roots_of(target.pid)] == [
        c["tree"] for c in calls
    ]


def test_without_bpf_loop_a_v2_extension_is_captured_through_its_per_span_probes(
    agent, python_target, tmp_out
):
    # A kernel before 5.17 has no bpf_loop, which session_spans needs: the
    # agent loads without it and attaches the per-span probes, which a v2
    # extension fires too. --per-span-probes (hidden) makes this kernel do
    # the same; vmtests/ runs it on a real 5.10.
    target = python_target()
    out = tmp_out / "per-span.json"
    run = agent("--pid", str(target.pid), "-o", str(out), "-v", "--per-span-probes")
    run.wait_attached(target.pid)
    calls = target.ask("run nested 3")["calls"]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert OLDER not in result.stderr  # the extension is not older: the kernel chose
    assert [[r.shape()] for r in Document(str(out)).roots_of(target.pid)] == [
        c["tree"] for c in calls
    ]
    records = int(re.search(r"records (\d+)", result.stderr).group(1))
    assert records > 3 * 10, result.stderr  # a record per span, not three per session


@pytest.mark.parametrize("threads", [1, 2])
def test_a_storm_faster_than_the_agent_loses_no_record_and_no_session_is_torn(
    agent_path, usdt_storm_path, threads
):
    """mlprof-usdt-storm at full speed (v2: session_begin and session_spans per
    session of 70 spans): faster than the agent can build sessions on this
    machine. What the agent cannot take it sheds whole at the session's begin
    (counted, one line); nothing is lost in the ring, no session arrives
    truncated or in pieces, and every session fired is either captured or
    shed. With two threads, one thread's many short sessions, held for the
    settle delay, must not cut the other's open one."""
    storm = subprocess.Popen(
        [
            usdt_storm_path,
            "--sessions",
            "0",
            "--seconds",
            "3",
            "--spans-per-session",
            "70",
            "--threads",
            str(threads),
            "--wait-attached",
            "30",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(storm.stdout.readline().split()[1])
        agent = subprocess.run(
            [agent_path, "--pid", str(pid), "-v"], capture_output=True, text=True, timeout=120
        )
        out = storm.communicate(timeout=60)[0]
    finally:
        if storm.poll() is None:
            storm.kill()
    fired = int(re.search(r"sessions=(\d+)", out).group(1))
    m = re.search(
        r"records (\d+), lost (\d+), shed (\d+), sessions (\d+) \(truncated (\d+)\), unmatched (\d+)",
        agent.stderr,
    )
    assert m, agent.stderr
    records, lost, shed, sessions, truncated, unmatched = map(int, m.groups())
    assert agent.returncode == 0, agent.stderr
    assert (lost, truncated, unmatched) == (0, 0, 0), agent.stderr
    assert sessions > 0 and sessions + shed == fired, (sessions, shed, fired)
    assert records >= 3 * sessions  # begin, the body (one piece here), end
    shed_lines = [
        l for l in agent.stderr.splitlines() if "not captured: the agent fell behind" in l
    ]
    assert len(shed_lines) == (1 if shed else 0), agent.stderr


def test_a_newer_extension_is_named_in_one_line_and_nothing_wrong_is_shown(
    agent_path, usdt_storm_path
):
    """Session bodies of a contract newer than the agent's (the storm plays a
    newer extension with --body-version): one line naming the process and
    both versions, no session shown (not an empty tree), and exit 6 (nothing
    captured), without the "does the target call predict()" hint."""
    storm = subprocess.Popen(
        [
            usdt_storm_path,
            "--sessions",
            "20",
            "--spans-per-session",
            "5",
            "--body-version",
            "99",
            "--wait-attached",
            "30",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(storm.stdout.readline().split()[1])
        agent = subprocess.run(
            [agent_path, "--pid", str(pid)], capture_output=True, text=True, timeout=120
        )
        storm.communicate(timeout=60)
    finally:
        if storm.poll() is None:
            storm.kill()
    newer = [l for l in agent.stderr.splitlines() if "is newer" in l]
    assert newer == [
        f"mlprof-ebpf: pid {pid}: its mlflow_profiler is newer (USDT contract v99 session bodies; "
        f"this agent reads v2): its sessions are not captured; upgrade mlprof-ebpf"
    ], agent.stderr
    assert OLDER not in agent.stderr and "does the target call predict()" not in agent.stderr
    assert agent.returncode == 6, agent.stderr
    assert "no sessions captured" in agent.stdout
