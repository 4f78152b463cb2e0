"""The real `mlflow server` of the tests (SQLite backend store, artifacts
served by the server) and what the sink does when the tracking server is
down.

PostgreSQL is not tested as a backend store: Debian's server is installed
here, but no Python driver (psycopg2) is, and initdb refuses to run as root,
which CI is."""

from __future__ import annotations

import socket
import time
import urllib.request

import numpy as np
import pytest
from _helpers import require_mlflow
from _mlflow_fixtures import mlflow_warning_filters, server_store, tracking_server  # noqa: F401

import mlflow_profiler
from mlflow_profiler import profiling
from mlflow_profiler._files import loads

pytestmark = mlflow_warning_filters()


def _model(x):
    return np.sort(x) @ np.ones(len(x))


def _session():
    with profiling(depth=1, capture_io=True) as session:
        _model(np.arange(1000.0))
    return session


def test_the_server_stores_and_serves_the_artifacts(server_store, tracking_server):
    import mlflow
    from mlflow.tracking import MlflowClient

    session = _session()
    with mlflow.start_run() as run:
        uri = mlflow_profiler.log_profile(session)
    assert tracking_server.backend_uri.startswith("sqlite:///")
    assert (
        MlflowClient().get_run(run.info.run_id).info.status == "FINISHED"
    )  # from the SQLite store
    # The client sent the files to the server (a mlflow-artifacts: URI, no
    # local path), and the server wrote them under --artifacts-destination.
    assert uri.startswith("mlflow-artifacts:/") and run.info.run_id in uri
    relative = uri[len("mlflow-artifacts:/") :].lstrip("/")
    on_disk = tracking_server.artifacts_dir / relative / "profile.json"
    assert on_disk.is_file()
    # ... and serves them back over HTTP, byte for byte.
    url = f"{tracking_server.uri}/api/2.0/mlflow-artifacts/artifacts/{relative}/profile.json"
    with urllib.request.urlopen(url, timeout=30) as resp:
        served = resp.read()
    assert served == on_disk.read_bytes()
    assert loads(served).format_tree() == session.format_tree()


def _dead_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on return: nothing listens there


def test_a_server_that_is_down_is_mlflows_error_to_the_caller(server_store, monkeypatch):
    """The sink raises; catching it is the background exporter's business."""
    mlflow = require_mlflow()
    from mlflow.exceptions import MlflowException

    session = _session()
    with mlflow.start_run() as run:
        pass
    # No retries with backoff: MLflow's default would take minutes here.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    port = _dead_port()
    mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")  # the fixture puts the URI back
    rid = run.info.run_id
    calls = {
        "log_profile": lambda: mlflow_profiler.log_profile(session, run_id=rid),
        "log_profile_metrics": lambda: mlflow_profiler.log_profile_metrics(session, run_id=rid),
        "log_profile_summary": lambda: mlflow_profiler.log_profile_summary(
            {
                "_model": {
                    "count": 1,
                    "mean_ms": 1.0,
                    "p50_ms": 1.0,
                    "p95_ms": 1.0,
                    "p99_ms": 1.0,
                    "max_ms": 1.0,
                    "self_mean_ms": 1.0,
                    "self_p95_ms": 1.0,
                }
            },
            run_id=rid,
        ),
    }
    for name, call in calls.items():
        start = time.monotonic()
        with pytest.raises(MlflowException) as info:
            call()
        assert f"127.0.0.1:{port}" in str(info.value), (name, str(info.value))
        assert time.monotonic() - start < 30, name
