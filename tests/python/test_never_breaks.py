"""Never break the program: _everything_program.py, which uses much of what
a model's code may (see its docstring), prints the same result inside a
native session as without one, at every depth, with all_threads and
capture_io on, and the session records it without a failure. Each run is a
child process, so that a crash is a failed test and not a dead test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROGRAM = os.path.join(os.path.dirname(__file__), "_everything_program.py")


def run(mode: str) -> dict:
    proc = subprocess.run(
        [sys.executable, PROGRAM, mode], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # No traceback printed (an exception in a thread or a finalizer, a
    # warning turned error). The profiler's own notices may appear: under
    # load capture_io says once that a type's repr() is too slow to call.
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def bare() -> dict:
    return run("bare")


@pytest.mark.parametrize("depth", [0, 1, 2, -1])
def test_the_program_returns_the_same_inside_a_session(bare, depth):
    out = run(str(depth))
    assert out.pop("session") == {"failures": [], "spans": True}
    assert out == bare
