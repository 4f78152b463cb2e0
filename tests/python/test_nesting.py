"""Nested sessions: the inner one sees its part, the outer one everything."""

from __future__ import annotations

from _helpers import check_times, qn, shape

from mlflow_profiler import current_session, profiling

# The sessions are created before the outer one starts: this file is about
# nesting, and creating a session object inside a collecting session is
# tested once, at the end.


def a():
    return b() + 1


def b():
    return c() * 2


def c():
    return 1


def test_inner_sees_its_part_outer_sees_everything(engine):
    outer, inner = profiling(depth=-1, engine=engine), profiling(depth=-1, engine=engine)
    with outer:
        a()
        with inner:
            assert current_session() is inner
            b()
        assert current_session() is outer
        c()
    assert current_session() is None
    assert shape(inner) == (("b", (("c", ()),)),)
    assert shape(outer) == (
        ("a", (("b", (("c", ()),)),)),
        ("b", (("c", ()),)),
        ("c", ()),
    )
    # the same call in both, at the same time: each lane reads the clock
    # itself, so both readings of b's start come after the outer a's end
    # and both of its end before the outer c's start (a bound in time, 1 ms,
    # failed on a loaded CI machine: 1.23 ms, the process descheduled
    # between the two lanes' readings)
    # between the two lanes' readings). Each session leaves its own profiler
    # work out of its times (naming a, b and c at first sight: the outer
    # session cut a's before the inner one began), so across sessions the
    # times agree to within what each cut.
    ib = inner.to_tree()[0]
    oa, ob, oc = outer.to_tree()
    cut = outer.statistics()["profiler_overhead_ns"] + inner.statistics()["profiler_overhead_ns"]
    assert oa["end_ns"] <= ob["start_ns"] <= ob["end_ns"] <= oc["start_ns"]
    assert oa["end_ns"] - cut <= ib["start_ns"] <= ib["end_ns"] <= oc["start_ns"] + cut
    inner_c, outer_c = ib["children"][0], ob["children"][0]
    assert (
        ib["start_ns"] <= outer_c["start_ns"] + cut and ob["start_ns"] <= inner_c["start_ns"] + cut
    )
    assert outer_c["end_ns"] <= ib["end_ns"] + cut and inner_c["end_ns"] <= ob["end_ns"] + cut
    check_times(inner)
    check_times(outer)


def test_inner_session_in_a_callee(engine):
    holder = {"inner": profiling(depth=-1, engine=engine)}

    def middle():
        a()
        with holder["inner"]:
            b()
        return c()

    with profiling(depth=-1, engine=engine) as outer:
        middle()
    name = qn("test_inner_session_in_a_callee.<locals>.middle")
    # the inner session's roots are what its with block called; in the outer
    # session the same calls sit at their true depth
    assert shape(holder["inner"]) == (("b", (("c", ()),)),)
    assert shape(outer) == (
        (
            name,
            (
                ("a", (("b", (("c", ()),)),)),
                ("b", (("c", ()),)),
                ("c", ()),
            ),
        ),
    )


def test_nested_sessions_with_different_ceilings(engine):
    outer, inner = profiling(depth=0, engine=engine), profiling(depth=-1, engine=engine)
    with outer:
        a()
        with inner:
            a()
    assert shape(outer) == (("a", ()), ("a", ()))
    assert shape(inner) == (("a", (("b", (("c", ()),)),)),)


def test_three_levels(engine):
    s1, s2, s3 = (profiling(depth=-1, engine=engine) for _ in range(3))
    with s1:
        c()
        with s2:
            b()
            with s3:
                a()
    assert [n[0] for n in shape(s1)] == ["c", "b", "a"]
    assert [n[0] for n in shape(s2)] == ["b", "a"]
    assert [n[0] for n in shape(s3)] == ["a"]


def test_inner_exception_leaves_outer_collecting(engine):
    outer, inner = profiling(depth=-1, engine=engine), profiling(depth=-1, engine=engine)
    raised = False
    with outer:
        try:
            with inner:
                b()
                1 / 0
        except ZeroDivisionError:
            raised = True
        states = (outer.state, inner.state)
        c()
    assert raised and states == ("collecting", "finalized")
    assert shape(inner) == (("b", (("c", ()),)),)
    assert shape(outer) == (("b", (("c", ()),)), ("c", ()))


def test_sequential_sessions(engine):
    sessions = []
    for fn in (a, b, c):
        with profiling(depth=-1, engine=engine) as s:
            fn()
        sessions.append(s)
    assert [shape(s)[0][0] for s in sessions] == ["a", "b", "c"]


def test_session_created_inside_another_session(engine, request):
    with profiling(depth=-1, engine=engine) as outer:
        a()
        with profiling(depth=-1, engine=engine) as inner:
            b()
    assert shape(inner) == (("b", (("c", ()),)),)
    assert shape(outer) == (("a", (("b", (("c", ()),)),)), ("b", (("c", ()),)))
