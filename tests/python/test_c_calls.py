"""capture_c_calls: builtins as spans, within the ceiling; folded into their
caller when rendered unless show_c_calls=True."""

from __future__ import annotations

import sys

import pytest
from _helpers import shape, tree_lines, walk

from mlflow_profiler import profile_block, profile_span, profiling


def key(x):
    return -x


def work(data):
    n = len(data)
    ordered = sorted(data, key=key)
    data.append(n)
    return ordered


def run():
    return work([3, 1, 2])


def test_c_calls_are_recorded(engine):
    with profiling(depth=-1, capture_c_calls=True, engine=engine) as session:
        assert run() == [3, 2, 1]
    assert shape(session) == (
        (
            "run",
            (
                (
                    "work",
                    (
                        ("len", ()),
                        ("sorted", (("key", ()), ("key", ()), ("key", ()))),
                        ("list.append", ()),
                    ),
                ),
            ),
        ),
    )
    nodes = {n["label"]: n for n in walk(session.to_tree())}
    for label in ("len", "sorted", "list.append"):
        assert "c_function" in nodes[label]["flags"]
        assert nodes[label]["module"] == "builtins"
        assert nodes[label]["is_user_code"] is False
    assert nodes["key"]["flags"] == []


def test_c_calls_hidden_from_print_tree_by_default(engine, capsys):
    with profiling(depth=-1, capture_c_calls=True, engine=engine) as session:
        run()
    session.print_tree()
    text = capsys.readouterr().out
    names = [ln.split(":")[0] for ln in tree_lines(text)]
    # the Python callbacks of a folded C call move up to its caller
    assert names == ["run", "  work", "    key", "    key", "    key"]
    shown = [ln.split(":")[0] for ln in tree_lines(session.format_tree(show_c_calls=True))]
    assert shown == [
        "run",
        "  work",
        "    len",
        "    sorted",
        "      key",
        "      key",
        "      key",
        "    list.append",
    ]
    assert shape(session, show_c_calls=False) == (("run", (("work", (("key", ()),) * 3),)),)


def test_no_c_calls_without_the_option(engine):
    with profiling(depth=-1, engine=engine) as session:
        run()
    assert shape(session) == (("run", (("work", (("key", ()),) * 3),)),)
    assert not any("c_function" in n["flags"] for n in walk(session.to_tree()))


@pytest.mark.parametrize("depth", [0, 1])
def test_c_calls_within_the_ceiling_only(engine, depth):
    with profiling(depth=depth, capture_c_calls=True, engine=engine) as session:
        run()
    expected = {
        0: (("run", ()),),
        1: (("run", (("work", ()),)),),
    }[depth]
    assert shape(session) == expected


def test_c_calls_at_the_ceiling(engine, request):
    with profiling(depth=2, capture_c_calls=True, engine=engine) as session:
        run()
    assert shape(session) == (
        ("run", (("work", (("len", ()), ("sorted", ()), ("list.append", ()))),)),
    )


def test_c_call_raising(engine):
    def bad():
        return int("x")

    def guarded():
        try:
            bad()
        except ValueError:
            return "ok"

    with profiling(depth=-1, capture_c_calls=True, engine=engine) as session:
        assert guarded() == "ok"
    nodes = list(walk(session.to_tree()))
    labels = [n["label"].rsplit(".", 1)[-1] for n in nodes]
    assert labels[:2] == ["guarded", "bad"]
    assert "exception" in nodes[1]["flags"]


def test_profile_span_with_c_calls_has_no_extra_node(engine, request):
    @profile_span("labelled")
    def decorated(x):
        return key(x)

    def caller():
        return decorated(1)

    with profiling(depth=-1, capture_c_calls=True, engine=engine) as session:
        caller()
    (root,) = session.to_tree()
    assert [c["label"] for c in root["children"]] == ["labelled"]
    assert [c["label"] for c in root["children"][0]["children"]] == ["key"]


def test_profiler_plumbing_is_not_a_c_span(engine, request):
    def caller():
        with profile_block("blk"):
            key(1)

    with profiling(depth=-1, capture_c_calls=True, engine=engine) as session:
        caller()
    assert shape(session) == (
        (
            "caller"
            if sys.version_info < (3, 11)
            else "test_profiler_plumbing_is_not_a_c_span.<locals>.caller",
            (("blk", (("key", ()),)),),
        ),
    )


def test_same_builtin_below_the_ceiling_does_not_close_the_recorded_one(engine, request):
    def inner_key(x):
        return sorted([x, -x])[0]

    def run():
        out = sorted([3, 1, 2], key=inner_key)
        return len(out)

    with profiling(depth=1, capture_c_calls=True, engine=engine) as session:
        run()
    assert shape(session) == ((session.to_tree()[0]["label"], (("sorted", ()), ("len", ()))),)
    assert all("open_at_end" not in n["flags"] for n in walk(session.to_tree()))


def test_the_sessions_own_exit_is_not_a_c_call(engine):
    # ProfileSession.__exit__ is a C function (pyext/bind_session.cpp), called
    # by the with block's frame while the session collects.
    with profiling(depth=2, capture_c_calls=True, engine=engine) as session:
        len("abc")
    labels = [n["label"] for n in walk(session.to_tree())]
    assert labels == ["len"]
