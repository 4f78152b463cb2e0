"""A small model-like program for the report tests: nested calls, sleeps of
known length, numpy/pandas I/O, a caught exception, a worker thread, a
generator, and user text that tries to break out of the page."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd

from mlflow_profiler import profile_block

PREPROCESS_S = 0.020
MODEL_S = 0.030
LOADER_S = 0.015
ATTACK = "</script><script>alert(1)</script>"


class Note:
    """An argument whose repr is hostile HTML."""

    def __repr__(self) -> str:
        return ATTACK


def tokenize(df):
    return df.to_numpy(dtype=np.float32)


def preprocess(df):
    time.sleep(PREPROCESS_S)
    return tokenize(df) * 2


def validate(x):
    raise ValueError("negative input")


def batches(x, size):
    for i in range(0, len(x), size):
        yield x[i : i + size]


def layer(x, w):
    return np.tanh(x @ w)


def run_model(x):
    time.sleep(MODEL_S)
    w = np.ones((x.shape[1], 10), dtype=np.float32)
    return np.concatenate([layer(chunk, w) for chunk in batches(x, 2)])


def postprocess(logits):
    return logits.argmax(axis=1)


def audit(note):
    return len(repr(note))


def load_vocab():
    time.sleep(LOADER_S)


class Model:
    def predict(self, df):
        loader = threading.Thread(target=load_vocab, name="vocab-loader")
        loader.start()
        x = preprocess(df)
        try:
            validate(x)
        except ValueError:
            pass
        out = postprocess(run_model(x))
        with profile_block(ATTACK):
            audit(Note())
        loader.join()
        return out


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"a": [1.0, 2.0, 3.0, 4.0], "b": [0.5, 0.1, 0.2, 0.3], "c": [1.0, 0.0, 1.0, 0.0]}
    )
