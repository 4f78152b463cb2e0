"""Shared fixtures: every behavioural test runs on both capture engines."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from _helpers import instrumented

from mlflow_profiler import _core

ENGINES = ["native", "reference"]


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    """The capture engine under test: use as ``profiling(depth=..., engine=engine)``."""
    return request.param


def autoprofile_on() -> bool:
    from mlflow_profiler import _autoprofile

    return _autoprofile.is_enabled()


def _thread_start():
    """What Thread.start calls to start a thread (all_threads wraps it)."""
    return getattr(threading, "_start_joinable_thread", None) or getattr(
        threading, "_start_new_thread", None
    )


def _fresh():
    return None


def _instrumented_everywhere() -> list:
    """3.12+: the instrumented instructions of a function no tool asked for.
    Any is a profile or trace function left in some thread (or a tool's
    global events): every function of the process pays for them."""
    _fresh()
    return instrumented(_fresh)


# Fixtures that start other processes: a real tracking server, `mlflow models
# serve`, or a fresh Python that imports MLflow and loads a model. CI runs the
# tests that use them on 3.11 and 3.14 only (.ci/run).
PROCESS_FIXTURES = {"tracking_server", "model_uri", "served_model"}
# Fixtures of an MLflow tracking store (_mlflow_fixtures.py): what MLflow's
# own Python code makes of a profile (runs, artifacts, metrics, traces), which
# does not depend on how the extension handles each CPython. CI runs these
# tests where it runs the `processes` ones.
STORE_FIXTURES = {"local_store", "server_store", "mlflow_store"}


# The modules whose tests exercise how the extension captures on each
# CPython (its hooks, frames, generators, coroutines, threads, C calls,
# exceptions, recursion, names, data summaries, other tools' hooks): marked
# `capture`. CI runs only these on 3.12 and 3.13, and these with the
# `processes` and `mlflow_tracking` ones on 3.14 (.ci/run); the rest (stores,
# exports, analysis, reports) run on the C++ core, the same on each version,
# and run on 3.11.
CAPTURE_MODULES = {
    "test_asyncio",
    "test_asyncio_structure",
    "test_bad_input",
    "test_basic",
    "test_below_ceiling",
    "test_busy_generators",
    "test_c_calls",
    "test_capture_faults",
    "test_clients",
    "test_collector",
    "test_decorators",
    "test_deep_recursion",
    "test_engines_agree",
    "test_exceptions",
    "test_generators",
    "test_io_capture",
    "test_loop_waits",
    "test_marks",
    "test_mechanism_sites",
    "test_names",
    "test_nesting",
    "test_never_breaks",
    "test_other_profiler",
    "test_overflow",
    "test_overhead_cut",
    "test_recursion",
    "test_reference",
    "test_resources",
    "test_session_options",
    "test_span_values",
    "test_summarize",
    "test_threads",
    "test_traces",
    "test_transparent_snapshot",
    "test_usdt",
    "test_user_code",
    "test_waiting",
    "test_waiting_metrics",
}


def pytest_configure(config):
    """A name in CAPTURE_MODULES that is no test module (renamed, removed)
    would drop its tests from CI's middle interpreters without a word."""
    here = Path(__file__).parent
    stale = sorted(m for m in CAPTURE_MODULES if not (here / f"{m}.py").is_file())
    if stale:
        raise pytest.UsageError(f"conftest.py: CAPTURE_MODULES names no test module: {stale}")


def pytest_collection_modifyitems(items):
    """Marks `processes` every test that uses one of PROCESS_FIXTURES, the
    tracking server through mlflow_store's "server" case included,
    `mlflow_tracking` every test that uses one of STORE_FIXTURES, and
    `capture` every test of CAPTURE_MODULES."""
    for item in items:
        if item.module is not None and item.module.__name__ in CAPTURE_MODULES:
            item.add_marker(pytest.mark.capture)
        callspec = getattr(item, "callspec", None)
        server_case = callspec is not None and callspec.params.get("mlflow_store") == "server"
        if server_case or PROCESS_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.processes)
        if STORE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.mlflow_tracking)


@pytest.fixture
def with_reprs():
    """configure(repr_objects=True): unknown objects get their repr()."""
    import mlflow_profiler

    mlflow_profiler.configure(repr_objects=True)
    try:
        yield
    finally:
        mlflow_profiler.configure(repr_objects=False)


@pytest.fixture(autouse=True)
def _no_leaks():
    """A test must leave no session current and no hook installed behind it."""
    profile_before = sys.getprofile()
    session_before = _core.session_var.get(None)
    threading_hook_before = getattr(threading, "_profile_hook", None)
    start_before = _thread_start()
    yield
    assert (
        getattr(threading, "_profile_hook", None) is threading_hook_before
    ), "threading.setprofile not put back"
    assert _thread_start() is start_before, "threading's thread start function not put back"
    assert (
        _core.session_var.get(None) is session_before
    ), "a session is still current after the test"
    assert sys.getprofile() is profile_before, "the profile function was not put back"
    assert _core._native_collecting() == 0, "a native session is still collecting"
    state = _core.capture_state()
    assert not state["eval_installed"], "the frame evaluation function is still installed"
    assert not state["global_frames"], "sys.monitoring still reports every frame"
    if sys.version_info >= (3, 12) and not autoprofile_on():
        # Freed with the last session (autoprofile keeps it between its sessions).
        assert _core.tool_id() == -1, "the sys.monitoring tool id was not freed"
    if sys.version_info >= (3, 12):
        assert (
            _instrumented_everywhere() == []
        ), "events left on for every function (a thread's profile function?)"
