"""The trace context crosses to the agent: a session started inside an
OpenTelemetry span carries its trace and span ids in the record the agent
reads (USDT contract v2, session_spans), and the agent's document and store
keep them per session, as in process (docs/capture.md, "Traces"). Real
OpenTelemetry SDK spans in a real Python process, the real agent."""

from __future__ import annotations

import os

from conftest import Document, LineProcess

TARGET = r"""
import json, os, sys
from opentelemetry.sdk.trace import TracerProvider
from mlflow_profiler import profiling

tracer = TracerProvider().get_tracer("e2e")


def work(n):
    return sum(i * i for i in range(n))


print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    words = line.split()
    if not words or words[0] == "quit":
        break
    ids = []
    for i in range(int(words[1])):
        if i % 2 == 0:  # every other session inside a span
            with tracer.start_as_current_span("request") as span:
                with profiling(depth=1):
                    work(2000)
            ctx = span.get_span_context()
            ids.append([f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"])
        else:
            with profiling(depth=1):
                work(2000)
            ids.append(None)
    print(json.dumps({"ids": ids}), flush=True)
"""


def test_the_agents_document_and_store_keep_each_sessions_trace(agent, python_exe, tmp_out):
    from mlflow_profiler.store import open_store

    script = tmp_out / "traced_target.py"
    script.write_text(TARGET)
    target = LineProcess([python_exe, str(script)], env=dict(os.environ))
    try:
        out, db = tmp_out / "out.json", tmp_out / "s.db"
        run = agent("--pid", str(target.pid), "-o", str(out), "--store", str(db), "--stream")
        run.wait_attached(target.pid)
        ids = target.ask("run 4")["ids"]
        result = run.stop()
    finally:
        target.close()
    assert result.returncode == 0, result.stderr
    traced = [tuple(x) for x in ids if x]
    assert len(traced) == 2 and len(ids) == 4

    doc = Document(str(out))
    by_session = {}
    for lane in doc.lanes:
        assert lane["pid"] == target.pid
        by_session.setdefault(lane["session"], set()).add(
            (lane.get("trace_id"), lane.get("span_id"))
        )
    assert len(by_session) == 4, by_session
    # Sessions in order: traced, untraced, traced, untraced; a session's lanes agree.
    in_order = [by_session[s] for s in sorted(by_session)]
    assert in_order == [{traced[0]}, {(None, None)}, {traced[1]}, {(None, None)}], in_order

    # --stream: each session's header names its trace.
    headers = [
        line for line in result.stdout.splitlines() if line.startswith(f"pid {target.pid} session ")
    ]
    assert len(headers) == 4, result.stdout
    assert [h.split(", trace ")[1] if ", trace " in h else None for h in headers] == [
        traced[0][0],
        None,
        traced[1][0],
        None,
    ], headers

    # --store with --stream: a source per session; the traced two keep their ids.
    with open_store(str(db)) as store:
        sources = [s["source_id"] for s in store.sources()]
        assert len(sources) == 4
        rows = store.traces()
        assert [(r["trace_id"], r["span_id"]) for r in rows] == traced
        assert [r["source_id"] for r in rows] == [sources[0], sources[2]]
        assert {r["pid"] for r in rows} == {target.pid}
        assert store.source_ids({"trace_id": "tr-" + traced[1][0]}) == [sources[2]]
