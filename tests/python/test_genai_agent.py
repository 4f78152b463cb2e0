"""A GenAI model end to end (issue 42 item 6): an MLflow ResponsesAgent whose
predict_stream fans a request's tickets out, with asyncio and aiohttp, to
two real HTTP endpoints on 127.0.0.1 (aiohttp servers with deliberate
latency: "fast" 20 ms behind Semaphore(4), "smart" 40 ms behind
Semaphore(2)), each call in profile_block(resource=). Saved (cloudpickled
by value, as from a notebook) and loaded as a serving process does;
recorded by autoprofile at depth 2, as `mlflow models serve` records it,
and by profiling() at depth 3 on both engines.

The story, checked against the program's own clocks (each call's
perf_counter_ns around its block, the thread's wall and CPU time around
the event loop): the
tree shows every call under the coroutine that gathered them, with its
in-flight and waiting time; the Chrome trace has a process per endpoint and
a thread per slot (peak 4 and 2); bubbles are where every call was waiting;
the MLflow trace has each call with its resource; the HTML report's
screenshot goes to CI's artifacts."""

from __future__ import annotations

import asyncio
import json
import time
import warnings

import pytest
from _browser import artifact_dir, console_errors, require_browser, start_chromium, wait_for
from _endpoints import serve
from _helpers import require_mlflow, schedstat, walk
from _mlflow_fixtures import local_store, mlflow_warning_filters  # noqa: F401

import mlflow_profiler as mp
from mlflow_profiler import analysis, profile_block, profiling

pytestmark = mlflow_warning_filters() + [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

LATENCY = {"fast": 0.020, "smart": 0.040}
SLOTS = {"fast": 4, "smart": 2}
TICKETS = 12


@pytest.fixture(scope="module")
def endpoints():
    """Two aiohttp servers on 127.0.0.1 (_endpoints.py): {"urls": {name: url},
    "handled": [(name, t0, t1)]}, the log of each request the server handled."""
    pytest.importorskip("aiohttp.web")
    with serve(LATENCY) as servers:
        yield servers


def agent_class(mlflow):
    from mlflow.pyfunc import ResponsesAgent
    from mlflow.types.responses import ResponsesAgentResponse, ResponsesAgentStreamEvent

    class TicketAgent(ResponsesAgent):
        """Routes each ticket of the request: odd ones to "fast", even ones
        to "smart"; streams each answer as it arrives."""

        def __init__(self, urls):
            self.urls = urls
            self.calls = []  # (endpoint, t0, t1) around each call, the program's own clock

        async def _ask(self, session, slots, i, ticket):
            import aiohttp  # noqa: F401  (the client lives in the model's environment)

            name = "fast" if i % 2 else "smart"
            async with slots[name]:
                t0 = time.perf_counter_ns()
                with profile_block(f"ask {name}", resource=name):
                    async with session.post(self.urls[name], json={"ticket": ticket}) as r:
                        answer = (await r.json())["answer"]
                self.calls.append((name, t0, time.perf_counter_ns()))
            return answer

        async def _fan_out(self, tickets):
            import aiohttp

            slots = {name: asyncio.Semaphore(n) for name, n in SLOTS.items()}
            async with aiohttp.ClientSession() as session:
                return await asyncio.gather(
                    *(self._ask(session, slots, i, t) for i, t in enumerate(tickets))
                )

        def _call_endpoints(self, tickets):
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return asyncio.run(self._fan_out(tickets))
            finally:  # the thread's wall and CPU time in the loop
                self.loop_clock = (time.perf_counter_ns() - w0, time.thread_time_ns() - c0)

        def _tickets(self, request):
            text = (
                request.input[-1].content
                if hasattr(request.input[-1], "content")
                else request.input[-1]["content"]
            )
            return [t.strip() for t in text.split(";") if t.strip()]

        def predict_stream(self, request):
            answers = self._call_endpoints(self._tickets(request))
            for k, answer in enumerate(answers):
                yield ResponsesAgentStreamEvent(
                    type="response.output_item.done",
                    item=self.create_text_output_item(text=answer, id=f"msg-{k}"),
                )

        def predict(self, request):
            items = [
                e.item
                for e in self.predict_stream(request)
                if e.type == "response.output_item.done"
            ]
            return ResponsesAgentResponse(output=items)

    return TicketAgent


def _request():
    return {
        "input": [{"role": "user", "content": "; ".join(f"ticket {k}" for k in range(TICKETS))}]
    }


@pytest.fixture(scope="module")
def served(endpoints, tmp_path_factory):
    """The agent saved with mlflow.pyfunc.save_model and loaded back (once:
    saving runs the model on an input example)."""
    mlflow = require_mlflow()
    try:
        agent_type = agent_class(mlflow)
    except ImportError as exc:  # a ResponsesAgent needs MLflow 3
        pytest.skip(f"this MLflow has no ResponsesAgent: {exc}")
    path = str(tmp_path_factory.mktemp("genai") / "agent")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlflow.pyfunc.save_model(path, python_model=agent_type(endpoints["urls"]))
        model = mlflow.pyfunc.load_model(path)
    list(model.predict_stream(_request()))  # first call: imports, connections
    return model


def _record(model, how):
    """One streamed predict: as a server records it (autoprofile at depth
    2, `how` "serving"), or in a notebook's profiling() on an engine, at
    depth 3 (there the with block's calls are depth 1, and the loaded
    model's stream is consumed by list(), outside PyFuncModel.predict_stream)."""
    if how == "serving":
        mp.autoprofile(depth=2)
        try:
            events = list(model.predict_stream(_request()))
        finally:
            mp.autoprofile(disable=True)
        return events, mp.last_profile()
    request = _request()
    with profiling(depth=3, engine=how) as session:
        events = list(model.predict_stream(request))
    return events, session


def _profile(model, how="serving", runq_out=None):
    """A recorded streamed predict whose calls match their clock (a busy
    machine may keep the thread in the run queue between them: 3 tries).
    runq_out, a list, gets the loop thread's run-queue seconds over it."""
    impl = model._model_impl.responses_agent  # the TicketAgent the loaded model serves
    for attempt in range(3):
        impl.calls.clear()
        q0 = schedstat()[1]
        events, session = _record(model, how)
        runq = (schedstat()[1] - q0) / 1e9
        assert len(events) == TICKETS
        truth = sorted(impl.calls, key=lambda c: c[1])
        asks = sorted(
            (n for n in walk(session.to_tree()) if n["label"].startswith("ask ")),
            key=lambda n: n["start_ns"],
        )
        assert len(asks) == TICKETS, session.format_tree()
        misses = [
            (n["label"], n["wall_ns"], t1 - t0)
            for n, (name, t0, t1) in zip(asks, truth)
            if n["label"] != f"ask {name}"
            or abs(n["wall_ns"] - (t1 - t0)) > 0.05 * (t1 - t0) + runq * 1e9
        ]
        if not misses:
            if runq_out is not None:
                runq_out.append(runq)
            return session, truth
    raise AssertionError(misses)


@pytest.mark.parametrize("how", ["serving", "native", "reference"])
def test_the_tree_shows_every_call_in_flight_under_the_coroutine_that_gathered_them(served, how):
    session, truth = _profile(served, how)
    tree = session.to_tree()
    text = session.format_tree()
    if how == "serving":
        (root,) = tree  # the model's stream, named for what it serves; its steps are depth 1
        assert root["label"] == "predict_stream [pyfunc agent_class.<locals>.TicketAgent]", text
        steps = root["children"]
    else:
        # The agent's own predict_stream is the node (MLflow's loader,
        # pydantic and tracing wrappers are transparent), and every step of
        # the model is under it; MLflow's checks are beside it.
        (root,) = [n for n in tree if n["label"].endswith("TicketAgent.predict_stream")]
        assert not [
            n for n in walk([m for m in tree if m is not root]) if "TicketAgent" in n["label"]
        ], text
        steps = root["children"]
    # The model's own steps, in order, not inside any MLflow group.
    mine = [n["label"].rpartition(".")[2] for n in steps if "TicketAgent." in n["label"]]
    assert mine[:2] == ["_tickets", "_call_endpoints"], text
    (call,) = [n for n in steps if n["label"].endswith("._call_endpoints")]
    # _fan_out, run by asyncio.run, is _call_endpoints' body: the tasks it
    # gathers (_ask) are _call_endpoints' children, each call under its task
    # (serving, depth 2: as a leaf below the ceiling).
    tasks = [n for n in call["children"] if n["label"].endswith("._ask")]
    assert len(tasks) == TICKETS and all(n["depth"] == call["depth"] + 1 for n in tasks), text
    asks = [n for n in walk(tasks) if n["label"].startswith("ask ")]
    assert len(asks) == TICKETS, text
    by_index = {n["index"]: n for n in tasks}
    assert all(n["parent_index"] in by_index for n in asks), text
    # Each call nearly all waiting, named with its endpoint.
    assert all(n["waiting_ns"] >= 0.8 * n["wall_ns"] for n in asks), text
    assert all(n["resource"] == n["label"][4:] for n in asks)
    # The step that ran the loop waited while its thread was off the CPU:
    # the thread's own clocks around asyncio.run (wall less CPU time; the
    # loop's work on the responses, ~10 ms here, is running).
    # (The reference engine's Python hook takes milliseconds an event on a
    # loaded machine, and its time is cut from the lane: checked loosely, as
    # in test_asyncio_structure.py.)
    # The span holds the clocked region, so it was off the CPU at least as
    # long as the loop was, and at most its own wall less the loop's CPU
    # time: a loaded machine also preempts the thread just outside the
    # region (15.5 ms once in CI, against a 9.7 ms tolerance on |difference|).
    # The profiler's own stretches are cut from the times, and so is what
    # they spent preempted (18 ms once beside callgrind): the bounds widen
    # by the session's cut.
    wall, cpu = served._model_impl.responses_agent.loop_clock
    cut = session.statistics()["profiler_overhead_ns"]
    slack = (0.3 if how == "reference" else 0.05) * wall + 1_000_000 + cut
    figures = (call["waiting_ns"], call["wall_ns"], wall, cpu, cut)
    assert wall - cpu - slack <= call["waiting_ns"] <= call["wall_ns"] - cpu + slack, figures
    assert "ask fast" in text and "ask smart" in text and ", waiting " in text


def test_the_chrome_trace_has_a_process_per_endpoint_and_a_thread_per_slot(served, tmp_path):
    session, truth = _profile(served)
    path = tmp_path / "agent.trace.json"
    session.save(str(path), "chrome_trace")
    events = json.loads(path.read_text())["traceEvents"]
    pids = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    for name, slots in SLOTS.items():
        (pid,) = [p for p, n in pids.items() if n == f"resource {name}"]
        threads = {
            e["tid"]
            for e in events
            if e["pid"] == pid and e["ph"] == "M" and e["name"] == "thread_name"
        }
        assert threads == set(range(1, slots + 1))  # the semaphore's bound, reached
        peak = max(
            e["args"]["calls"]
            for e in events
            if e["pid"] == pid and e["ph"] == "C" and e["name"] == "in flight"
        )
        assert peak == slots
        calls = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
        assert len(calls) == sum(1 for c in truth if c[0] == name)


def test_bubbles_are_where_every_call_waited(served, tmp_path):
    """At the middle of each idle gap of the loop some call was in flight
    (by the calls' own clocks, give or take 1 ms: profile times leave out
    the profiler's own work), and together the gaps are most of the time
    the calls were in flight: the model waits on its endpoints. A loaded
    machine can hold the loop's thread off the CPU, or off the GIL, while
    the calls are in flight (CI's 3.13 stage once: 1.04 s in flight for
    ~130 ms of latency, 133 ms of gaps): 3 tries, less its run-queue time."""
    for attempt in range(3):
        q0 = schedstat()[1]
        session, truth = _profile(served)
        runq = schedstat()[1] - q0
        path = tmp_path / "agent.json"
        session.save(str(path))
        result = analysis.bubbles([str(path)])
        (s,) = result.sessions
        gaps = [(b["start_ns"], b["end_ns"]) for b in s["bubbles"]]
        assert gaps, s
        for start, end in gaps:
            mid = (start + end) // 2
            assert any(t0 - 1_000_000 <= mid <= t1 + 1_000_000 for _, t0, t1 in truth), (start, end)
        in_flight = max(t1 for _, _, t1 in truth) - min(t0 for _, t0, _ in truth)
        idle = sum(e - b for b, e in gaps)
        if idle >= 0.5 * (in_flight - runq):
            break
    assert idle >= 0.5 * (in_flight - runq), (idle, in_flight, runq)


def test_the_mlflow_trace_names_each_call_and_its_resource(served, local_store):  # noqa: F811
    import mlflow

    from mlflow_profiler import _mlflow_trace
    from mlflow_profiler.mlflow_sink import log_profile_trace

    try:
        _mlflow_trace.check_supported(mlflow)
    except ImportError:
        pytest.skip("MLflow tracing of profiles needs MLflow >= 3.10")
    runq = []
    session, truth = _profile(served, runq_out=runq)
    with mlflow.start_run() as run:
        trace_id = log_profile_trace(session, run_id=run.info.run_id)
    mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(trace_id)
    asks = [s for s in trace.data.spans if s.name.startswith("ask ")]
    assert len(asks) == TICKETS
    assert {s.attributes["mlflow_profiler.resource"] for s in asks} == set(SLOTS)
    # Nearly all waiting, but for the time a busy machine kept the loop's
    # thread in the run queue while the call's steps ran (seen: 346 ms of a
    # 618 ms call, in CI's 3.11 stage at 99% CPU).
    for span in asks:
        wall = span.end_time_ns - span.start_time_ns
        waiting = span.attributes["mlflow_profiler.waiting_ns"]
        assert waiting >= 0.8 * (wall - runq[0] * 1e9), (waiting, wall, runq)


def test_the_report_tells_the_story(served, tmp_path):
    """The HTML report of the streamed predict: a screenshot for CI's
    artifacts, the endpoints' slot rows there, and no console errors."""
    require_browser()
    session, truth = _profile(served)
    html = tmp_path / "agent.html"
    session.save(str(html))
    driver = start_chromium()
    try:
        driver.get(html.as_uri())
        wait_for(
            lambda: driver.execute_script(
                "return !!window.mlprofReport && window.mlprofReport.resourceLayout().length === 2"
            ),
            what="the report",
        )
        layout = driver.execute_script("return window.mlprofReport.resourceLayout()")
        titles = sorted(r["title"] for r in layout)
        assert titles == ["resource fast", "resource smart"], layout
        driver.save_screenshot(str(artifact_dir(tmp_path) / "genai_agent_report.png"))
        assert console_errors(driver) == []
    finally:
        driver.quit()
