"""Recursive programs: fib and hanoi shapes and counts."""

from __future__ import annotations

import pytest
from _helpers import check_times, count_shape, shape, shape_depth, skipped_seen, walk

from mlflow_profiler import profiling


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    return 1 if n < 2 else 1 + fib_calls(n - 1) + fib_calls(n - 2)


def fib_shape(n):
    if n < 2:
        return ("fib", ())
    return ("fib", (fib_shape(n - 1), fib_shape(n - 2)))


def hanoi(n, src, dst, via, moves):
    if n == 0:
        return
    hanoi(n - 1, src, via, dst, moves)
    moves.append((src, dst))
    hanoi(n - 1, via, dst, src, moves)


def test_fib_shape_and_count(engine):
    with profiling(depth=-1, engine=engine) as session:
        assert fib(10) == 55
    s = shape(session)
    assert s == (fib_shape(10),)
    assert count_shape(s, "fib") == fib_calls(10) == 177
    assert session.statistics()["span_count"] == 177
    assert shape_depth(s) == 9
    check_times(session)


@pytest.mark.parametrize("depth", [0, 1, 3, 5])
def test_fib_under_a_ceiling(engine, depth):
    with profiling(depth=depth, engine=engine) as session:
        fib(10)
    nodes = list(walk(session.to_tree()))
    assert max(n["depth"] for n in nodes) == depth
    # level k of fib(10)'s call tree holds 2**k calls while every branch is that deep
    per_level = [sum(1 for n in nodes if n["depth"] == k) for k in range(depth + 1)]
    assert per_level == [2**k for k in range(depth + 1)]
    stats = session.statistics()
    assert stats["span_count"] == 2 ** (depth + 1) - 1
    assert skipped_seen(engine, fib_calls(10) - stats["span_count"])(stats["events_skipped"])


@pytest.mark.parametrize("n", [1, 4, 6])
def test_hanoi(engine, n):
    moves = []
    with profiling(depth=-1, engine=engine) as session:
        hanoi(n, "a", "c", "b", moves)
    assert len(moves) == 2**n - 1
    s = shape(session)
    assert count_shape(s, "hanoi") == 2 ** (n + 1) - 1
    assert shape_depth(s) == n
    # a complete binary tree: every call but the n == 0 ones has two children
    for node in walk(session.to_tree()):
        assert len(node["children"]) in (0, 2)
        assert (len(node["children"]) == 0) == (node["depth"] == n)
    check_times(session)


def test_deep_recursion_beyond_the_ceiling(engine):
    def down(k):
        return 0 if k == 0 else 1 + down(k - 1)

    with profiling(depth=4, engine=engine) as session:
        assert down(60) == 60
    nodes = list(walk(session.to_tree()))
    assert [n["depth"] for n in nodes] == [0, 1, 2, 3, 4]
    assert all(n["label"].endswith("down") for n in nodes)
    assert skipped_seen(engine, 61 - 5)(session.statistics()["events_skipped"])
    # the deepest recorded call still ends after everything below it returned
    deepest = nodes[-1]
    assert deepest["flags"] == [] and deepest["end_ns"] <= nodes[0]["end_ns"]


def test_mutual_recursion(engine):
    def is_even(k):
        return True if k == 0 else is_odd(k - 1)

    def is_odd(k):
        return False if k == 0 else is_even(k - 1)

    with profiling(depth=-1, engine=engine) as session:
        assert is_even(6)
    names = [n["label"].rsplit(".", 1)[-1] for n in walk(session.to_tree())]
    assert names == ["is_even", "is_odd"] * 3 + ["is_even"]
