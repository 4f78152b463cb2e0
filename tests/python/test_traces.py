"""A session records the trace context active where it started (an
OpenTelemetry span, or MLflow's), and the document and the store keep it: a
profile is found from its trace (`--where trace_id=...`, Store.traces) and a
trace from its profile (ProfileSession.trace_id). Real OpenTelemetry SDK
spans and real MLflow spans, both engines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _helpers import walk
from _mlflow_fixtures import local_store, mlflow_warning_filters  # noqa: F401
from test_store import _old_store

import mlflow_profiler
from mlflow_profiler import profiling
from mlflow_profiler.store import migrate, open_store

pytestmark = mlflow_warning_filters()

ENGINES = ["native", "reference"]


def _work(n: int = 2000) -> int:
    return sum(i * i for i in range(n))


def _tracer():
    sdk = pytest.importorskip("opentelemetry.sdk.trace")  # MLflow 3 depends on it
    # A provider of its own: the process-wide one is left alone.
    return sdk.TracerProvider().get_tracer("test_traces")


def _hex(span) -> tuple:
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_session_inside_an_opentelemetry_span_records_its_ids(engine):
    tracer = _tracer()
    with tracer.start_as_current_span("request"):
        with tracer.start_as_current_span("predict") as span:
            with profiling(depth=1, engine=engine) as session:
                result = _work()
            want = _hex(span)
    assert result == _work()
    assert (session.trace_id, session.span_id) == want
    assert session.traces == [{"pid": 0, "session": 0, "trace_id": want[0], "span_id": want[1]}]
    # Outside any span: none.
    with profiling(depth=1, engine=engine) as plain:
        _work()
    assert plain.trace_id is None and plain.span_id is None and plain.traces == []


@pytest.mark.parametrize("engine", ENGINES)
def test_reading_the_context_is_not_recorded_by_an_enclosing_session(engine):
    tracer = _tracer()
    with profiling(depth=-1, engine=engine) as outer:
        with tracer.start_as_current_span("predict") as span:
            with profiling(depth=-1, engine=engine) as inner:
                _work(10)
    assert inner.trace_id == _hex(span)[0]
    # _traces.current(), run at the inner session's start, is the profiler's work.
    nodes = list(walk(outer.to_tree()))
    assert [n["label"] for n in nodes if n["label"] in ("current", "refresh")] == []
    assert any(
        n["label"] == "_work" for n in nodes
    )  # the outer session did record below the inner one


def test_a_replaced_or_unusual_runtime_context_is_still_read(monkeypatch):
    """The native engine's quick test for "no span" reads the ContextVars
    that OpenTelemetry's runtime context keeps. A runtime context replaced
    after the first session, and one that keeps no ContextVar, are read
    right all the same."""
    context = pytest.importorskip("opentelemetry.context")
    from opentelemetry.context.context import _RuntimeContext
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    tracer = _tracer()
    with profiling(depth=0):  # the quick test learns the current runtime context
        pass

    class Plain(_RuntimeContext):  # the context in an attribute, no ContextVar
        def __init__(self):
            self.current = context.Context()

        def attach(self, ctx):
            previous, self.current = self.current, ctx
            return previous

        def get_current(self):
            return self.current

        def detach(self, token):
            self.current = token

    for runtime in (ContextVarsRuntimeContext(), Plain()):
        monkeypatch.setattr(context, "_RUNTIME_CONTEXT", runtime)
        with tracer.start_as_current_span("predict") as span:
            with profiling(depth=0) as session:
                pass
        assert (session.trace_id, session.span_id) == _hex(span), type(runtime).__name__
        with profiling(depth=0) as outside:
            pass
        assert outside.trace_id is None, type(runtime).__name__


def test_an_mlflow_span_is_found_and_its_trace_id_is_mlflows(local_store):  # noqa: F811
    import mlflow

    if not hasattr(mlflow, "start_span"):
        pytest.skip(f"MLflow {mlflow.__version__} has no tracing (it came in 2.14)")
    with mlflow.start_span("predict") as span:
        with profiling(depth=1) as session:
            _work()
    assert session.span_id == span.span_id
    # MLflow 3 names its trace "tr-" + the OpenTelemetry trace id in hex.
    if span.trace_id.startswith("tr-"):
        assert "tr-" + session.trace_id == span.trace_id


def test_the_document_and_the_store_keep_the_ids(tmp_path):
    tracer = _tracer()
    sessions = []
    for _ in range(2):
        with tracer.start_as_current_span("predict"):
            with profiling(depth=1) as session:
                _work()
        sessions.append(session)
    with profiling(depth=1) as untraced:
        _work()
    doc = tmp_path / "p.json"
    sessions[0].save(doc)
    assert mlflow_profiler.load(doc).traces == sessions[0].traces

    db = tmp_path / "p.db"
    with open_store(db) as store:
        ids = [store.add(s) for s in sessions + [untraced]]
        # From a trace to its profile, with the hex id or MLflow's "tr-" form.
        assert store.source_ids({"trace_id": sessions[1].trace_id}) == [ids[1]]
        assert store.source_ids({"trace_id": "tr-" + sessions[0].trace_id}) == [ids[0]]
        assert store.source_ids({"span_id": sessions[0].span_id}) == [ids[0]]
        assert store.source_ids({"trace_id": "0" * 32}) == []
        # From a profile to its trace.
        assert store.traces(ids[0]) == [
            {
                "source_id": ids[0],
                "pid": 0,
                "session": 0,
                "trace_id": sessions[0].trace_id,
                "span_id": sessions[0].span_id,
            }
        ]
        assert store.traces(ids[2]) == []
        assert [t["source_id"] for t in store.traces(trace_id=sessions[1].trace_id)] == [ids[1]]
        assert store.load(ids[1]).traces == sessions[1].traces
    top = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlflow_profiler._cli",
            "top",
            str(db),
            "--where",
            f"trace_id={sessions[1].trace_id}",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert top.returncode == 0, top.stderr
    assert json.loads(top.stdout)["sessions"] == 1


def test_a_store_of_2_1_is_written_without_traces_and_migrated(tmp_path):
    import sqlite3

    tracer = _tracer()
    with tracer.start_as_current_span("predict"):
        with profiling(depth=1) as session:
            _work()
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    _old_store(conn, "2.1")  # what 2.1 wrote
    with open_store(db) as store:  # still written, in 2.1's format, which 2.1 readers read
        source = store.add(session)
        assert store.traces() == [] and store.load(source).traces == []
        assert store.source_ids({"trace_id": session.trace_id}) == []
    assert migrate(str(db)) == ("2.1", "2.6")  # through 2.2 and 2.3 to the current
    with open_store(db) as store:
        again = store.add(session)
        assert store.source_ids({"trace_id": session.trace_id}) == [again]
    conn.close()
