"""Resources and slots (issue 42 item 3, docs/design/analysis.md, "Resources and slots"; docs/capture.md,
"Resources"): `profile_span(resource=)` and `profile_block(resource=)` name
what a call uses. The Chrome trace has a process per resource and a thread
per slot in use, each call on the lowest free slot, and counters of calls in
flight and queued; the HTML report carries the same view.

The oracle is the program's own clock: each call logs when it got its slot
and when it let it go (perf_counter_ns is CLOCK_MONOTONIC, the profile's
clock), and when its task started; the semaphores bound the slots."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import time

import pytest
from _helpers import schedstat, walk

from mlflow_profiler import profile_block, profile_span, profiling

LIMITS = {"fast": 4, "smart": 2}
LATENCY = {"fast": 0.02, "smart": 0.04}
CALLS = 16


class Router:
    """predict -> _call_endpoints -> asyncio.run(_fan_out): 16 calls, odd
    ones to "fast" (4 slots), even ones to "smart" (2). Each call logs
    (endpoint, task start, slot acquired, slot released) in ns, and, in
    `queued`, (endpoint, task start, slot acquired) of the calls that found
    their semaphore locked: those waited for a slot."""

    def __init__(self) -> None:
        self.log = []
        self.queued = []

    async def _endpoint_call(self, i, slots):
        endpoint = "fast" if i % 2 else "smart"
        t0 = time.perf_counter_ns()
        waits = slots[endpoint].locked()
        async with slots[endpoint]:
            t1 = time.perf_counter_ns()
            if waits:
                self.queued.append((endpoint, t0, t1))
            with profile_block(f"ask {endpoint}", resource=endpoint):
                await asyncio.sleep(LATENCY[endpoint])
            t2 = time.perf_counter_ns()
        self.log.append((endpoint, t0, t1, t2))

    async def _fan_out(self):
        slots = {name: asyncio.Semaphore(n) for name, n in LIMITS.items()}
        await asyncio.gather(*(self._endpoint_call(i, slots) for i in range(CALLS)))

    def _call_endpoints(self):
        asyncio.run(self._fan_out())

    def predict(self):
        self._call_endpoints()


def _trace(session, tmp_path):
    path = tmp_path / "t.trace.json"
    session.save(str(path), "chrome_trace")
    return json.loads(path.read_text())["traceEvents"]


def _resources(events):
    """{resource: {"slots": {tid: name}, "calls": [(ts_ns, end_ns, tid, args)],
    "in flight": [(ts_ns, n)], "queued": [(ts_ns, n)]}} from a Chrome trace."""
    pids = {
        e["pid"]: e["args"]["name"][len("resource ") :]
        for e in events
        if e["ph"] == "M"
        and e["name"] == "process_name"
        and e["args"]["name"].startswith("resource ")
    }
    out = {
        name: {"slots": {}, "calls": [], "in flight": [], "queued": []} for name in pids.values()
    }
    for e in events:
        if e["pid"] not in pids:
            continue
        r = out[pids[e["pid"]]]
        if e["ph"] == "M" and e["name"] == "thread_name":
            r["slots"][e["tid"]] = e["args"]["name"]
        elif e["ph"] == "X":
            start = round(e["ts"] * 1000)
            r["calls"].append((start, start + round(e["dur"] * 1000), e["tid"], e["args"]))
        elif e["ph"] == "C":
            r[e["name"]].append((round(e["ts"] * 1000), e["args"]["calls"]))
    return out


def _peak(samples):
    return max((n for _, n in samples), default=0)


def _truth_in_flight(log, endpoint, t):
    return sum(1 for e, _, t1, t2 in log if e == endpoint and t1 <= t < t2)


@pytest.mark.parametrize("depth", [2, 4, -1])
def test_each_resource_is_a_process_with_a_thread_per_slot(engine, depth, tmp_path):
    """At depth 2 the blocks (depth 3: _fan_out, run by asyncio.run, is
    _call_endpoints' body) are below the ceiling: recorded all the same, as
    leaves, since they name a resource, under their tasks' coroutines (depth
    2), which say how long each call was queued."""
    for attempt in range(3):  # a busy machine may stretch a call past its clock (run-queue time)
        model = Router()
        q0 = schedstat()[1]
        with profiling(depth=depth, engine=engine) as session:
            model.predict()
        runq = (schedstat()[1] - q0) / 1e9
        path = tmp_path / "t.trace.json"
        session.save(str(path), "chrome_trace")
        doc = json.loads(path.read_text())
        origin = doc["otherData"]["ts_origin_ns"]
        cut = session.statistics()["profiler_overhead_ns"]
        res = _resources(doc["traceEvents"])
        assert set(res) == {"fast", "smart"}
        misses = []
        for name, r in res.items():
            truth = sorted((t1, t2) for e, _, t1, t2 in model.log if e == name)
            calls = sorted(r["calls"])
            assert len(calls) == CALLS // 2
            # The semaphore's limit is the slots used: never more calls in flight.
            assert sorted(r["slots"].values()) == [f"slot {k}" for k in range(1, LIMITS[name] + 1)]
            assert _peak(r["in flight"]) == LIMITS[name]
            for (start, end, tid, args), (t1, t2) in zip(calls, truth):
                assert args["resource"] == name and args["slot"] == tid and 1 <= tid <= LIMITS[name]
                # in flight from the block's start to its end: the clock's [t1, t2]
                wall, own = end - start, t2 - t1
                # (the profile's times drift earlier than the clock by the profiler's own work)
                if not (
                    abs(wall - own) <= 0.05 * own + runq * 1e9
                    and start + origin >= t1 - 0.05 * own - cut
                ):
                    misses.append((name, wall, own))
            # No two calls on one slot at once.
            by_slot = {}
            for start, end, tid, _ in calls:
                by_slot.setdefault(tid, []).append((start, end))
            for spans in by_slot.values():
                spans.sort()
                assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
            # Queued: the calls that waited for their semaphore, at most all
            # but the slots; at the fan-out's start every call beyond the
            # limit is queued.
            assert _peak(r["queued"]) == CALLS // 2 - LIMITS[name]
            queued = sorted(
                float(args["queued"].rstrip("ms"))
                for _, _, _, args in calls
                if "queued" in args and args["queued"].endswith("ms")
            )
            own_queued = sorted((t1 - t0) / 1e6 for e, t0, t1 in model.queued if e == name)
            assert len(queued) == len(own_queued) == CALLS // 2 - LIMITS[name]
            # (the reference engine's hook runs between the clock and the span: its cut time too)
            slack_ms = 0.5 + runq * 1e3 + (cut / 1e6 if engine != "native" else 0)
            for got, want in zip(queued, own_queued):
                if abs(got - want) > 0.05 * want + slack_ms:
                    misses.append((name, "queued", got, want))
        if not misses:
            break
    assert not misses, misses
    if depth == 2:  # the leaves hang under their tasks' coroutines
        nodes = list(walk(session.to_tree()))
        deep = [n for n in nodes if n["depth"] > 2]
        assert len(deep) == CALLS and {n["label"] for n in deep} == {"ask fast", "ask smart"}
        calls = {n["index"]: n for n in nodes if n["label"] == "Router._endpoint_call"}
        assert len(calls) == CALLS and all(n["depth"] == 2 for n in calls.values())
        assert all(n["parent_index"] in calls and n["depth"] == 3 for n in deep)


def test_the_counters_follow_the_programs_clock(engine, tmp_path):
    """In flight at each sample is what the calls' own clocks say. Each
    stretch is compared at its middle, give or take 0.5 ms: the profile's
    times leave out the profiler's own work (first sight of a code, I/O
    summaries, the reference engine's hook), so they drift from the
    program's clock by what it took so far. The reference engine's hook
    takes 100s of us an event, milliseconds on a busy machine: there the
    counters are checked by their levels, not their times."""
    for attempt in range(3):
        model = Router()
        with profiling(depth=-1, engine=engine) as session:
            model.predict()
        path = tmp_path / "t.trace.json"
        session.save(str(path), "chrome_trace")
        doc = json.loads(path.read_text())
        origin = doc["otherData"]["ts_origin_ns"]
        res = _resources(doc["traceEvents"])
        misses = []
        for name, r in res.items():
            samples = r["in flight"]
            assert samples[-1][1] == 0 and len(samples) >= 4
            assert max(n for _, n in samples) == LIMITS[name]
            if engine != "native":
                continue
            for (ts, n), (nxt, _) in zip(samples, samples[1:]):
                if nxt - ts < 1_500_000:
                    continue  # too short to compare with another clock
                mid = origin + (ts + nxt) // 2
                truths = {
                    _truth_in_flight(model.log, name, mid + d) for d in (-500_000, 0, 500_000)
                }
                if n not in truths:
                    misses.append((name, ts, n, truths))
        if not misses:
            break
    assert not misses, misses


def test_profile_span_resource_on_a_coroutine_and_on_threads(engine, tmp_path):
    """A coroutine function labelled with a resource is a call in flight
    from its start (a semaphore inside it is part of it); a plain function
    called from a thread pool's 3 workers (all_threads) uses at most 3 slots."""

    @profile_span(resource="db")
    def query(n):
        time.sleep(0.01)
        return n

    @profile_span("fetch", resource="api")
    async def fetch(n):
        await asyncio.sleep(0.01)
        return n

    async def gather():
        return await asyncio.gather(*(fetch(i) for i in range(5)))

    def predict():
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            rows = list(pool.map(query, range(9)))
        return rows, asyncio.run(gather())

    with profiling(depth=-1, engine=engine, all_threads=True) as session:
        assert predict() == (list(range(9)), list(range(5)))
    res = _resources(_trace(session, tmp_path))
    assert set(res) == {"db", "api"}
    assert len(res["db"]["calls"]) == 9 and 1 <= len(res["db"]["slots"]) <= 3
    assert _peak(res["db"]["queued"]) == 0  # threads: nothing says a call was queued
    assert len(res["api"]["calls"]) == 5 and len(res["api"]["slots"]) == 5  # all in flight at once
    assert {args["resource"] for *_, args in res["api"]["calls"]} == {"api"}
    names = {n["label"]: n.get("resource") for n in walk(session.to_tree())}
    assert names["fetch"] == "api" and names[query.__qualname__] == "db"
    spans = {s.label: s.resource for s in session.spans}
    assert spans["fetch"] == "api" and spans[query.__qualname__] == "db"


def test_resources_survive_the_document_and_the_report(engine, tmp_path):
    import mlflow_profiler

    model = Router()
    with profiling(depth=-1, engine=engine) as session:
        model.predict()
    path = tmp_path / "p.json"
    session.save(str(path))
    loaded = mlflow_profiler.load(str(path))
    assert [s.resource for s in loaded.spans] == [s.resource for s in session.spans]
    assert sum(s.resource == "fast" for s in loaded.spans) == CALLS // 2
    html = tmp_path / "r.html"
    session.save(str(html))
    text = html.read_text()
    extras = json.loads(re.search(r'id="mlprof-extras">(.*?)</script>', text, re.S).group(1))
    by_name = {r["name"]: r for r in extras["resources"]}
    assert by_name["fast"]["slots"] == 4 and by_name["smart"]["slots"] == 2
    assert len(by_name["smart"]["calls"]) == CALLS // 2


def test_task_tracks_are_named_by_their_coroutine(engine, tmp_path):
    model = Router()
    with profiling(depth=-1, engine=engine) as session:
        model.predict()
    names = [
        e["args"]["name"]
        for e in _trace(session, tmp_path)
        if e["ph"] == "M" and e["name"] == "thread_name"
    ]
    tasks = [n for n in names if ", task " in n]
    assert len(tasks) == CALLS + 1
    assert sum(n.endswith(": Router._endpoint_call") for n in tasks) == CALLS
    # _fan_out is _call_endpoints' body: its task's track is named by its first call.
    assert sum(n.endswith(": Router._fan_out") for n in tasks) == 0


@pytest.mark.parametrize("bad", [1, b"x", ""])
def test_a_bad_resource_is_refused_at_decoration(bad):
    with pytest.raises(TypeError, match="resource must be a non-empty str"):
        profile_block("x", resource=bad)
    with pytest.raises(TypeError, match="resource must be a non-empty str"):
        profile_span(resource=bad)(lambda: None)


def test_a_resource_costs_nothing_without_a_session():
    @profile_span(resource="db")
    def f(x):
        return x + 1

    assert f(1) == 2 and f.resource == "db"
    with profile_block("b", resource="db") as b:
        pass
    assert b.resource == "db"


def test_a_store_keeps_each_spans_resource(engine, tmp_path):
    from mlflow_profiler.store import open_store

    model = Router()
    with profiling(depth=-1, engine=engine) as session:
        model.predict()
    with open_store(str(tmp_path / "p.db")) as store:
        source = store.add(session)
        back = store.load(source)
    assert [s.resource for s in back.spans] == [s.resource for s in session.spans]
    assert sum(s.resource == "smart" for s in back.spans) == CALLS // 2


async def _request(latency, clock):
    """A client's coroutine below the ceiling: its block spans its awaits."""
    await asyncio.sleep(0)
    with profile_block("request", resource="server"):
        t = time.perf_counter_ns()
        await asyncio.sleep(latency)
        clock.append(time.perf_counter_ns() - t)


async def _ask(latency, clock):
    await _request(latency, clock)


def _ask_all(clock):
    async def main():
        await asyncio.gather(*(_ask(0.02 * (i + 1), clock) for i in range(3)))

    asyncio.run(main())


def test_a_block_below_the_ceiling_is_suspended_with_the_coroutine_awaiting_it(engine):
    """depth 1: _ask_all 0, the tasks' _ask 1 (at the ceiling), _request 2
    (no hook there: 3.12+ reports none of its events, 3.11 its yields). The
    block is in flight for as long as its own clock, nearly all of it
    waiting, not closed at its first await."""
    for attempt in range(3):
        clock = []
        q0 = schedstat()[1]
        with profiling(depth=1, engine=engine) as session:
            _ask_all(clock)
        runq = schedstat()[1] - q0
        (root,) = session.to_tree()
        asks = [n for n in root["children"] if n["label"] == "_ask"]
        blocks = sorted((c for n in asks for c in n["children"]), key=lambda n: n["wall_ns"])
        assert len(asks) == 3 and [b["label"] for b in blocks] == ["request"] * 3
        ok = all(
            abs(b["wall_ns"] - own) <= 0.05 * own + runq for b, own in zip(blocks, sorted(clock))
        )
        if ok:
            break
    assert ok, ([b["wall_ns"] for b in blocks], sorted(clock), runq)
    assert all(b["waiting_ns"] >= 0.9 * b["wall_ns"] and "generator" in b["flags"] for b in blocks)
