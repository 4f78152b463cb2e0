"""The profile store fed by MLflow's paths (issue 18): log_profile with
MLFLOW_PROFILER_STORE, autoprofile(store=...) for a served model, and a
store that fails never reaching the model. A real tracking server."""

from __future__ import annotations

import logging

import pytest
from _helpers import require_mlflow

mlflow = require_mlflow()

import _fraud_model  # noqa: E402
from _mlflow_fixtures import (  # noqa: E402,F401
    mlflow_warning_filters,
    server_store,
    tracking_server,
)
from _postgres import free_port  # noqa: E402
from test_store import _encode  # noqa: E402

import mlflow_profiler  # noqa: E402
from mlflow_profiler import _autoprofile, profiling  # noqa: E402
from mlflow_profiler.store import open_store  # noqa: E402

pytestmark = mlflow_warning_filters() + [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


@pytest.fixture(autouse=True)
def _autoprofile_off():
    yield
    mlflow_profiler.autoprofile(disable=True)
    _autoprofile._last.set(None)


def test_log_profile_also_adds_to_the_store(server_store, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    monkeypatch.setenv("MLFLOW_PROFILER_STORE", str(db))
    with profiling(depth=-1) as session:
        _encode([3, 4])
    with mlflow.start_run() as run:
        uri = mlflow_profiler.log_profile(session)
    with open_store(db) as store:
        (source,) = store.sources()
        labels = store.labels(source["source_id"])
        assert source["run_id"] == run.info.run_id and labels["label.artifact_uri"] == uri
        assert store.load(source["source_id"]).to_tree() == session.to_tree()


def test_a_served_model_adds_each_profile(tmp_path):
    model, df = _fraud_model.save_and_load(tmp_path)
    expected = model.predict(df)
    db = tmp_path / "serving.db"
    mlflow_profiler.autoprofile(depth=2, store=str(db))
    for _ in range(3):
        got = model.predict(df)
    assert list(got) == list(expected)
    assert mlflow_profiler.flush(30)
    with open_store(db) as store:
        sources = store.sources()
        assert len(sources) == 3 and all(s["model"].endswith("FraudScorer") for s in sources)
        tree = store.load(sources[-1]["source_id"]).to_tree()
        assert tree[0]["label"].startswith("predict [pyfunc ")


def test_a_store_that_fails_never_reaches_the_model(server_store, tmp_path, monkeypatch, caplog):
    """A PostgreSQL store that is down: log_profile still logs to MLflow, the
    model still returns its result, and one line says so."""
    monkeypatch.setenv(
        "MLFLOW_PROFILER_STORE", f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    )
    with profiling(depth=2) as session:
        _encode([3])
    caplog.set_level(logging.WARNING, logger="mlflow_profiler")
    with mlflow.start_run():
        for _ in range(3):
            assert mlflow_profiler.log_profile(session).endswith("/profile")
    lines = [r.getMessage() for r in caplog.records if "store failed" in r.getMessage()]
    assert len(lines) == 1 and "cannot reach the PostgreSQL store" in lines[0], lines


def test_mlprof_diff_of_two_mlflow_runs(server_store, tmp_path):
    """Two runs' logged profiles, compared by run id: a release against the last."""
    import os
    import subprocess
    import sys

    from test_analysis import _release

    runs = []
    for slow in (False, True):
        with mlflow.start_run() as run:
            for i, session in enumerate(_release(slow, count=25)):
                mlflow_profiler.log_profile(session, f"profiles/{i:03d}")
        runs.append(run.info.run_id)
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow.get_tracking_uri()}
    cmd = [
        sys.executable,
        "-m",
        "mlflow_profiler._cli",
        "diff",
        runs[0],
        f"runs:/{runs[1]}",
        "--fail-on-regression",
        "50",
        "--format",
        "json",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 1, run.stderr
    import json

    doc = json.loads(run.stdout)
    assert doc["a"]["runs"] == doc["b"]["runs"] == 25 and doc["verdict"] == "regression"
    slow = [p for p in doc["paths"] if p["path"][-1].endswith("decode")]
    assert (
        slow
        and slow[0]["change_pct"] > 100
        and slow[0]["ci_pct"][0] > 0
        and slow[0]["verdict"] == "regression"
    )
