"""The models bench_diff.py captures runs of (one forked process per run).

Each predict() calls featurize, score and postprocess. score is the step a
release slows by a known factor; it is about a fifth of predict, above the
gate's floors (5% of the root, 20 us). Three kinds:
- cpu: pure-Python loops (CPU-bound, so a loaded machine stretches them);
- sleep: time.sleep (waiting; the load shows only as wakeup latency);
- mlflow: a pyfunc model loaded with mlflow.pyfunc.load_model, predict
  on a DataFrame: pandas in featurize, numpy in score, MLflow's own input
  checks around it (the sub-microsecond paths that must not gate).
"""

from __future__ import annotations

import time

FEATURIZE_SPIN = 60_000  # about 3 ms of CPython 3.11 here
SCORE_SPIN = 20_000      # about 1 ms
SCORE_MATMULS = 20       # about 2 ms of 64x128 @ 128x128 matmuls: 1.15 and 1.4 times are whole numbers


def spin(n: int) -> int:
    """A CPU-bound loop of n iterations."""
    total = 0
    for i in range(n):
        total += i * i
    return total


class Steps:
    """The cpu and sleep models: predict() = featurize, score, postprocess."""

    def __init__(self, kind: str, factor: float) -> None:
        self.kind = kind
        self.factor = factor

    def featurize(self) -> int:
        """3 ms of work or of sleep."""
        if self.kind == "cpu":
            return spin(FEATURIZE_SPIN)
        time.sleep(0.003)
        return 0

    def score(self) -> int:
        """1 ms times the release's factor."""
        if self.kind == "cpu":
            return spin(int(SCORE_SPIN * self.factor))
        time.sleep(0.001 * self.factor)
        return 0

    def postprocess(self, x: int) -> int:
        """A few microseconds."""
        return x % 7

    def predict(self) -> int:
        """One request."""
        return self.postprocess(self.featurize() + self.score())


def pyfunc_model_class():
    """The MLflow model's class (made here so that importing this module
    does not import MLflow)."""
    import mlflow.pyfunc
    import numpy as np

    class ScoringModel(mlflow.pyfunc.PythonModel):
        def load_context(self, context):
            import os

            self.factor = float(os.environ.get("BENCH_SCORE_FACTOR", "1"))
            self.weights = np.random.default_rng(0).standard_normal((128, 128)) / 12

        def featurize(self, df):
            out = df.copy()
            for c in df.columns:
                out[c + "_z"] = (df[c] - df[c].mean()) / (df[c].std() + 1e-9)
            return out.to_numpy(dtype=float)

        def score(self, x):
            w = self.weights
            m = np.resize(x, (x.shape[0], 128))
            for _ in range(int(round(SCORE_MATMULS * self.factor))):
                m = np.tanh(m @ w)
            return m.sum(axis=1)

        def postprocess(self, y):
            return (y > 0).astype(int)

        def predict(self, context, model_input, params=None):
            return self.postprocess(self.score(self.featurize(model_input)))

    return ScoringModel
