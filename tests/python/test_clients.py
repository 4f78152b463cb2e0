"""Resources named from the HTTP client (issue 42 item 3; docs/capture.md,
"Resources"): each aiohttp or httpx request is a call to its server,
`host:port`, with no profile_block in the model. The oracles are the
servers' own logs (how many requests each handled) and the model's clocks
around each request (when it was in flight)."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time

import pytest
from _endpoints import serve
from _helpers import schedstat, walk

from mlflow_profiler import profile_block, profiling

aiohttp = pytest.importorskip("aiohttp")
httpx = pytest.importorskip("httpx")

LATENCY = {"fast": 0.020, "smart": 0.040}
SLOTS = {"fast": 4, "smart": 2}  # server side: requests beyond them queue in the server
TICKETS = 12


@pytest.fixture(scope="module")
def endpoints():
    """Two aiohttp servers on 127.0.0.1 (_endpoints.py)."""
    with serve(LATENCY, SLOTS) as servers:
        yield servers


class Router:
    """predict -> _call_endpoints -> asyncio.run(_fan_out) -> _ask, the
    issue's ticket router with no profile_block: TICKETS POSTs, odd ones to "fast",
    even ones to "smart", all at once; each logs (name, t1, t2) around its
    request (sent until the response's headers: aiohttp's _request)."""

    def __init__(self, urls, user_resource=False):
        self.urls, self.user_resource, self.log = urls, user_resource, []

    async def _ask(self, session, i):
        name = "fast" if i % 2 else "smart"
        t1 = time.perf_counter_ns()
        if self.user_resource:
            with profile_block(f"ask {name}", resource=name):
                response = await session.post(self.urls[name], json={"ticket": i})
        else:
            response = await session.post(self.urls[name], json={"ticket": i})
        t2 = time.perf_counter_ns()
        self.log.append((name, t1, t2))
        async with response:
            return (await response.json())["answer"]

    async def _fan_out(self):
        async with aiohttp.ClientSession() as session:
            return await asyncio.gather(*(self._ask(session, i) for i in range(TICKETS)))

    def _call_endpoints(self):
        return asyncio.run(self._fan_out())

    def predict(self):
        return self._call_endpoints()


def _resources(session, tmp_path):
    """{resource: [(start_ns, end_ns, slot)]} and the in-flight peaks, from the Chrome trace."""
    path = tmp_path / "t.trace.json"
    session.save(str(path), "chrome_trace")
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    pids = {
        e["pid"]: e["args"]["name"][len("resource ") :]
        for e in events
        if e["ph"] == "M"
        and e["name"] == "process_name"
        and e["args"]["name"].startswith("resource ")
    }
    calls = {name: [] for name in pids.values()}
    peaks = {name: 0 for name in pids.values()}
    for e in events:
        if e["pid"] in pids and e["ph"] == "X":
            start = round(e["ts"] * 1000) + doc["otherData"]["ts_origin_ns"]
            calls[pids[e["pid"]]].append((start, start + round(e["dur"] * 1000), e["tid"]))
        elif e["pid"] in pids and e["ph"] == "C" and e["name"] == "in flight":
            peaks[pids[e["pid"]]] = max(peaks[pids[e["pid"]]], e["args"]["calls"])
    return calls, peaks


def _peak(intervals):
    edges = sorted(
        [(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda x: (x[0], x[1])
    )
    n = best = 0
    for _, d in edges:
        n += d
        best = max(best, n)
    return best


@pytest.mark.parametrize("depth", [2, -1])
def test_each_aiohttp_request_is_a_call_to_its_server(endpoints, engine, depth, tmp_path):
    """Every request the servers handled is one call of its host:port, in
    flight as long as the model's clock around it says, the peak in flight
    what the clocks give. At depth 2 (predict 0, _call_endpoints 1 with
    _fan_out, run by asyncio.run, as its body, _ask 2) the calls hang, as
    leaves, under their tasks' coroutines."""
    ports = endpoints["ports"]
    hosts = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    for attempt in range(3):  # a busy machine may stretch a call past its clock (run-queue time)
        model = Router(endpoints["urls"])
        before = len(endpoints["handled"])
        # Earlier tests' garbage (a browser driver's Service and its Popen, in
        # a 3.12 CI run) is freed now, not by a collection inside the session.
        gc.collect()
        q0 = schedstat()[1]
        with profiling(depth=depth, engine=engine) as session:
            answers = model.predict()
        runq = schedstat()[1] - q0
        assert answers == [f"{'fast' if i % 2 else 'smart'}: {i} resolved" for i in range(TICKETS)]
        handled = endpoints["handled"][before:]
        calls, peaks = _resources(session, tmp_path)
        assert set(calls) == set(hosts.values())
        cut = session.statistics()["profiler_overhead_ns"]
        misses = []
        for name, host in hosts.items():
            truth = sorted((t1, t2) for n, t1, t2 in model.log if n == name)
            got = sorted(calls[host])
            assert len(got) == len(truth) == sum(1 for n, *_ in handled if n == name)
            assert peaks[host] == _peak(truth) == TICKETS // 2
            for (start, end, _slot), (t1, t2) in zip(got, truth):
                wall, own = end - start, t2 - t1
                if not (wall <= own + 0.2e6 + runq and wall >= own - 0.05 * own - cut - 0.5e6):
                    misses.append((name, wall, own))
        if not misses:
            break
    assert not misses, misses
    nodes = list(walk(session.to_tree()))
    asks = [n for n in nodes if n["label"].startswith("POST 127.0.0.1:")]
    assert sorted({n["label"] for n in asks}) == sorted(f"POST {h}" for h in hosts.values())
    assert len(asks) == TICKETS
    # The clients' finalizers (a response freed in _fan_out's frame) are theirs, not steps.
    assert not [n["label"] for n in nodes if n["label"].endswith("__del__")]
    if depth == 2:  # leaves under their tasks' coroutines (_ask, depth 2)
        by_index = {n["index"]: n for n in nodes}
        assert all(
            by_index[n["parent_index"]]["label"] == "Router._ask" and n["children"] == []
            for n in asks
        )
        # Each request waited for its server, as long as its _ask did, give or take its own work.
        for n in asks:
            ask = by_index[n["parent_index"]]
            assert n["waiting_ns"] > 0.8 * n["wall_ns"] and ask["waiting_ns"] >= n["waiting_ns"]


def test_a_resource_the_user_named_wins(endpoints, engine, tmp_path):
    """A request inside `profile_block(resource="smart")` is that call: no
    second, automatic one for its host, at any depth."""
    model = Router(endpoints["urls"], user_resource=True)
    with profiling(depth=-1, engine=engine) as session:
        model.predict()
    calls, _ = _resources(session, tmp_path)
    assert set(calls) == {"fast", "smart"}
    assert len(calls["fast"]) + len(calls["smart"]) == TICKETS
    assert not [n for n in walk(session.to_tree()) if n["label"].startswith("POST ")]


def test_httpx_requests_sync_and_async_are_calls_to_their_servers(endpoints, engine, tmp_path):
    """httpx's Client.send and AsyncClient.send: a GET and a POST per server,
    sequential in the sync client, at once in the async one."""
    urls = endpoints["urls"]
    hosts = {name: f"127.0.0.1:{port}" for name, port in endpoints["ports"].items()}

    async def fan_out():
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(
                *(client.post(u, json={"ticket": 1}) for u in urls.values())
            )

    def predict():
        with httpx.Client() as client:
            codes = [client.get(u).status_code for u in urls.values()]
        return codes + [r.status_code for r in asyncio.run(fan_out())]

    before = len(endpoints["handled"])
    with profiling(depth=-1, engine=engine) as session:
        assert predict() == [200] * 4
    assert len(endpoints["handled"]) - before == 4
    calls, _ = _resources(session, tmp_path)
    assert {h: len(c) for h, c in calls.items()} == {h: 2 for h in hosts.values()}
    labels = sorted(
        n["label"] for n in walk(session.to_tree()) if n["label"].split(" ")[0] in ("GET", "POST")
    )
    assert labels == sorted(
        [f"GET {h}" for h in hosts.values()] + [f"POST {h}" for h in hosts.values()]
    )
    # Each lasted at least the server's latency, less what the engine took out of
    # spans as its own time (at most the session's whole overhead) and 0.5 ms.
    cut = session.statistics()["profiler_overhead_ns"]
    short = [
        (host, end - start, cut)
        for name, host in hosts.items()
        for start, end, _ in calls[host]
        if end - start < LATENCY[name] * 1e9 - cut - 0.5e6
    ]
    assert not short, short


def test_outside_a_session_the_clients_work_unchanged(endpoints):
    """After a session wrapped them, requests outside any session answer
    the same; the wrapper keeps the original as __wrapped__."""
    with profiling(depth=2):
        pass
    original = aiohttp.ClientSession._request.__wrapped__
    assert original.__module__.startswith("aiohttp")
    with httpx.Client() as client:
        assert client.post(endpoints["urls"]["fast"], json={"ticket": 7}).json() == {
            "answer": "fast: 7 resolved"
        }


def test_another_tools_patch_is_left_alone():
    """A request method someone else replaced (an instrumentation library)
    is not wrapped: theirs stays what the class holds."""
    code = (
        "import aiohttp, mlflow_profiler\n"
        "async def theirs(self, method, url, **kw):\n    return None\n"
        "aiohttp.ClientSession._request = theirs\n"
        "with mlflow_profiler.profiling(depth=2):\n    pass\n"
        "assert aiohttp.ClientSession._request is theirs\n"
        "import httpx\n"
        "with mlflow_profiler.profiling(depth=2):\n    pass\n"
        "assert httpx.Client.send.__wrapped__.__module__ == 'httpx._client'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
