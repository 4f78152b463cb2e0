"""The wheel CI builds (uv build, then auditwheel repair: a manylinux wheel)
installs and profiles a predict where nothing could compile it: a Podman
container on a minimal Debian root (debootstrap --variant=minbase with
python3 and python3-venv only), no network, no compiler, no Python headers.

Needs root and podman, and two paths from CI: MLPROF_WHEELS (the repaired
wheels, one per interpreter) and MLPROF_MINIMAL_ROOT (the root). Without
them it skips, or fails under MLPROF_REQUIRE_BPF=1 (CI runs it as root)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def require(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("MLPROF_REQUIRE_BPF") == "1":
        pytest.fail(f"{why}; required here (MLPROF_REQUIRE_BPF=1)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def setting():
    wheels = os.environ.get("MLPROF_WHEELS", "")
    root = os.environ.get("MLPROF_MINIMAL_ROOT", "")
    require(os.geteuid() == 0, "a Podman container on a given root needs root")
    require(shutil.which("podman") is not None, "podman is needed (apt-get install podman)")
    require(
        bool(wheels) and pathlib.Path(wheels).is_dir(),
        "MLPROF_WHEELS: the directory of the built wheels",
    )
    require(
        bool(root) and (pathlib.Path(root) / "usr/bin/python3").exists(),
        "MLPROF_MINIMAL_ROOT: a minimal Debian root with python3 (.ci/run makes one with debootstrap)",
    )
    return pathlib.Path(wheels), pathlib.Path(root)


def root_python(root: pathlib.Path) -> str:
    """The X.Y of the root's python3 ("3.11")."""
    target = os.readlink(root / "usr/bin/python3")
    m = re.search(r"python(\d+\.\d+)$", target)
    assert m, target
    return m.group(1)


def test_the_wheel_is_manylinux_for_each_interpreter(setting):
    wheels, _ = setting
    found = sorted(p.name for p in wheels.rglob("*.whl"))
    assert found, f"no wheel under {wheels}"
    for name in found:
        # auditwheel repair names the platform it checked the wheel against.
        assert re.search(r"-manylinux_\d+_\d+_x86_64\.whl$", name), name


def test_installs_and_profiles_with_no_compiler_and_no_headers(setting, tmp_path):
    wheels, root = setting
    version = root_python(root)
    tag = "cp" + version.replace(".", "")
    (wheel,) = [p for p in wheels.rglob(f"*-{tag}-{tag}-manylinux_*.whl")]
    script = (
        "set -e; "
        # What a user's slim image lacks: any compiler, and the Python headers.
        'for c in gcc cc c++ g++ clang cmake; do if command -v $c; then echo "found $c"; exit 3; fi; done; '
        f"test ! -e /usr/include/python{version}/Python.h || {{ echo 'found Python.h'; exit 3; }}; "
        "python3 -m venv /tmp/venv; "
        f"/tmp/venv/bin/pip install --no-index --no-cache-dir -q /wheels/{wheel.name}; "
        "/tmp/venv/bin/python /probe/probe_model.py /tmp/profile.json.gz"
    )
    run = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--network",
            "none",
            "-v",
            f"{wheel.parent}:/wheels:ro",
            "-v",
            f"{HERE}:/probe:ro",
            "--rootfs",
            f"{root}:O",
            "sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "Model.predict: " in out and "  Model.features: " in out, out
    assert re.search(r"saved and loaded back 7 spans", out), out
