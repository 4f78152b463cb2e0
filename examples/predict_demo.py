"""Profiles a real model's predict(): a scikit-learn Pipeline (imputation,
scaling, one-hot encoding, gradient boosting) wrapped in a monolithic
`predict` that does pandas feature engineering first, the way production
models look when nobody instrumented them.

    python examples/predict_demo.py [report.html]   # needs scikit-learn and pandas

The HTML report goes to the path given, by default predict-demo.html in the
system's temporary directory (never into the source tree).
"""

import os
import sys
import tempfile

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from mlflow_profiler import profile_span, profiling

NUMERIC = ["age", "income", "balance", "tenure"]
CATEGORICAL = ["region", "segment"]


def make_frame(n, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 90, n).astype(float),
        "income": rng.normal(50_000, 15_000, n),
        "balance": rng.normal(2_000, 900, n),
        "tenure": rng.integers(0, 30, n).astype(float),
        "region": rng.choice(["north", "south", "east", "west"], n),
        "segment": rng.choice(["retail", "smb", "corp"], n),
    })


class ChurnModel:
    def __init__(self):
        pre = ColumnTransformer([
            ("num", Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())]), NUMERIC + ["ratio"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), CATEGORICAL),
        ])
        self.pipeline = Pipeline([("pre", pre), ("model", HistGradientBoostingClassifier(max_iter=50))])
        train = make_frame(5000, seed=1)
        self.pipeline.fit(self._features(train), (train["balance"] > 2_000).astype(int))

    def _features(self, df):
        out = df.copy()
        out["ratio"] = out["balance"] / out["income"].clip(lower=1)
        return out

    @profile_span("postprocess")
    def _postprocess(self, proba):
        return (proba[:, 1] > 0.5).astype(np.int64)

    def predict(self, df):
        features = self._features(df)
        proba = self.pipeline.predict_proba(features)
        return self._postprocess(proba)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "predict-demo.html")
    model = ChurnModel()
    batch = make_frame(1000, seed=2)
    model.predict(batch)  # warm up caches, like a server after its first request
    with profiling(depth=3) as session:
        model.predict(batch)
    print("== depth 3 (as captured)")
    session.print_tree()
    print("\n== the same capture rendered at depth 1")
    session.print_tree(depth=1)
    print("\n== depth 3 with library subtrees collapsed")
    session.print_tree(collapse_frameworks=True)
    stats = session.statistics()
    print(f"\n{stats['span_count']} spans, {stats['events_captured']} events captured, "
          f"{stats['events_skipped']} skipped below the ceiling, engine {stats['engine']}")

    with profiling(depth=1, capture_io=True) as io_session:
        model.predict(batch)
    print("\n== depth 1 with I/O summaries (capture_io=True)")
    io_session.print_tree()
    report = io_session.save(out)
    print(f"\nHTML report (flame chart, tree, I/O): {report}")


if __name__ == "__main__":
    main()
