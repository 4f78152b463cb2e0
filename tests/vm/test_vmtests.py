"""vmtests/run.sh: the agent on a Debian kernel in a QEMU guest (issue 20).

CI runs the oldest kernel of the matrix, 5.10, where the agent must fall back
to the per-span probes (no bpf_loop); `vmtests/run.sh all` runs the matrix.
Needs root, QEMU and Debian's mirror (the script installs QEMU and fetches
the kernel; cached in ~/.cache/mlflow-profiler-tests/vmtests).

  MLPROF_AGENT       the mlprof-ebpf binary (required)
  MLPROF_VM_PYTHON   an interpreter that imports mlflow_profiler (default: this one)
  MLPROF_REQUIRE_VM=1  fail instead of skipping when something is missing (CI)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "vmtests", "run.sh")


def need(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("MLPROF_REQUIRE_VM") == "1":
        pytest.fail(f"{why}; required here (MLPROF_REQUIRE_VM=1)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def agent() -> str:
    path = os.environ.get("MLPROF_AGENT", "")
    need(bool(path) and os.access(path, os.X_OK), "set MLPROF_AGENT to the built mlprof-ebpf")
    need(os.geteuid() == 0, "QEMU guests with BPF inside: run as root")
    return path


def run(agent: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    python = os.environ.get("MLPROF_VM_PYTHON", sys.executable)
    return subprocess.run(
        ["bash", RUN, "--agent", agent, "--python", python, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def lines(out: str) -> list:
    """The per-kernel lines of run.sh's output."""
    return [l for l in out.splitlines() if re.match(r"^(5\.10|6\.1|6\.12|newest) ", l)]


def test_the_5_10_guest_runs_the_smoke_through_the_per_span_probes(agent):
    r = run(agent, "5.10")
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = lines(r.stdout)
    assert re.match(
        r"^5\.10\s+5\.10\.\d+-\d+-amd64\s+ok \| btf yes, lockdown none \| programs: "
        r"(tp_btf|raw_tp), per-span probes \| smoke [\d.]+ s \| boot [\d.]+ s, total \d+ s$",
        line,
    ), line


def test_a_guest_past_its_time_limit_is_one_line_and_the_next_kernel_still_runs(agent):
    r = run(agent, "--timeout", "3", "5.10", "5.10")
    assert r.returncode == 1, r.stdout + r.stderr
    got = lines(r.stdout)
    assert len(got) == 2, r.stdout
    for line in got:
        assert "FAILED: the guest did not finish in 3 s" in line, line


def test_a_guest_that_cannot_boot_is_one_line(agent):
    # 48 MiB: too little for the kernel to set itself up; it stops before
    # its init, a real boot failure.
    r = run(agent, "--memory", "48", "--timeout", "120", "5.10")
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = lines(r.stdout)
    assert (
        "FAILED: the guest did not boot to its init (QEMU exit " in line
        and "its console ends: " in line
    ), line


def test_the_diagnosis_walkthrough_profiles_a_model_server_inside_the_guest(agent, tmp_path):
    # docs/ebpf.md, "Diagnosis in a VM": the example server and mlprof-ebpf --pid inside.
    python = os.environ.get("MLPROF_VM_PYTHON", sys.executable)
    walk = os.path.join(ROOT, "vmtests", "walkthrough.sh")
    r = run(agent, "--keep", str(tmp_path), "--run", f"sh {walk} {python} {agent}", "5.10")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "20 sessions of 1 process" in r.stdout, r.stdout
    rows = {m.group(1): m for m in re.finditer(r"^\s+(Model\.\w+)\s+(\d+)\s.*$", r.stdout, re.M)}
    assert {"Model.predict", "Model._lookup", "Model._features"} <= set(rows), r.stdout
    # The 5 ms wait is off the CPU, asleep (S), woken by a timer. Its syscall
    # is "?" on 5.10: the agent reads it with bpf_task_pt_regs (5.15+).
    stall = [l for l in r.stdout.splitlines() if "Model.predict/Model._lookup" in l]
    assert stall and re.search(r"\? S [\d.]+ms\s+timer$", stall[0].rstrip()), r.stdout
    assert os.path.getsize(tmp_path / "5.10" / "profile.json") > 0


def test_under_lockdown_confidentiality_the_agent_names_it_in_one_line_and_exits_3(agent):
    # confidentiality takes bpf_probe_read_kernel away: no variant of the
    # scheduler programs loads, so the agent says why and how to boot instead.
    r = run(
        agent,
        "--lockdown",
        "confidentiality",
        "--run",
        f"{agent} --all --duration 1; echo exit $?",
        "5.10",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    said = [l.strip() for l in r.stdout.splitlines() if "mlprof-ebpf:" in l]
    assert len(said) == 1, r.stdout
    assert (
        said[0].startswith("mlprof-ebpf: kernel lockdown is in confidentiality mode")
        and "lockdown=integrity" in said[0]
    ), said
    assert "exit 3" in r.stdout, r.stdout
