"""Real MLflow models for the autoprofile and serving tests: a PythonModel
with a monolithic predict doing pandas preprocessing, and an sklearn
Pipeline, each logged with MLflow and loaded back with load_model."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

import numpy as np
import pandas as pd

with warnings.catch_warnings():
    # MLflow's type-hint advice when its own and our PythonModel classes are
    # created (on import and below): not ours to fix.
    warnings.simplefilter("ignore")
    import mlflow
    import mlflow.pyfunc
    import mlflow.sklearn

    class ChurnModel(mlflow.pyfunc.PythonModel):
        """One big predict, as users write them: cleaning, features, scoring."""

        def _clean(self, df):
            return df.fillna(0.0)

        def _features(self, df):
            out = df.copy()
            out["ratio"] = out["spend"] / (out["visits"] + 1.0)
            out["log_spend"] = np.log1p(out["spend"].clip(lower=0))
            return out

        def _score(self, feats):
            w = np.array([0.3, -0.2, 0.5, 0.1])
            return 1.0 / (1.0 + np.exp(-(feats.to_numpy() @ w)))

        def predict(self, context, model_input, params=None):
            df = self._clean(model_input)
            feats = self._features(df)
            scores = self._score(feats)
            return pd.DataFrame({"churn": scores})

        def predict_stream(self, context, model_input, params=None):
            for i in range(3):
                yield {"chunk": f"{i}:{self._stream_piece(i)}"}

        def _stream_piece(self, i):
            return sum(range(1000 * (i + 1)))


def frame(n: int, seed: int = 0) -> pd.DataFrame:
    """Input rows for ChurnModel (a NaN in the first row: _clean has work)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {"spend": rng.gamma(2.0, 50.0, n), "visits": rng.integers(0, 30, n).astype(float)}
    )
    df.loc[0, "spend"] = np.nan
    return df


def sklearn_pipeline():
    """A fitted StandardScaler + LogisticRegression pipeline and a sample frame."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(1)
    X = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    y = (X["a"] + X["b"] > 0).astype(int)
    return make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y), X


def log_models():
    """Logs both models in a new run of the current tracking store; returns
    (churn_uri, pipeline_uri, pipeline_sample)."""
    pipe, X = sklearn_pipeline()
    # MLflow's advice while logging (type hints, pip requirements) is not the
    # profiler's business.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mlflow.start_run():
            churn = _log(
                mlflow.pyfunc.log_model, "churn", python_model=ChurnModel(), input_example=frame(3)
            )
            sk = _log(mlflow.sklearn.log_model, "pipeline", sk_model=pipe, input_example=X.head(3))
    return churn.model_uri, sk.model_uri, X


def _log(fn, name, **kw):
    # pip_requirements given: MLflow does not infer them, which loads the
    # model in a child Python (10 s of each log_models here, 30-50 s under a
    # loaded test run); the tests serve with --env-manager local.
    kw.setdefault("pip_requirements", ["mlflow", "pandas", "scikit-learn"])
    # MLflow 3 names the model with `name`; 2.x with `artifact_path`.
    major = int(mlflow.__version__.split(".")[0])
    if major >= 3:
        return fn(name=name, **kw)
    return fn(artifact_path=name, **kw)


@contextlib.contextmanager
def tracking_uri(uri):
    """MLflow's tracking URI set to `uri` inside the block, put back after."""
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield uri
    finally:
        mlflow.set_tracking_uri(previous)


def log_models_in_new_store(directory):
    """Logs both models in a new SQLite store under `directory`; returns
    (store_uri, churn_uri, pipeline_uri, pipeline_sample). Load them inside
    `tracking_uri(store_uri)`: a models:/ URI is resolved through the store."""
    with tracking_uri(f"sqlite:///{directory}/mlflow.db") as store:
        return (store,) + log_models()


def load_churn_in_new_store(directory):
    """ChurnModel logged in a new store under `directory` and loaded through
    mlflow.pyfunc (what the benches and a test of autoprofile call)."""
    import mlflow.pyfunc

    store, churn_uri, _, _ = log_models_in_new_store(directory)
    with tracking_uri(store):
        return mlflow.pyfunc.load_model(churn_uri)


PTH = "mlflow_profiler_autoprofile.pth"
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def installed_pth():
    """The .pth that `pip install` put in site-packages, or None (a source
    checkout run through PYTHONPATH)."""
    import sysconfig

    for key in ("purelib", "platlib"):
        path = os.path.join(sysconfig.get_paths()[key], PTH)
        if os.path.exists(path):
            return path
    return None


def require_installed_pth(why: str) -> None:
    """Skips without the installed .pth, or fails under
    MLPROF_REQUIRE_MLFLOW=1 (CI tests the installed package)."""
    import pytest

    if installed_pth() is not None:
        return
    if os.environ.get("MLPROF_REQUIRE_MLFLOW") == "1":
        pytest.fail(
            f"{PTH} is not installed in site-packages: CI must test the installed package ({why})"
        )
    pytest.skip(f"{why} needs the installed package (pip install .): its .pth starts autoprofile")


def child_env(tracking_uri, extra=None):
    """The environment of a child Python: ours without MLFLOW_PROFILER_*,
    plus `extra`, the tracking store, this directory on PYTHONPATH (the
    models' classes are pickled by reference to _mlflow_models) and the
    interpreter's bin directory first on PATH (the scoring server runs
    `uvicorn`/`gunicorn` by name)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_PROFILER_")}
    env.update(extra or {})
    env["MLFLOW_TRACKING_URI"] = tracking_uri
    env["PYTHONWARNINGS"] = "ignore"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(
        [TESTS_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    return env


def logged_profiles(store, experiment_name: str) -> int:
    """Profiles autoprofile's exporter logged under `experiment_name` (its
    `profiles/` artifacts, over every run there); 0 if it does not exist."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name(experiment_name)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    return sum(len(client.list_artifacts(r.info.run_id, "profiles")) for r in runs)
