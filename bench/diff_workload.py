"""The models bench_diff.py captures runs of (one forked process per run).

Each predict() calls featurize, score and postprocess. score is the step a
release slows by a known factor; it is a sixth to a third of predict, above
the gate's floors (5% of the root, 20 us). Steps are short so that a run of
30 predicts takes about 0.1 s and thousands of runs fit in minutes. Three kinds:
- cpu: pure-Python loops (CPU-bound, so a loaded machine stretches them);
- sleep: time.sleep (waiting; the load shows only as wakeup latency);
- mlflow: a pyfunc model loaded with mlflow.pyfunc.load_model, predict
  on a DataFrame: pandas in featurize, numpy in score, MLflow's own input
  checks around it (the sub-microsecond paths that must not gate).
"""

from __future__ import annotations

import time

FEATURIZE_SPIN = 12_000  # about 0.6 ms of CPython 3.11 here
SCORE_SPIN = 5_000  # about 0.25 ms
FEATURIZE_SLEEP = 0.001
SCORE_SLEEP = 0.0005  # timer slack (50 us) dilutes a change of the request by a tenth
SCORE_MATMULS = 20  # about 2 ms of 64x128 @ 128x128 matmuls: 1.15 and 1.4 times are whole numbers


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
        """0.6 ms of work, or 1 ms of sleep."""
        if self.kind == "cpu":
            return spin(FEATURIZE_SPIN)
        time.sleep(FEATURIZE_SLEEP)
        return 0

    def score(self) -> int:
        """0.25 ms of work or 0.5 ms of sleep, times the release's factor."""
        if self.kind == "cpu":
            return spin(int(SCORE_SPIN * self.factor))
        time.sleep(SCORE_SLEEP * self.factor)
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
