"""The event loop's idle time, measured at its selector (docs/capture.md,
"Waiting"): bubbles at the default depth without capture_c_calls, against
the program's own clocks; the selector stays wrapped, unchanged from one
session to the next, and nothing changes for the program."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
import time

import pytest
from _helpers import document_marks, schedstat

from mlflow_profiler import analysis, mark, profiling


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


class Router:
    """predict -> _call_endpoints -> asyncio.run(fan-out): 4 calls to a fast
    endpoint (Semaphore(4), 100 ms), then 2 to a slow one (Semaphore(2), 200
    ms), each with 1 ms of work before its call. Each call logs when it
    started and stopped awaiting its endpoint, by CLOCK_MONOTONIC and
    schedstat's run-queue time, and marks both instants, which the profile
    places on its own timeline."""

    def __init__(self) -> None:
        self.awaits = {"fast": [], "slow": []}

    async def call(self, endpoint: str, sem: asyncio.Semaphore, delay: float) -> float:
        async with sem:
            _busy(1)
            t0, q0 = time.monotonic_ns(), schedstat()[1]
            mark(f"{endpoint} awaits")
            await asyncio.sleep(delay)
            mark(f"{endpoint} resumed")
            self.awaits[endpoint].append((t0, time.monotonic_ns(), q0, schedstat()[1]))
        return delay

    async def fan_out(self) -> list:
        fast, slow = asyncio.Semaphore(4), asyncio.Semaphore(2)
        a = await asyncio.gather(*(self.call("fast", fast, 0.1) for _ in range(4)))
        return a + await asyncio.gather(*(self.call("slow", slow, 0.2) for _ in range(2)))

    def _call_endpoints(self) -> list:
        return asyncio.run(self.fan_out())

    def predict(self) -> list:
        _busy(2)
        out = self._call_endpoints()
        _busy(2)
        return out


def _idle_errors(router: Router, session, measured: list) -> list:
    """Per phase: (truth, idle found in it, the thread's run-queue time in
    it). The truth runs from the last call's start of awaiting to the first
    call's end, as the calls marked them: the profile leaves its own work
    out of its timeline (a summary preempted on a busy machine, tens of ms
    under load), so its times run early against the program's clock, by
    all of that work before them. The program's clock bounds the truth."""
    marks: dict = {}
    for r in document_marks(session)[0]:
        marks.setdefault(r["name"], []).append(r["ts_ns"])
    out = []
    for endpoint in ("fast", "slow"):
        awaits = router.awaits[endpoint]
        (ta, _, qa, _), (_, tb, _, qb) = max(awaits), min(awaits, key=lambda a: a[1])
        ma, mb = max(marks[f"{endpoint} awaits"]), min(marks[f"{endpoint} resumed"])
        assert 0 < mb - ma <= tb - ta, (endpoint, ma, mb, ta, tb)
        inside = sum(min(e, mb) - max(s, ma) for s, e in measured if s < mb and ma < e)
        out.append((mb - ma, inside, qb - qa))
    return out


@pytest.mark.parametrize("depth", [2, 1, -1])
def test_idle_gaps_of_a_fan_out_at_any_depth_without_c_calls(engine, depth):
    """While every call of a phase awaits its endpoint, nothing runs: the
    truth is, per phase, from the last call's start of awaiting to the first
    call's end, as the calls marked them (about 97 ms and 199 ms, never
    longer than the program's own clock says). The bubbles found in that
    stretch add up to it within 5%.

    Never more idle than the truth. Less, where the loop waited for a CPU
    before it reached select (a starved process cannot tell that from work;
    the agent's run-queue time does): with both cores busy the loop was
    seen reaching select up to 20 ms late with 3 ms of schedstat run-queue
    time, so a run is repeated, up to 3 times, until one meets 5%."""
    for attempt in range(3):
        router = Router()
        with profiling(depth=depth, engine=engine) as session:
            result = router.predict()
        assert result == [0.1] * 4 + [0.2] * 2
        assert session._built().meta.get("loop_waits") == "selector"
        (report,) = analysis.bubbles([session], min_ms=1).sessions
        assert report["wait_data"]
        measured = [(b["start_ns"], b["end_ns"]) for b in report["bubbles"]]
        errors = _idle_errors(router, session, measured)
        for truth, inside, _ in errors:
            assert inside <= 1.05 * truth, (errors, measured)
        # Short of the truth by at most 5% and the run queue the stretch held.
        if all(truth - inside <= 0.05 * truth + runq for truth, inside, runq in errors):
            break
    else:
        pytest.fail(f"idle found off by more than 5% in 3 runs: (truth, found, run-queue) {errors}")
    spans = session.spans
    waits = [s for s in spans if "wait" in s.flags]
    assert waits and all(
        s.label.endswith(".select") and s.module == "selectors" for s in waits
    ), waits
    if depth == 1:
        # Below the ceiling: a leaf under the span that ran the loop.
        assert {spans[s.parent_index].label for s in waits} == {"Router._call_endpoints"}


def test_the_selectors_stay_watched_and_the_loop_runs_the_same(engine):
    """The wrappers stay after the session, unchanged by later sessions: the
    classes are not modified twice a session (on 3.13+ that used up their
    type versions after ~1,000 sessions: never cached or specialized again).
    Outside sessions a wrapper only forwards; unwatch_loops() puts the
    classes' own functions back."""
    import selectors

    from mlflow_profiler import _core

    async def work():
        # Long enough for the loop to reach select before the timer is due:
        # a 5 ms sleep had expired first once (CI, 3.13, the reference
        # engine on a loaded machine; 0.75 ms unloaded), and select(0) is
        # no wait.
        await asyncio.sleep(0.05)
        return 42

    classes = (selectors.SelectSelector, selectors.EpollSelector, selectors.PollSelector.__mro__[1])
    _core.unwatch_loops()
    own = {c: vars(c)["select"] for c in classes}
    assert not any(isinstance(f, _core.SelectWait) for f in own.values())
    try:
        testcapi = __import__("_testcapi")
    except ImportError:  # a Python built without its test modules
        testcapi = None
    if not hasattr(testcapi, "type_get_version"):  # 3.9 and 3.10 have no such function
        testcapi = None
    loop = asyncio.new_event_loop()

    def predict():
        return loop.run_until_complete(work())

    try:
        with profiling(depth=2, engine=engine) as session:
            assert predict() == 42
        wrappers = {c: vars(c)["select"] for c in classes}
        for cls, func in own.items():
            assert isinstance(wrappers[cls], _core.SelectWait) and wrappers[cls].__wrapped__ is func
        assert loop._selector.select.__name__ == "select"
        assert loop.run_until_complete(work()) == 42  # outside a session: forwarded
        for _ in range(3):
            loop._selector.select(0)  # a type version for each class, if it can have one
        versions = testcapi and [testcapi.type_get_version(c) for c in classes]
        for _ in range(50):
            with profiling(depth=0, engine=engine):
                loop._selector.select(0)
        assert {c: vars(c)["select"] for c in classes} == wrappers  # the same objects
        if testcapi:  # and the classes were not modified: the same type versions
            assert [testcapi.type_get_version(c) for c in classes] == versions != [0, 0, 0]
        with profiling(depth=2, engine=engine) as again:
            assert predict() == 42
    finally:
        loop.close()
        _core.unwatch_loops()
    assert {c: vars(c)["select"] for c in classes} == own
    del wrappers
    gc.collect()
    type_refs = sys.getrefcount(_core.SelectWait)
    for _ in range(5):  # a wrapper freed gives its type's reference back
        with profiling(depth=0, engine=engine):
            pass
        _core.unwatch_loops()
    gc.collect()
    after = sys.getrefcount(_core.SelectWait)  # (not in the assert: pytest keeps its operands)
    assert after == type_refs
    assert any("wait" in s.flags for s in session.spans)
    assert any("wait" in s.flags for s in again.spans)


def test_a_subprocess_waited_for_is_a_wait(engine):
    """subprocess.communicate waits in a selector too, below the ceiling."""
    import subprocess as sp

    def predict():
        with sp.Popen(
            [sys.executable, "-c", "import time; time.sleep(0.05); print('done')"],
            stdout=sp.PIPE,
            stderr=sp.PIPE,
        ) as proc:
            return proc.communicate(timeout=60)[0]

    with profiling(depth=0, engine=engine) as session:
        assert predict().strip() == b"done"
    waits = [s for s in session.spans if "wait" in s.flags]
    assert waits and sum(s.duration_ns for s in waits) >= 20_000_000, waits
    assert all(s.depth == 1 for s in waits)  # a leaf under the root, below depth 0


def test_a_session_entered_by_a_coroutine_knows_its_awaits(engine):
    async def fetch():
        await asyncio.sleep(0.05)

    async def main():
        with profiling(depth=2, engine=engine) as session:
            await asyncio.gather(fetch(), fetch())
        assert "select" not in vars(asyncio.get_running_loop()._selector)
        return session

    session = asyncio.run(main())
    assert session._built().meta.get("loop_waits") in ("selector", "awaits")
    (report,) = analysis.bubbles([session], min_ms=5).sessions
    # The 50 ms sleep is a bubble, less the time before the loop selects: on
    # a loaded machine the reference engine's work and preemptions took 7 ms
    # of a 20 ms sleep (CI, 3.14).
    assert report["wait_data"] and report["bubble_ns"] >= 30_000_000, report
    assert report["bubble_ns"] <= report["window_end_ns"] - report["window_start_ns"], report


def test_a_select_that_raises_raises_the_same(engine):
    """The wrapper returns what select returns and raises what it raises."""
    loop = asyncio.new_event_loop()
    try:
        with profiling(depth=2, engine=engine):
            loop.run_until_complete(asyncio.sleep(0.001))
            with pytest.raises(TypeError):
                loop._selector.select("not a timeout")
    finally:
        loop.close()


def test_mlprof_bubbles_exits_3_without_waiting_data(tmp_path):
    """Threads waiting in sleeps at depth 2, no C calls captured: nothing says
    when they waited, so the command says it cannot tell."""

    def worker():
        time.sleep(0.02)

    def predict():
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    with profiling(depth=2) as session:
        predict()
    path = session.save(tmp_path / "threads.json")
    run = subprocess.run(
        [sys.executable, "-m", "mlflow_profiler._cli", "bubbles", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 3, (run.returncode, run.stderr)
    assert "no waiting data" in run.stderr
    assert json.loads(run.stdout)["sessions"][0]["wait_data"] is False


def test_nested_sessions_each_name_the_wait(engine):
    """A wait belongs to every session in the chain, each naming it in its
    own function table."""

    async def work():
        await asyncio.sleep(0.01)

    def predict():
        asyncio.run(work())

    with profiling(depth=2, engine=engine) as outer:
        with profiling(depth=2, engine=engine) as inner:
            predict()
    for session in (outer, inner):
        waits = [s for s in session.spans if "wait" in s.flags]
        assert waits and all(
            s.label.endswith(".select") and s.module == "selectors" for s in waits
        ), waits
