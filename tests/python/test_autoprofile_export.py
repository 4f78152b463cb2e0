"""The background exporter of an autoprofiled process, in a fresh Python
process: profiles logged to MLflow, a tracking server that is down, and the
drain on SIGTERM."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import textwrap
import time

import pytest
from _helpers import require_mlflow

mlflow = require_mlflow()

from _autoprofile_child import (  # noqa: E402,F401 (model_uri: a fixture)
    APP,
    model_uri,
    python_with_hook,
    run_script,
)

import mlflow_profiler  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning:mlflow"),
]


def test_profiles_are_logged_to_mlflow_in_the_background(tmp_path, model_uri):
    store, uri = model_uri
    r = run_script(
        tmp_path,
        APP.format(uri=uri, calls=4),
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1",
            "MLFLOW_PROFILER_EXPERIMENT": "serving-profiles",
        },
        store,
    )
    assert r.returncode == 0, r.stderr
    assert "FLUSHED True" in r.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("serving-profiles")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    assert runs[0].info.status == "FINISHED"  # ended when the process exited
    profiles = client.list_artifacts(runs[0].info.run_id, "profiles")
    assert len(profiles) == 4
    names = {
        f.path.rsplit("/", 1)[-1]
        for f in client.list_artifacts(runs[0].info.run_id, profiles[0].path)
    }
    assert {"profile.json", "profile.html", "profile.trace.json"} <= names
    local = client.download_artifacts(
        runs[0].info.run_id, profiles[0].path + "/profile.json", str(tmp_path)
    )
    assert mlflow_profiler.load(local).spans[0].label == "predict [pyfunc ChurnModel]"


DOWN_APP = """
import logging, sys
logging.basicConfig(level=logging.WARNING)
import mlflow, mlflow.pyfunc
import _mlflow_models
model = mlflow.pyfunc.load_model({uri!r})  # from the sqlite store
mlflow.set_tracking_uri("http://127.0.0.1:{port}")  # profiles go to a server that is down
df = _mlflow_models.frame(32)
for _ in range(10):
    assert len(model.predict(df)) == 32
import time
import mlflow_profiler
start = time.monotonic()
print("FLUSHED", mlflow_profiler.flush(120))
print("FLUSH_S", time.monotonic() - start)
print("STATS", mlflow_profiler.statistics())
# A handler whose stream is gone by exit (pytest's capture, a daemon's log
# file): the exit summary still reaches the others, with no "Logging error".
import os
closed = logging.StreamHandler(open(os.devnull, "w"))
logging.getLogger().addHandler(closed)
closed.stream.close()
"""


def test_a_down_tracking_server_never_blocks_the_model(tmp_path, model_uri):
    store, uri = model_uri
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    # MLflow's own retry settings left at their defaults (minutes of retries
    # per request, each logged): the exporter does not get that far.
    r = run_script(
        tmp_path,
        DOWN_APP.format(uri=uri, port=port),
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1",
            "MLFLOW_PROFILER_QUEUE_SIZE": "4",
        },
        store,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    stats_line = next(line for line in lines if line.startswith("STATS"))
    export = eval(stats_line[len("STATS ") :])["export"]  # our own repr of a dict of ints
    assert export["submitted"] == 10
    assert export["exported"] == 0
    assert export["sink_down"] >= 1 and export["failed"] == 0
    assert export["sink_down"] + export["dropped"] == 10
    assert "FLUSHED True" in lines
    assert (
        float(next(line for line in lines if line.startswith("FLUSH_S")).split()[1]) < 10
    )  # not MLflow's retries
    assert r.stderr.count("does not answer") == 1, r.stderr  # one line for the outage
    assert f"tracking server at 127.0.0.1:{port} does not answer" in r.stderr
    assert "Retrying" not in r.stderr, r.stderr  # MLflow's client was never asked
    assert "export summary: 10 submitted, 0 exported" in r.stderr  # at exit
    assert f"{export['sink_down']} not sent (tracking server down)" in r.stderr
    assert "Logging error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_exporter_backs_off_from_a_down_server_and_comes_back(monkeypatch):
    """_sink_up against a real TCP port: refused, then backed off (not even
    tried), then listening again. The back-off is shortened for the test."""
    import socket

    from mlflow_profiler import _delivery

    monkeypatch.setattr(_delivery, "SINK_BACKOFF_S", 0.2)
    monkeypatch.setattr(_delivery, "_down_until", 0.0)
    monkeypatch.setattr(_delivery, "_backoff_s", 0.0)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")
    try:
        check_backoff(_delivery, s)
    finally:
        mlflow.set_tracking_uri(previous)
        s.close()


def test_a_server_behind_a_proxy_is_left_to_mlflows_client(monkeypatch):
    """With HTTPS_PROXY set, a direct connection to the server says nothing
    about whether MLflow reaches it: the exporter does not probe it."""
    from mlflow_profiler import _delivery

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri("https://tracking.example.internal:5000")
    try:
        assert _delivery._tracking_endpoint() == ("tracking.example.internal", 5000)
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert _delivery._tracking_endpoint() is None
        monkeypatch.setenv("NO_PROXY", "example.internal")
        assert _delivery._tracking_endpoint() == ("tracking.example.internal", 5000)
    finally:
        mlflow.set_tracking_uri(previous)


def check_backoff(_delivery, s):
    assert not _delivery._sink_up()  # nothing listens: down, backing off for 0.2 s
    assert _delivery._backoff_s == 0.2
    s.listen()
    assert not _delivery._sink_up()  # within the back-off: not tried, though it listens now
    time.sleep(0.25)
    assert _delivery._sink_up()  # tried again: up
    assert _delivery._backoff_s == 0.0
    s.close()
    assert not _delivery._sink_up()
    time.sleep(0.25)
    assert not _delivery._sink_up()  # still down: the back-off doubles
    assert _delivery._backoff_s == 0.4


SIGTERM_APP = """
import os, signal, sys, time
import mlflow.pyfunc
import _mlflow_models
import mlflow_profiler
{setup}
model = mlflow.pyfunc.load_model({uri!r})
df = _mlflow_models.frame(32)
for _ in range({calls}):
    assert len(model.predict(df)) == 32
{before_kill}
os.kill(os.getpid(), signal.SIGTERM)  # no flush(): what a stopped server gets
time.sleep(120)
print("STILL ALIVE")
"""


@pytest.mark.parametrize("drain", ["1", "0"])
def test_sigterm_logs_the_queued_profiles_then_dies_by_the_signal(tmp_path, model_uri, drain):
    from _mlflow_models import logged_profiles

    store, uri = model_uri
    experiment = f"sigterm-drain-{drain}"
    r = run_script(
        tmp_path,
        SIGTERM_APP.format(uri=uri, calls=8, setup="", before_kill=""),
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1",
            "MLFLOW_PROFILER_EXPERIMENT": experiment,
            "MLFLOW_PROFILER_DRAIN_ON_SIGTERM": drain,
            "MLFLOW_PROFILER_FLUSH_TIMEOUT": "120",
        },
        store,
    )  # the default 5 s may cut a drain on a busy machine
    assert r.returncode == -signal.SIGTERM, (
        r.stdout + r.stderr
    )  # the exit status a supervisor expects
    assert "STILL ALIVE" not in r.stdout
    if drain == "1":
        assert logged_profiles(store, experiment) == 8, r.stderr
        # and the process's log says how many were waiting and that none was left
        assert re.search(
            r"mlflow-profiler: SIGTERM: [1-8] queued profiles, 0 left after", r.stderr
        ), r.stderr
    else:
        # The control: logging 8 profiles (a run created, 3 artifacts each)
        # takes far longer than the signal does to arrive, so some are lost.
        assert logged_profiles(store, experiment) < 8


def test_a_second_sigterm_during_the_drain_dies_at_once(tmp_path, model_uri):
    store, uri = model_uri
    setup = "mlflow_profiler.configure(span_processors=[lambda span: time.sleep(10)])  # a drain of minutes"
    # The second signal comes from a timer thread while the main thread drains.
    before_kill = (
        "import threading; threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()"
    )
    start = time.monotonic()
    r = run_script(
        tmp_path,
        SIGTERM_APP.format(uri=uri, calls=3, setup=setup, before_kill=before_kill),
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_OUTPUT_DIR": str(tmp_path / "out"),
        },
        store,
    )
    assert r.returncode == -signal.SIGTERM, r.stdout + r.stderr
    assert time.monotonic() - start < 60  # not the drain of minutes (nor the 120 s sleep)
    assert not glob.glob(str(tmp_path / "out" / "*.json.gz"))


@pytest.mark.parametrize(
    "env,inherited,expected",
    [
        ({"MLFLOW_PROFILER_OUTPUT_DIR": "out"}, signal.SIG_DFL, "drain"),
        ({"MLFLOW_PROFILER_LOG_TO_MLFLOW": "1"}, signal.SIG_DFL, "drain"),
        ({}, signal.SIG_DFL, "SIG_DFL"),  # nothing is exported: nothing to drain
        (
            {"MLFLOW_PROFILER_OUTPUT_DIR": "out", "MLFLOW_PROFILER_DRAIN_ON_SIGTERM": "0"},
            signal.SIG_DFL,
            "SIG_DFL",
        ),
        (
            {"MLFLOW_PROFILER_OUTPUT_DIR": "out"},
            signal.SIG_IGN,
            "SIG_IGN",
        ),  # e.g. started under nohup
    ],
)
def test_the_sigterm_handler_is_installed_only_where_it_drains_something(
    tmp_path, model_uri, env, inherited, expected
):
    store, _ = model_uri
    body = """
        import signal
        h = signal.getsignal(signal.SIGTERM)
        print("HANDLER", "drain" if getattr(h, "__module__", "") == "mlflow_profiler._bootstrap" else h.name)
    """
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(body))
    import _mlflow_models

    r = subprocess.run(
        python_with_hook(tmp_path) + [str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_mlflow_models.child_env(store, {"MLFLOW_PROFILER_AUTOPROFILE": "1", **env}),
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, inherited),
    )
    assert r.returncode == 0, r.stderr
    assert f"HANDLER {expected}" in r.stdout


# The server's parent (the `mlflow models serve` CLI) and the server get the
# process group's SIGTERM; the parent dies at once, and the server, which
# MLflow starts with PR_SET_PDEATHSIG=SIGTERM, gets a second SIGTERM then:
# under load, during the drain. Here the app is its own server: it sets the
# death signal, signals itself, and kills its parent 0.5 s into a drain of
# about 3 s. A grandparent (a subreaper) collects the app's exit status.
PDEATHSIG_GRANDPARENT = """
import ctypes, json, os, signal, subprocess, sys
ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
parent = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; subprocess.call(sys.argv[1:])", *{app_argv!r}])
statuses = {{}}
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    statuses[pid] = status
app = [s for pid, s in statuses.items() if pid != parent.pid]
print(json.dumps({{"parent": statuses.get(parent.pid), "app": app}}))
"""


def test_the_parent_death_signal_during_the_drain_does_not_cut_it(tmp_path, model_uri):
    from _autoprofile_child import python_with_hook

    store, uri = model_uri
    setup = (
        "import ctypes, threading\n"
        "ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
        "mlflow_profiler.configure(span_processors=[lambda span: time.sleep(0.2)])"
    )
    before_kill = "threading.Timer(0.5, os.kill, (os.getppid(), signal.SIGKILL)).start()"
    app = tmp_path / "server.py"
    app.write_text(
        textwrap.dedent(SIGTERM_APP.format(uri=uri, calls=3, setup=setup, before_kill=before_kill))
    )
    out_dir = tmp_path / "out"
    r = run_script(
        tmp_path,
        PDEATHSIG_GRANDPARENT.format(app_argv=[*python_with_hook(tmp_path), str(app)]),
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_OUTPUT_DIR": str(out_dir),
            "MLFLOW_PROFILER_FLUSH_TIMEOUT": "120",
        },
        store,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    statuses = json.loads(r.stdout.strip().splitlines()[-1])
    assert os.WIFSIGNALED(statuses["parent"]) and os.WTERMSIG(statuses["parent"]) == signal.SIGKILL
    [app_status] = statuses["app"]
    assert os.WIFSIGNALED(app_status) and os.WTERMSIG(app_status) == signal.SIGTERM, r.stderr
    assert len(glob.glob(str(out_dir / "profile-*.json.gz"))) == 3, r.stderr
    assert re.search(
        r"mlflow-profiler: SIGTERM: [1-3] queued profiles, 0 left after", r.stderr
    ), r.stderr
