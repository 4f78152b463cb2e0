"""Profiles recorded as MLflow traces (log_profile(log_as_trace=True),
log_profile_trace), read back through MLflow's tracing API: the span tree,
times to the microsecond, I/O summaries, attributes and the link to the run.

MLflow before 3.10 cannot link a trace to a run given by id
(start_span_no_context has no `metadata`): there, what is checked is the
ImportError that names the version (test_old_mlflow_names_the_version), and
the other tests check that same error and stop."""

from __future__ import annotations

import inspect
import logging
import threading
import time

import numpy as np
import pandas as pd
import pytest
from _helpers import qn, require_mlflow, walk
from _mlflow_fixtures import (  # noqa: F401
    local_store,
    mlflow_store,
    mlflow_warning_filters,
    server_store,
    tracking_server,
)

import mlflow_profiler
from mlflow_profiler import _mlflow_trace, profile_block, profiling
from mlflow_profiler.mlflow_sink import log_profile_trace

pytestmark = mlflow_warning_filters()


def _has_tracing() -> bool:
    mlflow = require_mlflow()
    try:
        _mlflow_trace.check_supported(mlflow)
    except ImportError:
        return False
    return True


def needs_tracing(session) -> bool:
    """True where this MLflow records traces; elsewhere checks that asking for
    one is the clear error, before anything is logged, and returns False."""
    if _has_tracing():
        return True
    with pytest.raises(ImportError, match=r"needs MLflow >= 3\.10.*pip install -U 'mlflow>=3\.10'"):
        log_profile_trace(session, run_id="0" * 32)
    return False


def _prep(df):
    return (df - df.mean()) / df.std()


def _score(x):
    return np.asarray(x).sum(axis=1)


def predict(df):
    return _score(_prep(df))


DF = pd.DataFrame(np.random.default_rng(0).random((64, 3)), columns=list("abc"))


def _session(calls=1, **kw):
    kw.setdefault("depth", 2)
    kw.setdefault("capture_io", True)
    before = time.time_ns()
    with profiling(**kw) as session:
        for _ in range(calls):
            predict(DF)
    return session, before, time.time_ns()


def _search(run_id, flush=True):
    import mlflow

    if flush:  # MLflow writes traces in the background; a flush takes about a second
        mlflow.flush_trace_async_logging()
    # as docs/mlflow.md says: the run's experiment named, whatever is active
    # (`locations` in MLflow 3, which deprecates `experiment_ids`)
    experiment_id = mlflow.get_run(run_id).info.experiment_id
    where = (
        "locations"
        if "locations" in inspect.signature(mlflow.search_traces).parameters
        else "experiment_ids"
    )
    return mlflow.search_traces(run_id=run_id, return_type="list", **{where: [experiment_id]})


def _get_trace(trace_id, flush=True):
    import mlflow

    if flush:
        mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(trace_id)
    assert trace is not None, f"trace {trace_id} was not stored"
    return trace


def _tree(trace):
    """(name, children) tuples of a trace, children in start order."""
    spans = trace.data.spans
    kids = {}
    for s in spans:
        kids.setdefault(s.parent_id, []).append(s)

    def build(parent_id):
        return tuple(
            (s.name, build(s.span_id))
            for s in sorted(kids.get(parent_id, []), key=lambda s: s.start_time_ns)
        )

    return build(None)


def _walk_trace(trace):
    """The trace's spans in pre-order, children in start order (as to_tree())."""
    kids = {}
    for s in trace.data.spans:
        kids.setdefault(s.parent_id, []).append(s)
    stack = sorted(kids.get(None, []), key=lambda s: s.start_time_ns, reverse=True)
    while stack:
        s = stack.pop()
        yield s
        stack.extend(sorted(kids.get(s.span_id, []), key=lambda c: c.start_time_ns, reverse=True))


def _profile_shape(nodes):
    return tuple((n["label"], _profile_shape(n["children"])) for n in nodes)


def _epoch(session, t):
    p = session._built()
    return int(p.meta["start_unix_ns"]) + (t - p.start_ns)


def test_trace_round_trip(mlflow_store):
    import mlflow

    session, before, after = _session()
    if not needs_tracing(session):
        return
    with mlflow.start_run() as run:
        uri = mlflow_profiler.log_profile(session, log_as_trace=True)
    rid = run.info.run_id
    found = _search(rid)
    assert len(found) == 1, "the trace is linked to the run"
    mlflow.set_experiment(
        "somewhere-else"
    )  # docs/mlflow.md's search finds it from any active experiment
    assert [t.info.trace_id for t in _search(rid, flush=False)] == [found[0].info.trace_id]
    mlflow.set_experiment(experiment_id=run.info.experiment_id)
    trace = _get_trace(found[0].info.trace_id, flush=False)
    assert trace.info.experiment_id == run.info.experiment_id
    assert trace.info.trace_metadata["mlflow.sourceRun"] == rid
    assert trace.info.tags["mlflow_profiler.run_id"] == rid
    assert trace.info.tags["mlflow_profiler.artifact_uri"] == uri

    # One root (predict): it is the trace's root, with the same tree below it.
    assert _tree(trace) == _profile_shape(session.to_tree())
    by_name = {s.name: s for s in trace.data.spans}
    # every span has a type (no "?" in the UI): the steps of the user's code
    # a chain, the library functions it calls tools
    assert by_name["predict"].span_type == "CHAIN"
    types = {s.name: s.span_type for s in trace.data.spans}
    records = {r.label: r for r in session.spans}
    for name, kind in types.items():
        rec = records[name]
        assert kind == ("CHAIN" if rec.is_user_code or rec.parent_index is None else "TOOL"), (
            name,
            kind,
        )
    assert "TOOL" in types.values() and list(types.values()).count("CHAIN") > 1
    root = by_name["predict"]
    assert (
        before <= root.start_time_ns <= root.end_time_ns <= after
    ), "epoch times, in the session's window"
    pairs = list(zip(_walk_trace(trace), walk(session.to_tree())))
    assert len(pairs) == len(trace.data.spans) == len(session.spans)
    for s, n in pairs:
        assert s.name == n["label"]
        assert abs(s.start_time_ns - _epoch(session, n["start_ns"])) <= 1000
        assert abs((s.end_time_ns - s.start_time_ns) - n["duration_ns"]) <= 1000
        assert s.attributes["mlflow_profiler.thread_name"] == n["thread_name"]
        assert s.attributes["mlflow_profiler.active_ns"] == n["active_ns"]
        rec = session.spans[n["span_index"]]
        assert s.attributes["mlflow_profiler.waiting_ns"] == rec.waiting_ns
        assert s.attributes["mlflow_profiler.running_ns"] == rec.duration_ns - rec.waiting_ns >= 0
        assert s.attributes["mlflow_profiler.line"] == n["line"]
        assert s.attributes["mlflow_profiler.file"] == n["file"]

    prep = by_name[qn("_prep")]
    # The class's own module: "pandas" from pandas 3, "pandas.core.frame" before.
    frame_type = f"{pd.DataFrame.__module__}.DataFrame"
    assert prep.inputs == {
        "df": {
            "type_name": frame_type,
            "shape": [64, 3],
            "dtype": "float64",
            "length": 64,
            "size_bytes": prep.inputs["df"]["size_bytes"],
        }
    }
    assert prep.outputs["type_name"] == frame_type and prep.outputs["shape"] == [64, 3]
    assert by_name[qn("_score")].outputs == {
        "type_name": "numpy.ndarray",
        "shape": [64],
        "dtype": "float64",
        "length": 64,
        "size_bytes": 512,
    }
    assert prep.attributes["mlflow_profiler.module"] == __name__
    assert root.attributes["mlflow_profiler.captured_depth"] == 2
    assert root.attributes["mlflow_profiler.spans_omitted"] == 0
    assert root.status.status_code == "OK"


def test_several_roots_and_threads_hang_under_one_profile_span(local_store):
    import mlflow

    def worker():
        with profile_block("worker_block"):
            predict(DF)

    with profiling(depth=3, all_threads=True) as session:
        predict(DF)
        t = threading.Thread(target=worker, name="feature-worker")
        t.start()
        t.join()
        predict(DF)
    if not needs_tracing(session):
        return
    with mlflow.start_run() as run:
        trace_id = log_profile_trace(session, run_id=run.info.run_id)
    trace = _get_trace(trace_id)
    tree = _tree(trace)
    assert len(tree) == 1 and tree[0][0] == "profile"
    assert tree[0][1] == _profile_shape(session.to_tree())
    spans = {s.name: s for s in trace.data.spans}
    assert spans["worker_block"].attributes["mlflow_profiler.thread_name"] == "feature-worker"
    stats = session.statistics()
    top = spans["profile"]
    assert top.start_time_ns == _epoch(session, stats["start_ns"])
    assert top.end_time_ns == _epoch(session, stats["end_ns"])
    assert top.attributes["mlflow_profiler.span_count"] == len(session.spans)


def test_run_id_wins_over_another_threads_active_run(local_store):
    """The background exporter logs for run A while the main thread has run B
    active: the trace belongs to A (why MLflow 3.10 is needed)."""
    import mlflow

    session, _, _ = _session()
    if not needs_tracing(session):
        return
    with mlflow.start_run() as run_a:
        pass
    result = {}
    with mlflow.start_run() as run_b:
        t = threading.Thread(
            target=lambda: result.update(
                uri=mlflow_profiler.log_profile(
                    session, run_id=run_a.info.run_id, log_as_trace=True
                )
            )
        )
        t.start()
        t.join()
    assert "uri" in result
    in_a = _search(run_a.info.run_id)
    in_b = _search(run_b.info.run_id, flush=False)
    assert len(in_a) == 1 and in_b == []


def test_max_spans_keeps_the_shallow_levels(local_store):
    import mlflow

    with profiling(depth=3) as session:
        with profile_block("predict"):
            for i in range(5):
                with profile_block(f"batch_{i}"):
                    for j in range(10):
                        with profile_block(f"row_{j}"):
                            pass
    if not needs_tracing(session):
        return
    with mlflow.start_run() as run:
        trace_id = log_profile_trace(session, run_id=run.info.run_id, max_spans=20)
    trace = _get_trace(trace_id)
    names = sorted(s.name for s in trace.data.spans)
    assert names == sorted(["predict"] + [f"batch_{i}" for i in range(5)])
    root = [s for s in trace.data.spans if s.name == "predict"][0]
    assert root.attributes["mlflow_profiler.spans_omitted"] == 50


def test_an_exception_that_left_the_root_is_an_error_and_a_caught_one_is_not(local_store):
    import mlflow

    def fails():
        raise KeyError("missing column")

    def boom():
        raise ValueError("the model's error")

    def model():
        try:
            fails()
        except KeyError:
            pass
        boom()

    with pytest.raises(ValueError):
        with profiling(depth=1) as session:
            model()
    if not needs_tracing(session):
        return
    with mlflow.start_run() as run:
        trace = _get_trace(log_profile_trace(session, run_id=run.info.run_id))
    spans = {s.name: s for s in trace.data.spans}
    name = lambda f: qn(
        f"test_an_exception_that_left_the_root_is_an_error_and_a_caught_one_is_not.<locals>.{f}"
    )  # noqa: E731
    assert spans[name("fails")].status.status_code == "OK"  # model caught it
    assert spans[name("fails")].attributes["mlflow_profiler.flags"] == ["exception", "caught"]
    assert spans[name("boom")].status.status_code == "ERROR"
    assert spans[name("model")].status.status_code == "ERROR"  # it left predict


def test_without_a_run_the_trace_goes_to_the_experiment(local_store):
    import mlflow

    session, _, _ = _session()
    if not needs_tracing(session):
        return
    trace_id = log_profile_trace(session)  # no active run: the current experiment
    other = mlflow.create_experiment("other-traces")
    trace_id2 = log_profile_trace(session, experiment_id=other)
    trace = _get_trace(trace_id)
    assert trace.info.experiment_id == local_store.experiment_id
    assert "mlflow.sourceRun" not in trace.info.trace_metadata
    assert _get_trace(trace_id2, flush=False).info.experiment_id == other


def test_disabled_tracing_records_nothing_and_says_so(local_store, caplog):
    import mlflow

    session, _, _ = _session()
    if not needs_tracing(session):
        return
    mlflow.tracing.disable()
    try:
        with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
            with mlflow.start_run() as run:
                uri = mlflow_profiler.log_profile(session, log_as_trace=True)
    finally:
        mlflow.tracing.enable()
    assert uri.endswith("/profile"), "the artifacts are logged all the same"
    assert _search(run.info.run_id) == []
    assert "not recorded as an MLflow trace" in caplog.text


def test_old_mlflow_names_the_version(local_store):
    """On MLflow < 3.10 log_as_trace fails before anything is logged; on newer
    ones an MLflow module without the API gets the same error."""
    import mlflow
    from mlflow.tracking import MlflowClient

    session, _, _ = _session()

    class OldMlflow:
        __version__ = "3.9.0"

        @staticmethod
        def start_span_no_context(
            name,
            parent_span=None,
            inputs=None,
            attributes=None,
            tags=None,
            experiment_id=None,
            start_time_ns=None,
        ):
            raise AssertionError("not called")

    with pytest.raises(ImportError, match=r"MLflow >= 3\.10.*MLflow 3\.9\.0 is installed"):
        _mlflow_trace.check_supported(OldMlflow)
    if _has_tracing():
        return
    with mlflow.start_run() as run:
        with pytest.raises(
            ImportError, match=r"needs MLflow >= 3\.10.*MLflow [0-9.]+ is installed"
        ):
            mlflow_profiler.log_profile(session, log_as_trace=True)
    assert MlflowClient().list_artifacts(run.info.run_id) == [], "nothing was logged"


def test_span_processors_apply_to_the_trace(local_store):
    import mlflow

    session, _, _ = _session()
    if not needs_tracing(session):
        return

    def rename(span):
        if span.label == qn("_score"):
            span.label = "score!"
            span.output_summary = None

    mlflow_profiler.configure(span_processors=[rename])
    try:
        with mlflow.start_run() as run:
            mlflow_profiler.log_profile(session, log_as_trace=True)
    finally:
        mlflow_profiler.configure(span_processors=[])
    (found,) = _search(run.info.run_id)
    spans = {s.name: s for s in _get_trace(found.info.trace_id, flush=False).data.spans}
    assert "score!" in spans and qn("_score") not in spans
    assert spans["score!"].outputs is None
