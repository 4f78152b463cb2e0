"""The no-code-change path: MLFLOW_PROFILER_* variables, the package's .pth
hook and the mlflow-profiler-run launcher, each in a fresh Python process (a
real interpreter start, as in serving). The background exporter of such a
process: test_autoprofile_export.py."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap

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
from mlflow_profiler import _env  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning:mlflow"),
]

HERE = os.path.dirname(os.path.abspath(__file__))


def test_environment_turns_autoprofile_on_with_no_code_change(tmp_path, model_uri):
    store, uri = model_uri
    out_dir = tmp_path / "profiles"
    r = run_script(
        tmp_path,
        APP.format(uri=uri, calls=3),
        {
            "MLFLOW_PROFILER_AUTOPROFILE": "1",
            "MLFLOW_PROFILER_DEPTH": "1",
            "MLFLOW_PROFILER_SAMPLE_RATE": "1.0",
            "MLFLOW_PROFILER_CAPTURE_IO": "true",
            "MLFLOW_PROFILER_OUTPUT_DIR": str(out_dir),
        },
        store,
    )
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


@pytest.mark.parametrize(
    "name,value",
    [
        ("MLFLOW_PROFILER_SAMPLE_RATE", "abc"),
        ("MLFLOW_PROFILER_SAMPLE_RATE", "1.5"),
        ("MLFLOW_PROFILER_DEPTH", "two"),
        ("MLFLOW_PROFILER_CAPTURE_IO", "maybe"),
        ("MLFLOW_PROFILER_QUEUE_SIZE", "0"),
    ],
)
def test_a_bad_value_is_named_and_the_program_still_runs(tmp_path, model_uri, name, value):
    store, uri = model_uri
    r = run_script(
        tmp_path,
        APP.format(uri=uri, calls=1),
        {"MLFLOW_PROFILER_AUTOPROFILE": "1", name: value},
        store,
    )
    assert r.returncode == 0, r.stderr
    assert name in r.stderr and "autoprofile stays off" in r.stderr
    assert "LAST None" in r.stdout


def test_env_read_validates_every_variable():
    assert _env.read({})["sample_rate"] == 1.0
    got = _env.read(
        {
            "MLFLOW_PROFILER_SAMPLE_RATE": "0.25",
            "MLFLOW_PROFILER_DEPTH": "-1",
            "MLFLOW_PROFILER_LOG_TO_MLFLOW": "yes",
        }
    )
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
        pytest.fail(
            "the mlflow-profiler-run console script is not installed next to the interpreter"
        )
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
    for flag, value, says in (
        ("--sample-rate", "2", "in [0, 1]"),
        ("--sample-rate", "abc", "is not a number"),
        ("--depth", "deep", "is not an integer"),
    ):
        bad = subprocess.run(
            launcher(tmp_path) + [flag, value, "--", sys.executable, "-c", "pass"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        # the error names the flag the user typed, not the variable it sets
        assert (
            bad.returncode == 2 and f"{flag}='{value}'" in bad.stderr and says in bad.stderr
        ), bad.stderr
        assert "MLFLOW_PROFILER_" not in bad.stderr.splitlines()[-1], bad.stderr
