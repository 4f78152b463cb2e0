"""Generators: one span from first start to final return; resumes counted;
calls made by the consumer between two resumes are siblings."""

from __future__ import annotations

import sys

import pytest
from _helpers import check_times, qn, shape, walk

from mlflow_profiler import profiling


def leaf(x):
    return x + 1


def numbers(n):
    for i in range(n):
        yield leaf(i)


def consume(n):
    total = 0
    for v in numbers(n):
        total += leaf(v)
    return total


def test_generator_consumed_in_a_loop(engine):
    with profiling(depth=-1, engine=engine) as session:
        total = consume(4)
    assert total == 2 + 3 + 4 + 5
    assert shape(session) == (
        ("consume", (("numbers", (("leaf", ()),) * 4),) + (("leaf", ()),) * 4),
    )
    (root,) = session.to_tree()
    gen = root["children"][0]
    assert gen["label"] == "numbers"
    assert "generator" in gen["flags"] and "exception" not in gen["flags"]
    # 4 values: started once, resumed 4 times (the last resume ends it)
    assert _resumes(session, "numbers") == [4]
    # the consumer's calls happened while the generator was suspended
    assert gen["active_ns"] == gen["duration_ns"] < gen["wall_ns"]
    consumer_leaves = root["children"][1:]
    assert all(c["start_ns"] >= gen["start_ns"] for c in consumer_leaves)
    assert (
        consumer_leaves[-1]["end_ns"] <= gen["end_ns"]
    )  # the last value came before the final resume
    check_times(session)


def _resumes(session, label):
    return [
        s.flags.count("generator") and _span_resumes(session, i)
        for i, s in enumerate(session.spans)
        if s.label == label
    ]


def _span_resumes(session, index):
    import json

    doc = json.loads(session.to_json())
    return doc["spans"][index][doc["span_fields"].index("resumes")]


def inner_gen():
    yield leaf(1)
    yield leaf(2)
    return "done"


def outer_gen():
    result = yield from inner_gen()
    yield result


def test_yield_from(engine):
    def run():
        return list(outer_gen())

    with profiling(depth=-1, engine=engine) as session:
        assert run() == [2, 3, "done"]
    assert shape(session) == (
        (
            qn("test_yield_from.<locals>.run"),
            (("outer_gen", (("inner_gen", (("leaf", ()), ("leaf", ()))),)),),
        ),
    )
    assert _resumes(session, "outer_gen") == [3]
    assert _resumes(session, "inner_gen") == [2]
    for n in walk(session.to_tree()):
        if n["label"] in ("outer_gen", "inner_gen"):
            assert "generator" in n["flags"] and "exception" not in n["flags"]
            assert n["active_ns"] < n["wall_ns"]
    check_times(session)


def bare():
    yield 1
    yield 2
    yield 3


def guarded():
    try:
        yield 1
        yield 2
    finally:
        leaf(0)


# On 3.13+, close() of a generator resting on a `yield` with no handler
# around it finishes the generator without running its frame. 3.13 reports
# nothing, and its span stays suspended until the session ends; 3.14+'s
# sys.monitoring reports the throw and the unwind (its profile function still
# nothing), so the native engine there ends the span at the close.
def close_runs_no_code(engine):
    if sys.version_info < (3, 13):
        return False
    return not (engine == "native" and sys.version_info >= (3, 14))


def test_generator_closed_early_by_break(engine):
    def run():
        for v in bare():
            if v == 2:
                break
        leaf(9)

    with profiling(depth=-1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    assert [c["label"] for c in root["children"]] == ["bare", "leaf"]
    gen = root["children"][0]
    assert "generator" in gen["flags"]
    if close_runs_no_code(engine):
        assert "suspended_at_end" in gen["flags"]
    else:
        assert "exception" in gen["flags"]  # GeneratorExit closed it
        assert gen["end_ns"] <= root["children"][1]["start_ns"]
    check_times(session)


def _any_positive():
    return any(
        x > 0 for x in [1, 2, 3]
    )  # any() stops at the first: the generator is abandoned at a yield


def _sum_small():
    return sum(x for x in range(3))


def _deeper():
    return _sum_small()


def test_a_generator_abandoned_at_a_yield_leaves_nothing_behind(engine):
    """3.12+ closes a generator resting at a yield outside any try without
    running it: no event says it ended. Its suspended segment must not be
    taken by a later generator at the same address (the reference engine
    then nested every later step under the abandoned generator, and in an
    MLflow agent's predict_stream kept its stack in pandas' to_dict). The
    later generators run below the ceiling, where only the resume sees them."""

    def predict():
        for _ in range(50):
            _any_positive()
            _deeper()

    with profiling(depth=2, engine=engine) as session:
        predict()
    (root,) = session.to_tree()
    assert [c["label"] for c in root["children"]] == ["_any_positive", "_deeper"] * 50
    assert not root["flags"]
    # 3.9/3.10 have no co_qualname: a generator expression is named by its code's name.
    name = "_any_positive.<locals>.<genexpr>" if sys.version_info >= (3, 11) else "<genexpr>"
    for step in root["children"][::2]:
        (gen,) = step["children"]
        assert gen["label"] == name and gen["children"] == []
    check_times(session)


def test_generator_closed_explicitly(engine):
    def run():
        g = guarded()
        next(g)
        g.close()
        leaf(9)

    with profiling(depth=-1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    assert shape(session) == ((root["label"], (("guarded", (("leaf", ()),)), ("leaf", ()))),)
    gen = root["children"][0]
    assert "exception" in gen["flags"] and "generator" in gen["flags"]
    assert gen["end_ns"] <= root["children"][1]["start_ns"]
    assert _resumes(session, "guarded") == [1]  # close() resumed it to run the finally


def test_generator_thrown_into(engine):
    def run():
        g = bare()
        next(g)
        with pytest.raises(KeyError):
            g.throw(KeyError("x"))
        leaf(1)

    with profiling(depth=-1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    gen = [c for c in root["children"] if c["label"] == "bare"]
    assert len(gen) == 1
    assert "exception" in gen[0]["flags"]
    assert root["children"][-1]["label"] == "leaf"


def test_generator_yielding_none(engine):
    def pauses():
        for _ in range(3):
            yield

    def run():
        for _ in pauses():
            leaf(0)

    with profiling(depth=-1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    assert [c["label"].rsplit(".", 1)[-1] for c in root["children"]] == [
        "pauses",
        "leaf",
        "leaf",
        "leaf",
    ]
    gen = root["children"][0]
    assert gen["flags"] == ["generator"]
    assert _resumes(session, gen["label"]) == [3]


def test_generator_expression(engine):
    def run():
        return sum(leaf(x) for x in range(3))

    with profiling(depth=-1, engine=engine) as session:
        assert run() == 6
    (root,) = session.to_tree()
    (genexpr,) = root["children"]
    assert genexpr["label"].endswith("<genexpr>")
    assert [c["label"] for c in genexpr["children"]] == ["leaf"] * 3


def test_generator_below_the_ceiling_is_not_recorded(engine):
    with profiling(depth=0, engine=engine) as session:
        consume(3)
    assert shape(session) == (("consume", ()),)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_generator_started_before_the_session(engine, warm):
    # warm: the interpreter has specialized the generator's code (3.11+), so
    # an engine reading instructions must read through the quickened forms

    def fresh(n):
        for i in range(n):
            yield leaf(i)

    if warm:
        for _ in range(100):  # the interpreter specializes code that runs often
            list(fresh(3))
    g = fresh(3)
    next(g)
    with profiling(depth=-1, engine=engine) as session:
        rest = list(g)
    assert rest == [2, 3]
    (root,) = [n for n in session.to_tree() if n["label"].endswith("fresh")]
    # its start was not seen: the span starts at its first resume in the session
    assert "continued" in root["flags"]
    assert [c["label"] for c in root["children"]] == ["leaf", "leaf"]


def test_closure_generator_started_in_the_session_is_not_continued(engine, request):
    scale = 3

    def scaled(n):
        for i in range(n):
            yield i * scale  # `scale` is a free variable: COPY_FREE_VARS before RESUME

    def run():
        return list(scaled(3)) + list(leaf(x) for x in range(scale))

    with profiling(depth=-1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    gens = root["children"]
    assert [g["label"].rsplit(".", 1)[-1] for g in gens] == ["scaled", "<genexpr>"]
    for g in gens:
        assert "continued" not in g["flags"], g["label"]
        assert "generator" in g["flags"]
