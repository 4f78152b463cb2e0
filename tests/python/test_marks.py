"""Instants (issue 42, item 3; docs/capture.md, "Instants"): mark(),
rate_limit_hit() and retry() record a point in time in the current lanes;
the HTTP clients mark a 429 (with its Retry-After) and a request that
repeats its task's last failed one. The oracles: the program's own clock
around each call, and real aiohttp servers on 127.0.0.1 answering with the
statuses a test scripts (_endpoints.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from _endpoints import serve
from _helpers import document_marks, walk

import mlflow_profiler
from mlflow_profiler import mark, profile_block, profiling, rate_limit_hit, retry


def _trace(session, tmp_path):
    path = tmp_path / "t.trace.json"
    session.save(str(path), "chrome_trace")
    doc = json.loads(path.read_text())
    return doc, doc["otherData"]["ts_origin_ns"]


def test_outside_a_session_nothing_happens_and_bad_arguments_are_refused():
    mark("nothing")
    rate_limit_hit("host", 1.0)
    retry("host", 1)
    with pytest.raises(TypeError):
        mark("")
    with pytest.raises(TypeError):
        mark("x", resource=3)


def work(clock):
    with profile_block("call", resource="llm"):
        time.sleep(0.002)
        clock.append(time.perf_counter_ns())
        rate_limit_hit("llm", 1.5)
        clock.append(time.perf_counter_ns())
    clock.append(time.perf_counter_ns())
    mark("checkpoint")
    clock.append(time.perf_counter_ns())


def test_a_mark_is_an_instant_of_its_lane_under_the_span_open(engine, tmp_path):
    clock = []
    with profiling(depth=-1, engine=engine) as session:
        work(clock)
    rows, doc = document_marks(session)
    assert [(r["name"], r["resource"]) for r in rows] == [
        ("rate limited, retry after 1.5s", "llm"),
        ("checkpoint", None),
    ]
    # Each within the program's clock around it (the profile's times leave
    # out the profiler's own work so far: earlier by at most all of it).
    cut = session.statistics()["profiler_overhead_ns"]
    assert (
        clock[0] - cut <= rows[0]["ts_ns"] <= clock[1]
        and clock[2] - cut <= rows[1]["ts_ns"] <= clock[3]
    )
    spans = [dict(zip(doc["span_fields"], r)) for r in doc["spans"]]
    label = (
        lambda i: doc["strings"][spans[i]["label"]]
        if spans[i]["label"]
        else doc["strings"][doc["functions"][spans[i]["function"]][0]]
    )
    assert label(rows[0]["span"]) == "call" and label(rows[1]["span"]).endswith("work")
    # Nothing else changed: the marks open no span.
    assert [n["label"] for n in walk(session.to_tree())] == ["work", "call"]

    trace, origin = _trace(session, tmp_path)
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    on_lane = [e for e in instants if e["s"] == "t"]
    on_resource = [e for e in instants if e["s"] == "p"]
    assert [e["name"] for e in on_lane] == ["rate limited, retry after 1.5s", "checkpoint"]
    (rl,) = on_resource
    pids = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert pids[rl["pid"]] == "resource llm" and rl["args"] == {"resource": "llm", "under": "call"}
    assert abs(round(rl["ts"] * 1000) + origin - rows[0]["ts_ns"]) <= 1000


def test_marks_survive_the_document_and_a_shallower_view(engine, tmp_path):
    clock = []
    with profiling(depth=-1, engine=engine) as session:
        work(clock)
    path = tmp_path / "p.json"
    session.save(str(path))
    loaded = mlflow_profiler.load(str(path))
    assert document_marks(loaded)[0] == document_marks(session)[0]
    # At depth 0 the block is cut: its mark is under the span kept above it.
    rows = [
        dict(zip(d["mark_fields"], r))
        for d in [json.loads(session.to_json(depth=0))]
        for r in d["marks"]
    ]
    assert len(rows) == 2 and {r["span"] for r in rows} == {0}


# --- HTTP: rate limits and retries --------------------------------------------------

LATENCY = {"llm": 0.005}


@pytest.fixture(scope="module")
def server():
    with serve(LATENCY, answers={}) as s:
        yield s


async def _ask_until_answered(session, url, body, tries=4):
    """A client's retry loop: a 429 waits what Retry-After says, a 5xx 10 ms."""
    for _ in range(tries):
        async with session.post(url, json=body) as r:
            if r.status == 200:
                return (await r.json())["answer"]
            await asyncio.sleep(float(r.headers.get("Retry-After", "0.01")))
    raise RuntimeError("no answer")


def _aiohttp_model(url, bodies):
    import aiohttp

    async def main():
        async with aiohttp.ClientSession() as session:
            return [await _ask_until_answered(session, url, b) for b in bodies]

    def predict():
        return asyncio.run(main())

    return predict


def _host(server):
    return f"127.0.0.1:{server['ports']['llm']}"


def test_a_429_and_the_retries_it_causes_are_marked(server, engine, tmp_path):
    pytest.importorskip("aiohttp")
    server["answers"]["llm"] = [(429, "0.05"), (503, None)]
    predict = _aiohttp_model(server["urls"]["llm"], [{"ticket": 1}])
    with profiling(depth=2, engine=engine) as session:
        assert predict() == ["llm: 1 resolved"]
    host = _host(server)
    rows, _ = document_marks(session)
    assert [(r["name"], r["resource"]) for r in rows] == [
        ("rate limited, retry after 0.05s", host),
        ("retry 1", host),
        ("retry 2", host),
    ]
    # The three requests are three calls to the host; the retries start them.
    calls = sorted(
        (n for n in walk(session.to_tree()) if n["label"] == f"POST {host}"),
        key=lambda n: n["start_ns"],
    )
    assert len(calls) == 3
    assert calls[0]["start_ns"] <= rows[0]["ts_ns"] <= calls[0]["end_ns"]
    for r, call in zip(rows[1:], calls[1:]):
        assert call["start_ns"] <= r["ts_ns"] <= call["end_ns"]
    # The waits between: at least what Retry-After asked.
    assert calls[1]["start_ns"] - calls[0]["end_ns"] >= 0.05e9
    trace, _ = _trace(session, tmp_path)
    pids = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    on_host = [
        e["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "i" and e["s"] == "p" and pids.get(e["pid"]) == f"resource {host}"
    ]
    assert on_host == ["rate limited, retry after 0.05s", "retry 1", "retry 2"]


def test_a_new_request_after_a_failure_is_no_retry(server, engine):
    """The false alarm: a failed request followed by a different one (another
    body) to the same host is not a retry; the failed one repeated later is."""
    pytest.importorskip("aiohttp")
    import aiohttp

    url = server["urls"]["llm"]

    async def main():
        statuses = []
        async with aiohttp.ClientSession() as session:
            for ticket in (1, 2, 1):
                async with session.post(url, json={"ticket": ticket}) as r:
                    statuses.append(r.status)
        return statuses

    server["answers"]["llm"] = [(500, None), (500, None)]
    with profiling(depth=1, engine=engine) as session:
        statuses = asyncio.run(main())
    assert statuses == [500, 500, 200]
    rows, _ = document_marks(session)
    # ticket 1 failed, ticket 2 (new) failed, ticket 1 again: not what failed last.
    assert rows == []
    server["answers"]["llm"] = [(500, None)]
    with profiling(depth=1, engine=engine) as session:
        asyncio.run(main())
    assert [
        r["name"] for r in document_marks(session)[0]
    ] == []  # ticket 2 succeeded after 1 failed: none

    async def again():
        async with aiohttp.ClientSession() as session:
            for ticket in (1, 1):
                async with session.post(url, json={"ticket": ticket}) as r:
                    await r.read()

    server["answers"]["llm"] = [(500, None)]
    with profiling(depth=1, engine=engine) as session:
        asyncio.run(again())
    assert [r["name"] for r in document_marks(session)[0]] == ["retry 1"]


def test_httpx_sync_retries_are_marked(server, engine):
    httpx = pytest.importorskip("httpx")
    url = server["urls"]["llm"]

    def predict():
        with httpx.Client() as client:
            for _ in range(3):
                r = client.post(url, json={"ticket": 7})
                if r.status_code == 200:
                    return r.json()["answer"]
                time.sleep(float(r.headers.get("Retry-After", "0.01")))

    server["answers"]["llm"] = [(429, None), (502, None)]
    with profiling(depth=1, engine=engine) as session:
        assert predict() == "llm: 7 resolved"
    host = _host(server)
    assert [(r["name"], r["resource"]) for r in document_marks(session)[0]] == [
        ("rate limited", host),
        ("retry 1", host),
        ("retry 2", host),
    ]
    # The profiler's own work is no node.
    names = [n["label"] for n in walk(session.to_tree())]
    own = (
        "_Attempt",
        "_owner",
        "_body_key",
        "_httpx_identity",
        "authority",
        "mark",
        "retry",
        "rate_limit_hit",
    )
    assert not [n for n in names if n.startswith(own) or n.split(".")[-1] in own], names


def test_the_report_ticks_a_resources_instants(engine, tmp_path):
    """The HTML report draws a resource's instants as red ticks down its
    title bar, where the chart puts their time."""
    from _browser import console_errors, require_browser, start_chromium
    from test_html_report import AXIS_PX, _x_of, open_session

    require_browser()
    clock = []
    with profiling(depth=-1, engine=engine) as session:
        work(clock)
    rows, doc = document_marks(session)
    driver = start_chromium()
    try:
        open_session(driver, session, tmp_path)
        (track,) = driver.execute_script("return window.mlprofReport.resourceLayout()")
        assert track["title"] == "resource llm"
        (tick,) = track["marks"]
        assert tick["name"] == "rate limited, retry after 1.5s"
        assert abs(tick["x"] - _x_of(driver, rows[0]["ts_ns"] - doc["meta"]["start_ns"])) < 1
        scroll = driver.execute_script("return document.getElementById('chart-scroll').scrollTop")
        y = track["y"] + 4 - scroll
        assert y > AXIS_PX
        red = driver.execute_script(
            """
            const c = document.getElementById('chart'), r = window.devicePixelRatio || 1;
            const d = c.getContext('2d').getImageData(Math.floor(arguments[0] * r), Math.floor(arguments[1] * r), 1, 1).data;
            return [d[0], d[1], d[2]];
            """,
            tick["x"],
            y,
        )
        assert red == [0xC5, 0x22, 0x1F], red
        assert console_errors(driver) == []
    finally:
        driver.quit()
