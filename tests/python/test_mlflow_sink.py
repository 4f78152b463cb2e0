"""The MLflow sink against real MLflow: profiles logged as artifacts, run
metrics and collector summaries, on a fresh local store and on a real
`mlflow server` (mlflow_store runs both), read back through the MLflow client
and compared with the session they came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

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
from mlflow_profiler import mlflow_sink, profile_block, profiling

pytestmark = mlflow_warning_filters()

# -- a small real model ------------------------------------------------------------------


def _prep(df):
    return (df - df.mean()) / df.std()


def _features(df):
    return [c for c in df.columns], df.to_numpy()


def _score(x):
    return np.asarray(x).sum(axis=1)


def predict(df):
    scaled = _prep(df)
    names, x = _features(scaled)
    weights = list(map(lambda v: v * 2.0, [1.0, 2.0]))
    del names, weights
    return _score(x)


def make_session(depth=2, calls=1):
    df = pd.DataFrame(np.random.default_rng(0).random((200, 4)), columns=list("abcd"))
    with profiling(depth=depth, capture_io=True) as session:
        for _ in range(calls):
            predict(df)
    return session


def _download(run_id, path, dst):
    import mlflow

    return Path(
        mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst))
    )


def _running(node):
    return max(0, node["duration_ns"] - node["waiting_ns"])


def _self_ns(node):
    """A node's own running code: its running time (duration_ns less
    waiting_ns) less its same-lane children's, as the full capture has them."""
    kids = [
        c
        for c in node["children"]
        if c["thread_id"] == node["thread_id"] and c["task"] == node["task"]
    ]
    return max(0, _running(node) - sum(_running(c) for c in kids))


def expected_figures(session, depth=None):
    """Per call path from to_tree() (every captured span): wall ms, running
    ms, waiting ms and self ms (own running code, children as captured, not
    cut at `depth`) summed, and calls; the paths down to `depth`."""
    out = defaultdict(lambda: [0, 0, 0, 0, 0])

    def visit(node, path):
        path = path + (node["label"],)
        if depth is None or len(path) <= depth + 1:
            fig = out[path]
            fig[0] += node["duration_ns"]
            fig[1] += _running(node)
            fig[2] += node["waiting_ns"]
            fig[3] += _self_ns(node)
            fig[4] += 1
        for c in node["children"]:
            visit(c, path)

    for root in session.to_tree():
        visit(root, ())
    return {p: (w / 1e6, r / 1e6, wt / 1e6, s / 1e6, n) for p, (w, r, wt, s, n) in out.items()}


# -- log_profile ---------------------------------------------------------------------------


def test_log_profile_artifacts_round_trip(mlflow_store, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    session = make_session()
    with mlflow.start_run() as run:
        uri = mlflow_profiler.log_profile(session)
    rid = run.info.run_id
    client = MlflowClient()
    info = client.get_run(rid).info
    assert uri == info.artifact_uri.rstrip("/") + "/profile"
    if mlflow_store.kind == "server":
        assert uri.startswith("mlflow-artifacts:/"), "artifacts go through the server"
    names = sorted(os.path.basename(f.path) for f in client.list_artifacts(rid, "profile"))
    assert names == ["profile.html", "profile.json", "profile.trace.json"]
    # Stored where the store keeps artifacts (the server's --artifacts-destination).
    on_disk = list(mlflow_store.artifacts_dir.rglob(f"*{rid}*/**/profile/profile.json"))
    assert len(on_disk) == 1, on_disk

    local = _download(rid, "profile", tmp_path / "dl")
    loaded = mlflow_profiler.load(local / "profile.json")
    assert loaded.format_tree() == session.format_tree()
    assert loaded.to_flat() == session.to_flat()

    trace = json.loads((local / "profile.trace.json").read_text())
    span_names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert span_names == {n["label"] for n in walk(session.to_tree())}

    html = (local / "profile.html").read_text(encoding="utf-8")
    for label in ("predict", qn("_prep"), qn("_features"), qn("_score")):
        assert label in html
    prep = next(s for s in session.spans if s.label == qn("_prep"))
    assert prep.input_summary["df"].type_name in html  # the I/O summaries are in the report's data


def test_log_profile_artifact_path_and_run_id_from_another_thread(local_store, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    session = make_session()
    with mlflow.start_run() as run:
        pass
    result = {}

    def exporter():  # what the background exporter does: no active run in its thread
        try:
            result["uri"] = mlflow_profiler.log_profile(
                session, "batches/0007", run_id=run.info.run_id
            )
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc

    t = threading.Thread(target=exporter)
    t.start()
    t.join()
    assert "error" not in result, result
    assert result["uri"].endswith("/batches/0007")
    files = {
        os.path.basename(f.path)
        for f in MlflowClient().list_artifacts(run.info.run_id, "batches/0007")
    }
    assert files == {"profile.html", "profile.json", "profile.trace.json"}
    loaded = mlflow_profiler.load(_download(run.info.run_id, "batches/0007/profile.json", tmp_path))
    assert loaded.format_tree() == session.format_tree()


def test_no_run_is_a_clear_error(local_store):
    import mlflow

    session = make_session()
    assert mlflow.active_run() is None
    for call in (
        lambda: mlflow_profiler.log_profile(session),
        lambda: mlflow_profiler.log_profile_metrics(session),
        lambda: mlflow_profiler.log_profile_summary(HAND_SUMMARY),
    ):
        with pytest.raises(
            RuntimeError, match=r"inside `with mlflow.start_run\(\):` or pass run_id=\.\.\."
        ):
            call()


def test_bad_arguments(local_store):
    import mlflow

    session = make_session()
    with mlflow.start_run():
        with pytest.raises(TypeError, match="ProfileSession"):
            mlflow_profiler.log_profile({"not": "a session"})
        with pytest.raises(TypeError, match="ProfileSession"):
            mlflow_profiler.log_profile_metrics(session.to_flat())
        with pytest.raises(ValueError, match="relative path"):
            mlflow_profiler.log_profile(session, "../outside")
        with pytest.raises(TypeError, match="step"):
            mlflow_profiler.log_profile_metrics(session, step=1.5)
        with pytest.raises(TypeError, match="run_id"):
            mlflow_profiler.log_profile(session, run_id=42)
    with profiling(depth=1) as running:
        with pytest.raises(RuntimeError, match="after the `with profiling\\(\\)` block"):
            mlflow_profiler.log_profile(running, run_id="0" * 32)


def test_unknown_run_id_raises_mlflows_error(local_store):
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match="0123456789abcdef0123456789abcdef"):
        mlflow_profiler.log_profile(make_session(), run_id="0123456789abcdef0123456789abcdef")


# -- log_profile_metrics -----------------------------------------------------------------


def test_metrics_equal_the_session(mlflow_store):
    import mlflow
    from mlflow.tracking import MlflowClient

    session = make_session(calls=3)
    with mlflow.start_run() as run:
        logged = mlflow_profiler.log_profile_metrics(session, depth=None)  # every path captured
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    assert metrics == pytest.approx(logged, rel=1e-12)

    expected = expected_figures(session)
    assert len(metrics) == len(mlflow_sink.METRIC_STATS) * len(expected)
    lam = qn("predict.<locals>.<lambda>").replace("<", "_").replace(">", "_")
    for path, (wall, running, waiting, self_ms, calls) in expected.items():
        name = "profile/" + "/".join(p.replace("<", "_").replace(">", "_") for p in path)
        assert metrics[name + "/wall_ms"] == pytest.approx(wall, rel=1e-9, abs=1e-9)
        assert metrics[name + "/running_ms"] == pytest.approx(running, rel=1e-9, abs=1e-9)
        assert metrics[name + "/waiting_ms"] == pytest.approx(waiting, rel=1e-9, abs=1e-9)
        assert running + waiting == pytest.approx(wall, rel=1e-9, abs=1e-9)
        assert metrics[name + "/self_ms"] == pytest.approx(self_ms, rel=1e-9, abs=1e-9)
        assert metrics[name + "/calls"] == calls
    assert metrics["profile/predict/calls"] == 3
    assert metrics[f"profile/predict/{lam}/calls"] == 6  # two lambda calls per predict
    history = MlflowClient().get_metric_history(run.info.run_id, "profile/predict/wall_ms")
    assert [(m.step, m.value) for m in history] == [(0, pytest.approx(expected[("predict",)][0]))]


def test_metrics_by_default_are_the_root_and_its_steps_and_top_keeps_the_heaviest(local_store):
    import mlflow

    session = make_session(depth=2)
    full = expected_figures(session)
    assert max(len(p) for p in full) == 3  # captured two levels below the root
    with mlflow.start_run():
        default = mlflow_profiler.log_profile_metrics(session)
        top = mlflow_profiler.log_profile_metrics(session, prefix="top", depth=None, top=2)
    shallow = expected_figures(session, depth=1)
    assert len(default) == 5 * len(shallow) < 5 * len(full)
    for path, (wall, running, waiting, self_ms, calls) in shallow.items():
        # The steps' self time is their own running code, their captured
        # children excluded though depth=1 does not show them.
        base = "profile/" + "/".join(p.replace("<", "_").replace(">", "_") for p in path)
        assert default[base + "/self_ms"] == pytest.approx(self_ms, rel=1e-9, abs=1e-9)
        assert default[base + "/self_ms"] <= default[base + "/running_ms"] + 1e-9
    assert {k.rsplit("/", 1)[0].count("/") for k in default} == {1, 2}  # profile/<root>[/<step>]
    heaviest = sorted((p for p in full if len(p) > 1), key=lambda p: (-full[p][0], p))[:2]
    clean = lambda p: "/".join(x.replace("<", "_").replace(">", "_") for x in p)  # noqa: E731
    assert {k.rsplit("/", 1)[0] for k in top} == {"top/predict"} | {
        "top/" + clean(p) for p in heaviest
    }
    with pytest.raises(ValueError, match="top must be"):
        mlflow_profiler.log_profile_metrics(session, top=0)


def test_metrics_depth_prefix_and_steps(local_store):
    import mlflow
    from mlflow.tracking import MlflowClient

    first, second = make_session(), make_session()
    with mlflow.start_run() as run:
        mlflow_profiler.log_profile_metrics(first, prefix="serving/profile", depth=0, step=1)
        mlflow_profiler.log_profile_metrics(second, prefix="serving/profile", depth=0, step=2)
    client = MlflowClient()
    metrics = client.get_run(run.info.run_id).data.metrics
    # depth=0: the root only; its self time is still its own running code.
    assert sorted(metrics) == [
        "serving/profile/predict/calls",
        "serving/profile/predict/running_ms",
        "serving/profile/predict/self_ms",
        "serving/profile/predict/waiting_ms",
        "serving/profile/predict/wall_ms",
    ]
    history = client.get_metric_history(run.info.run_id, "serving/profile/predict/wall_ms")
    root2 = second.to_tree()[0]
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [1, 2]
    assert sorted(history, key=lambda m: m.step)[1].value == pytest.approx(
        root2["duration_ns"] / 1e6
    )
    self2 = client.get_metric_history(run.info.run_id, "serving/profile/predict/self_ms")
    assert max(self2, key=lambda m: m.step).value == pytest.approx(_self_ns(root2) / 1e6)
    running2 = client.get_metric_history(run.info.run_id, "serving/profile/predict/running_ms")
    assert max(running2, key=lambda m: m.step).value == pytest.approx(_running(root2) / 1e6)


def _hostile_session():
    """Display names MLflow would refuse as they are, nested 60 deep."""
    names = [
        "<lambda>",
        "<listcomp>",
        "a:b",
        "a_b",
        "größe",
        "推論",
        "with space",
        ".",
        "..",
        "",
        "x/y",
        "tab\there",
        "emoji🙂",
        "q" * 300,
    ]
    with profiling(depth=-1) as session:
        with profile_block("predict"):
            for name in names:
                with profile_block(name):
                    pass
            # a deep chain: the name would be thousands of characters long
            blocks = []
            for i in range(60):
                blocks.append(profile_block(f"level_{i:02d}_" + "d" * 40))
                blocks[-1].__enter__()
            for b in reversed(blocks):
                b.__exit__(None, None, None)
    return session, names


def test_hostile_names_are_accepted_and_stay_apart(mlflow_store):
    import mlflow
    from mlflow.tracking import MlflowClient

    session, names = _hostile_session()
    with mlflow.start_run() as run:
        logged = mlflow_profiler.log_profile_metrics(session, depth=None)
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    paths = expected_figures(session)
    assert len(paths) == 1 + len(names) + 60
    assert len(logged) == len(mlflow_sink.METRIC_STATS) * len(paths), "two paths got the same name"
    assert set(metrics) == set(logged)
    assert max(len(k) for k in metrics) <= 250
    assert "profile/predict/_lambda_/calls" in metrics
    assert "profile/predict/_listcomp_/calls" in metrics
    assert "profile/predict/with space/calls" in metrics
    assert "profile/predict/größe/calls" in metrics
    assert "profile/predict/推論/wall_ms" in metrics
    assert "profile/predict/a_b/calls" in metrics, "an unchanged name keeps its name"
    assert any(k.startswith("profile/predict/a_b-") for k in metrics), "a:b is told apart from a_b"
    deepest = [k for k in metrics if "level_59_" in k]
    assert len(deepest) == len(mlflow_sink.METRIC_STATS) and all(
        k.startswith("profile/predict/...-") for k in deepest
    )


def test_metrics_over_one_batch(server_store):
    import mlflow
    from mlflow.tracking import MlflowClient

    with profiling(depth=1) as session:
        with profile_block("predict"):
            for i in range(420):
                with profile_block(f"step_{i:03d}"):
                    pass
    with mlflow.start_run() as run:
        logged = mlflow_profiler.log_profile_metrics(session)
    assert len(logged) == len(mlflow_sink.METRIC_STATS) * 421 > 1000
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    assert len(metrics) == len(logged)
    assert metrics["profile/predict/step_419/calls"] == 1


def test_metric_names_are_stable_and_bounded():
    bases = mlflow_sink.metric_bases
    paths = [("predict", "a:b"), ("predict", "a_b"), ("predict", "<lambda>"), ("predict",)]
    first = bases(paths, "profile", mlflow_sink.METRIC_STATS)
    assert first == bases(list(reversed(paths)), "profile", mlflow_sink.METRIC_STATS)
    assert first[("predict",)] == "profile/predict"
    assert first[("predict", "a_b")] == "profile/predict/a_b"
    assert first[("predict", "<lambda>")] == "profile/predict/_lambda_"
    assert first[("predict", "a:b")].startswith("profile/predict/a_b-")
    # Alone, a changed name has no hash: it does not depend on the other paths.
    assert bases([("predict", "a:b")], "profile", ("calls",)) == {
        ("predict", "a:b"): "profile/predict/a_b"
    }
    deep = tuple(f"n{i}" * 20 for i in range(50))
    name = bases([deep], "profile", mlflow_sink.SUMMARY_STATS)[deep]
    assert len(name) + len("/self_mean_ms") <= 250
    assert name.startswith("profile/" + deep[0] + "/...-") and name.endswith("/" + deep[-1])
    other = deep[:-1] + ("other",)
    assert bases([other], "profile", ("calls",))[other] != name
    with pytest.raises(ValueError, match="prefix"):
        bases([("a",)], "p" * 101, ("calls",))


# -- log_profile_summary -------------------------------------------------------------------

HAND_SUMMARY = {
    "predict": {
        "path": ["predict"],
        "count": 4,
        "sessions": 4,
        "incomplete": 0,
        "mean_ms": 12.5,
        "min_ms": 10.0,
        "max_ms": 16.0,
        "p50_ms": 12.0,
        "p95_ms": 15.5,
        "p99_ms": 15.9,
        "total_ms": 50.0,
        "self_mean_ms": 1.25,
        "self_min_ms": 1.0,
        "self_max_ms": 1.5,
        "self_p50_ms": 1.2,
        "self_p95_ms": 1.45,
        "self_p99_ms": 1.49,
        "self_total_ms": 5.0,
    },
    "predict/preprocess": {
        "path": ["predict", "preprocess"],
        "count": 8,
        "sessions": 4,
        "incomplete": 0,
        "mean_ms": 3.0,
        "min_ms": 2.0,
        "max_ms": 4.0,
        "p50_ms": 3.0,
        "p95_ms": 3.9,
        "p99_ms": 3.99,
        "total_ms": 24.0,
        "self_mean_ms": 3.0,
        "self_min_ms": 2.0,
        "self_max_ms": 4.0,
        "self_p50_ms": 3.0,
        "self_p95_ms": 3.9,
        "self_p99_ms": 3.99,
        "self_total_ms": 24.0,
    },
    "predict/predict.<locals>.<lambda>": {
        "path": ["predict", "predict.<locals>.<lambda>"],
        "count": 2,
        "sessions": 1,
        "incomplete": 0,
        "mean_ms": 0.001,
        "min_ms": 0.001,
        "max_ms": 0.001,
        "p50_ms": 0.001,
        "p95_ms": 0.001,
        "p99_ms": 0.001,
        "total_ms": 0.002,
        "self_mean_ms": 0.001,
        "self_min_ms": 0.001,
        "self_max_ms": 0.001,
        "self_p50_ms": 0.001,
        "self_p95_ms": 0.001,
        "self_p99_ms": 0.001,
        "self_total_ms": 0.002,
    },
    # No complete call yet (a stream still open): the quantiles are None.
    "predict/stream": {
        "path": ["predict", "stream"],
        "count": 0,
        "sessions": 1,
        "incomplete": 1,
        "mean_ms": None,
        "min_ms": None,
        "max_ms": None,
        "p50_ms": None,
        "p95_ms": None,
        "p99_ms": None,
        "total_ms": 0.0,
        "self_mean_ms": None,
        "self_min_ms": None,
        "self_max_ms": None,
        "self_p50_ms": None,
        "self_p95_ms": None,
        "self_p99_ms": None,
        "self_total_ms": 0.0,
    },
}


def test_summary_metrics_and_artifact(mlflow_store, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    with mlflow.start_run() as run:
        logged = mlflow_profiler.log_profile_summary(HAND_SUMMARY)
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    assert metrics == pytest.approx(logged)
    assert len(metrics) == 3 * len(mlflow_sink.SUMMARY_STATS) + 1
    assert metrics["profile_summary/predict/stream/count"] == 0  # and nothing that is None
    assert metrics["profile_summary/predict/p95_ms"] == 15.5
    assert metrics["profile_summary/predict/preprocess/count"] == 8
    assert metrics["profile_summary/predict/preprocess/self_p95_ms"] == 3.9
    assert metrics["profile_summary/predict/predict._locals_._lambda_/max_ms"] == 0.001
    assert not any(k.endswith("/min_ms") or k.endswith("/total_ms") for k in metrics)
    doc = json.loads(
        _download(run.info.run_id, "profile/profile_summary.json", tmp_path).read_text()
    )
    assert doc == HAND_SUMMARY


def test_summary_of_a_real_collector(local_store, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    df = pd.DataFrame(np.random.default_rng(1).random((50, 3)), columns=list("abc"))
    collector = mlflow_profiler.ProfileCollector()
    for _ in range(5):
        with collector.session(depth=2):
            predict(df)
    summary = collector.summary()
    with mlflow.start_run() as run:
        logged = mlflow_profiler.log_profile_summary(summary, artifact_path="stats")
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    assert metrics["profile_summary/predict/count"] == 5
    assert metrics["profile_summary/predict/_prep/count"] == 5
    assert metrics == pytest.approx(logged)
    # as metrics the roots and their steps only (depth 1); the artifact has every path
    assert {len(v["path"]) for v in summary.values()} == {1, 2, 3}
    assert {k.rsplit("/", 1)[0].count("/") for k in metrics} == {1, 2}
    doc = json.loads(_download(run.info.run_id, "stats/profile_summary.json", tmp_path).read_text())
    assert doc.keys() == summary.keys()


@pytest.mark.parametrize(
    "summary, error, match",
    [
        ([1, 2], TypeError, "must be the dict of ProfileCollector.summary"),
        ({"predict": 3}, TypeError, r"summary\['predict'\] must be a dict"),
        ({"predict": {"count": 1}}, ValueError, r"summary\['predict'\] has no 'mean_ms'"),
        (
            {"predict": dict(HAND_SUMMARY["predict"], p95_ms="fast")},
            TypeError,
            r"\['p95_ms'\] must be a number",
        ),
        (
            {"predict": dict(HAND_SUMMARY["predict"], count=True)},
            TypeError,
            r"\['count'\] must be a number",
        ),
        (
            {"predict": dict(HAND_SUMMARY["predict"], path=[])},
            ValueError,
            r"\['path'\] must be a non-empty list",
        ),
        ({7: HAND_SUMMARY["predict"]}, TypeError, "keys must be call paths"),
    ],
)
def test_summary_validation(summary, error, match):
    # Checked before MLflow is touched: no store needed.
    with pytest.raises(error, match=match):
        mlflow_profiler.log_profile_summary(summary, run_id="0" * 32)


# -- without MLflow --------------------------------------------------------------------------

_BLOCKER = """
import sys
class _NoMlflow:
    # Finds nothing called mlflow: as if it were not installed.
    def find_spec(self, name, path=None, target=None):
        if name == "mlflow" or name.startswith("mlflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoMlflow())
"""

_PROGRAM = """
import sys
import mlflow_profiler
assert "mlflow" not in sys.modules, "import mlflow_profiler imported mlflow"
def f():
    return sum(range(10))
with mlflow_profiler.profiling(depth=1, capture_io=True) as s:
    f()
s.format_tree(); s.to_json()
assert "mlflow" not in sys.modules, "profiling imported mlflow"
calls = {
    "log_profile": lambda: mlflow_profiler.log_profile(s, run_id="r"),
    "log_profile_metrics": lambda: mlflow_profiler.log_profile_metrics(s, run_id="r"),
    "log_profile_summary": lambda: mlflow_profiler.log_profile_summary({}, run_id="r"),
    "log_profile_trace": lambda: mlflow_profiler.mlflow_sink.log_profile_trace(s, run_id="r"),
}
for name, call in calls.items():
    try:
        call()
    except ImportError as exc:
        print(name, "|", exc)
    else:
        print(name, "| no error")
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONWARNINGS="error"),
    )


def test_without_mlflow_the_sinks_name_the_extra():
    proc = _run(_BLOCKER + _PROGRAM)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" | ", 1) for line in proc.stdout.splitlines())
    assert sorted(lines) == [
        "log_profile",
        "log_profile_metrics",
        "log_profile_summary",
        "log_profile_trace",
    ]
    for name, message in lines.items():
        assert f"mlflow_profiler.{name} needs MLflow" in message, message
        assert "pip install 'mlflow-profiler[mlflow]'" in message, message


def test_import_does_not_import_mlflow():
    require_mlflow()  # installed, and still not imported
    proc = _run(
        "import sys, mlflow_profiler\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# -- span processors ------------------------------------------------------------------------


def test_span_processors_run_once_before_every_sink(local_store, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    from mlflow_profiler import IOSummary

    def rename(span):  # applied twice, it would give "preprocess!!"
        if span.label == qn("_prep"):
            span.label = "preprocess!"
            span.input_summary = {"df": IOSummary(type_name="REDACTED")}

    session = make_session()
    mlflow_profiler.configure(span_processors=[rename])
    try:
        with mlflow.start_run() as run:
            mlflow_profiler.log_profile(session)
            metrics = mlflow_profiler.log_profile_metrics(session)
    finally:
        mlflow_profiler.configure(span_processors=[])
    assert "profile/predict/preprocess_/calls" in metrics
    assert not any("_prep" in k for k in metrics)
    loaded = mlflow_profiler.load(_download(run.info.run_id, "profile/profile.json", tmp_path))
    spans = {s.label: s for s in loaded.spans}
    assert "preprocess!" in spans and qn("_prep") not in spans
    assert spans["preprocess!"].input_summary["df"].type_name == "REDACTED"
    html = (_download(run.info.run_id, "profile/profile.html", tmp_path / "h")).read_text(
        encoding="utf-8"
    )
    assert "preprocess!" in html
    assert qn("_prep") in session.format_tree(), "the session itself is left as captured"
    assert MlflowClient().get_run(run.info.run_id).data.metrics == pytest.approx(metrics)
