"""Shared fixtures: every behavioural test runs on both capture engines."""

from __future__ import annotations

import sys
import threading

import pytest

from mlflow_profiler import _core

ENGINES = ["native", "reference"]


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    """The capture engine under test: use as ``profiling(depth=..., engine=engine)``."""
    return request.param


@pytest.fixture(autouse=True)
def _no_leaks():
    """A test must leave no session current and no hook installed behind it."""
    profile_before = sys.getprofile()
    session_before = _core.session_var.get(None)
    threading_hook_before = getattr(threading, "_profile_hook", None)
    yield
    assert getattr(threading, "_profile_hook", None) is threading_hook_before, "threading.setprofile not put back"
    assert _core.session_var.get(None) is session_before, "a session is still current after the test"
    assert sys.getprofile() is profile_before, "the profile function was not put back"
    assert _core._native_collecting() == 0, "a native session is still collecting"
    state = _core.capture_state()
    assert not state["eval_installed"], "the frame evaluation function is still installed"
    assert not state["global_frames"], "sys.monitoring still reports every frame"
    if sys.version_info >= (3, 12):
        # The id is kept for the process when it is 3 or 4, which no standard
        # tool uses (docs/capture.md); any other is freed with the last session.
        assert _core.tool_id() in (-1, 3, 4), "the sys.monitoring tool id was not freed"
