"""Busy generators (docs/capture.md, "Busy generators"): a generator resumed
20,000 times straight from its consumer is stored as a bounded number of
segments, with its resumes, running time and wall time exact."""

from __future__ import annotations

import json

import pytest
from _helpers import check_times, shape, walk

from mlflow_profiler import profiling

N = 20000


def busy(n):
    return sum(i * i for i in range(n))


def predict(n):
    return busy(n)


CASES = [(2, False), (-1, False), (-1, True)]


def _capture(engine, depth, c_calls, n=N, **kw):
    with profiling(depth=depth, capture_c_calls=c_calls, engine=engine, **kw) as session:
        total = predict(n)
    assert total == sum(i * i for i in range(n))
    return session


def _generator(session):
    """The generator's span index, its document row and its segments."""
    doc = json.loads(session.to_json())
    names = [s.label for s in session.spans]
    (g,) = [i for i, name in enumerate(names) if name.endswith("<genexpr>")]
    span = dict(zip(doc["span_fields"], doc["spans"][g]))
    fields = doc["segment_fields"]
    segments = [dict(zip(fields, row)) for row in doc["segments"] if row[0] == g]
    return g, span, segments, doc


@pytest.mark.parametrize("depth,c_calls", CASES)
def test_a_busy_generator_stores_at_most_100_segments(engine, depth, c_calls):
    session = _capture(engine, depth, c_calls)
    g, span, segments, doc = _generator(session)
    assert "generator" in session.spans[g].flags
    # 20,000 values: started once, resumed 20,000 times (the last resume ends it).
    assert span["resumes"] == N
    assert 1 <= len(segments) <= 100
    # Every resume is in a segment: folded ones counted, the others start one.
    assert sum(s["resumes"] for s in segments) + len(segments) - 1 == N
    # The segments cover the span's running time exactly, its pauses inside them.
    wall = span["end_ns"] - span["start_ns"]
    running = sum(s["end_ns"] - s["start_ns"] - s["paused_ns"] for s in segments)
    assert running == span["active_ns"]
    assert 0 < span["active_ns"] <= wall
    assert segments[0]["start_ns"] == span["start_ns"] and segments[-1]["end_ns"] == span["end_ns"]
    # The tree shows its running time, and the times add up.
    (node,) = [n for n in walk(session.to_tree()) if n["label"].endswith("<genexpr>")]
    assert node["duration_ns"] == span["active_ns"] and node["wall_ns"] == wall
    check_times(session)


@pytest.mark.parametrize("depth,c_calls", CASES)
def test_the_document_stays_flat_in_the_resumes(engine, depth, c_calls):
    small = _capture(engine, depth, c_calls, n=200)
    large = _capture(engine, depth, c_calls)
    # The same spans; 100 times the resumes adds only the digits of the figures.
    assert shape(small) == shape(large)
    assert len(large.to_json()) - len(small.to_json()) < 200
    assert len(large.to_json()) < 20000
    assert large.statistics()["events_captured"] == small.statistics()["events_captured"]


def _path(session):
    g = _generator(session)[0]
    out = []
    while g is not None:
        out.append(session.spans[g].label)
        g = session.spans[g].parent_index
    return out


@pytest.mark.parametrize("depth,c_calls", CASES)
def test_the_engines_agree_on_a_busy_generator(depth, c_calls):
    native = _capture("native", depth, c_calls)
    reference = _capture("reference", depth, c_calls)
    # The path to the generator (3.12+ records `range(n)`, a type's call, as
    # a C call in one engine only: not this test's matter).
    assert _path(native) == _path(reference)
    _, n_span, n_segments, _ = _generator(native)
    _, r_span, r_segments, _ = _generator(reference)
    assert n_span["resumes"] == r_span["resumes"] == N
    assert [s["resumes"] for s in n_segments] == [s["resumes"] for s in r_segments]


def test_the_consumers_cpu_stays_out_of_the_generators(engine):
    # Up to three captures: a run preempted inside the generator's resumes
    # (CI, 3.13: its wall 128 ms, the consumer 8% of it) leaves too little of
    # the consumer's share for this test to tell the two apart.
    for _ in range(3):
        session = _capture(engine, 2, False, cpu_time=True)
        g, span, _, _ = _generator(session)
        wall = span["end_ns"] - span["start_ns"]
        paused = wall - span["active_ns"]
        if paused > 0.1 * wall:
            break
    parent = session.spans[g].parent_index
    gen_cpu, busy_cpu = session.spans[g].cpu_ns, session.spans[parent].cpu_ns
    assert gen_cpu is not None and busy_cpu is not None
    # The CPU clock counts about the running time (each reading sits after
    # the hook's work that follows its timestamp: a yield's is the longer,
    # some 40 ns a resume); the consumer's work between resumes (sum's
    # additions, each next()) is its parent's, not the generator's: counted
    # in, the generator's CPU would reach its wall time.
    assert paused > 0.1 * wall, "the consumer's share is what this test tells apart"
    assert gen_cpu < span["active_ns"] + paused / 2
    assert gen_cpu < busy_cpu


def test_a_store_keeps_the_folded_segments(tmp_path, engine):
    from mlflow_profiler.store import open_store

    session = _capture(engine, 2, False)
    with open_store(tmp_path / "profiles.db") as store:
        back = store.load(store.add(session))
        assert back.to_tree() == session.to_tree()
        _, span, segments, _ = _generator(back)
        _, want_span, want_segments, _ = _generator(session)
    assert segments == want_segments and span["resumes"] == N
    assert span["active_ns"] == want_span["active_ns"]
