"""The tree of a simple model and every view of it."""

from __future__ import annotations

import json
import re

import pytest
from _helpers import check_times, qn, run_engines, shape, skipped_seen, tree_lines, walk

from mlflow_profiler import ProfileSession, current_session, profiling


# No comprehensions: they are frames of their own before 3.12 and inlined after.
def scale(rows):
    out = []
    for r in rows:
        out.append(r * 2)
    return out


def featurize(rows):
    out = []
    for r in rows:
        out.append(r + 1)
    return out


def matmul(rows):
    return sum(rows)


class Model:
    def preprocess(self, rows):
        return featurize(scale(rows))

    def infer(self, rows):
        return matmul(rows)

    def postprocess(self, y):
        return {"y": y}

    def predict(self, rows):
        return self.postprocess(self.infer(self.preprocess(rows)))


ROWS = [1, 2, 3]


def full_shape():
    return (
        (
            qn("Model.predict"),
            (
                (qn("Model.preprocess"), (("scale", ()), ("featurize", ()))),
                (qn("Model.infer"), (("matmul", ()),)),
                (qn("Model.postprocess"), ()),
            ),
        ),
    )


def capture(engine, depth):
    model = Model()
    with profiling(depth=depth, engine=engine) as session:
        result = model.predict(ROWS)
    assert result == {"y": 15}
    return session


@pytest.mark.parametrize("depth", [0, 1, 2, -1])
def test_tree_of_a_simple_model(engine, depth):
    session = capture(engine, depth)
    expected = {
        0: ((qn("Model.predict"), ()),),
        1: (
            (
                qn("Model.predict"),
                (
                    (qn("Model.preprocess"), ()),
                    (qn("Model.infer"), ()),
                    (qn("Model.postprocess"), ()),
                ),
            ),
        ),
        2: full_shape(),
        -1: full_shape(),
    }[depth]
    assert shape(session) == expected
    assert session.captured_depth == depth
    assert session.state == "finalized"
    check_times(session)


def test_root_span_fields(engine):
    session = capture(engine, 2)
    (root,) = session.to_tree()
    assert root["function"] == qn("Model.predict")
    assert root["module"] == __name__
    assert root["file"] == __file__
    assert root["line"] == Model.predict.__code__.co_firstlineno
    assert root["depth"] == 0 and root["parent_index"] is None
    assert root["is_user_code"] is True
    assert root["flags"] == []
    assert root["thread_name"] == "MainThread" and root["task"] == 0
    depths = {n["label"]: n["depth"] for n in walk([root])}
    assert depths["scale"] == 2 and depths[qn("Model.infer")] == 1


def test_to_flat_paths_and_durations(engine):
    session = capture(engine, -1)
    flat = session.to_flat()
    predict, pre, infer, post = (
        qn("Model.predict"),
        qn("Model.preprocess"),
        qn("Model.infer"),
        qn("Model.postprocess"),
    )
    assert [r["call_path"] for r in flat] == [
        predict,
        f"{predict}/{pre}",
        f"{predict}/{pre}/scale",
        f"{predict}/{pre}/featurize",
        f"{predict}/{infer}",
        f"{predict}/{infer}/matmul",
        f"{predict}/{post}",
    ]
    for row in flat:
        assert row["duration_ms"] == pytest.approx(row["duration_ns"] / 1e6)
        assert row["duration_ns"] >= 0
    # pre-order: a row's parent comes before it
    for i, row in enumerate(flat):
        assert row["index"] == i
        if row["parent_index"] is not None:
            assert row["parent_index"] < i
            assert flat[row["parent_index"]]["depth"] == row["depth"] - 1
    assert [r["call_path"] for r in session.to_flat(depth=1)] == [
        predict,
        f"{predict}/{pre}",
        f"{predict}/{infer}",
        f"{predict}/{post}",
    ]


def test_to_json_document(engine):
    session = capture(engine, 2)
    doc = json.loads(session.to_json())
    meta = doc["meta"]
    assert meta["format"] == "mlflow-profiler"
    assert meta["version"] == 2
    assert meta["captured_depth"] == 2
    assert meta["view_depth"] is None
    assert meta["clock"] == "CLOCK_MONOTONIC"
    assert meta["duration_ns"] == meta["end_ns"] - meta["start_ns"] > 0
    strings = doc["strings"]
    assert strings[0] == ""
    fields = doc["span_fields"]
    spans = [dict(zip(fields, row)) for row in doc["spans"]]
    assert len(spans) == session.statistics()["span_count"] == 7
    ffields = doc["function_fields"]
    functions = [dict(zip(ffields, row)) for row in doc["functions"]]
    names = [strings[functions[s["function"]]["name"]] for s in spans]
    assert names == [
        qn("Model.predict"),
        qn("Model.preprocess"),
        "scale",
        "featurize",
        qn("Model.infer"),
        "matmul",
        qn("Model.postprocess"),
    ]
    for i, s in enumerate(spans):
        assert s["parent"] < i
        assert s["start_ns"] <= s["end_ns"]
        assert s["depth"] == (0 if s["parent"] < 0 else spans[s["parent"]]["depth"] + 1)
    assert all(f["user_code"] == 1 for f in functions)
    assert len(doc["lanes"]) == 1 and doc["lanes"][0]["thread_name"] == "MainThread"

    view = json.loads(session.to_json(depth=1))
    assert view["meta"]["view_depth"] == 1
    assert len(view["spans"]) == 4


def test_statistics(engine):
    session = capture(engine, 1)
    stats = session.statistics()
    assert stats["state"] == "finalized"
    assert stats["engine"] == ("reference" if engine == "reference" else _native_hook())
    assert stats["depth"] == 1
    assert stats["span_count"] == 4
    # 4 calls and 4 returns recorded; the 3 calls below the ceiling skipped
    assert stats["events_captured"] == 8
    assert skipped_seen(engine, 3)(stats["events_skipped"])
    assert stats["unmatched_returns"] == 0
    assert stats["dropped"] == 0
    assert stats["thread_count"] == 1
    assert list(stats["threads"]) == ["MainThread"]
    assert stats["threads"]["MainThread"]["events"] == 8
    assert stats["duration_ns"] == stats["end_ns"] - stats["start_ns"] > 0
    assert stats["failures"] == []


def _native_hook():
    import sys

    # pyext/capture/README.md: what reports frames on each version
    if sys.version_info >= (3, 12):
        return "eval_frame+sys.monitoring"
    return "eval_frame" if sys.version_info >= (3, 11) else "setprofile"


def test_statistics_while_collecting(engine):
    with profiling(engine=engine) as session:
        stats = session.statistics()
        assert current_session() is session
    assert stats == {"state": "collecting", "engine": stats["engine"], "depth": 2}
    assert current_session() is None


def test_span_records(engine):
    session = capture(engine, -1)
    spans = session.spans
    assert [s.label for s in spans] == [n["label"] for n in walk(session.to_tree())]
    root = spans[0]
    assert root.parent_index is None and root.depth == 0
    assert root.module == __name__ and root.is_user_code
    assert root.duration_ns == root.end_ns - root.start_ns
    assert root.duration_ms == pytest.approx(root.duration_ns / 1e6)
    for s in spans[1:]:
        parent = spans[s.parent_index]
        assert parent.start_ns <= s.start_ns <= s.end_ns <= parent.end_ns
        assert s.depth == parent.depth + 1
        assert s.thread_name == "MainThread"


def test_print_tree_text(engine, capsys):
    session = capture(engine, 2)
    session.print_tree()
    out = capsys.readouterr().out
    lines = tree_lines(out)
    assert [ln.split(":")[0] for ln in lines] == [
        qn("Model.predict"),
        "  " + qn("Model.preprocess"),
        "    scale",
        "    featurize",
        "  " + qn("Model.infer"),
        "    matmul",
        "  " + qn("Model.postprocess"),
    ]
    # "name: 2.14ms", and ", waiting 1.88ms" when it waited over 1% of it
    assert all(
        re.search(r": \d+\.\d\d(us|ms)(, waiting \d+\.\d\d(us|ms))?$", ln) for ln in lines
    ), lines
    assert tree_lines(session.format_tree(depth=0)) == lines[:1]


def test_empty_session(engine):
    with profiling(engine=engine) as session:
        pass
    assert session.to_tree() == []
    assert "(no spans captured)" in session.format_tree()
    assert session.statistics()["span_count"] == 0


def test_session_is_a_profile_session(engine):
    session = profiling(engine=engine)
    assert isinstance(session, ProfileSession)
    assert session.state == "idle"
    assert "idle" in repr(session)


def test_both_engines_give_the_same_tree():
    def program():
        Model().predict(ROWS)

    for depth in (0, 1, 2, -1):
        out = run_engines(program, depth=depth)
        assert shape(out["native"]) == shape(out["reference"])
        assert [r["call_path"] for r in out["native"].to_flat()] == [
            r["call_path"] for r in out["reference"].to_flat()
        ]


def test_meta_records_the_wall_clock_start(engine):
    import time

    before = time.time_ns()
    with profiling(depth=1, engine=engine) as s:
        pass
    after = time.time_ns()
    start = int(s._built().meta["start_unix_ns"])
    assert before <= start <= after


def test_a_session_maps_its_clock_within_a_fraction_of_a_microsecond():
    """Each session's anchors (a clock_gettime between two TSC reads, at its
    start and end) bound the error of every time it reports: docs/capture.md,
    "Clock". One read an anchor, unless its window is wider than usual."""
    errors = []
    for _ in range(200):
        with profiling(depth=0) as session:
            len(())
        errors.append(int(json.loads(session.to_json())["meta"]["clock_error_ns"]))
    errors.sort()
    assert 0 < errors[len(errors) // 2] <= 500, errors
    assert errors[int(len(errors) * 0.9)] <= 2_000, errors


def test_a_session_names_its_thread_as_threading_does_at_its_start(engine):
    """Each session's lanes carry the thread's name as threading knows it
    when the session starts: renamed between two sessions, the second has
    the new name; a thread threading does not know yet (started by _thread)
    is "Thread-<ident>" until threading.current_thread() makes its
    _DummyThread, and that name after."""
    import _thread
    import threading

    def leaf():
        return 1

    def name_of_a_session():
        with profiling(depth=0, engine=engine) as s:
            leaf()
        return s.spans[0].thread_name if s.spans else None

    def worker(out):
        out.append(name_of_a_session())
        threading.current_thread().name = "renamed"
        out.append(name_of_a_session())

    names: list = []
    t = threading.Thread(target=worker, args=(names,), name="first")
    t.start()
    t.join()
    assert names == ["first", "renamed"]

    foreign: list = []
    done = threading.Event()

    def bare():
        ident = _thread.get_ident()
        foreign.append(ident)
        # What threading knows of this thread before it is asked: nothing,
        # unless an ended thread of the same ident left its _DummyThread
        # (3.11 and 3.12 keep them; pthread reuses the ident): then that.
        foreign.append({t.ident: t.name for t in threading.enumerate()}.get(ident))
        foreign.append(name_of_a_session())
        threading.current_thread()  # threading makes its _DummyThread now
        foreign.append(threading.current_thread().name)
        foreign.append(name_of_a_session())
        done.set()

    _thread.start_new_thread(bare, ())
    assert done.wait(30)
    ident, known, before, dummy, after = foreign
    assert dummy.startswith("Dummy-")
    assert (before, after) == (known or f"Thread-{ident}", dummy)
