"""Running and waiting time in the MLflow metrics: a model step that sleeps
and a step that fans out over asyncio, measured with the program's own
clocks (time.perf_counter) and compared with profile_path_figures and
log_profile_metrics."""

from __future__ import annotations

import asyncio
import time

import pytest
from _mlflow_fixtures import local_store, mlflow_warning_filters  # noqa: F401

import mlflow_profiler
from mlflow_profiler import mlflow_sink

pytestmark = mlflow_warning_filters()

SLEEP_S = 0.05
CPU_S = 0.005
FAN_OUT_S = (0.03, 0.06, 0.09)

measured = {}


def _load_and_scale():
    # The program's own clocks: wall (perf_counter) and the thread's CPU
    # time (thread_time). Off the CPU counts as waiting: on a busy machine
    # the loop is preempted too, so the truth is wall less CPU time of both.
    w0, c0 = time.perf_counter(), time.thread_time()
    time.sleep(SLEEP_S)
    w1, c1 = time.perf_counter(), time.thread_time()
    n = 0
    while time.thread_time() - c1 < CPU_S:
        n += 1
    w2, c2 = time.perf_counter(), time.thread_time()
    measured["sleep"] = w1 - w0
    measured["clean_wall"] = w2 - w0
    measured["cpu"] = c2 - c1
    measured["off_cpu"] = (w1 - w0 - (c1 - c0)) + (w2 - w1 - (c2 - c1))
    return n


def _clean():
    return _load_and_scale()


async def _fetch(delay):
    await asyncio.sleep(delay)
    return delay


async def _gather():
    return await asyncio.gather(*(_fetch(d) for d in FAN_OUT_S))


def _fan_out():
    w0, c0 = time.perf_counter(), time.thread_time()
    out = asyncio.run(_gather())
    measured["fan_out"] = time.perf_counter() - w0
    measured["fan_out_off_cpu"] = measured["fan_out"] - (time.thread_time() - c0)
    return out


def predict():
    _clean()
    return _fan_out()


def _capture(engine):
    asyncio.run(_gather())  # warm: the first event loop of the process sets things up
    measured.clear()
    with mlflow_profiler.profiling(depth=2, engine=engine) as session:
        predict()
    return session


def _close(got_ms, want_s, outside_ms=0.0):
    """Within 5% + 0.5 ms of `want_s`; `outside_ms`: the span's wall time
    less the window the program measured. Above 0, calls and hooks outside
    the window, which a busy machine may spend off the CPU too; below 0, the
    profiler's own work inside it, cut from the span with any time it spent
    preempted, which the program's clock counts."""
    want_ms = want_s * 1e3
    return (
        want_ms - max(0.0, -outside_ms) - (0.05 * want_ms + 0.5)
        <= got_ms
        <= want_ms + max(0.0, outside_ms) + 0.05 * want_ms + 0.5
    )


def _outside(fig, wall_s):
    return fig["wall_ms"] - wall_s * 1e3


def test_waiting_and_own_running_time_per_step(engine):
    session = _capture(engine)
    figures = mlflow_sink.profile_path_figures(session, 1)
    assert set(figures) == {tuple(r["call_path"].split("/")) for r in session.to_flat(1)}
    assert set(figures) == {("predict",), ("predict", "_clean"), ("predict", "_fan_out")}, sorted(
        figures
    )
    for path, fig in figures.items():
        assert fig["running_ms"] + fig["waiting_ms"] == pytest.approx(
            fig["wall_ms"], abs=1e-6
        ), path
        assert 0 <= fig["self_ms"] <= fig["running_ms"] + 1e-9, path

    clean = figures[("predict", "_clean")]
    assert _close(
        clean["waiting_ms"], measured["off_cpu"], _outside(clean, measured["clean_wall"])
    ), (clean, measured)
    assert clean["waiting_ms"] >= measured["sleep"] * 1e3 * 0.95, (clean, measured)
    # Its own code is one call: the sleep and the loop are its helper's,
    # captured below depth 1, so not its own though depth 1 does not show it.
    assert clean["self_ms"] < clean["wall_ms"] - 40, clean
    assert clean["self_ms"] < 1.0, clean
    assert clean["running_ms"] >= measured["cpu"] * 1e3 * 0.9, (clean, measured)

    fan = figures[("predict", "_fan_out")]
    outside = _outside(fan, measured["fan_out"])
    # The oracle is the program's own off-CPU count: the loop's own CPU
    # (asyncio.run's setup, 6.6 ms of a 112 ms fan-out under CI's load once)
    # is running time, so waiting is not the fan-out's whole wall.
    assert _close(fan["waiting_ms"], measured["fan_out_off_cpu"], outside), (fan, measured)
    assert fan["waiting_ms"] >= 0.8 * max(FAN_OUT_S) * 1e3, (fan, measured)
    assert fan["wall_ms"] >= max(FAN_OUT_S) * 1e3

    root = figures[("predict",)]
    # Waiting at any depth: its steps' waiting, and any of its own (off the CPU between them).
    assert (
        clean["waiting_ms"] + fan["waiting_ms"] - 0.01 <= root["waiting_ms"] <= root["wall_ms"]
    ), figures
    assert root["self_ms"] < 1.0, root

    # At depth 2 the helper holds the loop as its own running code.
    deeper = mlflow_sink.profile_path_figures(session, 2)
    helper = deeper[("predict", "_clean", "_load_and_scale")]
    assert helper["self_ms"] >= measured["cpu"] * 1e3 * 0.9, (helper, measured)
    assert deeper[("predict", "_clean")] == clean


def test_ceiling_span_counts_its_callees_as_its_own(engine):
    """Captured at depth 1, _clean had no children recorded: its self time
    includes the helper's loop."""
    asyncio.run(_gather())
    measured.clear()
    with mlflow_profiler.profiling(depth=1, engine=engine) as session:
        predict()
    clean = mlflow_sink.profile_path_figures(session, 1)[("predict", "_clean")]
    assert clean["self_ms"] == pytest.approx(clean["running_ms"])
    assert clean["self_ms"] >= measured["cpu"] * 1e3 * 0.9, (clean, measured)
    assert _close(
        clean["waiting_ms"], measured["off_cpu"], _outside(clean, measured["clean_wall"])
    ), (clean, measured)


def test_logged_metrics_carry_running_and_waiting(local_store):
    import mlflow
    from mlflow.tracking import MlflowClient

    session = _capture("native")
    with mlflow.start_run() as run:
        logged = mlflow_profiler.log_profile_metrics(session)
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    assert metrics == pytest.approx(logged, rel=1e-12)
    for step in ("profile/predict", "profile/predict/_clean", "profile/predict/_fan_out"):
        for stat in mlflow_sink.METRIC_STATS:
            assert f"{step}/{stat}" in metrics, sorted(metrics)
    for step, off_cpu, wall in (
        ("_clean", "off_cpu", "clean_wall"),
        ("_fan_out", "fan_out_off_cpu", "fan_out"),
    ):
        outside = metrics[f"profile/predict/{step}/wall_ms"] - measured[wall] * 1e3
        assert _close(metrics[f"profile/predict/{step}/waiting_ms"], measured[off_cpu], outside), (
            step,
            measured,
        )
    assert (
        metrics["profile/predict/_clean/self_ms"] < metrics["profile/predict/_clean/wall_ms"] - 40
    )
