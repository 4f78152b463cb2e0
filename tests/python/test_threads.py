"""Threads: a session belongs to its thread (and context); all_threads=True
follows the threads started during the session."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time

import pytest
from _helpers import check_times, find, qn, walk

from mlflow_profiler import profiling


def main_work(n):
    return n + 1


def worker_work(n):
    return n - 1


def test_other_threads_are_not_captured(engine):
    stop = threading.Event()
    started = threading.Event()
    calls = []

    def background():
        started.set()
        while not stop.is_set():
            calls.append(worker_work(1))
            time.sleep(0.001)

    t = threading.Thread(target=background, name="bg")
    t.start()
    started.wait()
    try:
        with profiling(depth=-1, engine=engine) as session:
            for i in range(20):
                main_work(i)
                time.sleep(0.001)
    finally:
        stop.set()
        t.join()
    assert len(calls) > 1
    names = [n["label"] for n in walk(session.to_tree())]
    assert names == ["main_work"] * 20
    assert session.statistics()["thread_count"] == 1


def test_thread_started_in_the_session_is_not_captured_by_default(engine):
    def spawn():
        t = threading.Thread(target=worker_work, args=(3,))
        t.start()
        t.join()

    with profiling(depth=-1, engine=engine) as session:
        spawn()
    assert find(session.to_tree(), "worker_work") == []
    assert session.statistics()["thread_count"] == 1


def in_copied_context(fn, *args):
    """Runs fn in another thread, in a copy of this context (which carries
    the session), as asyncio.to_thread and 3.14t's threads do."""
    ctx = contextvars.copy_context()
    t = threading.Thread(target=ctx.run, args=(fn, *args))
    t.start()
    t.join()


async def offload(n):
    return await asyncio.to_thread(worker_work, n)


def test_a_thread_running_a_context_that_carries_the_session_is_not_captured(engine):
    # The context is not the thread: a session records where it was entered
    # (docs/capture.md, Threads), on every version and at every depth.
    for depth in (-1, 0, 3):
        with profiling(depth=depth, engine=engine) as session:
            in_copied_context(worker_work, 1)
            asyncio.run(offload(2))
        assert find(session.to_tree(), "worker_work") == [], depth
        assert session.statistics()["thread_count"] == 1, depth


def test_all_threads_captures_a_thread_running_a_copied_context(engine):
    with profiling(depth=-1, engine=engine, all_threads=True) as session:
        in_copied_context(worker_work, 1)
    assert len(find(session.to_tree(), "worker_work")) == 1
    assert session.statistics()["thread_count"] == 2


def test_an_outer_session_sees_a_session_entered_in_a_thread_it_reached(engine):
    # The inner session is entered in a thread whose context carries the
    # outer one: the outer session sees its part too, like any nested session.
    inner = []

    def enter_inner():
        with profiling(depth=-1, engine=engine) as s:
            worker_work(5)
        inner.append(s)

    with profiling(depth=-1, engine=engine) as outer:
        in_copied_context(enter_inner)
    assert [n["label"] for n in walk(inner[0].to_tree())] == ["worker_work"]
    assert len(find(outer.to_tree(), "worker_work")) == 1


def worker(n):
    total = 0
    for i in range(n):
        total += worker_work(i)
    return total


def meet_and_work(barrier, n):
    barrier.wait()  # all workers are alive together: no thread ident is reused
    return worker(n)


def spawn_workers(k):
    barrier = threading.Barrier(k)
    threads = [
        threading.Thread(target=meet_and_work, args=(barrier, 3), name=f"w{i}") for i in range(k)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return threads  # kept alive by the caller: their finalizers would run inside the session


def test_all_threads_captures_workers(engine):
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        threads = spawn_workers(2)
    del threads
    roots = session.to_tree()
    # the session's own roots: only what the with block called
    assert [r["label"] for r in roots] == ["spawn_workers"]
    workers = find(roots, "meet_and_work")
    assert sorted(w["thread_name"] for w in workers) == ["w0", "w1"]
    main_tid = roots[0]["thread_id"]
    for w in workers:
        # the target is the root of its thread's lane: nothing of the
        # threading bootstrap above it, its own calls below it
        assert w["thread_id"] != main_tid
        assert [c["label"] for c in w["children"]] == [qn("Barrier.wait"), "worker"]
        assert [c["label"] for c in w["children"][1]["children"]] == ["worker_work"] * 3
        # hung under the span of the main thread that was open when it began
        parent = _parent_of(roots, w)
        assert parent is not None and parent["thread_id"] == main_tid
        assert _is_descendant(roots[0], w)
    lanes = session.statistics()["threads"].values()
    assert sorted(lane["thread_name"] for lane in lanes) == ["MainThread", "w0", "w1"]
    assert all(lane["task"] == 0 for lane in lanes)
    check_times(session)


def test_threads_started_one_after_another(engine, request):
    # A joined thread's ident is given to the next thread (glibc reuses the
    # pthread_t): each thread must still get its own lane.

    def sequential():
        threads = []
        for i in range(3):
            t = threading.Thread(target=worker, args=(2,), name=f"s{i}")
            t.start()
            t.join()
            threads.append(t)
        return threads

    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        threads = sequential()
    del threads
    roots = session.to_tree()
    workers = find(roots, "worker")
    assert [w["thread_name"] for w in workers] == ["s0", "s1", "s2"]
    assert [w["task"] for w in workers] == [0, 0, 0]
    starts = [n for n in walk(roots) if n["label"] == qn("Thread.start")]
    assert len(starts) == 3
    for start, w in zip(starts, workers):
        assert any(n is w for n in walk([start])), "each worker hangs under its own Thread.start"


class _LateStarted(threading.Event):
    """Thread._started for a thread that is scheduled late: the new thread
    reports that it runs, then sleeps before its first profile event (where
    all_threads binds it), so its starter has moved on by then."""

    def set(self):
        super().set()
        time.sleep(0.05)


def start_late(n):
    t = threading.Thread(target=worker, args=(n,), name="late")
    t._started = _LateStarted()
    t.start()
    return t


def after_start():
    time.sleep(0.2)


@pytest.mark.parametrize("depth", [-1, 0, 1])
def test_a_thread_hangs_where_it_was_started_even_when_it_runs_late(engine, depth):
    # The thread's lane hangs under the span open in its starter when
    # Thread.start ran, not under the one open when the thread first ran.
    with profiling(depth=depth, all_threads=True, engine=engine) as session:
        t = start_late(2)
        after_start()
        t.join()
    roots = session.to_tree()
    (w,) = find(roots, "worker")
    assert w["thread_name"] == "late"
    parent = _parent_of(roots, w)
    assert parent is not None
    assert parent["label"] == (qn("Thread.start") if depth != 0 else "start_late")
    assert parent["thread_name"] == "MainThread"
    (late,) = find(roots, "start_late")
    assert _is_descendant(late, w)
    assert find(find(roots, "after_start")[0]["children"], "worker") == []


def spawn_inner():
    t = threading.Thread(target=worker, args=(1,), name="inner")
    t.start()
    t.join()


def test_a_thread_started_by_a_captured_thread_hangs_in_that_thread(engine):
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        t = threading.Thread(target=spawn_inner, name="outer")
        t.start()
        t.join()
    roots = session.to_tree()
    (inner,) = [w for w in find(roots, "worker") if w["thread_name"] == "inner"]
    parent = _parent_of(roots, inner)
    assert parent is not None and parent["label"] == qn("Thread.start")
    assert parent["thread_name"] == "outer"
    (outer,) = find(roots, "spawn_inner")
    assert outer["thread_name"] == "outer" and _is_descendant(outer, inner)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="threading.setprofile_all_threads is 3.12+")
def test_threadings_profile_function_put_back_in_every_thread(engine):
    # CPython's test_threading.test_getprofile_all_threads, inside an
    # all_threads session: the function threading.getprofile() returns (the
    # session's binder) is installed in every thread and must stay there.
    try:
        with profiling(depth=-1, all_threads=True, engine=engine):
            old = threading.getprofile()
            threading.setprofile_all_threads(old)
            main_work(1)
            assert sys.getprofile() is old
            assert threading.getprofile() is old
    finally:
        # Out of every thread, not just this one: a thread of an earlier test
        # parked in C (an exporter waiting on its queue) never runs the
        # binder's next event, and its profile function keeps sys.monitoring's
        # events on for every function of the process.
        threading.setprofile_all_threads(None)


def test_all_threads_with_a_ceiling(engine):
    with profiling(depth=1, all_threads=True, engine=engine) as session:
        threads = spawn_workers(1)
    del threads
    workers = find(session.to_tree(), "meet_and_work")
    assert len(workers) == 1
    # a thread lane gets the whole ceiling for its own frames (docs/capture.md)
    assert [c["label"] for c in workers[0]["children"]] == [qn("Barrier.wait"), "worker"]
    assert workers[0]["children"][1]["children"] == []
    main = [n for n in walk(session.to_tree()) if n["thread_name"] == "MainThread"]
    assert max(n["depth"] for n in main) == 1


def test_threads_that_existed_before_are_not_captured(engine):
    go = threading.Event()
    done = threading.Event()

    def waiting():
        go.wait()
        worker_work(1)
        done.set()

    t = threading.Thread(target=waiting)
    t.start()
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        go.set()
        done.wait()
        main_work(1)
    t.join()
    labels = [n["label"] for n in walk(session.to_tree())]
    assert "worker_work" not in labels
    assert "main_work" in labels


def test_sessions_in_two_threads_are_independent(engine):
    results = {}
    barrier = threading.Barrier(2)

    def run(name, fn):
        barrier.wait()
        with profiling(depth=-1, engine=engine) as session:
            for i in range(30):
                fn(i)
        results[name] = session

    threads = [
        threading.Thread(target=run, args=("a", main_work)),
        threading.Thread(target=run, args=("b", worker_work)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [n["label"] for n in walk(results["a"].to_tree())] == ["main_work"] * 30
    assert [n["label"] for n in walk(results["b"].to_tree())] == ["worker_work"] * 30


def _parent_of(roots, node):
    for n in walk(roots):
        if any(c is node for c in n["children"]):
            return n
    return None


def _is_descendant(ancestor, node):
    return any(n is node for n in walk([ancestor]))
