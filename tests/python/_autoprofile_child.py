"""What the autoprofile tests of a fresh Python process share: the
interpreter command that processes our .pth at startup, a script runner, the
logged models and the serving-like program (APP)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

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
    return [
        sys.executable,
        "-c",
        f"import site, runpy, sys; site.addsitedir({str(site_dir)!r}); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
    ]


@pytest.fixture(scope="module")
def model_uri(tmp_path_factory):
    """(store URI, churn model URI): the models logged once per test module."""
    import _mlflow_models

    store, churn_uri, _, _ = _mlflow_models.log_models_in_new_store(
        tmp_path_factory.mktemp("envstore")
    )
    return store, churn_uri


def run_script(tmp_path, body: str, env_extra: dict, tracking_uri: str, timeout=240):
    """Runs `body` as a script in a fresh Python with our .pth hook, with
    `env_extra` over the child environment of `tracking_uri`."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(body))
    import _mlflow_models

    return subprocess.run(
        python_with_hook(tmp_path) + [str(script)],
        capture_output=True,
        text=True,
        env=_mlflow_models.child_env(tracking_uri, env_extra),
        timeout=timeout,
        cwd=tmp_path,
    )


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
