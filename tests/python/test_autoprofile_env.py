"""The no-code-change path: MLFLOW_PROFILER_* variables, the package's .pth
hook, the mlflow-profiler-run launcher and the background exporter, each in a
fresh Python process (a real interpreter start, as in serving)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from _helpers import require_mlflow

mlflow = require_mlflow()

import mlflow_profiler  # noqa: E402
from mlflow_profiler import _env  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning:mlflow"),
]

HERE = os.path.dirname(os.path.abspath(__file__))


def python_with_hook(tmp_path):
    """argv prefix of a Python that processes our .pth at startup: the
    installed one (CI: pip install .), else the source file added as a site
    directory (same file, same processing by site.py)."""
    import _mlflow_models

    pth = _mlflow_models.PTH
    if _mlflow_models.installed_pth() is not None:
        return [sys.executable]
    if os.environ.get("MLPROF_REQUIRE_MLFLOW") == "1":
        pytest.fail(f"{pth} is not installed in site-packages: CI must test the installed package")
    site_dir = tmp_path / "site"
    site_dir.mkdir(exist_ok=True)
    shutil.copy(os.path.join(HERE, "..", "..", "python", pth), site_dir / pth)
    return [sys.executable, "-c", f"import site, runpy, sys; site.addsitedir({str(site_dir)!r}); "
            "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"]


@pytest.fixture(scope="module")
def model_uri(tmp_path_factory):
    import _mlflow_models

    store, churn_uri, _, _ = _mlflow_models.log_models_in_new_store(tmp_path_factory.mktemp("envstore"))
    return store, churn_uri


def run_script(tmp_path, body: str, env_extra: dict, tracking_uri: str, timeout=240):
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(body))
    import _mlflow_models

    return subprocess.run(python_with_hook(tmp_path) + [str(script)], capture_output=True, text=True,
                          env=_mlflow_models.child_env(tracking_uri, env_extra), timeout=timeout, cwd=tmp_path)


APP = """
    import sys
    import mlflow.pyfunc
    import _mlflow_models
    model = mlflow.pyfunc.load_model({uri!r})
    df = _mlflow_models.frame(32)
    for _ in range({calls}):
        out = model.predict(df)
    assert len(out) == 32
    import mlflow_profiler
    last = mlflow_profiler.last_profile()
    print("LAST", None if last is None else last.to_tree()[0]["label"])
    print("FLUSHED", mlflow_profiler.flush(120))
    print("STATS", mlflow_profiler.statistics())
"""


def test_environment_turns_autoprofile_on_with_no_code_change(tmp_path, model_uri):
    store, uri = model_uri
    out_dir = tmp_path / "profiles"
    r = run_script(tmp_path, APP.format(uri=uri, calls=3), {
        "MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_DEPTH": "1",
        "MLFLOW_PROFILER_SAMPLE_RATE": "1.0", "MLFLOW_PROFILER_CAPTURE_IO": "true",
        "MLFLOW_PROFILER_OUTPUT_DIR": str(out_dir)}, store)
    assert r.returncode == 0, r.stderr
    assert "LAST predict [pyfunc ChurnModel]" in r.stdout
    files = sorted(glob.glob(str(out_dir / "profile-*.json.gz")))
    assert len(files) == 3, r.stdout + r.stderr
    session = mlflow_profiler.load(files[0])
    assert session.captured_depth == 1
    assert session.spans[0].input_summary["data"].shape == (32, 2)
    labels = [s.label for s in session.spans]
    assert "ChurnModel._score" in labels


def test_without_the_variable_nothing_is_imported(tmp_path, model_uri):
    store, uri = model_uri
    body = """
        import sys
        print("LOADED", "mlflow_profiler" in sys.modules)
    """
    r = run_script(tmp_path, body, {}, store)
    assert r.returncode == 0, r.stderr
    assert "LOADED False" in r.stdout
    r = run_script(tmp_path, body, {"MLFLOW_PROFILER_AUTOPROFILE": "1"}, store)
    assert "LOADED True" in r.stdout, r.stderr
    assert "mlflow" not in r.stdout  # MLflow itself is only patched once the program imports it


@pytest.mark.parametrize("name,value", [
    ("MLFLOW_PROFILER_SAMPLE_RATE", "abc"), ("MLFLOW_PROFILER_SAMPLE_RATE", "1.5"),
    ("MLFLOW_PROFILER_DEPTH", "two"), ("MLFLOW_PROFILER_CAPTURE_IO", "maybe"),
    ("MLFLOW_PROFILER_QUEUE_SIZE", "0"),
])
def test_a_bad_value_is_named_and_the_program_still_runs(tmp_path, model_uri, name, value):
    store, uri = model_uri
    r = run_script(tmp_path, APP.format(uri=uri, calls=1),
                   {"MLFLOW_PROFILER_AUTOPROFILE": "1", name: value}, store)
    assert r.returncode == 0, r.stderr
    assert name in r.stderr and "autoprofile stays off" in r.stderr
    assert "LAST None" in r.stdout


def test_env_read_validates_every_variable():
    assert _env.read({})["sample_rate"] == 1.0
    got = _env.read({"MLFLOW_PROFILER_SAMPLE_RATE": "0.25", "MLFLOW_PROFILER_DEPTH": "-1",
                     "MLFLOW_PROFILER_LOG_TO_MLFLOW": "yes"})
    assert (got["sample_rate"], got["depth"], got["log_to_mlflow"]) == (0.25, -1, True)
    for var in _env.VARIABLES:
        if var.parse is _env._text:
            continue
        with pytest.raises(_env.EnvError, match=var.name):
            _env.read({var.name: "not-a-value"})


def test_every_variable_is_documented():
    with open(os.path.join(HERE, "..", "..", "docs", "autoprofile.md")) as f:
        doc = f.read()
    for var in _env.VARIABLES:
        assert f"`{var.name}`" in doc, var.name


def launcher(tmp_path):
    script = shutil.which("mlflow-profiler-run", path=os.path.dirname(sys.executable))
    if script is not None:
        return [script]
    if os.environ.get("MLPROF_REQUIRE_MLFLOW") == "1":
        pytest.fail("the mlflow-profiler-run console script is not installed next to the interpreter")
    return [sys.executable, "-m", "mlflow_profiler._launcher"]


def test_launcher_runs_a_command_with_autoprofile_on(tmp_path, model_uri):
    store, uri = model_uri
    out_dir = tmp_path / "launched"
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(uri=uri, calls=2)))
    import _mlflow_models

    env = _mlflow_models.child_env(store)
    cmd = launcher(tmp_path) + ["--depth", "1", "--output-dir", str(out_dir), "--"]
    cmd += python_with_hook(tmp_path) + [str(script)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "LAST predict [pyfunc ChurnModel]" in r.stdout
    assert len(glob.glob(str(out_dir / "*.json.gz"))) == 2
    bad = subprocess.run(launcher(tmp_path) + ["--sample-rate", "2", "--", sys.executable, "-c", "pass"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "MLFLOW_PROFILER_SAMPLE_RATE" in bad.stderr


def test_profiles_are_logged_to_mlflow_in_the_background(tmp_path, model_uri):
    store, uri = model_uri
    r = run_script(tmp_path, APP.format(uri=uri, calls=4), {
        "MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_DEPTH": "1",
        "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1", "MLFLOW_PROFILER_EXPERIMENT": "serving-profiles"}, store)
    assert r.returncode == 0, r.stderr
    assert "FLUSHED True" in r.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("serving-profiles")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    profiles = client.list_artifacts(runs[0].info.run_id, "profiles")
    assert len(profiles) == 4
    names = {f.path.rsplit("/", 1)[-1] for f in client.list_artifacts(runs[0].info.run_id, profiles[0].path)}
    assert {"profile.json", "profile.html", "profile.trace.json"} <= names
    local = client.download_artifacts(runs[0].info.run_id, profiles[0].path + "/profile.json", str(tmp_path))
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
import mlflow_profiler
print("FLUSHED", mlflow_profiler.flush(120))
print("STATS", mlflow_profiler.statistics())
"""


def test_a_down_tracking_server_never_blocks_the_model(tmp_path, model_uri):
    store, uri = model_uri
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    r = run_script(tmp_path, DOWN_APP.format(uri=uri, port=port), {
        "MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_DEPTH": "1",
        "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1", "MLFLOW_PROFILER_QUEUE_SIZE": "4",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}, store)
    assert r.returncode == 0, r.stderr
    stats_line = next(line for line in r.stdout.splitlines() if line.startswith("STATS"))
    export = eval(stats_line[len("STATS "):])["export"]  # our own repr of a dict of ints
    assert export["submitted"] == 10
    assert export["exported"] == 0
    assert export["failed"] >= 1 and export["failed"] + export["dropped"] == 10
    assert r.stderr.count("exporting a profile failed") == 1  # logged once


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
    r = run_script(tmp_path, SIGTERM_APP.format(uri=uri, calls=8, setup="", before_kill=""), {
        "MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_DEPTH": "1",
        "MLFLOW_PROFILER_LOG_TO_MLFLOW": "1", "MLFLOW_PROFILER_EXPERIMENT": experiment,
        "MLFLOW_PROFILER_DRAIN_ON_SIGTERM": drain}, store)
    assert r.returncode == -signal.SIGTERM, r.stdout + r.stderr  # the exit status a supervisor expects
    assert "STILL ALIVE" not in r.stdout
    if drain == "1":
        assert logged_profiles(store, experiment) == 8, r.stderr
    else:
        # The control: logging 8 profiles (a run created, 3 artifacts each)
        # takes far longer than the signal does to arrive, so some are lost.
        assert logged_profiles(store, experiment) < 8


def test_a_second_sigterm_during_the_drain_dies_at_once(tmp_path, model_uri):
    store, uri = model_uri
    setup = "mlflow_profiler.configure(span_processors=[lambda span: time.sleep(10)])  # a drain of minutes"
    # The second signal comes from a timer thread while the main thread drains.
    before_kill = "import threading; threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()"
    start = time.monotonic()
    r = run_script(tmp_path, SIGTERM_APP.format(uri=uri, calls=3, setup=setup, before_kill=before_kill), {
        "MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_DEPTH": "1",
        "MLFLOW_PROFILER_OUTPUT_DIR": str(tmp_path / "out")}, store)
    assert r.returncode == -signal.SIGTERM, r.stdout + r.stderr
    assert time.monotonic() - start < 60  # not the drain of minutes (nor the 120 s sleep)
    assert not glob.glob(str(tmp_path / "out" / "*.json.gz"))


@pytest.mark.parametrize("env,inherited,expected", [
    ({"MLFLOW_PROFILER_OUTPUT_DIR": "out"}, signal.SIG_DFL, "drain"),
    ({"MLFLOW_PROFILER_LOG_TO_MLFLOW": "1"}, signal.SIG_DFL, "drain"),
    ({}, signal.SIG_DFL, "SIG_DFL"),  # nothing is exported: nothing to drain
    ({"MLFLOW_PROFILER_OUTPUT_DIR": "out", "MLFLOW_PROFILER_DRAIN_ON_SIGTERM": "0"}, signal.SIG_DFL, "SIG_DFL"),
    ({"MLFLOW_PROFILER_OUTPUT_DIR": "out"}, signal.SIG_IGN, "SIG_IGN"),  # e.g. started under nohup
])
def test_the_sigterm_handler_is_installed_only_where_it_drains_something(tmp_path, model_uri, env, inherited,
                                                                        expected):
    store, _ = model_uri
    body = """
        import signal
        h = signal.getsignal(signal.SIGTERM)
        print("HANDLER", "drain" if getattr(h, "__module__", "") == "mlflow_profiler._bootstrap" else h.name)
    """
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(body))
    import _mlflow_models

    r = subprocess.run(python_with_hook(tmp_path) + [str(script)], capture_output=True, text=True, timeout=120,
                       env=_mlflow_models.child_env(store, {"MLFLOW_PROFILER_AUTOPROFILE": "1", **env}),
                       cwd=tmp_path, preexec_fn=lambda: signal.signal(signal.SIGTERM, inherited))
    assert r.returncode == 0, r.stderr
    assert f"HANDLER {expected}" in r.stdout
