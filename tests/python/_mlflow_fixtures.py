"""MLflow tracking stores for the tests: a fresh local store per test, and one
real `mlflow server` per test session.

    from _mlflow_fixtures import local_store, mlflow_store, server_store, tracking_server  # noqa: F401

    def test_x(local_store):          # or server_store, or mlflow_store (both)
        with mlflow.start_run(): ...

Import every fixture a test uses and the ones it depends on: server_store
needs tracking_server, mlflow_store needs local_store and server_store.

Each store fixture points MLflow at its store and an experiment of its own,
and afterwards ends any active run and puts back the tracking URI, the active
experiment and their environment variables. `mlflow_store` runs a test on
both. Without MLflow they skip (or fail under MLPROF_REQUIRE_MLFLOW=1).

The local store is MLflow's embedded default: SQLite (``sqlite:///...db``)
on MLflow 3.x, the file store (``./mlruns``) on MLflow 2.x. A fresh SQLite
store is a copy of one migrated per test session (migrating takes seconds).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Optional

import pytest
from _helpers import require_mlflow

__all__ = [
    "MLFLOW_WARNING_FILTERS",
    "Server",
    "Store",
    "local_store",
    "mlflow_store",
    "mlflow_warning_filters",
    "server_store",
    "start_server",
    "tracking_server",
]

# Warnings MLflow's own dependencies raise inside MLflow's code, whatever the
# test does; each module that talks to MLflow applies them with
# `pytestmark = mlflow_warning_filters()`. Named exactly, so anything else
# still fails the test.
MLFLOW_WARNING_FILTERS = (
    # MLflow 3.17's SQLAlchemy store maps relationships with lazy="noload",
    # deprecated by SQLAlchemy 2.1 (sqlalchemy_store.py: configure_mappers()).
    "ignore:The ``noload`` loader strategy is deprecated:DeprecationWarning",
    # MLflow 3.17 imports mlflow.pyfunc at the first trace, whose module-level
    # type-hint inference warns about its own `Any` hints (mlflow/types/
    # responses.py; the message starts with an ANSI colour code).
    "ignore:.*Any type hint is inferred as AnyType:UserWarning",
)


def mlflow_warning_filters() -> list:
    """pytest marks for MLFLOW_WARNING_FILTERS."""
    return [pytest.mark.filterwarnings(f) for f in MLFLOW_WARNING_FILTERS]


_ENV_VARS = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME")
SERVER_START_TIMEOUT_S = float(os.environ.get("MLPROF_MLFLOW_SERVER_TIMEOUT", "180"))


@dataclasses.dataclass
class Store:
    """A tracking store a test logs to."""

    kind: str  # "sqlite", "file" or "server"
    uri: str  # the tracking URI MLflow is pointed at
    experiment_id: str  # the test's own experiment, set active
    artifacts_dir: Path  # where artifacts land on disk


@dataclasses.dataclass
class Server:
    """A running `mlflow server` (see tracking_server)."""

    uri: str
    backend_uri: str
    artifacts_dir: Path  # --artifacts-destination: the server writes artifacts here
    log_path: Path
    process: subprocess.Popen


# -- global MLflow state -------------------------------------------------------------


def _save_state(mlflow) -> dict:
    from mlflow.tracking import fluent
    from mlflow.tracking._tracking_service import utils

    return {
        # MLflow keeps these in module globals; there is no public getter that
        # tells "not set" from "the default".
        "uri": utils._tracking_uri,
        "experiment_id": fluent._active_experiment_id,
        "env": {k: os.environ.get(k) for k in _ENV_VARS},
    }


def _end_runs(mlflow) -> None:
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _restore_state(mlflow, saved: dict) -> None:
    from mlflow.tracking import fluent

    _end_runs(mlflow)
    # Traces still queued are written by MLflow's background writer, which
    # keeps this test's store (set_tracking_uri shuts it down, flushing it).
    mlflow.set_tracking_uri(saved["uri"])
    fluent._active_experiment_id = saved["experiment_id"]
    for key, value in saved["env"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _point_at(mlflow, uri: str, artifact_location: Optional[str]) -> str:
    """Points MLflow at `uri` with a new experiment of this test; returns its id."""
    _end_runs(mlflow)
    for key in _ENV_VARS:
        os.environ.pop(key, None)
    mlflow.set_tracking_uri(uri)
    from mlflow.tracking import MlflowClient

    name = f"mlflow-profiler-test-{uuid.uuid4().hex[:12]}"
    experiment_id = MlflowClient().create_experiment(name, artifact_location=artifact_location)
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def _embedded_default_is_sqlite() -> bool:
    """Whether this MLflow's default local store is SQLite (3.x) rather than
    the file store (2.x)."""
    try:
        from mlflow.store.tracking import DEFAULT_TRACKING_URI
    except ImportError:
        return False
    return DEFAULT_TRACKING_URI.startswith("sqlite:")


# -- local store ----------------------------------------------------------------------


_template: dict = {}


def _sqlite_template(tmp_path_factory) -> Optional[Path]:
    """A migrated, empty SQLite tracking database to copy, made once per test
    session (None where the embedded default is the file store). Not a
    fixture, so that importing local_store is enough."""
    if not _embedded_default_is_sqlite():
        return None
    if "db" not in _template:
        from mlflow.tracking import MlflowClient

        root = tmp_path_factory.mktemp("mlflow-template")
        db = root / "mlflow.db"
        # The store puts the default experiment's artifacts under ./mlruns: here, not the cwd.
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(root)
            MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
        _template["db"] = db
    return _template["db"]


@pytest.fixture
def local_store(tmp_path, tmp_path_factory, monkeypatch) -> Store:
    """A fresh local tracking store in tmp_path, MLflow's embedded default
    (SQLite on 3.x, file store on 2.x), with the test's own experiment whose
    artifacts go to tmp_path/artifacts. The cwd is tmp_path, so MLflow's
    relative defaults (./mlruns, ./mlflow.db) land there too."""
    mlflow = require_mlflow()
    monkeypatch.chdir(tmp_path)
    saved = _save_state(mlflow)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    template = _sqlite_template(tmp_path_factory)
    if template is not None:
        db = tmp_path / "mlflow.db"
        shutil.copyfile(template, db)
        kind, uri = "sqlite", f"sqlite:///{db}"
    else:
        kind, uri = "file", (tmp_path / "mlruns").as_uri()
    try:
        experiment_id = _point_at(mlflow, uri, artifacts.as_uri())
        yield Store(kind, uri, experiment_id, artifacts)
    finally:
        _restore_state(mlflow, saved)


# -- tracking server -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_command() -> list:
    script = Path(sys.executable).with_name("mlflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mlflow"]


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(uri + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _stop(process: subprocess.Popen) -> None:
    # The server runs uvicorn or gunicorn workers in its own process group, and
    # its store is thrown away: no need for a graceful shutdown.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def start_server(root: Path, port: Optional[int] = None) -> Server:
    """Starts `mlflow server` on 127.0.0.1 (a free port, or `port`: a server
    started again on its store), with a SQLite backend store in `root` and
    artifacts served by the server from root/artifacts (clients upload and
    download them over HTTP), and waits for /health."""
    artifacts = root / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    backend = f"sqlite:///{root / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # No job runner: MLflow 3's huey consumers (one per job kind, about 7
    # processes) poll at ~30% of a core each while the server idles, which
    # took more CPU than any test did; no test runs an MLflow job.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    last_error = ""
    fixed = port
    for attempt in range(
        1 if fixed else 3
    ):  # the free port may be taken before the server binds it
        port = fixed or _free_port()
        uri = f"http://127.0.0.1:{port}"
        log_path = root / f"server-{attempt}.log"
        cmd = _server_command() + [
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            backend,
            "--artifacts-destination",
            str(artifacts),
        ]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if _healthy(uri):
                return Server(uri, backend, artifacts, log_path, process)
            if process.poll() is not None:
                break
            time.sleep(0.2)
        _stop(process)
        last_error = (
            f"`{' '.join(cmd)}` did not answer {uri}/health; its log ends with:\n{_tail(log_path)}"
        )
        if "address already in use" not in last_error.lower():
            break
    raise RuntimeError(last_error)


# Each test module that imports tracking_server gets a fixture of its own
# (pytest keys fixtures by the module that holds them), so the server itself
# is shared here: started by the first, stopped by the last at session end.
_server: dict = {"server": None, "users": 0}


@pytest.fixture(scope="session")
def tracking_server(tmp_path_factory) -> Server:
    """One real `mlflow server` for the whole test session (see start_server),
    stopped at its end. Its URI is ``tracking_server.uri``."""
    require_mlflow()
    server = _server["server"]
    if server is None or server.process.poll() is not None:
        server = _server["server"] = start_server(tmp_path_factory.mktemp("mlflow-server"))
    _server["users"] += 1
    try:
        yield server
    finally:
        _server["users"] -= 1
        if _server["users"] == 0:
            _stop(server.process)
            _server["server"] = None


@pytest.fixture
def server_store(tracking_server, tmp_path, monkeypatch) -> Store:
    """MLflow pointed at the session's tracking server, with a new experiment
    for this test (artifacts: mlflow-artifacts:/, stored by the server under
    tracking_server.artifacts_dir); state put back afterwards."""
    mlflow = require_mlflow()
    monkeypatch.chdir(tmp_path)
    saved = _save_state(mlflow)
    try:
        experiment_id = _point_at(mlflow, tracking_server.uri, None)
        yield Store("server", tracking_server.uri, experiment_id, tracking_server.artifacts_dir)
    finally:
        _restore_state(mlflow, saved)


@pytest.fixture(params=["local", "server"])
def mlflow_store(request) -> Store:
    """Runs the test once on a fresh local store and once on the tracking server."""
    return request.getfixturevalue("local_store" if request.param == "local" else "server_store")
