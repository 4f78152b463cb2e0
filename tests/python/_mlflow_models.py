"""Real MLflow models for the autoprofile and serving tests: a PythonModel
with a monolithic predict doing pandas preprocessing, and an sklearn
Pipeline, each logged with MLflow and loaded back with load_model."""

from __future__ import annotations

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
    df = pd.DataFrame({"spend": rng.gamma(2.0, 50.0, n), "visits": rng.integers(0, 30, n).astype(float)})
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
    import warnings

    pipe, X = sklearn_pipeline()
    # MLflow's advice while logging (type hints, pip requirements) is not the
    # profiler's business.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mlflow.start_run():
            churn = _log(mlflow.pyfunc.log_model, "churn", python_model=ChurnModel(), input_example=frame(3))
            sk = _log(mlflow.sklearn.log_model, "pipeline", sk_model=pipe, input_example=X.head(3))
    return churn.model_uri, sk.model_uri, X


def _log(fn, name, **kw):
    # MLflow 3 names the model with `name`; 2.x with `artifact_path`.
    major = int(mlflow.__version__.split(".")[0])
    if major >= 3:
        return fn(name=name, **kw)
    return fn(artifact_path=name, **kw)
