"""Capture once, render shallower (issue 42, item 5): an MLflow pyfunc model
captured at depths 2, 3, 4, 5, 6, 8 and -1 reads the same at every render
depth d up to the capture's: MLflow's grouping, the text tree, to_tree(),
the JSON document's spans, the report's tree, the run metrics, `top` and
the MLflow trace's spans. At depth 1 MLflow's work is one node.

What is compared: names, structure (parents and depths), flags and counts.
Times are not: each capture is its own predict call. Each view's times are
checked to add up (a node's time is at least its children's)."""

from __future__ import annotations

import json
import re
import threading
import warnings

import numpy as np
import pandas as pd
import pytest
from _helpers import assert_times_add_up, require_mlflow, tree_lines, walk

mlflow = require_mlflow()

with warnings.catch_warnings():
    # MLflow's type-hint advice on import: not about the profiler.
    warnings.simplefilter("ignore")
    import mlflow.pyfunc  # noqa: E402

from mlflow_profiler import _mlflow_trace, analysis, profiling  # noqa: E402
from mlflow_profiler.mlflow_sink import (  # noqa: E402
    METRIC_STATS,
    metric_bases,
    profile_path_figures,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

CAPTURES = (2, 3, 4, 5, 6, 8, -1)
VIEWS = (0, 1, 2, 3, 4)


# The model's steps: user code at depths 1 to 8 below its predict, and
# pandas calls at several of them.
def clean(df):
    return df.fillna(0.0)


def level7(values):
    return float(np.sum(values))


def level6(values):
    return level7(values) + 1.0


def level5(values):
    return level6(values) * 0.5


def level4(values):
    return level5(values) - 1.0


def level3(df):
    return level4(df["amount"].to_numpy())


def level2(df):
    return level3(df) + level3(df.head(10))


def features(df):
    out = df.copy()
    out["ratio"] = out["amount"] / (out["visits"] + 1.0)
    return out


def model_class():
    """Defined in a function, so that cloudpickle saves the class by value,
    as it does for a class written in a notebook."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        class Scorer(mlflow.pyfunc.PythonModel):
            def predict(self, context, model_input, params=None):
                df = clean(model_input)
                feats = features(df)
                total = level2(feats)
                return pd.DataFrame({"score": feats["ratio"] * 0.0 + total})

    return Scorer


def frame(n):
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {
            "amount": rng.gamma(2.0, 50.0, n),
            "visits": rng.integers(0, 30, n).astype("int64"),
            "merchant": rng.choice(["a", "b", "c"], n),
        }
    )


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """{capture depth: the session of one predict captured at it}."""
    df = frame(40)
    model = model_class()()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A signature: MLflow checks the input frame against it (schema
        # enforcement, several levels of MLflow and pandas calls).
        signature = mlflow.models.infer_signature(df, model.predict(None, df))
        path = str(tmp_path_factory.mktemp("shallower") / "model")
        mlflow.pyfunc.save_model(
            path, python_model=model, signature=signature, pip_requirements=["pandas"]
        )
        loaded = mlflow.pyfunc.load_model(path)
        for _ in range(3):  # first calls import and fill caches: other code paths
            loaded.predict(df)
        out = {}
        for depth in CAPTURES:
            with profiling(depth=depth) as session:
                loaded.predict(df)
            out[depth] = session
    return out


def views(sessions):
    """(d, [captures at depth >= d]) for each render depth."""
    return [(d, [c for c in CAPTURES if c < 0 or c >= d]) for d in VIEWS]


def _tree(nodes):
    return tuple((n["label"], tuple(sorted(n["flags"])), _tree(n["children"])) for n in nodes)


_TIME = re.compile(r"\d+(?:\.\d+)?(?:ns|us|ms|s)\b")


def _text(session, d):
    # Times out (and whether a span waited over 1% of it: a matter of
    # timing), names and indentation kept.
    return [
        _TIME.sub("T", line).replace(", waiting T", "")
        for line in tree_lines(session.format_tree(depth=d))
    ]


def _doc_spans(doc):
    """(parent, name, depth, flags) of each span of a profile document."""
    strings = doc["strings"]
    fn_name = doc["function_fields"].index("name")
    names = [strings[f[fn_name]] for f in doc["functions"]]
    fields = doc["span_fields"]
    out = []
    for row in doc["spans"]:
        r = dict(zip(fields, row))
        name = strings[r["label"]] if r["label"] else names[r["function"]]
        out.append((r["parent"], name, r["depth"], r["flags"]))
    return out


def _json_spans(session, d):
    return _doc_spans(json.loads(session.to_json(depth=d)))


def _report_tree(session, d):
    """The report's tree at depth d: the whole document (what save("x.html")
    embeds), spans shown while their depth counted along the parent chain
    is at most d, as report.js's depth select does (no C calls here); each
    as its path of names."""
    spans = _doc_spans(json.loads(session.to_json()))
    depth, path, shown = [], [], []
    for parent, name, _, flags in spans:
        depth.append(0 if parent < 0 else depth[parent] + 1)
        path.append((name,) if parent < 0 else path[parent] + (name,))
        if depth[-1] <= d:
            shown.append((path[-1], flags))
    return shown


def _metrics(session, d):
    figures = profile_path_figures(session, d)
    for fig in figures.values():
        assert 0 <= fig["self_ms"] <= fig["running_ms"] + 1e-9, fig
        assert fig["running_ms"] + fig["waiting_ms"] == pytest.approx(fig["wall_ms"], abs=1e-9), fig
    names = metric_bases(list(figures), "profile", METRIC_STATS)
    return sorted((names[p], fig["calls"]) for p, fig in figures.items())


def _top(session, d):
    return sorted((tuple(r.path), r.count) for r in analysis.top([session], depth=d).rows)


def _trace_spans(session, d):
    """The MLflow trace's spans down to depth d (log_profile_trace: every
    span outside MLflow's groups, the shallowest levels first) and the calls
    each group holds, names only (the attribute lists the 8 longest: which
    ones is a matter of time, not depth)."""
    spans = session.spans
    inside = _mlflow_trace._inside_groups(spans)
    kept = [i for i in _mlflow_trace._kept(spans, 2000) if i not in inside and spans[i].depth <= d]
    groups = _mlflow_trace._group_calls(spans, inside, top=len(spans))
    listed = {i: sorted(c.rsplit(" ", 1)[0] for c in groups.get(i, [])) for i in kept}
    return [(spans[i].label, spans[i].depth, listed[i]) for i in kept]


VIEWERS = {
    "to_tree": lambda s, d: _tree(s.to_tree(d)),
    "text": _text,
    "json": _json_spans,
    "report": _report_tree,
    "metrics": _metrics,
    "top": _top,
    "trace": _trace_spans,
}


@pytest.mark.parametrize("viewer", list(VIEWERS))
def test_every_view_at_depth_d_is_the_same_for_every_capture_from_d(sessions, viewer):
    render = VIEWERS[viewer]
    for d, captures in views(sessions):
        if viewer == "trace" and d == 0:
            continue
        seen = {c: render(sessions[c], d) for c in captures}
        first = seen[captures[0]]
        assert first, (viewer, d)
        for c in captures[1:]:
            assert (
                seen[c] == first
            ), f"{viewer} at depth {d}: capture {c} differs from capture {captures[0]}"


def test_at_depth_1_mlflow_is_one_node_for_every_capture(sessions):
    for c, session in sessions.items():
        (root,) = session.to_tree(1)
        assert root["label"].startswith("predict [pyfunc ") and root["label"].endswith(
            "Scorer]"
        ), root["label"]
        children = root["children"]
        mlflow_nodes = [n for n in children if n["module"].startswith("mlflow")]
        assert len(mlflow_nodes) == 1, (c, [n["label"] for n in children])
        (group,) = mlflow_nodes
        assert (
            group["label"].startswith("[mlflow: input checks") and "group" in group["flags"]
        ), group
        # The model's steps beside it (and the pandas calls its predict makes).
        steps = [n["label"] for n in children if n["module"] == clean.__module__]
        assert steps == ["clean", "features", "level2"], c
        for view in (1, 2, 3):
            if c < 0 or view <= c:
                for node in walk(session.to_tree(view)):
                    assert_times_add_up(node)


def test_the_user_steps_are_captured_down_to_the_capture_depth(sessions):
    # The captures differ below: the deepest step is at depth 7 under the
    # root (level2 at 1 ... level7 at 6, np.sum's frames below it).
    deepest = {c: max(n["depth"] for n in walk(s.to_tree())) for c, s in sessions.items()}
    assert deepest[2] <= 3 and deepest[8] >= 8 and deepest[-1] >= 8, deepest
    labels = {n["label"] for n in walk(sessions[-1].to_tree())}
    assert {"level2", "level3", "level4", "level5", "level6", "level7"} <= labels


# A thread bound by all_threads gets the whole ceiling for its own frames
# (docs/capture.md), so its spans sit deeper than the capture depth; a view
# at depth d cuts them at d, for d equal to the capture depth too.
def _thread_leaf():
    return sum(range(100))


def _thread_c():
    return _thread_leaf()


def _thread_b():
    return _thread_c()


def _thread_a():
    return _thread_b()


def _start_thread():
    t = threading.Thread(target=_thread_a)
    t.start()
    t.join()


def test_a_threads_spans_are_cut_at_the_view_depth_whatever_the_capture_depth(engine):
    captured = {}
    for depth in (1, 2, 3, -1):
        with profiling(depth=depth, all_threads=True, engine=engine) as session:
            _start_thread()
        captured[depth] = session
    # The capture at depth 1 holds the thread's frames below depth 1.
    assert max(n["depth"] for n in walk(captured[1].to_tree())) >= 3
    for d in (1, 2):
        shapes = {c: _tree(s.to_tree(d)) for c, s in captured.items() if c < 0 or c >= d}
        texts = {c: _text(s, d) for c, s in captured.items() if c < 0 or c >= d}
        first = min(c for c in shapes if c >= 0)
        for c in shapes:
            assert shapes[c] == shapes[first], (d, c)
            assert texts[c] == texts[first], (d, c)
        assert max(n["depth"] for n in walk(captured[d].to_tree(d))) == d
