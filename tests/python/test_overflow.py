"""Bounded buffers: drops are counted per thread, the tree stays valid and
recorded spans keep their true end."""

from __future__ import annotations

from _helpers import check_times, walk

from mlflow_profiler import profiling


def leaf(x):
    return x


def many(n):
    for i in range(n):
        leaf(i)
    return n


def test_drops_are_counted_and_the_tree_stays_valid(engine):
    with profiling(depth=-1, max_events=50, engine=engine) as session:
        many(500)
        leaf(-1)
    stats = session.statistics()
    main = stats["threads"]["MainThread"]
    # `many` and 48 `leaf` calls fit in the 50 events (calls and returns share the buffer)
    assert main["dropped"] > 400
    assert stats["dropped"] == main["dropped"]
    assert main["truncated"] is False
    roots = session.to_tree()
    assert [r["label"] for r in roots] == ["many"]  # the last root call was dropped too
    root = roots[0]
    # the root still has its true end: it closed when many() returned
    assert "open_at_end" not in root["flags"]
    assert root["end_ns"] <= stats["end_ns"]
    assert root["end_ns"] >= max(c["end_ns"] for c in root["children"])
    assert "children_dropped" in root["flags"]
    assert stats["span_count"] == 1 + len(root["children"])
    assert len(root["children"]) + main["dropped"] == 500 + 1
    check_times(session)
    text = session.format_tree()
    assert f"({main['dropped']} calls dropped in thread MainThread" in text


def numbers(n):
    for i in range(n):
        yield i


def test_hard_cap_truncates_the_lane(engine):
    # Generators recorded early keep writing suspends and resumes after the
    # soft cap; at twice max_events (plus slack) the lane stops. Two, taken
    # in turn: one generator's resumes straight after its own suspends would
    # be folded into one counted segment (docs/capture.md) and never fill it.
    def run():
        total = 0
        for a, b in zip(numbers(400), numbers(400)):
            total += a + b
        return total

    with profiling(depth=-1, max_events=20, engine=engine) as session:
        assert run() == 2 * sum(range(400))
    stats = session.statistics()
    main = stats["threads"]["MainThread"]
    assert main["truncated"] is True
    assert main["events"] <= 2 * 20 + 64
    nodes = list(walk(session.to_tree()))
    assert [n["label"].rsplit(".", 1)[-1] for n in nodes] == ["run", "numbers", "numbers"]
    for n in nodes:
        assert "truncated" in n["flags"]
        assert n["end_ns"] >= n["start_ns"]
    assert stats["failures"] == []


def test_drops_in_a_deep_tree_do_not_move_spans(engine):
    def down(k):
        if k:
            down(k - 1)
            down(k - 1)

    with profiling(depth=-1, max_events=30, engine=engine) as session:
        down(6)
    nodes = list(walk(session.to_tree()))
    # what was recorded is the start of the call tree, each at its true depth
    assert [n["depth"] for n in nodes[:7]] == list(range(7))
    for n in nodes:
        assert n["label"].endswith("down")
    check_times(session)
    assert session.statistics()["dropped"] == 2**7 - 1 - len(nodes)


def test_drops_counted_per_thread(engine):
    import threading

    def worker():
        many(200)

    def spawn():
        t = threading.Thread(target=worker, name="busy")
        t.start()
        t.join()
        return t

    with profiling(depth=-1, max_events=40, all_threads=True, engine=engine) as session:
        t = spawn()
    del t
    threads = session.statistics()["threads"]
    assert threads["busy"]["dropped"] > 100
    assert threads["MainThread"]["dropped"] < threads["busy"]["dropped"]
    assert session.statistics()["dropped"] == sum(t["dropped"] for t in threads.values())
