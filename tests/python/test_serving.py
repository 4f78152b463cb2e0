"""The real MLflow scoring server (`mlflow models serve --env-manager local`
on 127.0.0.1), profiled through the environment only: one profile per
sampled request arrives, and the responses are those of an unprofiled server."""

from __future__ import annotations

import glob
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from _helpers import require_mlflow

mlflow = require_mlflow()

import _mlflow_models  # noqa: E402

import mlflow_profiler  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlflow_cli():
    exe = os.path.join(os.path.dirname(sys.executable), "mlflow")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "mlflow"]


@pytest.fixture(scope="module")
def served_model(tmp_path_factory):
    store, churn_uri, _, _ = _mlflow_models.log_models_in_new_store(
        tmp_path_factory.mktemp("servestore")
    )
    return store, churn_uri


class Server:
    """`mlflow models serve` in its own process group, stopped with SIGTERM."""

    def __init__(self, store, uri, env_extra, log_path):
        # The server is a fresh interpreter: only the installed .pth starts autoprofile in it.
        _mlflow_models.require_installed_pth("serving")
        self.port = free_port()
        env = _mlflow_models.child_env(store, env_extra)
        self.log = open(log_path, "w")
        cmd = mlflow_cli() + [
            "models",
            "serve",
            "-m",
            uri,
            "--env-manager",
            "local",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
        ]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()

    def _wait_ready(self, timeout=120.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the scoring server exited with {self.proc.returncode}: {self.output()}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ping", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("the scoring server did not answer /ping: " + self.output())

    def predict(self, df):
        body = json.dumps(
            {"dataframe_split": json.loads(df.to_json(orient="split", index=False))}
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/invocations",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
            return json.loads(r.read())

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-4000:]

    def stop(self, timeout=60.0):
        """SIGTERM to the whole group (the CLI and uvicorn), as a supervisor
        stops it; returns once every process of the group is gone."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._group_alive():
            time.sleep(0.1)
        if self._group_alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()

    def _group_alive(self) -> bool:
        self.proc.poll()  # reaps the CLI; uvicorn, once orphaned, is reaped by init
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False


def requests_frames(n):
    return [_mlflow_models.frame(5 + i, seed=i) for i in range(n)]


def serve_and_send(store, uri, env, frames, log_path, until=None):
    """Responses of a server started with `env`; `until()` is polled (at most
    90 s) before the server is stopped: profiles arrive while it serves."""
    server = Server(store, uri, env, log_path)
    try:
        responses = [server.predict(df) for df in frames]
        deadline = time.monotonic() + 90
        while until is not None and not until() and time.monotonic() < deadline:
            time.sleep(0.25)
        return responses, server
    finally:
        server.stop()


def wait_for_files(pattern, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = glob.glob(pattern)
        if len(files) >= n:
            return files
        time.sleep(0.2)
    return glob.glob(pattern)


def test_profiled_server_answers_the_same_and_writes_one_profile_per_request(
    tmp_path, served_model
):
    store, uri = served_model
    frames = requests_frames(12)
    plain, _ = serve_and_send(store, uri, {}, frames, tmp_path / "plain.log")
    out_dir = tmp_path / "profiles"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)

    def arrived():
        return len(glob.glob(str(out_dir / "profile-*.json.gz"))) >= len(
            frames
        ) and _mlflow_models.logged_profiles(store, "served") >= len(frames)

    profiled, server = serve_and_send(
        store,
        uri,
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_SAMPLE_RATE": "1.0",
            "MLFLOW_PROFILER_DEPTH": "2",
            "MLFLOW_PROFILER_CAPTURE_IO": "1",
            "MLFLOW_PROFILER_OUTPUT_DIR": str(out_dir),
            "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1",
            "MLFLOW_PROFILER_EXPERIMENT": "served",
        },
        frames,
        tmp_path / "profiled.log",
        until=arrived,
    )
    assert profiled == plain
    files = sorted(glob.glob(str(out_dir / "profile-*.json.gz")))
    assert len(files) == len(frames), server.output()
    rows = sorted(mlflow_profiler.load(f).spans[0].input_summary["data"].shape[0] for f in files)
    assert rows == sorted(len(df) for df in frames)  # one profile per request, each its own
    session = mlflow_profiler.load(files[0])
    assert session.spans[0].label == "predict [pyfunc ChurnModel]"
    assert "ChurnModel._score" in [s.label for s in session.spans if s.depth == 1]
    # The same profiles were logged to MLflow, under one run of the server process.
    experiment = client.get_experiment_by_name("served")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    assert len(client.list_artifacts(runs[0].info.run_id, "profiles")) == len(frames)


def test_sampled_server_writes_one_profile_per_sampled_request(tmp_path, served_model):
    store, uri = served_model
    frames = requests_frames(60)
    out_dir = tmp_path / "sampled"
    _, server = serve_and_send(
        store,
        uri,
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_SAMPLE_RATE": "0.3",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_CAPTURE_IO": "1",
            "MLFLOW_PROFILER_OUTPUT_DIR": str(out_dir),
        },
        frames,
        tmp_path / "sampled.log",
    )
    # Written at once or, at the latest, by the drain on SIGTERM when the server stopped.
    files = glob.glob(str(out_dir / "profile-*.json.gz"))
    sd = math.sqrt(60 * 0.3 * 0.7)
    assert abs(len(files) - 18) < 5 * sd, (len(files), server.output())
    sizes = [mlflow_profiler.load(f).spans[0].input_summary["data"].shape[0] for f in files]
    assert len(set(sizes)) == len(sizes)  # each sampled request once: no duplicates, no merges
    assert set(sizes) <= {len(df) for df in frames}


def test_a_stopped_server_logs_every_queued_profile_before_it_dies(tmp_path, served_model):
    # uvicorn re-raises SIGTERM after its graceful shutdown, so atexit never
    # runs: the bootstrap's SIGTERM handler drains the queues instead.
    store, uri = served_model
    frames = requests_frames(8)
    out_dir = tmp_path / "stopped"
    _, server = serve_and_send(
        store,
        uri,
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_SAMPLE_RATE": "1.0",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_OUTPUT_DIR": str(out_dir),
            "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1",
            "MLFLOW_PROFILER_EXPERIMENT": "stopped",
            "MLFLOW_PROFILER_FLUSH_TIMEOUT": "120",
        },  # the default 5 s may cut the drain on a busy machine
        frames,
        tmp_path / "stopped.log",
    )  # stopped right after the last response
    assert _mlflow_models.logged_profiles(store, "stopped") == len(frames), server.output()
    # and the serving run ended with the server, as a run of a job does
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("stopped").experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"] * len(runs) and runs, server.output()
    assert len(glob.glob(str(out_dir / "profile-*.json.gz"))) == len(frames)
