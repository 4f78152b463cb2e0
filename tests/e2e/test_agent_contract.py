"""The USDT contract's versions on both sides (docs/usdt.md, "Versions on both
sides"): against an extension with session_spans (v2) the agent takes a
session in one piece and says nothing about versions; against a binary with
the per-span probes only (v1: tests/cpp's usdt_target) it falls back to them
and says so in one line, and the tree still arrives."""

from __future__ import annotations

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
    assert len(lines) == 1 and lines[0].startswith(f"mlprof-ebpf: pid {target.pid}: "), result.stderr
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
    assert [[r.shape()] for r in Document(str(out)).roots_of(target.pid)] == [c["tree"] for c in calls]
