"""What the user reads (issue 17): a PythonModel a user wrote, with pandas
features and an sklearn pipeline, saved with MLflow and loaded back. The tree
tells the model's story: MLflow's own work is one named node per stretch,
the model's steps come under the model's predict with the names the user
called, library wrappers that only forward are not nodes, and times add up."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import assert_times_add_up, require_mlflow, walk

mlflow = require_mlflow()

import _fraud_model  # noqa: E402

import mlflow_profiler  # noqa: E402
from mlflow_profiler import _autoprofile, profiling  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(scope="module")
def fraud(tmp_path_factory):
    """(the loaded pyfunc model, an input frame)."""
    return _fraud_model.save_and_load(tmp_path_factory.mktemp("fraud"))


@pytest.fixture(autouse=True)
def _autoprofile_off():
    yield
    mlflow_profiler.autoprofile(disable=True)
    _autoprofile._last.set(None)


def _mlflow_nodes(nodes):
    return [n for n in nodes if n["label"].startswith("[mlflow")]


def test_autoprofile_shows_mlflow_as_named_nodes_and_the_models_steps(fraud):
    model, df = fraud
    expected = model.predict(df)
    mlflow_profiler.autoprofile(depth=2)
    got = model.predict(df)
    np.testing.assert_array_equal(got, expected)  # the model's result, exactly
    session = mlflow_profiler.last_profile()
    (root,) = session.to_tree()
    # The class's __qualname__ as cloudpickle rebuilt it (with or without
    # "fraud_model_class.<locals>.").
    assert root["label"].startswith("predict [pyfunc ") and root["label"].endswith(
        "FraudScorer]"
    ), root["label"]
    depth1 = root["children"]
    groups = _mlflow_nodes(depth1)
    # MLflow's checks before the model run as one stretch: one node, named for
    # what it does, instead of ~25 internal functions.
    assert len(groups) == 1, [n["label"] for n in depth1]
    assert groups[0]["label"].startswith("[mlflow: ") and "input checks" in groups[0]["label"]
    assert "group" in groups[0]["flags"]
    assert groups[0]["duration_ns"] > 0 and groups[0]["children"]  # its calls, one level down
    # Every other node at depth 1 is the model's: its own code or the library
    # it calls, never an MLflow function.
    others = [n for n in depth1 if n not in groups]
    assert [n["label"] for n in others if n["module"].startswith("mlflow")] == []
    assert [n for n in others if n["label"].endswith("FraudScorer.featurize")]
    assert "Pipeline.predict_proba" in [n["label"] for n in others]
    # How much of predict is MLflow's, how much the model's: both are there.
    assert (
        sum(g["duration_ns"] for g in groups) + sum(n["duration_ns"] for n in others)
        <= root["duration_ns"]
    )
    # Rendered, the group is one line at depth 1; its calls show at depth 2.
    members = [c["label"] for c in groups[0]["children"]]
    text = session.format_tree(depth=1)
    assert text.count("[mlflow") == 1 and not [m for m in members if f"  {m}: " in text], text
    deeper = session.format_tree(depth=2)
    assert all(f"    {m}: " in deeper for m in members), deeper


def test_the_names_are_what_the_user_called(fraud):
    model, df = fraud
    mlflow_profiler.autoprofile(depth=3)
    model.predict(df)
    session = mlflow_profiler.last_profile()
    labels = [n["label"] for n in walk(session.to_tree())]
    # Forwarding wrappers are not nodes: the function they wrap is.
    assert "DataFrame.groupby" in labels, labels
    assert any(label.endswith("__truediv__") for label in labels), labels
    for noise in (
        "wrapper",
        "new_method",
        "_getter",
        "_AvailableIfDescriptor",
        "_dispatcher",
        "_tp_cache",
    ):
        assert not [
            label for label in labels if noise in label and not label.startswith("[mlflow")
        ], noise
    featurize = next(
        n for n in walk(session.to_tree()) if n["label"].endswith("FraudScorer.featurize")
    )
    assert [c["label"] for c in featurize["children"]] == [
        "features"
    ]  # a forwarding wrapper uses no level


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_profiling_around_the_python_model_puts_its_predict_at_the_root(fraud, engine):
    model, df = fraud
    python_model = model.unwrap_python_model()
    with _session(engine, 1) as session:
        python_model.predict(None, df)
    roots = session.to_tree()
    # MLflow's type-hint wrapper around predict is not the root: the user's
    # predict is, and its children are the user's steps.
    predict = "fraud_model_class.<locals>.FraudScorer.predict"
    assert [r["label"] for r in roots if not r["label"].startswith("[mlflow")] == [predict]
    (root,) = [r for r in roots if r["label"] == predict]
    assert [c["label"] for c in root["children"]][:1] == [
        "fraud_model_class.<locals>.FraudScorer.featurize"
    ]


def _session(engine, depth):
    # "plain": profiling(depth) alone, whose C path must see MLflow loaded.
    return profiling(depth) if engine == "plain" else profiling(depth, engine=engine)


@pytest.mark.parametrize("engine", ["plain", "native", "reference"])
def test_profiling_around_the_pyfunc_counts_depth_from_the_models_predict(fraud, engine):
    """profiling() around PyFuncModel.predict: the root is named after the
    user's model, MLflow's work is one node beside the model's steps, and
    depth counts from the model's predict (its steps at 1, their calls at 2),
    as under autoprofile."""
    model, df = fraud
    expected = model.predict(df)
    with _session(engine, 2) as session:
        result = model.predict(df)
    np.testing.assert_array_equal(np.asarray(result), np.asarray(expected))
    (root,) = session.to_tree()
    # (cloudpickle may give the loaded class its bare name)
    assert root["label"].startswith("predict [pyfunc ") and root["label"].endswith(
        "FraudScorer]"
    ), root["label"]
    names = [c["label"] for c in root["children"]]
    assert len(_mlflow_nodes(root["children"])) == 1, names
    assert "fraud_model_class.<locals>.FraudScorer.featurize" in names, names
    assert "Pipeline.predict_proba" in names, names
    assert not any(n.endswith("FraudScorer.predict") for n in names), names
    featurize = next(c for c in root["children"] if c["label"].endswith("FraudScorer.featurize"))
    assert [c["label"] for c in featurize["children"]] == ["features"]  # depth 2 was captured
    # Called directly, a PythonModel's predict is not folded: it is the root.
    python_model = model.unwrap_python_model()
    with _session(engine, 1) as session:
        python_model.predict(None, df)
    assert [r["label"] for r in session.to_tree() if not r["label"].startswith("[mlflow")] == [
        "fraud_model_class.<locals>.FraudScorer.predict"
    ]


def _check_tree(session):
    for node in walk(session.to_tree(depth=1_000)):
        assert_times_add_up(node)


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_times_add_up_in_whole_real_trees(fraud, engine):
    """Over every node of real predicts: the fraud model through MLflow (pandas
    and sklearn, Pipeline._iter a generator consumed by predict_proba), the
    bare pipeline, and the demo's model."""
    import importlib.util
    import pathlib

    model, df = fraud
    with profiling(engine=engine) as session:
        model.predict(df)
    _check_tree(session)
    pipe = model.unwrap_python_model()
    with profiling(engine=engine) as session:
        pipe.pipe.predict_proba(_fraud_model.features(df))
    iters = [n for n in walk(session.to_tree()) if n["label"] == "Pipeline._iter"]
    assert iters and all(
        "generator" in n["flags"] and n["duration_ns"] <= n["active_ns"] < n["wall_ns"]
        for n in iters
    )
    _check_tree(session)
    demo_path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "predict_demo.py"
    spec = importlib.util.spec_from_file_location("predict_demo_times", demo_path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    churn = demo.ChurnModel()
    batch = demo.make_frame(300, seed=2)
    with profiling(engine=engine) as session:
        churn.predict(batch)
    _check_tree(session)
    text = session.format_tree()
    # The text says the same: each line's time is at least its children's.
    _check_text(text)


def _check_text(text: str) -> None:
    """Each line's time is at least the sum of the lines right under it, to
    the rounding of the printed figures."""
    rows = _parse(text)
    for i, (indent, ns, err) in enumerate(rows):
        total, slack = 0.0, err
        for child_indent, child_ns, child_err in rows[i + 1 :]:
            if child_indent <= indent:
                break
            if child_indent == indent + 1:
                total += child_ns
                slack += child_err
        assert total <= ns + slack, (text.splitlines()[i], total, ns)


def _parse(text: str):
    """(indent, ns, rounding error in ns) per node line of a print_tree text."""
    import re

    units = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
    out = []
    for line in text.splitlines():
        m = re.match(r"^( *)(.+?): ([0-9]+)(?:\.([0-9]+))?(ms|us|ns|s)\b", line)
        if m and not line.lstrip().startswith(("in:", "out:")):
            unit = units[m.group(5)]
            decimals = len(m.group(4) or "")
            value = float(m.group(3) + "." + (m.group(4) or "0")) * unit
            out.append((len(m.group(1)) // 2, value, 0.5 * unit / 10**decimals))
    return out
