"""Names a user recognises (issue 17, docs/capture.md "Names that depend on
the call"): pandas operators and accessors named as the user wrote them, the
plumbing of an attribute lookup or an isinstance check left in its caller's
time, and the profiler's own work (naming, first sight of a function) left
out of every span's time."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _helpers import assert_times_add_up, qn, walk

from mlflow_profiler import _labels, profiling

pd = pytest.importorskip("pandas")

ENGINES = ["native", "reference"]


def _frame():
    return pd.DataFrame(
        {
            "amount": np.arange(10.0),
            "ts": pd.date_range("2024-01-01", periods=10, freq="h"),
            "merchant": list("abcdeabcde"),
        }
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_operators_methods_and_accessors_are_named_as_the_user_wrote_them(engine):
    df = _frame()
    s = df["amount"]
    expected = [
        s * 2,
        df[["amount"]] / 3,
        -s,
        s.abs(),
        df.fillna(0),
        df["ts"].dt.hour,
        df["ts"].dt.strftime("%Y"),
        df["merchant"].str.upper(),
        df["merchant"].astype("category").cat.codes,
    ]
    with profiling(depth=0, engine=engine) as session:
        got = [
            s * 2,
            df[["amount"]] / 3,
            -s,
            s.abs(),
            df.fillna(0),
            df["ts"].dt.hour,
            df["ts"].dt.strftime("%Y"),
            df["merchant"].str.upper(),
            df["merchant"].astype("category").cat.codes,
        ]
    for a, b in zip(got, expected):  # the values are the unprofiled ones
        assert a.equals(b)
    labels = [n["label"] for n in session.to_tree() if n["label"] != "DataFrame.__getitem__"]
    assert labels == [
        "Series.__mul__",
        "DataFrame.__truediv__",
        "Series.__neg__",
        "Series.abs",
        "DataFrame.fillna",
        "Series.dt.hour",
        "Series.dt.strftime",
        "Series.str.upper",
        "Series.astype",
        "Series.cat.codes",
    ], labels
    # The function is still the one that ran: the label names the call.
    truediv = next(n for n in session.to_tree() if n["label"] == "DataFrame.__truediv__")
    assert truediv["function"] == "OpsMixin.__truediv__" and truediv["module"].startswith("pandas")


@pytest.mark.parametrize("engine", ENGINES)
def test_lookups_and_isinstance_checks_are_their_callers_time(engine):
    """pipe.predict_proba runs sklearn's available_if check, s.dt builds the
    accessor, `/` checks isinstance(other, ABCDataFrame): none is a node, at
    any depth, and the times still add up."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = np.random.default_rng(0).normal(size=(64, 3))
    pipe = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, X[:, 0] > 0)
    df = _frame()
    expected = pipe.predict_proba(X)

    def predict():
        hours = df["ts"].dt.hour / df["amount"].max()
        return pipe.predict_proba(X), hours

    with profiling(depth=-1, engine=engine) as session:
        proba, _ = predict()
    np.testing.assert_array_equal(proba, expected)
    (root,) = session.to_tree()
    assert [c["label"] for c in root["children"]][-1] == "Pipeline.predict_proba"
    labels = [n["label"] for n in walk([root])]
    for noise in (
        "_final_estimator_has",
        "<locals>.check",
        "_AvailableIfDescriptor",
        "Accessor.__get__",
        "_instancecheck",
        "_subclasscheck",
    ):
        assert not [label for label in labels if noise in label], (noise, labels)
    assert "Series.dt.hour" in labels and "Series.__truediv__" in labels
    for node in walk([root]):
        assert_times_add_up(node)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_labeller_that_raises_leaves_the_name_and_is_noted_once(engine):
    # Fault injection through the labeller registry: a labeller that raises
    # (a library changed under us) must not reach the model.
    def step(x):
        return x + 1

    def broken(a, b):
        raise RuntimeError("labeller broke")

    _labels._add(step.__code__, broken)
    try:
        with profiling(depth=1, engine=engine) as session:
            total = sum(step(i) for i in range(3))
        assert total == 6
        assert [n["label"] for n in walk(session.to_tree())].count(
            qn("test_a_labeller_that_raises_leaves_the_name_and_is_noted_once.<locals>.step")
        ) == 3
        notes = session.statistics()["notes"]
        assert (
            len([n for n in notes if "labeller raised" in n and "labeller broke" in n]) == 1
        ), notes
    finally:
        _labels.LABELLERS.pop(step.__code__, None)


@pytest.mark.parametrize("engine", ENGINES)
def test_first_sight_of_functions_is_the_profilers_work(engine):
    """1,000 functions the session sees for the first time: naming them (about
    0.6 us each, native) is the profiler's work, reported once and cut from
    every span."""
    namespace: dict = {}
    exec("\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(1000)), namespace)
    fns = [namespace[f"f{i}"] for i in range(1000)]

    def run():
        return sum(f(1) for f in fns)

    with profiling(depth=2, engine=engine) as session:
        assert run() == 1000 + sum(range(1000))
    stats = session.statistics()
    assert stats["profiler_overhead_ns"] > 0, stats
    (root,) = session.to_tree()
    assert len([n for n in walk([root]) if n["label"].startswith("f")]) == 1000
    for node in walk([root]):
        assert_times_add_up(node)
    # The footer says it when it moved the times by 0.1 ms and 1% of the
    # session (a loaded machine can stretch the session past that share).
    shown = (
        stats["profiler_overhead_ns"] >= 100_000
        and 100 * stats["profiler_overhead_ns"] >= stats["duration_ns"]
    )
    assert ("(profiler's own work: " in session.format_tree()) == shown


def timed(fn):
    """A user's own decorator, as a notebook or a serving module has them."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@timed
def scale_step(x):
    return x * 2


@pytest.mark.parametrize("engine", ENGINES)
def test_a_users_own_decorator_is_not_a_node(engine):
    """functools.wraps decorators of the user's own modules forward like the
    libraries': the decorated function is the node, at the level it was called."""

    def predict(x):
        return scale_step(x) + 1

    with profiling(depth=1, engine=engine) as session:
        assert predict(3) == 7
    (root,) = session.to_tree()
    assert [c["label"] for c in root["children"]] == ["scale_step"], session.format_tree()
