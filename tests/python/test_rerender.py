"""Re-rendering: a capture rendered at depth k is the full capture with the
nodes deeper than k removed, for every k; and capturing at depth k gives the
same tree as capturing everything and cutting at k."""

from __future__ import annotations

import pytest
from _helpers import check_times, prune, shape, shape_depth

from mlflow_profiler import profiling


def walk_tree(node, depth=0):
    # A recursive program with uneven branches: leaves at several depths.
    total = node["value"]
    for child in node["children"]:
        total += walk_tree(child, depth + 1)
    return total


def make(depth, fanout):
    return {
        "value": depth,
        "children": [make(depth + 1, fanout - 1) for _ in range(fanout)] if fanout else [],
    }


TREES = (make(0, 3), make(0, 2))  # built once, outside the captures


def program():
    return walk_tree(TREES[0]) + walk_tree(TREES[1])


def test_view_at_every_depth_is_the_full_tree_cut(engine):
    with profiling(depth=-1, engine=engine) as session:
        program()
    full = shape(session)
    deepest = shape_depth(full)
    assert deepest == 4  # program -> walk_tree x4 levels
    for k in range(0, deepest + 3):
        assert shape(session, depth=k) == prune(full, k), k
        flat = [(r["call_path"], r["depth"]) for r in session.to_flat(depth=k)]
        full_flat = [(r["call_path"], r["depth"]) for r in session.to_flat() if r["depth"] <= k]
        assert flat == full_flat, k
        text = session.format_tree(depth=k).splitlines()
        full_text = [
            ln
            for ln in session.format_tree().splitlines()
            if (len(ln) - len(ln.lstrip(" "))) // 2 <= k
        ]
        assert text == full_text, k
    assert shape(session, depth=None) == full
    check_times(session)


@pytest.mark.parametrize("ceiling", [0, 1, 2, 3])
def test_capture_at_depth_k_equals_full_capture_cut(engine, ceiling):
    with profiling(depth=-1, engine=engine) as full_session:
        program()
    with profiling(depth=ceiling, engine=engine) as session:
        program()
    assert shape(session) == prune(shape(full_session), ceiling)
    # and rendering that capture shallower cuts it further
    for k in range(ceiling + 1):
        assert shape(session, depth=k) == prune(shape(full_session), k)


def test_times_do_not_change_between_views(engine):
    with profiling(depth=-1, engine=engine) as session:
        program()
    full = {r["span_index"]: (r["start_ns"], r["end_ns"]) for r in session.to_flat()}
    for k in range(4):
        for r in session.to_flat(depth=k):
            assert (r["start_ns"], r["end_ns"]) == full[r["span_index"]]


def test_json_view_matches_tree_view(engine):
    import json

    with profiling(depth=-1, engine=engine) as session:
        program()
    for k in range(4):
        doc = json.loads(session.to_json(depth=k))
        assert len(doc["spans"]) == len(session.to_flat(depth=k))
        assert max(row[doc["span_fields"].index("depth")] for row in doc["spans"]) == k
