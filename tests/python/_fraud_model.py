"""A model as users write them, for the tests of what the user reads
(issue 17): a PythonModel with pandas datetime and groupby features and a
ColumnTransformer + RandomForest pipeline, saved with MLflow and loaded back."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd

with warnings.catch_warnings():
    # MLflow's type-hint advice on import: not about the profiler.
    warnings.simplefilter("ignore")
    import mlflow
    import mlflow.pyfunc


def make_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "ts": pd.date_range("2024-01-01", periods=n, freq="h"),
            "amount": rng.gamma(2.0, 50.0, n),
            "merchant": rng.choice(["a", "b", "c", "d"], n),
            "user": rng.integers(0, 20, n),
        }
    )


def features(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    out["hour"] = df["ts"].dt.hour
    out["amount"] = df["amount"]
    out["ratio"] = df["amount"] / df.groupby("user")["amount"].transform("mean")
    out["merchant"] = df["merchant"]
    return out


def fraud_model_class():
    """Defined in a function, so cloudpickle saves the class by value and
    load_model rebuilds it (MLflow's predict wrapper included), as it does for
    a class defined in a notebook or a script's __main__."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        class FraudScorer(mlflow.pyfunc.PythonModel):
            def load_context(self, context):
                with open(context.artifacts["pipe"], "rb") as f:
                    self.pipe = pickle.load(f)

            def predict(self, context, model_input, params=None):
                X = self.featurize(model_input)
                return self.pipe.predict_proba(X)[:, 1]

            def featurize(self, df):
                return features(df)

    return FraudScorer


def save_and_load(tmp):
    """A FraudScorer fitted, saved with mlflow.pyfunc.save_model under `tmp`
    and loaded back; returns (the pyfunc model, an input frame)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df = make_frame(200)
    X = features(df)
    y = (df["amount"] > 100).astype(int)
    pipe = Pipeline(
        [
            (
                "ct",
                ColumnTransformer(
                    [
                        ("num", StandardScaler(), ["hour", "amount", "ratio"]),
                        ("cat", OneHotEncoder(handle_unknown="ignore"), ["merchant"]),
                    ]
                ),
            ),
            ("rf", RandomForestClassifier(n_estimators=5, random_state=0)),
        ]
    ).fit(X, y)
    with open(tmp / "pipe.pkl", "wb") as f:
        pickle.dump(pipe, f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlflow.pyfunc.save_model(
            str(tmp / "model"),
            python_model=fraud_model_class()(),
            artifacts={"pipe": str(tmp / "pipe.pkl")},
            pip_requirements=["pandas"],
        )
        model = mlflow.pyfunc.load_model(str(tmp / "model"))
    return model, make_frame(50, seed=1)
