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
    if sys.version_info >= (3, 12):
        assert _core.tool_id() == -1, "the sys.monitoring tool id was not freed"
