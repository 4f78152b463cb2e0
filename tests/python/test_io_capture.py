"""capture_io: arguments at call and the return value at return, summarized
(never referenced) for recorded spans within capture_io_depth; show_io."""

from __future__ import annotations

import gc
import json
import sys
import threading
import weakref

import numpy as np
import pytest
from _helpers import qn

from mlflow_profiler import IOSummary, profile_span, profiling


def postprocess(logits):
    return logits.argmax(axis=1)


def run_model(x, *, scale=1.0):
    return np.tanh(x[:, :10] * scale)


def preprocess(X):
    return np.asarray(X, dtype=np.float32) * 2


def predict(X):
    return postprocess(run_model(preprocess(X)))


class Model:
    def predict(self, X, threshold=0.5):
        return (preprocess(X).mean(axis=1) > threshold).astype(np.int64)


def by_label(session):
    return {s.label: s for s in session.spans}


def test_arguments_and_return_values_are_summarized(engine):
    X = np.ones((100, 50))
    with profiling(depth=2, capture_io=True, engine=engine) as s:
        out = predict(X)
    spans = by_label(s)
    root = spans["predict"]
    assert root.input_summary == {
        "X": IOSummary(
            type_name="numpy.ndarray",
            shape=(100, 50),
            dtype="float64",
            length=100,
            size_bytes=40000,
        )
    }
    assert root.output_summary == IOSummary(
        type_name="numpy.ndarray", shape=(100,), dtype="int64", length=100, size_bytes=800
    )
    assert out.shape == (100,)
    run = spans["run_model"]
    assert set(run.input_summary) == {"x", "scale"}  # keyword-only parameters too
    assert run.input_summary["x"].shape == (100, 50)
    assert run.input_summary["x"].dtype == "float32"
    assert run.input_summary["scale"].type_name == "float"
    assert run.input_summary["scale"].repr_short == "1.0"
    assert run.output_summary.shape == (100, 10)


def test_show_io_renders_in_and_out_lines(engine):
    X = np.ones((100, 50))
    with profiling(depth=1, capture_io=True, engine=engine) as s:
        predict(X)
    text = s.format_tree(show_io=True)
    lines = text.splitlines()
    assert lines[0].startswith("predict: ")
    assert lines[1] == "  in:  (ndarray, shape=(100, 50), dtype=float64, 39.1KB)"
    assert lines[2] == "  out: (ndarray, shape=(100,), dtype=int64, 800B)"
    assert lines[3] == ""
    assert lines[4].startswith("  preprocess: ")
    assert lines[5] == "    in:  (ndarray, shape=(100, 50), dtype=float64, 39.1KB)"
    assert lines[6] == "    out: (ndarray, shape=(100, 50), dtype=float32, 19.5KB)"
    # run_model has two parameters: each is named.
    i = next(i for i, line in enumerate(lines) if line.startswith("  run_model: "))
    assert lines[i + 1] == "    in:  x=(ndarray, shape=(100, 50), dtype=float32, 19.5KB)"
    assert lines[i + 2] == "    in:  scale=(float, 1.0)"
    assert lines[i + 3] == "    out: (ndarray, shape=(100, 10), dtype=float32, 3.9KB)"
    assert not text.endswith("\n\n")
    # The same capture without I/O lines, and print_tree prints the same text.
    assert "in:" not in s.format_tree(show_io=False)
    assert [
        line for line in text.splitlines() if line and "in:" not in line and "out:" not in line
    ] == s.format_tree(show_io=False).splitlines()


def test_print_tree_shows_io_by_default(engine, capsys):
    X = np.zeros((2, 3))
    with profiling(depth=0, capture_io=True, engine=engine) as s:
        predict(X)
    s.print_tree()
    assert "  in:  (ndarray, shape=(2, 3), dtype=float64, 48B)\n" in capsys.readouterr().out


def test_without_capture_io_nothing_is_summarized(engine):
    X = np.ones((4, 20))
    with profiling(depth=2, engine=engine) as s:
        predict(X)
    assert all(sp.input_summary is None and sp.output_summary is None for sp in s.spans)
    assert json.loads(s.to_json())["io"] == []


def test_capture_io_depth_limits_which_levels_get_io(engine):
    X = np.ones((4, 20))
    with profiling(depth=2, capture_io=True, capture_io_depth=0, engine=engine) as s:
        predict(X)
    with_io = {sp.label for sp in s.spans if sp.input_summary or sp.output_summary}
    assert with_io == {"predict"}
    assert {sp.label for sp in s.spans} == {"predict", "preprocess", "run_model", "postprocess"}
    with profiling(depth=2, capture_io=True, capture_io_depth=1, engine=engine) as s:
        predict(X)
    assert {sp.label for sp in s.spans if sp.output_summary} == {
        "predict",
        "preprocess",
        "run_model",
        "postprocess",
    }


def test_deeper_than_the_ceiling_io_depth_is_the_ceiling(engine):
    X = np.ones((4, 20))
    with profiling(depth=0, capture_io=True, capture_io_depth=5, engine=engine) as s:
        predict(X)
    assert [sp.label for sp in s.spans] == ["predict"]
    assert s.spans[0].output_summary is not None


def test_the_receiver_of_a_method_is_not_summarized(engine):
    m, X = Model(), np.ones((3, 4))
    with profiling(depth=1, capture_io=True, engine=engine) as s:
        m.predict(X, threshold=0.1)
    root = by_label(s)[qn("Model.predict")]
    assert list(root.input_summary) == ["X", "threshold"]
    assert root.output_summary.dtype == "int64"


def test_an_exception_gives_arguments_and_no_return_value(engine):
    def fails(x):
        raise ValueError("bad")

    with profiling(depth=1, capture_io=True, engine=engine) as s:
        with pytest.raises(ValueError):
            fails([1, 2, 3])
    span = by_label(s)[qn("test_an_exception_gives_arguments_and_no_return_value.<locals>.fails")]
    assert span.input_summary["x"] == IOSummary(
        type_name="list", length=3, size_bytes=span.input_summary["x"].size_bytes
    )
    assert span.output_summary is None
    assert "exception" in span.flags


def test_generator_arguments_at_first_start_and_final_return_value(engine):
    def gen(n):
        for i in range(n):
            yield i
        return "done"

    def consume():
        g = gen(3)
        total = 0
        try:
            while True:
                total += next(g)
        except StopIteration as stop:
            return total, stop.value

    with profiling(depth=2, capture_io=True, engine=engine) as s:
        assert consume() == (3, "done")
    span = next(sp for sp in s.spans if sp.function.endswith("gen"))
    assert span.input_summary == {"n": IOSummary(type_name="int", repr_short="3")}
    assert span.output_summary == IOSummary(type_name="str", length=4, repr_short="'done'")
    root = next(sp for sp in s.spans if sp.function.endswith("consume"))
    assert root.output_summary.type_name == "tuple"
    assert root.output_summary.length == 2


def test_variadic_parameters_are_summarized_as_their_tuple_and_dict(engine):
    def f(a, *rest, **options):
        return None

    with profiling(depth=1, capture_io=True, engine=engine) as s:
        f(1, 2, 3, k=4)
    span = next(sp for sp in s.spans if sp.function.split(".")[-1] == "f")
    assert span.input_summary["a"].repr_short == "1"
    assert span.input_summary["rest"].type_name == "tuple"
    assert span.input_summary["rest"].length == 2
    assert span.input_summary["options"].type_name == "dict"
    assert span.input_summary["options"].length == 1
    assert span.output_summary == IOSummary(type_name="NoneType")


def test_profile_span_io_for_python_functions_and_other_callables(engine):
    labelled = profile_span("prep")(preprocess)
    builtin = profile_span("sort")(sorted)
    X = np.ones((2, 2))
    with profiling(depth=1, capture_io=True, engine=engine) as s:
        labelled(X)
        builtin([3, 1, 2], reverse=True)
    spans = by_label(s)
    assert spans["prep"].input_summary["X"].shape == (2, 2)
    assert spans["prep"].output_summary.dtype == "float32"
    # A callable without a Python frame: positional arguments by position.
    assert spans["sort"].input_summary == {
        "args[0]": IOSummary(type_name="list", length=3, size_bytes=sys.getsizeof([3, 1, 2])),
        "reverse": IOSummary(type_name="bool", repr_short="True"),
    }
    assert spans["sort"].output_summary.length == 3


def test_a_large_array_captured_as_io_is_freed_while_the_session_lives(engine):
    """No reference to user data survives the call (issue 3, item 3)."""

    def consume(big):
        return big.sum()

    def run():
        # The array lives in this frame only: on 3.9/3.10 a Python-level
        # profile function (the reference engine) makes CPython copy the
        # caller's fast locals into f_locals, which holds them until the
        # frame ends. The native engine's refcount is also checked directly.
        big = np.ones((1000, 1000))  # 8 MB
        before = sys.getrefcount(big)
        with profiling(depth=1, capture_io=True, engine=engine) as s:
            consume(big)
        if engine == "native":
            assert sys.getrefcount(big) == before
        return s, weakref.ref(big)

    s, ref = run()
    gc.collect()
    assert ref() is None, "the profiler kept the array alive"
    # ... and the session, still alive, has its summary.
    span = next(sp for sp in s.spans if sp.function.endswith("consume"))
    assert span.input_summary["big"].size_bytes == 8_000_000
    assert s.state == "finalized"


def test_io_in_threads_under_all_threads(engine):
    results = []

    def work(chunk):
        results.append(chunk.sum())
        return chunk.shape

    chunk = np.ones((5, 5))

    def fan_out():
        t = threading.Thread(target=work, args=(chunk,))
        t.start()
        t.join()

    with profiling(depth=2, capture_io=True, all_threads=True, engine=engine) as s:
        fan_out()
    span = next(sp for sp in s.spans if sp.function.endswith("work"))
    assert span.input_summary["chunk"].shape == (5, 5)
    assert span.output_summary.type_name == "tuple"
    assert results == [25.0]


def test_io_is_in_the_json_document(engine):
    X = np.ones((10, 20))
    with profiling(depth=1, capture_io=True, engine=engine) as s:
        predict(X)
    doc = json.loads(s.to_json())
    assert doc["io_fields"] == [
        "span",
        "role",
        "name",
        "type",
        "shape",
        "dtype",
        "length",
        "size_bytes",
        "device",
        "repr",
    ]
    root = next(i for i, sp in enumerate(doc["spans"]) if sp[0] == -1)
    rows = [r for r in doc["io"] if r[0] == root]
    assert rows == [
        [root, 0, "X", "numpy.ndarray", [10, 20], "float64", 10, 1600, None, None],
        [root, 1, "", "numpy.ndarray", [10], "int64", 10, 80, None, None],
    ]
    # A view keeps the I/O of the spans it keeps, renumbered.
    view = json.loads(s.to_json(depth=0))
    assert [r[0] for r in view["io"]] == [0, 0]


def test_results_are_unchanged_and_a_failing_repr_does_not_break_the_model(engine):
    class Weird:
        def __repr__(self):
            raise RuntimeError("repr is broken")

        @property
        def shape(self):
            raise RuntimeError("shape is broken")

    def f(w):
        return w

    w = Weird()
    with profiling(depth=1, capture_io=True, engine=engine) as s:
        assert f(w) is w
    span = next(sp for sp in s.spans if sp.function.split(".")[-1] == "f")
    assert span.input_summary["w"].type_name.endswith("Weird")


def test_summarizing_an_argument_is_neither_the_spans_time_nor_its_callers(engine, with_reprs):
    import time

    class SlowRepr:  # a fresh type per run: its repr is timed anew
        def __repr__(self):
            time.sleep(0.03)
            return "SlowRepr()"

    def callee(x):
        return None

    def caller(x):
        callee(x)

    value = SlowRepr()
    with profiling(depth=1, capture_io=True, engine=engine) as s:
        caller(value)
    spans = {sp.function.split(".")[-1]: sp for sp in s.spans}
    assert spans["callee"].input_summary["x"].type_name.endswith("SlowRepr")
    # callee's argument took 30 ms to summarize: the profiler's time, in no
    # span (docs/decisions/0006-profilers-own-cost-is-cut-out.md).
    assert spans["callee"].duration_ns < 10_000_000
    assert spans["caller"].duration_ns < 10_000_000
    assert s.statistics()["profiler_overhead_ns"] >= 30_000_000


def test_a_multi_line_repr_becomes_one_line(engine, with_reprs):
    class Pretty:
        def __repr__(self):
            return "Pretty(a=1,\n       b=[1,\n          2])\t"

    def f(p):
        return None

    value = Pretty()
    with profiling(depth=0, capture_io=True, engine=engine) as s:
        f(value)
    assert s.spans[0].input_summary["p"].repr_short == "Pretty(a=1, b=[1, 2])"
    assert s.format_tree(show_io=True).splitlines()[1] == "  in:  (Pretty, Pretty(a=1, b=[1, 2]))"


class SlowToSummarize:
    """Data whose registered summarizer takes 20 ms: profiler work inside
    the session, like the first summary of a big object."""


_SUMMARY_NS: list = []  # each summary's wall time, by its own clock


def _slow_summary(obj):
    import time

    t = time.perf_counter_ns()
    time.sleep(0.02)
    _SUMMARY_NS.append(time.perf_counter_ns() - t)
    return IOSummary(type_name="SlowToSummarize")


def _nested(x):
    import time

    def leaf(v):
        time.sleep(0.001)
        return v

    def mid(v):
        return leaf(v)

    return mid(x)


def test_the_profilers_work_is_left_out_of_every_span_and_reported_once(engine):
    import time

    from mlflow_profiler import register_summarizer

    register_summarizer(SlowToSummarize, _slow_summary)
    _SUMMARY_NS.clear()
    try:
        with profiling(depth=3, capture_io=True, engine=engine) as session:
            t = time.perf_counter_ns()
            _nested(SlowToSummarize())
            outer_ns = time.perf_counter_ns() - t
    finally:
        register_summarizer(SlowToSummarize, None)
    spans = by_label(session)
    # Six summaries of 20 ms (in and out of three spans), all inside the
    # program's clock around the call: none of their time is in any span,
    # the outermost included; each span keeps its own 1 ms of sleep. (Against
    # the program's clocks, so a loaded machine's preemptions, which fall in
    # the spans and in that clock alike, do not matter.)
    assert len(_SUMMARY_NS) == 6
    names = ("_nested", qn("_nested.<locals>.mid"), qn("_nested.<locals>.leaf"))
    assert spans[names[0]].duration_ns <= outer_ns - sum(_SUMMARY_NS), (outer_ns, _SUMMARY_NS)
    for outer, inner in zip(names, names[1:]):
        assert spans[inner].duration_ns <= spans[outer].duration_ns, (outer, inner)
    assert spans[names[2]].duration_ns >= 1e6
    stats = session.statistics()
    assert stats["profiler_overhead_ns"] >= 6 * 20e6
    assert stats["duration_ns"] >= stats["profiler_overhead_ns"]  # the session's wall time keeps it
    # Said once, under the tree.
    text = session.format_tree()
    assert (
        text.count("(profiler's own work: ") == 1 and "left out of every time above" in text
    ), text
    assert "summaries took" not in text
