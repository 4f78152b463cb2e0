"""A real Podman container named serving-1 running the Python model loop,
found by --container (name, and id prefix) through Podman's own state and
the process's cgroup, attached through /proc/PID/root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from conftest import TARGET_PY, Document, require, run_agent

NAME = "serving-1"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, check=check, timeout=timeout
    )


@pytest.fixture
def serving(python_exe):
    """serving-1: the host's root as the container's (an overlay), so the
    interpreter, MLflow and the project are there at the same paths. runc,
    not crun (crun refuses this host's hybrid cgroups); the ulimits keep
    runc within this VM's limits."""
    require(shutil.which("podman") is not None, "podman is needed (apt-get install podman)")
    podman("rm", "-f", NAME, check=False)
    env = ["-e", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}"]
    run = podman(
        "run",
        "-d",
        "--name",
        NAME,
        "--runtime",
        "runc",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        *env,
        "--rootfs",
        "/:O",
        python_exe,
        TARGET_PY,
        "--loop",
        "nested",
        "--interval",
        "0.02",
        check=False,
    )
    require(run.returncode == 0, f"podman run failed: {run.stderr.strip()[-500:]}")
    cid = run.stdout.strip()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            logs = podman("logs", NAME, check=False).stdout
            if '{"ready"' in logs:
                break
            state = podman("inspect", "-f", "{{.State.Status}}", NAME, check=False).stdout.strip()
            assert state == "running", podman("logs", NAME, check=False).stderr[-2000:]
            time.sleep(0.3)
        else:
            raise AssertionError("the container's model never got ready")
        pid = int(podman("inspect", "-f", "{{.State.Pid}}", NAME).stdout.strip())
        yield cid, pid
    finally:
        podman("rm", "-f", "-t", "0", NAME, check=False)


def test_container_by_name(agent_path, serving, tmp_out):
    cid, host_pid = serving
    out = tmp_out / "serving.json"
    r = run_agent(
        agent_path, "--container", NAME, "--duration", "3", "-o", str(out), "-v", timeout=90
    )
    assert r.returncode == 0, r.stderr
    assert f"watching container {NAME} (podman {cid[:12]})" in r.stderr
    # Another mount namespace: the extension is opened through the process's root.
    assert f"attached to pid {host_pid} (python" in r.stderr
    assert f"/proc/{host_pid}/root/" in r.stderr
    doc = Document(str(out))
    roots = doc.roots_of(host_pid)
    assert len(roots) >= 10, r.stderr  # the loop predicts every 20 ms
    for root in roots:
        assert root.name.startswith("predict [pyfunc E2EModel]")
        nested = [s for s in root.walk() if s.name.endswith("_nested")]
        assert len(nested) == 1, root.shape()
        assert [c.name.rsplit(".", 1)[-1] for c in nested[0].children] == [
            "_clean",
            "_features",
            "_score",
        ]
    assert doc.meta.get("container") == NAME
    assert doc.meta.get("container_id") == cid


def test_container_by_id_prefix_and_minimal_capabilities(agent_path, serving, tmp_out):
    cid, host_pid = serving
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) cuts the capabilities")
    out = tmp_out / "by-id.trace.json"
    r = run_agent(
        agent_path,
        "--container",
        cid[:12],
        "--duration",
        "2",
        "-o",
        str(out),
        wrapper=[setpriv, "--bounding-set=-all,+bpf,+perfmon,+sys_ptrace", "--inh-caps=-all"],
        timeout=90,
    )
    assert r.returncode == 0, r.stderr
    trace = json.loads(out.read_text())  # Chrome trace, from the extension of -o
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("pid") == host_pid for e in events if isinstance(e, dict))


def test_agent_image_with_the_daemonsets_settings(agent_path, serving):
    """deploy/build-image.sh's image, run as deploy/daemonset.yaml runs it:
    host pid namespace, only CAP_BPF/CAP_PERFMON/CAP_SYS_PTRACE, seccomp
    unconfined, the runtime's state mounted read-only."""
    cid, host_pid = serving
    image = "localhost/mlprof-ebpf:e2e"
    build = subprocess.run(
        [os.path.join(REPO, "deploy", "build-image.sh"), agent_path, image],
        capture_output=True,
        text=True,
        timeout=300,
    )  # dpkg-query per library
    assert build.returncode == 0, build.stderr
    try:
        base = [
            "run",
            "--rm",
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--pid=host",
            "--cap-drop=all",
            "--cap-add=bpf,perfmon,sys_ptrace",
            "-v",
            "/var/lib/containers:/var/lib/containers:ro",
        ]
        r = podman(
            *base,
            "--security-opt",
            "seccomp=unconfined",
            image,
            "--container",
            NAME,
            "--duration",
            "2",
            "--depth",
            "0",
            check=False,
        )
        assert r.returncode == 0, r.stderr
        assert f"attached to pid {host_pid} (python" in r.stderr
        assert "predict [pyfunc E2EModel]" in r.stdout
        # The runtime's default seccomp profile refuses bpf(): one line that says so, status 3.
        r = podman(*base, image, "--container", NAME, "--duration", "1", check=False)
        assert r.returncode == 3, r.stderr
        assert "seccomp unconfined" in r.stderr.strip().splitlines()[-1]
    finally:
        podman("rmi", "-f", image, check=False)
