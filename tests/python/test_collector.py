"""ProfileCollector: statistics per call path over real sessions, checked
against the times of the sessions' own spans."""

from __future__ import annotations

import gc
import logging
import math
import os
import random
import threading
import time
import weakref

import pytest
from _helpers import qn, require_mlflow

import mlflow_profiler
from mlflow_profiler import ProfileCollector, ProfileSession, profiling

QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
ACCURACY = 0.01  # the sketch's stated relative accuracy (docs/collector.md)


# No comprehensions: they are frames of their own before 3.12 and inlined after.
def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total


def forward(n):
    return spin(n)


def encode(n):
    return forward(n)


def decode(n):
    forward(n)
    return forward(n // 2)


def preprocess(n):
    return spin(n)


def predict(n):
    preprocess(n)
    encode(n)
    decode(n)
    return n


def produce():
    yield 1
    yield 2


def predict_leaving_a_generator():
    g = produce()
    next(g)
    return g


def spans_by_path(sessions):
    """What a user can measure from the sessions themselves: per call path,
    the wall, self and waiting times (ns) of the complete calls, and the
    sessions it appeared in. Self = running time (wall less waiting) minus
    the same-lane children's, at least 0."""
    out = {}
    for index, session in enumerate(sessions):
        # Every span: a depth past the capture's also opens MLflow's grouped
        # calls below it (the collector counts them all).
        stack = [(n, (n["label"],)) for n in session.to_tree(depth=1_000)]
        while stack:
            n, path = stack.pop()
            entry = out.setdefault(
                "/".join(path),
                {"wall": [], "self": [], "waiting": [], "sessions": set(), "incomplete": 0},
            )
            entry["sessions"].add(index)
            children = n["children"]
            if "open_at_end" in n["flags"] or "suspended_at_end" in n["flags"]:
                entry["incomplete"] += 1
            else:
                same_lane = [
                    c
                    for c in children
                    if c["thread_id"] == n["thread_id"] and c["task"] == n["task"]
                ]
                entry["wall"].append(n["wall_ns"])
                # to_tree's waiting_ns is of the time shown (a generator's running
                # segments); the span's is that and its suspended time.
                running = lambda x: x["active_ns"] - x["waiting_ns"]  # noqa: E731
                entry["self"].append(max(0, running(n) - sum(running(c) for c in same_lane)))
                entry["waiting"].append(n["wall_ns"] - n["active_ns"] + n["waiting_ns"])
            for c in children:
                stack.append((c, path + (c["label"],)))
    return out


def check_against_spans(summary, sessions):
    """Counts, sessions, min, max, mean and total exactly; quantiles within the
    stated accuracy of the sample of rank floor(q*(n-1))."""
    expected = spans_by_path(sessions)
    assert set(summary) == set(expected)
    for key, exp in expected.items():
        got = summary[key]
        assert got["path"] == key.split("/")
        assert got["depth"] == len(got["path"]) - 1
        assert got["count"] == len(exp["wall"])
        assert got["sessions"] == len(exp["sessions"])
        assert got["incomplete"] == exp["incomplete"]
        for prefix, values in (
            ("", exp["wall"]),
            ("self_", exp["self"]),
            ("waiting_", exp["waiting"]),
        ):
            values = sorted(values)
            assert got[prefix + "total_ms"] == pytest.approx(sum(values) / 1e6, rel=1e-12)
            if not values:
                assert got[prefix + "min_ms"] is None and got[prefix + "p50_ms"] is None
                continue
            assert got[prefix + "min_ms"] == pytest.approx(values[0] / 1e6, rel=1e-12)
            assert got[prefix + "max_ms"] == pytest.approx(values[-1] / 1e6, rel=1e-12)
            assert got[prefix + "mean_ms"] == pytest.approx(
                sum(values) / len(values) / 1e6, rel=1e-12
            )
            for name, q in QUANTILES.items():
                exact = values[math.floor(q * (len(values) - 1))] / 1e6
                assert got[f"{prefix}{name}_ms"] == pytest.approx(exact, rel=ACCURACY + 1e-9), (
                    key,
                    prefix,
                    name,
                )


def test_summary_matches_the_sessions_spans(engine):
    rng = random.Random(4)
    collector = ProfileCollector()
    sessions = []
    for _ in range(60):
        n = rng.randrange(50, 3000)
        with collector.session(depth=-1, engine=engine) as session:
            predict(n)
        sessions.append(session)
    summary = collector.summary()
    check_against_spans(summary, sessions)
    assert summary["predict"]["count"] == 60
    assert summary["predict"]["sessions"] == 60
    # Times are spread enough that the quantiles differ: a check with teeth.
    assert summary["predict"]["p50_ms"] < summary["predict"]["p99_ms"]
    assert collector.statistics()["sessions"] == 60


def test_repeated_names_under_different_parents_stay_apart(engine):
    collector = ProfileCollector()
    for _ in range(5):
        with collector.session(depth=2, engine=engine):
            predict(100)
    s = collector.summary()
    assert list(s) == [
        "predict",
        "predict/preprocess",
        "predict/preprocess/spin",
        "predict/encode",
        "predict/encode/forward",
        "predict/decode",
        "predict/decode/forward",
    ]
    assert s["predict/encode/forward"]["count"] == 5
    # Two calls of one path in a session: two samples, one session.
    assert s["predict/decode/forward"]["count"] == 10
    assert s["predict/decode/forward"]["sessions"] == 5
    assert s["predict/decode/forward"]["path"] == ["predict", "decode", "forward"]
    assert s["predict/decode/forward"]["depth"] == 2


def test_self_time_is_what_the_children_leave(engine):
    collector = ProfileCollector()
    sessions = []
    for _ in range(10):
        with collector.session(depth=1, engine=engine) as session:
            predict(2000)
        sessions.append(session)
    s = collector.summary()
    for entry in s.values():
        assert entry["self_total_ms"] <= entry["total_ms"]
    parent, children = s["predict"], [s[k] for k in s if k.startswith("predict/")]
    # Self is running time: the wall less the waits, less the children's running time.
    assert parent["self_total_ms"] == pytest.approx(
        parent["total_ms"]
        - parent["waiting_total_ms"]
        - sum(c["total_ms"] - c["waiting_total_ms"] for c in children),
        rel=1e-9,
        abs=1e-6,
    )
    # At depth 1 the depth-1 spans have no children here: self == running
    # time, and the time of what they call (spin, forward) stays in them.
    for c in children:
        assert c["self_total_ms"] == pytest.approx(
            c["total_ms"] - c["waiting_total_ms"], rel=1e-9, abs=1e-6
        )
    check_against_spans(s, sessions)


def sleeps_10ms():
    time.sleep(0.010)


def sleeps_20ms_then_calls():
    time.sleep(0.020)
    sleeps_10ms()


def test_self_time_in_real_time(engine):
    collector = ProfileCollector()
    for _ in range(3):
        with collector.session(depth=1, engine=engine):
            sleeps_20ms_then_calls()
    s = collector.summary()
    parent, child = s["sleeps_20ms_then_calls"], s["sleeps_20ms_then_calls/sleeps_10ms"]
    assert parent["min_ms"] >= 30
    assert child["min_ms"] >= 10
    # A sleep is waiting, not self time (issue 42): the parent waited its own
    # 20 ms and the child's 10 (a wait is placed within 50 us of where it was).
    assert parent["waiting_min_ms"] >= 30 - 0.1 and child["waiting_min_ms"] >= 10 - 0.1
    assert parent["self_max_ms"] < 5 and child["self_max_ms"] < 5
    # Self and waiting split the wall of a call with nothing under it.
    assert child["self_total_ms"] + child["waiting_total_ms"] == pytest.approx(
        child["total_ms"], rel=1e-9
    )


def test_depth_cut_when_adding_and_when_reading(engine):
    collector = ProfileCollector()
    with profiling(depth=-1, engine=engine) as session:
        predict(500)
    assert collector.add(session, depth=0) is True
    s = collector.summary()
    assert list(s) == ["predict"]
    assert s["predict"]["self_total_ms"] == pytest.approx(
        s["predict"]["total_ms"] - s["predict"]["waiting_total_ms"], rel=1e-9, abs=1e-6
    )

    deep = ProfileCollector()
    deep.add(session)
    assert "predict/decode/forward/spin" in deep.summary()
    assert set(deep.summary(depth=1)) == {
        "predict",
        "predict/preprocess",
        "predict/encode",
        "predict/decode",
    }
    assert list(deep.summary(depth=0)) == ["predict"]
    # Reading shallower leaves the self times as they were added.
    assert deep.summary(depth=0)["predict"] == deep.summary()["predict"]
    with pytest.raises(ValueError, match="depth"):
        deep.summary(depth=-2)


def test_spans_open_at_the_end_are_incomplete_not_samples(engine):
    collector = ProfileCollector()
    for _ in range(3):
        with collector.session(depth=-1, engine=engine) as session:
            g = predict_leaving_a_generator()
        g.close()
    s = collector.summary()
    produce_path = f"{qn('predict_leaving_a_generator')}/produce"
    assert s[produce_path]["incomplete"] == 3
    assert s[produce_path]["count"] == 0
    assert s[produce_path]["sessions"] == 3
    assert s[produce_path]["p50_ms"] is None and s[produce_path]["self_mean_ms"] is None
    assert s[produce_path]["total_ms"] == 0.0
    assert s[qn("predict_leaving_a_generator")]["count"] == 3
    fresh = ProfileCollector()
    fresh.add(session)
    check_against_spans(fresh.summary(), [session])


def test_many_threads_at_once(engine):
    collector = ProfileCollector()
    errors = []
    reads = []
    start = threading.Barrier(9)

    def worker():
        try:
            start.wait()
            for _ in range(200):
                with collector.session(depth=2, engine=engine):
                    predict(20)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def reader():
        start.wait()
        while any(t.is_alive() for t in threads):
            reads.append(len(collector.summary()))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    r = threading.Thread(target=reader)
    for t in threads:
        t.start()
    r.start()
    for t in threads:
        t.join()
    r.join()
    assert errors == []
    assert reads, "summary() ran while sessions were being added"
    s = collector.summary()
    assert collector.statistics()["sessions"] == 1600
    assert s["predict"]["count"] == 1600 and s["predict"]["sessions"] == 1600
    assert s["predict/decode/forward"]["count"] == 3200
    assert s["predict/preprocess/spin"]["count"] == 1600
    assert s["predict/encode/forward"]["sessions"] == 1600


def _in_a_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_no_reference_to_the_session_is_kept(engine):
    collector = ProfileCollector()

    def collected():
        with collector.session(depth=2, engine=engine) as session:
            predict(10)
        return weakref.ref(session), weakref.ref(session._built())

    def plain():
        with profiling(depth=2, engine=engine) as session:
            predict(10)
        assert collector.add(session)
        return weakref.ref(session)

    # The reference engine caches the last session of a thread in its
    # thread state (_reference.py, _ThreadState.sess) until the thread's next
    # session: run it in a thread that ends, so only the collector could keep it.
    run = (lambda fn: fn()) if engine == "native" else _in_a_thread
    ref, profile_ref = run(collected)
    gc.collect()
    assert ref() is None
    assert profile_ref() is None
    ref = run(plain)
    gc.collect()
    assert ref() is None
    assert collector.summary()["predict"]["count"] == 2


def test_the_session_is_an_ordinary_session(engine, capsys):
    collector = ProfileCollector()
    with collector.session(depth=1, engine=engine, capture_io=True) as session:
        assert mlflow_profiler.current_session() is session
        predict(10)
    assert isinstance(session, ProfileSession)
    assert session.state == "finalized"
    session.print_tree()
    assert "preprocess" in capsys.readouterr().out
    # Ending it again (deactivate is idempotent) does not add it twice.
    session.deactivate()
    assert collector.statistics()["sessions"] == 1
    with pytest.raises(TypeError):
        collector.session(depth=2, not_an_option=True)


def test_a_raising_model_is_still_a_sample_and_the_error_is_the_users(engine):
    collector = ProfileCollector()

    def failing():
        preprocess(10)
        raise KeyError("column")

    with pytest.raises(KeyError, match="column"):
        with collector.session(depth=1, engine=engine):
            failing()
    s = collector.summary()
    assert (
        s[qn("test_a_raising_model_is_still_a_sample_and_the_error_is_the_users.<locals>.failing")][
            "count"
        ]
        == 1
    )


def test_add_refuses_quietly_what_it_cannot_add(engine, caplog):
    from mlflow_profiler import _log

    _log._seen.discard("collector:unfinished")  # log_once: make this test see its own line
    collector = ProfileCollector()
    unfinished = profiling(depth=1, engine=engine)
    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        assert collector.add(unfinished) is False
    assert collector.statistics()["sessions"] == 0
    assert [r.getMessage() for r in caplog.records if "did not add" in r.getMessage()]
    with pytest.raises(TypeError, match="ProfileSession"):
        collector.add("not a session")
    with pytest.raises(ValueError, match="depth"):
        collector.add(unfinished, depth=-3)


def test_loaded_sessions_can_be_added(engine, tmp_path):
    with profiling(depth=2, engine=engine) as session:
        predict(100)
    path = session.save(tmp_path / "p.json")
    collector = ProfileCollector()
    collector.add(mlflow_profiler.load(path))
    collector.add(session)
    s = collector.summary()
    assert s["predict"]["count"] == 2
    assert s["predict"]["min_ms"] == s["predict"]["max_ms"]  # the same capture twice


def test_path_cap_and_dropped_count(engine):
    collector = ProfileCollector(max_paths=3)
    for _ in range(4):
        with collector.session(depth=2, engine=engine):
            predict(10)
    s = collector.summary()
    assert list(s) == ["predict", "predict/preprocess", "predict/preprocess/spin"]
    stats = collector.statistics()
    assert stats["paths"] == 3 and stats["max_paths"] == 3 and collector.max_paths == 3
    # Per session, 5 calls are on untracked paths: encode, its forward, decode
    # and its two forwards.
    assert stats["dropped_paths"] == 4 * 5
    collector.reset()
    assert collector.summary() == {}
    assert collector.statistics()["sessions"] == 0
    for bad, exc in ((0, ValueError), (-1, ValueError), ("10", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="max_paths"):
            ProfileCollector(max_paths=bad)


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_bounded_over_100k_sessions(engine):
    # Real captures of different sizes, each added many times through the
    # C++ object (the collector's add path without the capture): 100k sessions.
    rng = random.Random(7)
    profiles = []
    for _ in range(25):
        n = rng.randrange(10, 5000)
        with profiling(depth=-1, engine=engine) as session:
            predict(n)
        profiles.append(session._built())
    collector = ProfileCollector()
    stats = collector._stats
    for p in profiles:
        stats.add(p)
    after_one_round = collector.statistics()["memory_bytes"]
    rss_before = _rss_bytes()
    for i in range(100_000 - len(profiles)):
        stats.add(profiles[i % len(profiles)])
    rss_after = _rss_bytes()
    st = collector.statistics()
    assert st["sessions"] == 100_000
    # Every value range was already seen: not a byte more.
    assert st["memory_bytes"] == after_one_round
    # Per path at most a record and two sketches of 2185 counters.
    assert st["memory_bytes"] <= st["paths"] * (2 * 2185 * 8 + 512) + 64 * 1024
    assert rss_after - rss_before < 4 * 1024 * 1024
    s = collector.summary()
    assert s["predict"]["count"] == 100_000
    assert s["predict/decode/forward"]["count"] == 200_000
    walls = sorted(p.to_tree()[0]["duration_ns"] for p in profiles)
    # 4000 adds of each profile: the median of 100k samples is the median profile's.
    assert s["predict"]["p50_ms"] == pytest.approx(walls[(len(walls) - 1) // 2] / 1e6, rel=ACCURACY)
    assert s["predict"]["min_ms"] == walls[0] / 1e6 and s["predict"]["max_ms"] == walls[-1] / 1e6


def scale_frame(df):
    return df * 2


def _frame_model_class(mlflow):
    """A PythonModel doing pandas preprocessing, untyped as many users' are."""

    class FrameModel(mlflow.pyfunc.PythonModel):
        def preprocess(self, df):
            return scale_frame(df)

        def predict(self, context, model_input, params=None):
            return self.preprocess(model_input).sum(axis=1)

    return FrameModel


# MLflow warns that an untyped predict() gets no input validation; the model
# is untyped on purpose, as many users' are. (Its other such warning, "Add
# type hints ...", is emitted under MLflow's own "once" filter: shown, not raised.)
@pytest.mark.filterwarnings("ignore:.*Any type hint is inferred as AnyType:UserWarning")
def test_a_real_mlflow_model(engine, tmp_path):
    """What the issue's user does: a PythonModel saved with MLflow, loaded back
    with mlflow.pyfunc.load_model, each predict() under a collector session."""
    mlflow = require_mlflow()
    import mlflow.pyfunc
    import pandas as pd

    FrameModel = _frame_model_class(mlflow)

    # pip_requirements given: no inference of the environment (seconds of pip).
    mlflow.pyfunc.save_model(
        str(tmp_path / "model"), python_model=FrameModel(), pip_requirements=["pandas"]
    )
    model = mlflow.pyfunc.load_model(str(tmp_path / "model"))
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]})
    collector = ProfileCollector()
    sessions = []
    for _ in range(10):
        # Deep enough for MLflow's wrappers between PyFuncModel.predict and ours.
        with collector.session(depth=6, engine=engine) as session:
            out = model.predict(df)
        sessions.append(session)
    assert list(out) == [10.0, 14.0, 18.0]
    s = collector.summary()
    check_against_spans(s, sessions)
    (root,) = [k for k in s if s[k]["depth"] == 0]
    assert s[root]["count"] == 10 and s[root]["sessions"] == 10
    # The model's predict is folded into PyFuncModel.predict, which is named
    # after it: the model's steps are the root's children.
    assert s[root]["path"] == ["predict [pyfunc _frame_model_class.<locals>.FrameModel]"], s[root][
        "path"
    ]
    assert (
        s[f"{root}/{qn('_frame_model_class.<locals>.FrameModel.preprocess')}/scale_frame"]["count"]
        == 10
    )
