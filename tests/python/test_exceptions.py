"""Exceptions: spans closed with the exception flag, the session ends
cleanly and the exception reaches the caller unchanged."""

from __future__ import annotations

import pytest
from _helpers import check_times, shape, tree_lines, walk

from mlflow_profiler import current_session, profile_block, profiling


class Boom(Exception):
    pass


def level(k, raise_at, exc):
    if k == raise_at:
        raise exc
    return level(k + 1, raise_at, exc)


@pytest.mark.parametrize("raise_at", [0, 1, 2, 3])
def test_exception_at_each_depth(engine, raise_at):
    exc = Boom("at %d" % raise_at)
    with pytest.raises(Boom) as info:
        with profiling(depth=-1, engine=engine) as session:
            level(0, raise_at, exc)
    assert info.value is exc  # unchanged
    assert session.state == "finalized"
    assert current_session() is None
    nodes = list(walk(session.to_tree()))
    assert [n["depth"] for n in nodes] == list(range(raise_at + 1))
    for n in nodes:
        assert n["label"] == "level"
        assert "exception" in n["flags"], n
        assert "open_at_end" not in n["flags"]
    assert session.statistics()["failures"] == []
    check_times(session)


def test_exception_caught_midway(engine):
    def catcher():
        try:
            level(0, 2, Boom())
        except Boom:
            return "caught"

    with profiling(depth=-1, engine=engine) as session:
        assert catcher() == "caught"
        after()
    nodes = {(n["label"], n["depth"]): n for n in walk(session.to_tree())}
    assert shape(session) == (
        (
            "test_exception_caught_midway.<locals>.catcher" if _qualnames() else "catcher",
            (("level", (("level", (("level", ()),)),)),),
        ),
        ("after", ()),
    )
    assert "exception" not in nodes[(next(iter(nodes))[0], 0)]["flags"]
    for d in (1, 2, 3):
        assert "exception" in nodes[("level", d)]["flags"]
    assert nodes[("after", 0)]["flags"] == []


def probe():
    raise AttributeError("no such column")  # pandas' attribute probing, say


def lookup():
    try:
        probe()
    except AttributeError:
        return None


def fail():
    raise Boom("the model's error")


def model():
    lookup()
    fail()


def test_an_exception_a_caller_caught_is_no_error_and_one_that_left_the_root_is(engine, tmp_path):
    with pytest.raises(Boom):
        with profiling(depth=2, engine=engine) as session:
            model()
    flags = {n["label"]: n["flags"] for n in walk(session.to_tree())}
    assert flags["probe"] == ["exception", "caught"]  # lookup caught it
    assert flags["fail"] == ["exception"] and flags["model"] == ["exception"]  # it left the root
    assert flags["lookup"] == []
    lines = [
        line.split(":")[0].strip() + ("!" if "[exception]" in line else "")
        for line in tree_lines(session.format_tree())
    ]
    assert lines == ["model!", "lookup", "probe", "fail!"]
    # the same after a save and a load (derived again when the tree is linked)
    import mlflow_profiler

    loaded = mlflow_profiler.load(session.save(tmp_path / "p.json.gz"))
    assert loaded.format_tree() == session.format_tree()
    assert {n["label"]: n["flags"] for n in walk(loaded.to_tree())} == flags


def _qualnames():
    import sys

    return sys.version_info >= (3, 11)


def after():
    return None


def returns_none():
    x = 1
    if x:
        return None


def test_returning_none_is_not_an_exception(engine):
    with profiling(depth=-1, engine=engine) as session:
        returns_none()
        after()
    assert [n["flags"] for n in walk(session.to_tree())] == [[], []]


def test_keyboard_interrupt_inside_a_profiled_block(engine):
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with profiling(depth=-1, engine=engine) as session:
            after()
            interrupted()
    assert session.state == "finalized"
    assert current_session() is None
    flat = session.to_flat()
    assert [r["label"].rsplit(".", 1)[-1] for r in flat] == ["after", "interrupted"]
    assert flat[1]["flags"] == ["exception"]
    assert session.statistics()["failures"] == []


def test_exception_through_a_profile_block(engine):
    def inner():
        raise Boom()

    def outer():
        with profile_block("risky"):
            inner()

    with pytest.raises(Boom):
        with profiling(depth=-1, engine=engine) as session:
            outer()
    nodes = list(walk(session.to_tree()))
    assert [n["label"].rsplit(".", 1)[-1] for n in nodes] == ["outer", "risky", "inner"]
    assert all("exception" in n["flags"] for n in nodes)
    assert "block" in nodes[1]["flags"]


def test_exception_out_of_a_generator(engine):
    def gen():
        yield 1
        raise Boom()

    def consume():
        try:
            for _ in gen():
                pass
        except Boom:
            pass

    with profiling(depth=-1, engine=engine) as session:
        consume()
    (root,) = session.to_tree()
    (g,) = root["children"]
    assert g["label"].endswith("gen")
    assert "exception" in g["flags"] and "generator" in g["flags"]
    assert g["end_ns"] <= root["end_ns"]


def test_session_usable_after_an_exception(engine):
    with pytest.raises(Boom):
        with profiling(engine=engine):
            level(0, 0, Boom())
    with profiling(depth=-1, engine=engine) as session:
        after()
    assert shape(session) == (("after", ()),)
