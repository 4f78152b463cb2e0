"""The exit statuses that end a capture that could never succeed, each with
one line naming the fix (docs/ebpf.md, "Exit status"): -o where no file can
be created (1, before attaching), nothing captured (6), a --pid that is not
Python or never loads the extension (7), the host's pids not visible (8),
and the privilege line naming the DaemonSet field. Real processes, a real
read-only mount and a real pid namespace (unshare); root."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
from conftest import require, run_agent

EXIT_ERROR, EXIT_PRIVILEGE, EXIT_NOTHING, EXIT_NOT_PYTHON, EXIT_HOST_PID = 1, 3, 6, 7, 8


def lines(stderr: str) -> list:
    return [l for l in stderr.splitlines() if l.startswith("mlprof-ebpf: ")]


@pytest.fixture
def read_only_dir():
    """A tmpfs mounted read-only: a refusal even to root (a chmod is not one)."""
    path = tempfile.mkdtemp(prefix="mlprof-ro-")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", path], capture_output=True, text=True
    )
    require(r.returncode == 0, f"mounting a read-only tmpfs needs root: {r.stderr.strip()}")
    yield path
    subprocess.run(["umount", path], check=False)
    os.rmdir(path)


def test_output_in_a_read_only_directory_fails_before_attaching(agent_path, read_only_dir):
    r = run_agent(
        agent_path, "--all", "--duration", "30", "-o", os.path.join(read_only_dir, "p.json.gz")
    )
    assert r.returncode == EXIT_ERROR, r.stderr
    said = lines(r.stderr)
    assert len(said) == 1, r.stderr  # nothing attached, nothing watched
    assert f"cannot create a file in {read_only_dir} (Read-only file system)" in said[0]


def test_output_directory_missing(agent_path, tmp_path):
    r = run_agent(agent_path, "--all", "--duration", "30", "-o", str(tmp_path / "no" / "p.json"))
    assert r.returncode == EXIT_ERROR, r.stderr
    assert "does not exist" in lines(r.stderr)[0]


def test_pid_that_is_not_python(agent_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r = run_agent(agent_path, "--pid", str(sleeper.pid))  # no --duration: it must not wait
        assert r.returncode == EXIT_NOT_PYTHON, r.stderr
        said = lines(r.stderr)
        assert len(said) == 1, r.stderr
        assert f"pid {sleeper.pid} (sleep, " in said[0] and "is not a Python process" in said[0]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_native_target_with_usdt_notes_is_not_refused(agent_path, native_target):
    target = native_target()  # not Python, but its executable has mlprof USDT notes
    r = run_agent(agent_path, "--pid", str(target.pid), "--duration", "1")
    assert r.returncode == EXIT_NOTHING, r.stderr  # attached; it ran no session
    assert f"attached to pid {target.pid}" in r.stderr


@pytest.mark.parametrize("duration", [["--duration", "2"], []], ids=["duration", "bounded-wait"])
def test_python_that_never_loads_the_extension(agent_path, python_exe, duration):
    """Without --duration the agent waited forever; now 30 s at most."""
    py = subprocess.Popen([python_exe, "-c", "import time; time.sleep(120)"])
    try:
        r = run_agent(agent_path, "--pid", str(py.pid), *duration, timeout=90)
        assert r.returncode == EXIT_NOT_PYTHON, r.stderr
        last = lines(r.stderr)[-1]
        assert (
            f"pid {py.pid} did not load mlflow_profiler in" in last
            and "import mlflow_profiler" in last
        )
    finally:
        py.kill()
        py.wait()


def test_nothing_captured(agent_path, python_target):
    target = python_target()  # loads the extension, calls no predict()
    r = run_agent(agent_path, "--pid", str(target.pid), "--duration", "1")
    assert r.returncode == EXIT_NOTHING, r.stderr
    assert f"attached to pid {target.pid}" in r.stderr
    assert "no predict() session was captured" in lines(r.stderr)[-1]


def test_host_pids_not_visible(agent_path, python_target):
    """A new pid namespace with its own /proc, the agent its pid 1: what a
    pod without hostPID gives it."""
    unshare = shutil.which("unshare")
    require(unshare is not None, "unshare (util-linux) makes the pid namespace")
    target = python_target()
    for args in (["--all"], ["--pid", str(target.pid)]):
        r = run_agent(
            agent_path,
            *args,
            "--duration",
            "30",
            wrapper=[unshare, "--pid", "--fork", "--mount-proc"],
        )
        assert r.returncode == EXIT_HOST_PID, (args, r.stderr)
        said = lines(r.stderr)
        assert len(said) == 1, r.stderr
        assert "run the pod with hostPID: true (podman/docker: --pid=host)" in said[0]
        assert "pid 1 is the agent" in said[0]


def test_missing_capability_names_the_daemonset_field(agent_path):
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) cuts the capabilities")
    r = run_agent(
        agent_path,
        "--all",
        "--duration",
        "1",
        wrapper=[setpriv, "--bounding-set=-all,+bpf,+perfmon", "--inh-caps=-all"],
    )
    assert r.returncode == EXIT_PRIVILEGE, r.stderr
    said = lines(r.stderr)
    assert len(said) == 1
    assert "missing CAP_SYS_PTRACE" in said[0]
    assert "securityContext.capabilities.add: [BPF, PERFMON, SYS_PTRACE]" in said[0]
