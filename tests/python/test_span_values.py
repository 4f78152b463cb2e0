"""Opt-in per-span values measured in process: cpu_time (the thread's CPU
clock) and alloc_bytes (bytes requested from Python's allocators), with both
engines, through the document and the store (docs/capture.md, "Per-span CPU
time and allocated bytes"). Bounds are loose: CI machines are loaded."""

from __future__ import annotations

import itertools
import json
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from _mlflow_fixtures import local_store, mlflow_warning_filters  # noqa: F401

import mlflow_profiler
from mlflow_profiler import _native, profiling
from mlflow_profiler.store import open_store

pytestmark = mlflow_warning_filters()  # MLflow's own warnings, in the one test that uses it

ENGINES = ["native", "reference"]
MB10 = 10_000_000
SMALL = (
    256 * 1024
)  # what a function that allocates nothing may still show (the reference engine's own tuples)

free_threaded = pytest.mark.skipif(
    _native.FREE_THREADED, reason="alloc_bytes is refused on free-threaded builds"
)


def spin(n: int = 1_000_000) -> bool:
    """CPU work that allocates nothing (None and the bools are shared; 3.9
    and 3.10 allocate an int operation's result before returning a small
    int for it)."""
    x = False
    for _ in itertools.repeat(None, n):
        x = not x
    return x


def sleepy() -> None:
    time.sleep(0.05)


def allocate() -> int:
    return len(bytes(MB10))


def nothing() -> int:
    return 1 + 1


def parent() -> int:
    return allocate() + nothing()


def by_label(session, label):
    found = [s for s in session.spans if s.label.endswith(label)]
    assert found, f"no span {label!r} in {[s.label for s in session.spans]}"
    return found[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_cpu_follows_the_thread_clock(engine):
    # The oracle is the same thread's clock read around each call: load on
    # the machine (CI) stretches the wall time, not this.
    with profiling(depth=2, cpu_time=True, engine=engine) as s:
        t0 = time.thread_time_ns()
        spin(2_000_000)
        t1 = time.thread_time_ns()
        sleepy()
        t2 = time.thread_time_ns()
    b, z = by_label(s, "spin"), by_label(s, "sleepy")
    # Inside [t0, t1]: at most that, and all of it but the hook's own steps.
    assert t1 - t0 - 2_000_000 <= b.cpu_ns <= t1 - t0, (b.cpu_ns, t1 - t0)
    assert b.cpu_ns <= b.duration_ns + 1_000_000  # never more than the wall time
    assert b.cpu_ns > 1_000_000  # two million loop turns are milliseconds of CPU
    # A sleep is off the CPU: a few syscalls' worth, far below its 50 ms.
    assert z.cpu_ns <= t2 - t1
    assert z.cpu_ns < 5_000_000, z.cpu_ns
    assert z.duration_ns >= 50_000_000
    assert b.alloc_bytes is None and z.alloc_bytes is None  # not asked for


@free_threaded
@pytest.mark.parametrize("engine", ENGINES)
def test_alloc_is_inclusive_bytes(engine):
    with profiling(depth=3, alloc_bytes=True, engine=engine) as s:
        parent()
    a, n, p = by_label(s, "allocate"), by_label(s, "nothing"), by_label(s, "parent")
    assert a.alloc_bytes >= MB10
    assert p.alloc_bytes >= a.alloc_bytes  # inclusive: the parent holds its child's
    assert n.alloc_bytes < SMALL
    assert a.cpu_ns is None  # not asked for
    assert "alloc 9.5MB" in s.format_tree() or "alloc 9.6MB" in s.format_tree()


def test_options_off_leave_no_values():
    with profiling(depth=2) as s:
        parent()
    assert all(sp.cpu_ns is None and sp.alloc_bytes is None for sp in s.spans)
    doc = json.loads(s.to_json())
    assert "span_values" not in doc
    assert "cpu " not in s.format_tree() and "alloc " not in s.format_tree()


def test_options_are_checked():
    with pytest.raises(TypeError):
        profiling(cpu_time="yes")
    with pytest.raises(TypeError):
        mlflow_profiler.ProfileSession(alloc_bytes=2)


def values(session):
    return [(sp.label, sp.depth, sp.cpu_ns, sp.alloc_bytes) for sp in session.spans]


@free_threaded
def test_values_survive_save_load_and_the_store(tmp_path):
    with profiling(depth=3, cpu_time=True, alloc_bytes=True) as s:
        parent()
        spin(100_000)
    doc = json.loads(s.to_json())
    kinds = {(t, u) for _, t, u, _ in doc["span_values"]}
    assert kinds == {("cpu", "ns"), ("alloc", "bytes")}
    assert doc["span_value_fields"] == ["span", "type", "unit", "value"]
    path = s.save(tmp_path / "p.json.gz")
    back = mlflow_profiler.load(path)
    assert values(back) == values(s)
    assert back.format_tree() == s.format_tree()
    with open_store(tmp_path / "s.db") as store:
        source = store.add(s)
        stored = store.load(source)
    assert values(stored) == values(s)
    assert stored.format_tree() == s.format_tree()
    # A shallower view keeps the values of the spans it keeps.
    shallow = json.loads(s.to_json(depth=0))
    assert {t for _, t, _, _ in shallow["span_values"]} == {"cpu", "alloc"}
    assert all(span < len(shallow["spans"]) for span, _, _, _ in shallow["span_values"])


@free_threaded
@pytest.mark.parametrize("engine", ENGINES)
def test_threads_count_their_own(engine):
    def worker_alloc():
        allocate()

    def worker_busy():
        spin()

    def fan_out():
        ts = [threading.Thread(target=worker_alloc), threading.Thread(target=worker_busy)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    with profiling(depth=3, cpu_time=True, alloc_bytes=True, all_threads=True, engine=engine) as s:
        fan_out()
    a, b, f = by_label(s, "worker_alloc"), by_label(s, "worker_busy"), by_label(s, "fan_out")
    assert (
        a.thread_name != b.thread_name
    )  # (the first may end before the second starts: same ident)
    assert a.alloc_bytes >= MB10
    assert b.alloc_bytes < SMALL
    assert b.cpu_ns > 1_000_000  # a million loop turns
    # The thread that waited in join() allocated and computed neither.
    assert f.alloc_bytes < MB10
    assert f.cpu_ns < b.cpu_ns


@free_threaded
@pytest.mark.parametrize("engine", ENGINES)
def test_tracemalloc_started_before_and_stopped_during(engine):
    tracemalloc.start()
    try:
        with profiling(depth=2, alloc_bytes=True, engine=engine) as s:
            x = bytes(MB10)
            current, _ = tracemalloc.get_traced_memory()
            assert current >= MB10  # tracemalloc still sees every block
            first = allocate()
            tracemalloc.stop()  # takes its hook out from under ours
            second = allocate()
            del x
    finally:
        tracemalloc.stop()
    assert first == second == MB10
    assert not tracemalloc.is_tracing()
    spans = [sp for sp in s.spans if sp.label.endswith("allocate")]
    assert len(spans) == 2
    assert spans[0].alloc_bytes >= MB10  # counted while tracemalloc was below
    # Afterwards the program still runs; a new session counts again.
    with profiling(depth=1, alloc_bytes=True, engine=engine) as again:
        allocate()
    assert by_label(again, "allocate").alloc_bytes >= MB10


@free_threaded
@pytest.mark.parametrize("engine", ENGINES)
def test_tracemalloc_started_during(engine):
    try:
        with profiling(depth=2, alloc_bytes=True, engine=engine) as s:
            tracemalloc.start()  # wraps ours
            before, _ = tracemalloc.get_traced_memory()
            x = allocate()
            keep = bytes(MB10)
            after, _ = tracemalloc.get_traced_memory()
        # Our session ended while tracemalloc was above us: it still traces.
        assert tracemalloc.is_tracing()
        assert after - before >= MB10
        still, _ = tracemalloc.get_traced_memory()
        assert still >= MB10
        del keep
    finally:
        tracemalloc.stop()
    assert x == MB10
    assert by_label(s, "allocate").alloc_bytes >= MB10
    # tracemalloc gave back our (now passing-through) wrapper: it counts again when asked.
    with profiling(depth=1, alloc_bytes=True, engine=engine) as again:
        allocate()
    assert by_label(again, "allocate").alloc_bytes >= MB10


def raises_after_allocating():
    _ = bytes(MB10)
    raise ValueError("boom")


def gen():
    for _ in range(3):
        yield bytes(MB10 // 10)


def catcher():
    try:
        raises_after_allocating()
    except ValueError:
        pass
    return sum(len(b) for b in gen())


@free_threaded
@pytest.mark.parametrize("engine", ENGINES)
def test_exceptions_and_generators_keep_working(engine):
    with profiling(depth=3, cpu_time=True, alloc_bytes=True, engine=engine) as s:
        total = catcher()
    assert total == 3 * (MB10 // 10)
    r, g, c = by_label(s, "raises_after_allocating"), by_label(s, "gen"), by_label(s, "catcher")
    assert "exception" in r.flags
    assert r.alloc_bytes >= MB10
    assert "generator" in g.flags
    assert g.alloc_bytes >= 3 * (MB10 // 10)  # its running stretches, summed
    assert c.alloc_bytes >= r.alloc_bytes + g.alloc_bytes
    assert c.cpu_ns >= g.cpu_ns


@free_threaded
def test_nested_sessions_share_the_counter():
    with profiling(depth=2, alloc_bytes=True) as outer:
        with profiling(depth=1, alloc_bytes=True) as inner:
            allocate()
        allocate()
    assert by_label(inner, "allocate").alloc_bytes >= MB10
    assert all(sp.alloc_bytes >= MB10 for sp in outer.spans if sp.label.endswith("allocate"))


@pytest.mark.skipif(not _native.FREE_THREADED, reason="the refusal is for free-threaded builds")
def test_free_threaded_refuses_alloc_with_a_warning():
    with pytest.warns(RuntimeWarning, match="free-threaded"):
        with profiling(depth=1, alloc_bytes=True, engine="reference") as s:
            allocate()
    assert all(sp.alloc_bytes is None for sp in s.spans)


@free_threaded
def test_the_report_shows_them_in_the_span_details(tmp_path):
    from _browser import console_errors, require_browser, start_chromium, wait_for

    require_browser()
    with profiling(depth=2, cpu_time=True, alloc_bytes=True) as s:
        parent()
    path = s.save(tmp_path / "r.html")
    a = by_label(s, "allocate")
    driver = start_chromium()
    try:
        driver.get(Path(path).as_uri())
        wait_for(
            lambda: driver.execute_script("return !!window.mlprofReport"),
            what="the report to render",
        )
        rows = [
            el
            for el in driver.find_elements("css selector", "#tree .row[role=treeitem]")
            if el.text.startswith("allocate")
        ]
        assert rows, "no tree row for allocate"
        rows[0].click()
        wait_for(
            lambda: driver.find_element("css selector", "#detail h2").text == "allocate",
            what="the details",
        )
        detail = driver.find_element("id", "detail").text
        assert "Allocated 9.5MB" in detail or "Allocated 9.6MB" in detail, detail
        cpu = [line for line in detail.splitlines() if line.startswith("CPU time ")]
        assert cpu and cpu[0].endswith(("us", "ms")), detail
        assert console_errors(driver) == []
    finally:
        driver.quit()
    assert a.alloc_bytes >= MB10


@free_threaded
def test_mlflow_trace_spans_carry_them(local_store):
    import mlflow

    from mlflow_profiler import _mlflow_trace
    from mlflow_profiler.mlflow_sink import log_profile_trace

    try:
        _mlflow_trace.check_supported(mlflow)
    except ImportError:
        pytest.skip("this MLflow records no traces")
    with profiling(depth=2, cpu_time=True, alloc_bytes=True) as s:
        parent()
    a = by_label(s, "allocate")
    with mlflow.start_run() as run:
        trace_id = log_profile_trace(s, run_id=run.info.run_id)
    mlflow.flush_trace_async_logging()
    spans = {sp.name: sp for sp in mlflow.get_trace(trace_id).data.spans}
    attrs = spans[a.label].attributes
    assert attrs["mlflow_profiler.alloc_bytes"] == a.alloc_bytes >= MB10
    assert attrs["mlflow_profiler.cpu_ns"] == a.cpu_ns
    # Not captured: no attribute.
    with profiling(depth=2) as plain:
        parent()
    with mlflow.start_run() as run:
        trace_id = log_profile_trace(plain, run_id=run.info.run_id)
    mlflow.flush_trace_async_logging()
    spans = {sp.name: sp for sp in mlflow.get_trace(trace_id).data.spans}
    assert "mlflow_profiler.cpu_ns" not in spans[a.label].attributes


@free_threaded
def test_autoprofile_passes_them_on(tmp_path):
    from _helpers import require_mlflow

    require_mlflow()
    import _mlflow_models

    churn = _mlflow_models.load_churn_in_new_store(tmp_path / "store")
    df = _mlflow_models.frame(64)
    try:
        mlflow_profiler.autoprofile(depth=2, cpu_time=True, alloc_bytes=True)
        churn.predict(df)
        session = mlflow_profiler.last_profile()
    finally:
        mlflow_profiler.autoprofile(disable=True)
    assert session is not None and session.spans
    assert all(sp.cpu_ns is not None and sp.alloc_bytes is not None for sp in session.spans)
    root = session.spans[0]
    assert root.cpu_ns > 0 and root.alloc_bytes > 0  # a pandas predict allocates
    with pytest.raises(TypeError):
        mlflow_profiler.autoprofile(cpu_time="yes")
