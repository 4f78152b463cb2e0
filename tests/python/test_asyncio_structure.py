"""Awaited work under the span that awaited it (issue 42, item 2;
docs/capture.md, "asyncio"): the event loop's frames are transparent and
count no depth, and so is the coroutine a loop runs to completion (the body
of the call that ran the loop); asyncio's own callbacks are no lanes, and a
task hangs under the span open in the lane that created it, a task's lane
included.

The oracle for every time is the coroutine's own perf_counter around its
body; the oracle for the structure is the program's text."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import warnings

import pytest
from _helpers import check_times, require_mlflow, schedstat, walk

from mlflow_profiler import profiling

FAST, SMART = 0.02, 0.04  # seconds each endpoint call sleeps once it holds a slot
CALLS = 16

# asyncio's plumbing: none of it may be a node of the tree.
INTERNALS = (
    "run_until_complete",
    "run_forever",
    "_run_once",
    "Runner",
    "_done_callback",
    "_set_result_unless_cancelled",
    "_run_until_complete_cb",
    "shutdown_asyncgens",
    "shutdown_default_executor",
    "_cancel_all_tasks",
    "Handle._run",
    "select",
    "_on_task_done",
)


async def endpoint_call(i, slots, latency, truth):
    t0 = time.perf_counter()
    async with slots:
        await asyncio.sleep(latency)
    truth[i] = time.perf_counter() - t0
    return i


def calls(truth, fast, smart):
    # Odd calls go to "fast" (4 slots), even ones to "smart" (2 slots).
    return [
        endpoint_call(i, fast if i % 2 else smart, FAST if i % 2 else SMART, truth)
        for i in range(CALLS)
    ]


async def fan_out(truth):
    fast, smart = asyncio.Semaphore(4), asyncio.Semaphore(2)
    return await asyncio.gather(*calls(truth, fast, smart))


def call_endpoints(truth):
    """The fan-out run by asyncio.run: fan_out is the main task's coroutine."""
    return asyncio.run(fan_out(truth))


def call_endpoints_until_complete(truth):
    """fan_out handed to a loop's run_until_complete: the same body."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(fan_out(truth))
    finally:
        loop.close()


def call_endpoints_on_loop(truth):
    """The tasks made here, in plain code, and run to completion on a loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        fast, smart = asyncio.Semaphore(4), asyncio.Semaphore(2)
        return loop.run_until_complete(asyncio.gather(*calls(truth, fast, smart)))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def predict(truth, on_loop=False, until_complete=False):
    if until_complete:
        return call_endpoints_until_complete(truth)
    return (call_endpoints_on_loop if on_loop else call_endpoints)(truth)


def kids(node):
    """A node's children, less the event loop's waits in its selector (flag
    `wait`: docs/capture.md, "Waiting"), which are leaves of the span that
    ran the loop."""
    return [c for c in node["children"] if "wait" not in c["flags"]]


def shape(session, depth=None):
    def of(nodes):
        return tuple((n["label"], of(kids(n))) for n in nodes if "wait" not in n["flags"])

    return of(session.to_tree(depth))


def task_lanes(session):
    return [lane for lane in json.loads(session.to_json())["lanes"] if lane["task"] > 0]


def no_internals(session):
    names = [n["label"] for n in walk(session.to_tree()) if "wait" not in n["flags"]]
    assert not [n for n in names if any(part in n for part in INTERNALS)], names


def tolerance(engine):
    """How close a span's wall time is to its own clock: 5% (the target) for
    the native engine. The reference engine's Python hook takes tens of
    microseconds an event, milliseconds on a loaded machine, and its own
    time is cut from every lane of its thread: its spans are checked loosely."""
    return 0.05 if engine == "native" else 0.3


def call_misses(nodes, truth, engine="native", runq_s=0.0, cut_s=0.0):
    """The calls whose wall time is not within 5% of their own clock: a span
    opens before the coroutine's first clock read and closes after its last,
    so a busy machine may also put up to the thread's run-queue time
    (schedstat, runq_s) between them, and the profiler's own stretches, which
    every span's time leaves out (docs/decisions/0006), take up to cut_s
    (the session's profiler_overhead_ns) off: one preempted stretch is cut
    from every lane of its thread (CI, 3.10: four calls 7.6 ms short of their
    clocks, run queue 11 ms). In start order, the calls are made (and first
    run) in the order of i. Waiting for a slot and sleeping are not
    running."""
    assert len(nodes) == CALLS
    nodes = sorted(nodes, key=lambda n: n["start_ns"])
    misses = []
    for i, node in enumerate(nodes):
        wall = node["wall_ns"] / 1e9
        slack = tolerance(engine) * truth[i]
        if not truth[i] - slack - cut_s <= wall <= truth[i] + slack + runq_s:
            misses.append((i, wall, truth[i], runq_s, cut_s))
        # Mostly waiting. The reference engine's hook, at full depth on a
        # loaded machine, runs long in the call's own lane (once 14 of 21 ms).
        if node["active_ns"] >= (0.5 if engine == "native" else 0.8) * node["wall_ns"]:
            misses.append((i, "active", node["active_ns"], node["wall_ns"]))
    return misses


def captured(run, attempts=3):
    """Run `run(truth)` -> (session, nodes) until its calls' times are within
    call_misses (a busy machine may preempt the thread between a clock and
    the hook): the last try's session, and its misses, which must be none."""
    for attempt in range(attempts):
        truth = {}
        q0 = schedstat()[1]
        session, nodes, engine = run(truth)
        runq_s = (schedstat()[1] - q0) / 1e9
        cut_s = session.statistics()["profiler_overhead_ns"] / 1e9
        misses = call_misses(nodes, truth, engine, runq_s, cut_s)
        if not misses:
            break
    assert not misses, misses
    return session, truth


# What the main task's coroutine (fan_out) calls itself: the calls' list and
# gather, in call_endpoints' body.
MAIN_CALLS = ["Semaphore.__init__", "Semaphore.__init__", "calls", "gather"]


@pytest.mark.parametrize("depth", [2, 3, -1])
@pytest.mark.parametrize("until_complete", [False, True], ids=["run", "until_complete"])
def test_fan_out_hangs_under_the_call_that_ran_the_loop(engine, depth, until_complete):
    def run(truth):
        with profiling(depth=depth, engine=engine) as session:
            assert predict(truth, until_complete=until_complete) == list(range(CALLS))
        (root,) = session.to_tree()
        assert root["label"] == "predict"
        (ce,) = [c for c in kids(root) if c["label"].startswith("call_endpoints")]
        assert ce["depth"] == 1
        # asyncio.run, Runner, the loop: transparent; the main task's coroutine
        # (fan_out) is call_endpoints' body: what it calls and the tasks it
        # gathers are call_endpoints' children, at depth 2.
        labels = [c["label"] for c in kids(ce)]
        # (run_until_complete's caller also makes and closes its loop)
        assert [x for x in labels if x in MAIN_CALLS + ["endpoint_call"]] == MAIN_CALLS + [
            "endpoint_call"
        ] * CALLS
        assert "fan_out" not in [n["label"] for n in walk(session.to_tree())]
        ends = [c for c in kids(ce) if c["label"] == "endpoint_call"]
        assert all(c["depth"] == 2 and c["task"] > 0 for c in ends)
        assert len({c["task"] for c in ends}) == CALLS
        # call_endpoints' wall is the fan-out's: the slowest call's own clock,
        # at least, less the profiler's own stretches, which every span's time
        # leaves out (docs/decisions/0006): one preempted on a loaded machine
        # is milliseconds (CI, once: the wall 2.85 ms under the clock).
        cut = session.statistics()["profiler_overhead_ns"]
        assert ce["wall_ns"] + cut >= max(truth.values()) * 1e9, (ce["wall_ns"], cut, truth)
        assert ce["waiting_ns"] > 0.5 * ce["wall_ns"]  # in the selector, idle
        return session, ends, engine

    session, _ = captured(run)
    # 16 calls and the main task's own calls: asyncio's callbacks and shutdown left no lane.
    assert len(task_lanes(session)) == CALLS + 1
    no_internals(session)
    check_times(session)


async def nest(n):
    if n:
        await asyncio.sleep(0.001)
        return await nest(n - 1)
    return n


def run_nest():
    return asyncio.run(nest(2))


def test_a_coroutine_run_by_the_loop_keeps_its_own_awaits_of_itself():
    # Only the frame the loop runs is its caller's body: the same coroutine
    # awaited inside it is a span (both engines, by frame, not by code).
    shapes = {}
    for engine in ("native", "reference"):
        with profiling(depth=-1, engine=engine) as session:
            assert run_nest() == 0
        shapes[engine] = shape(session)
        (root,) = session.to_tree()
        assert root["label"] == "run_nest"
        labels = [c["label"] for c in kids(root)]
        assert labels == ["sleep", "nest"], labels
        (inner,) = [c for c in kids(root) if c["label"] == "nest"]
        assert [c["label"] for c in kids(inner)] == ["sleep", "nest"]
    assert shapes["native"] == shapes["reference"]


def test_tasks_made_in_plain_code_at_depth_2(engine):
    # gather called outside the loop: the tasks hang under the span that ran
    # the loop until they were done, at depth 2 under predict.
    def run(truth):
        with profiling(depth=2, engine=engine) as session:
            assert predict(truth, on_loop=True) == list(range(CALLS))
        (root,) = session.to_tree()
        # (the loop's finalizer, BaseEventLoop.__del__, runs as predict returns)
        (ce,) = [c for c in kids(root) if c["label"] == "call_endpoints_on_loop"]
        ends = [c for c in kids(ce) if c["label"] == "endpoint_call"]
        assert all(c["depth"] == 2 and c["task"] > 0 for c in ends)
        return session, ends, engine

    session, _ = captured(run)
    # What else ran there is the user's own calls (gather, Semaphore()...).
    assert len(task_lanes(session)) == CALLS
    no_internals(session)
    check_times(session)


def test_engines_agree_on_the_fan_out():
    trees = {}
    for engine in ("native", "reference"):
        for depth in (2, 3):
            with profiling(depth=depth, engine=engine) as session:
                predict({})
            trees[engine, depth] = shape(session)
    assert trees["native", 2] == trees["reference", 2]
    assert trees["native", 3] == trees["reference", 3]


def test_chrome_trace_and_report_have_one_track_per_task(engine, tmp_path):
    with profiling(depth=3, engine=engine) as session:
        predict({})
    session.save(str(tmp_path / "t.json"), "chrome_trace")
    trace = json.loads((tmp_path / "t.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    tracks = {
        e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    assert len([t for t in tracks if ", task " in t]) == CALLS + 1, sorted(tracks)
    names = {
        e.get("name", "")
        for e in events
        if e.get("ph") == "X" and "select" not in e.get("name", "")
    }
    assert not [n for n in names if any(part in n for part in INTERNALS)], sorted(names)
    session.save(str(tmp_path / "r.html"))
    doc = (tmp_path / "r.html").read_text()
    assert "_set_result_unless_cancelled" not in doc and "_done_callback" not in doc


# --- tasks made inside tasks ------------------------------------------------------


async def leaf(n):
    t0 = time.perf_counter()
    await asyncio.sleep(0.01)
    return n, time.perf_counter() - t0


async def spawner(n):
    task = asyncio.create_task(leaf(n))
    return await task


async def spawn_all():
    return await asyncio.gather(spawner(1), spawner(2))


def run_spawn():
    return asyncio.run(spawn_all())


@pytest.mark.parametrize("depth", [3, -1])
def test_a_task_made_in_a_task_hangs_under_it(engine, depth):
    for attempt in range(3):  # a busy machine may preempt the thread between the clock and the hook
        q0 = schedstat()[1]
        with profiling(depth=depth, engine=engine) as session:
            results = run_spawn()
        runq = (schedstat()[1] - q0) / 1e9
        roots = session.to_tree()
        # spawn_all, run by asyncio.run, is run_spawn's body.
        (spawn,) = [n for n in walk(roots) if n["label"] == "run_spawn"]
        assert spawn["depth"] == 0
        spawners = [c for c in kids(spawn) if c["label"] == "spawner"]
        assert len(spawners) == 2
        misses = []
        for s, (n, own) in zip(sorted(spawners, key=lambda s: s["start_ns"]), results):
            (lf,) = [c for c in s["children"] if c["label"] == "leaf"]
            assert lf["depth"] == 2 and lf["task"] not in (s["task"], 0)
            # The reference engine's hook opens the leaf's lane in Python before
            # the leaf's first line runs: milliseconds under CI's two-core load
            # (30 ms for an 11.7 ms leaf once, within 0.1 ms idle), so its time
            # is the native engine's to check here.
            if (
                engine == "native"
                and abs(lf["wall_ns"] / 1e9 - own) > tolerance(engine) * own + runq
            ):
                misses.append((lf["wall_ns"], own, runq))
        if not misses:
            break
    assert not misses, misses
    assert len([n for n in walk(roots) if n["label"] == "leaf"]) == 2
    assert len(task_lanes(session)) == 5  # spawn_all's gather, two spawners, two leaves
    no_internals(session)
    check_times(session)


async def grouped():
    async with asyncio.TaskGroup() as tg:
        for i in range(3):
            tg.create_task(leaf(i))


def run_group():
    asyncio.run(grouped())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TaskGroup is 3.11+")
def test_task_group_tasks_hang_under_the_block(engine):
    with profiling(depth=2, engine=engine) as session:
        run_group()
    (root,) = session.to_tree()
    # grouped, run by asyncio.run, is run_group's body.
    g = root
    assert g["label"] == "run_group" and g["depth"] == 0
    leaves = [c for c in g["children"] if c["label"] == "leaf"]
    assert len(leaves) == 3 and all(c["depth"] == 1 for c in leaves)
    # (TaskGroup's __aenter__/__aexit__ are transparent: what they call is
    # grouped's callees, TaskGroup.__init__ and the loop's create_future)
    others = [c["label"] for c in kids(g) if c["label"] != "leaf"]
    assert others.count("TaskGroup.create_task") == 3, others
    no_internals(session)
    check_times(session)


# --- work handed to a thread pool ----------------------------------------------------


def blocking(n):
    t0 = time.perf_counter()
    time.sleep(0.01)
    return n, time.perf_counter() - t0, threading.get_native_id()


async def offload(n):
    n, own, tid = await asyncio.to_thread(blocking, n)
    # The pool thread's run-queue time so far (read here, outside its span):
    # a busy machine may preempt it between the hook and a clock read, which
    # only the span then counts.
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        runq = int(f.read().split()[1]) / 1e9
    return n, own, runq


async def offload_all():
    return await asyncio.gather(*(offload(n) for n in range(4)))


@pytest.mark.parametrize("depth", [3, -1])
def test_to_thread_work_hangs_under_the_task_that_awaited_it(engine, depth):
    # The pool's threads start during the session (all_threads binds them);
    # the first calls start a thread each, later ones may reuse one. Each
    # call's work is a child of the to_thread that awaited it, whichever
    # thread ran it, even when the thread ran it before its task got to await.
    for attempt in range(3):  # a busy machine may preempt a thread between the clock and the hook
        with profiling(depth=depth, engine=engine, all_threads=True) as session:
            results = asyncio.run(offload_all())
        roots = session.to_tree()
        offloads = sorted(
            (n for n in walk(roots) if n["label"] == "offload"), key=lambda n: n["start_ns"]
        )
        assert len(offloads) == 4
        misses = []
        for o, (n, own, runq) in zip(offloads, results):
            (awaiting,) = [c for c in kids(o) if c["label"] == "to_thread"]
            (w,) = [c for c in kids(awaiting) if c["label"] == "blocking"]
            assert (
                w["thread_id"] != o["thread_id"] and w["depth"] == 3
            )  # offload_all: a root (no span ran the loop)
            # The span opens and closes in the pool thread's hook, which five
            # threads share the GIL with: the reference engine's Python hook can
            # be made to hand it over at each, for up to a switch interval.
            gil = 2 * sys.getswitchinterval() if engine == "reference" else 0.0
            if abs(w["wall_ns"] / 1e9 - own) > tolerance(engine) * own + gil + runq:
                misses.append((w["wall_ns"], own, runq))
        if not misses:
            break
    assert not misses, misses
    assert len([n for n in walk(roots) if n["label"] == "blocking"]) == 4


# --- an MLflow PythonModel ------------------------------------------------------------


def router_class(mlflow):
    class TicketRouter(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input, params=None):
            truth = {}
            self._call_endpoints(truth)
            return [truth[i] for i in range(CALLS)]

        def _call_endpoints(self, truth):
            return asyncio.run(self._fan_out(truth))

        async def _fan_out(self, truth):
            fast, smart = asyncio.Semaphore(4), asyncio.Semaphore(2)
            return await asyncio.gather(
                *(
                    self._endpoint_call(
                        i, fast if i % 2 else smart, FAST if i % 2 else SMART, truth
                    )
                    for i in range(CALLS)
                )
            )

        async def _endpoint_call(self, i, slots, latency, truth):
            t0 = time.perf_counter()
            async with slots:
                await asyncio.sleep(latency)
            truth[i] = time.perf_counter() - t0
            return i

    return TicketRouter


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_mlflow_python_model_fan_out(engine, tmp_path):
    mlflow = require_mlflow()
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = str(tmp_path / "router")
        mlflow.pyfunc.save_model(
            path, python_model=router_class(mlflow)(), pip_requirements=["pandas"]
        )
        model = mlflow.pyfunc.load_model(path)
        frame = pd.DataFrame({"ticket": ["a"]})
        model.predict(frame)  # first call: imports, caches

        def run(depth, truth):
            with profiling(depth=depth, engine=engine) as session:
                out = model.predict(frame)
            truth.update(enumerate(out))
            (root,) = session.to_tree()
            assert root["label"].startswith("predict [pyfunc "), root["label"]
            (ce,) = [c for c in kids(root) if c["label"].endswith("._call_endpoints")]
            assert ce["depth"] == 1
            # _fan_out, run by asyncio.run, is _call_endpoints' body: the 16
            # calls are at depth 2 (the ticket router).
            ends = [c for c in kids(ce) if c["label"].endswith("._endpoint_call")]
            assert all(c["depth"] == 2 for c in ends)
            return session, ends, engine

        for depth in (2, 3):
            session, _ = captured(lambda truth: run(depth, truth))
            assert len(task_lanes(session)) == CALLS + 1
        no_internals(session)
