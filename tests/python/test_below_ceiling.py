"""Frames below the ceiling. On 3.11+ the native engine runs them with no
hook at all: a frame evaluation function reports the frames within the
ceiling, and is taken out while a frame below it runs (pyext/capture/). On
every version the tree, generators resumed down there, sessions started down
there and debuggers attached down there behave as if every frame were traced;
the skipped counts are what reached the engine (docs/capture.md)."""

from __future__ import annotations

import dis
import functools
import sys
import threading

import pytest
from _helpers import assert_skipped_agree, run_engines, shape

from mlflow_profiler import _core, profiling


def leaf(x):
    return x + 1


def numbers(n):
    for i in range(n):
        yield leaf(i)


def drain(g):
    return [v for v in g]


def middle(g):
    return drain(g)


def started_above_drained_below():
    g = numbers(3)
    first = next(g)  # the generator's span opens at depth 1, within the ceiling
    return [first] + middle(g)  # ... and is resumed from depth 3, below it


@pytest.mark.parametrize("depth", [1, 2])
def test_generator_resumed_below_the_ceiling(depth):
    out = run_engines(started_above_drained_below, depth=depth)
    assert shape(out["native"]) == shape(out["reference"])
    stats = [out[e].statistics() for e in ("native", "reference")]
    assert_skipped_agree(out["native"], out["reference"])
    assert stats[0]["unmatched_returns"] == 0
    # one numbers span: opened by next() within the ceiling, resumed from
    # below it until it finished inside middle()
    (root,) = out["native"].to_tree()
    gen, mid = root["children"]
    assert (gen["label"], mid["label"]) == ("numbers", "middle")
    assert gen["end_ns"] > mid["start_ns"] and gen["active_ns"] < gen["wall_ns"]


def deep_with_inner_session(record):
    with profiling(depth=1) as inner:
        leaf(1)
        middle(iter([1]))
    record.append(inner)


def outer_program(record):
    middle_of_outer(record)
    leaf(0)


def middle_of_outer(record):
    below_outer(record)


def below_outer(record):
    deep_with_inner_session(record)


def test_session_started_below_another_sessions_ceiling():
    record = []
    with profiling(depth=1) as outer:
        outer_program(record)
    assert shape(outer) == (("outer_program", (("middle_of_outer", ()), ("leaf", ()))),)
    assert outer.statistics()["unmatched_returns"] == 0
    (inner,) = record
    assert shape(inner) == (("leaf", ()), ("middle", (("drain", ()),)))


def test_debugger_attached_below_the_ceiling_sees_its_callers():
    lines = []

    def tracer(frame, event, arg):
        if event == "line" and frame.f_code is caller.__code__:
            lines.append(frame.f_lineno - caller.__code__.co_firstlineno)
        return tracer

    def attach():
        # what pdb.set_trace() does: trace the callers too
        frame = sys._getframe(2)
        frame.f_trace = tracer
        sys.settrace(tracer)

    def below():
        attach()  # from a generator: on 3.11 traced even below the ceiling
        yield

    def caller():
        g = below()
        next(g)
        a = 1
        b = a + 1
        return b  # (g lives to here: its close would re-enable tracing by itself)

    def top():
        return caller()  # caller and what it calls are below the ceiling

    try:
        with profiling(depth=0) as session:
            assert top() == 2
    finally:
        sys.settrace(None)
    assert lines[:3] == [3, 4, 5]  # every line of caller after the attach
    assert [n["function"].rsplit(".", 1)[-1] for n in session.to_tree()] == ["top"]


def test_other_threads_unaffected_while_a_session_runs():
    results = []
    go = threading.Event()

    def worker():
        go.wait()
        results.append(sum(leaf(i) for i in range(1000)))

    t = threading.Thread(target=worker)
    t.start()
    with profiling(depth=0) as session:
        go.set()
        t.join()
    assert results == [sum(range(1, 1001))]
    assert session.statistics()["thread_count"] == 1


SOURCE = """
def below_{n}(k):
    total = 0
    for i in range(k):
        total = total + i
    return total
"""


def fresh_function(n):
    scope = {}
    exec(SOURCE.format(n=n), scope)  # a code object nobody ran: not yet specialised
    return scope[f"below_{n}"]


def specialised(func):
    return [
        i.opname
        for i in dis.get_instructions(func, adaptive=True)
        if i.opname.startswith("BINARY_OP_") and not i.opname.endswith("_ADAPTIVE")
    ]


def run_under_session(func, depth, through=False):
    def calls():
        for _ in range(200):
            func(50)

    def at_depth_0():
        if through:
            calls()  # one level between the root and the 200 frames
        else:
            for _ in range(200):
                func(50)

    with profiling(depth=depth) as session:
        at_depth_0()
    return session


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11's tracing path; 3.12+ has none")
def test_frames_run_at_full_speed_on_311():
    below = fresh_function(1)
    session = run_under_session(below, depth=0)
    # The first call passes the frame evaluation function, which closes the
    # root's window: the other 199 run inlined, reaching no hook.
    assert session.statistics()["events_skipped"] == 1
    # Specialised instructions ran: the frames were not on the tracing path,
    # which executes every instruction de-specialised.
    assert specialised(below) == ["BINARY_OP_ADD_INT"]

    within = fresh_function(2)
    session = run_under_session(within, depth=1)
    assert session.statistics()["span_count"] == 201
    # Recorded frames too: the evaluation hook reports them, no profile
    # function puts the thread on the tracing path.
    assert specialised(within) == ["BINARY_OP_ADD_INT"]

    traced = fresh_function(3)
    prev = sys.gettrace()
    sys.settrace(lambda *a: None)  # a tracer (coverage, a debugger) sees every frame
    try:
        run_under_session(traced, depth=0)
    finally:
        sys.settrace(prev)
    assert specialised(traced) == []


def hook_events(func, depth, through=True):
    """Events the native hook received while a session at `depth` ran
    func(50) 200 times, one level below the root (through=True) or right
    under it."""
    before = _core.hook_event_count()
    session = run_under_session(func, depth, through)
    return _core.hook_event_count() - before, session


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.9 and 3.10 trace every frame")
def test_frames_below_the_ceiling_send_the_hook_no_events():
    sent, session = hook_events(fresh_function(4), depth=0)
    # the frame between (the root's callee) reaches the hook once: its start
    # shows it is below the ceiling, and the hook is out while it runs
    assert session.statistics()["events_skipped"] == 1
    assert session.statistics()["span_count"] == 1
    # at_depth_0's start and return, calls' start and the session's own exit
    # (plus any other thread of this process that runs Python meanwhile: the
    # count is process-wide); each of the 200 frames below would send two
    assert sent < 100

    sent, session = hook_events(fresh_function(5), depth=2)
    assert session.statistics()["span_count"] == 202
    assert sent >= 400  # recorded frames are reported


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.9 and 3.10 trace every frame")
def test_frames_below_the_ceiling_stay_traced_for_a_tracer():
    below = fresh_function(6)
    calls = []

    def tracer(frame, event, arg):  # a debugger, coverage through settrace
        if event == "call" and frame.f_code is below.__code__:
            calls.append(frame)
        return None

    prev = sys.gettrace()
    sys.settrace(tracer)
    try:
        sent, session = hook_events(below, depth=0)
    finally:
        sys.settrace(prev)
    assert session.statistics()["events_skipped"] == 1
    assert len(calls) == 200  # the tracer saw every frame below our ceiling
    assert sent < 100  # and ours still skipped them: the two do not share a switch


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_frames_below_the_ceiling_stay_traced_for_another_monitoring_tool():
    seen = []
    mon = sys.monitoring
    tool = next(i for i in (5, 4, 3, 1, 0) if mon.get_tool(i) is None)
    mon.use_tool_id(tool, "another tool")  # coverage.py's sys.monitoring core, say
    below = fresh_function(7)
    mon.register_callback(
        tool,
        mon.events.PY_START,
        lambda code, offset: seen.append(code) if code is below.__code__ else None,
    )
    mon.set_events(tool, mon.events.PY_START)
    try:
        sent, session = hook_events(below, depth=0)
    finally:
        mon.set_events(tool, 0)
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
    assert session.statistics()["events_skipped"] == 1
    assert len(seen) == 200  # the other tool saw every frame below our ceiling
    assert sent < 100  # and ours still skipped them


class Plain:
    def __init__(self, x):
        self.x = leaf(x)


class Record:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x


def make(n):
    out = []
    for i in range(n):  # no comprehension: a frame of its own before 3.12
        out.append(Plain(i))
        out.append(Record(i))
    return out


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_class_called_often_before_the_session_is_seen_within_the_ceiling(engine, depth):
    # CPython 3.13 specializes the call of a plain Python class into one that
    # pushes its __init__ frame inline, past any frame evaluation function
    # (CALL_ALLOC_AND_ENTER_INIT); the call site is warm before the session.
    for _ in range(50):
        make(3)
    with profiling(depth=depth, engine=engine) as session:
        make(3)
    calls = {}
    for row in session.to_flat():
        name = row["call_path"].split("/")[-1]
        calls[name] = calls.get(name, 0) + 1
    assert calls.get("Plain.__init__") == 3 and calls.get("Record.__init__") == 3, calls
    assert calls.get("leaf", 0) == (3 if depth >= 2 else 0), calls


# --- a frame at the ceiling that makes many calls (3.12+: a "closed ceiling") ---

CLOSES = sys.version_info >= (3, 12)  # after 8 calls its calls reach no hook (3.11: after 1)


class Noted:
    """Its finalizer runs when the frame holding the last reference tears
    down, after that frame returned: the frame's sibling."""

    def __init__(self, seen):
        self.seen = seen

    def __del__(self):
        self.seen.append(leaf(0))


def busy(seen, calls, fail=False):
    keep = Noted(seen)  # noqa: F841 (released in the teardown)
    total = 0
    for i in range(calls):
        total += leaf(i)
    if fail:
        raise KeyError(total)
    return total


def busy_then_teardown(calls, fail=False):
    seen = []
    for _ in range(3):
        busy(seen, calls)
    if fail:
        try:
            busy(seen, calls, fail=True)
        except KeyError:
            pass
    return len(seen)


def count(session, name):
    return sum(1 for row in session.to_flat() if row["call_path"].split("/")[-1] == name)


@pytest.mark.parametrize("calls", [2, 40])
@pytest.mark.parametrize("depth", [2, 3])
def test_finalizers_in_the_teardown_of_a_frame_at_the_ceiling(depth, calls):
    # At depth 2 `busy` is at the ceiling; with 40 calls its window closes
    # (3.12+), and its return puts the hook back for the teardown.
    runs = run_engines(lambda: busy_then_teardown(calls), depth=depth)
    assert shape(runs["native"]) == shape(runs["reference"])
    assert count(runs["native"], "Noted.__del__") == 3
    # the finalizer's call of leaf is at depth 3, busy's too
    assert count(runs["native"], "leaf") == (0 if depth == 2 else 3 * calls + 3)
    assert_skipped_agree(runs["native"], runs["reference"])


@pytest.mark.parametrize("calls", [2, 40])
def test_finalizers_in_the_teardown_of_a_frame_at_the_ceiling_that_raised(calls):
    runs = run_engines(lambda: busy_then_teardown(calls, fail=True), depth=2)
    # The traceback holds the raising frame and its locals: the finalizer
    # runs when the handler drops the exception, as a callee of the handler's
    # frame (the sibling of `busy` again), not in the teardown.
    assert count(runs["reference"], "Noted.__del__") == 4
    assert count(runs["native"], "Noted.__del__") == 4
    assert shape(runs["native"]) == shape(runs["reference"])


def fan(n):
    total = 1
    for _ in range(10):
        if n:
            total += fan(n - 1)
    return total


@pytest.mark.parametrize("depth", [0, 1])
def test_a_recursive_frame_at_the_ceiling(engine, depth):
    # fan(3) at the ceiling closes its window; its 1,110 recursive frames
    # below return through the same code, whose return event is given up.
    with profiling(depth=depth, engine=engine) as session:
        first = fan(3)
        second = fan(3)  # its code's returns given up: the window stays open
    assert first == second == fan(3) == 1111
    assert count(session, "fan") == (2 if depth == 0 else 22)
    assert session.statistics()["dropped"] == 0


def test_a_frame_at_the_ceiling_making_many_calls_sends_few_to_the_hook():
    def root():
        for i in range(200):
            leaf(i)

    with profiling(depth=0) as session:
        root()
    skipped = session.statistics()["events_skipped"]
    if CLOSES:
        assert skipped == 8  # then the calls reach no hook
    elif sys.version_info >= (3, 11):
        assert skipped == 1  # its first call closes its window
    else:
        assert skipped == 200  # the profile function sees every call


def plumbing(log):
    """A @contextmanager generator made transparent, as autoprofile makes
    MLflow's set_prediction_context: suspended for the whole predict."""
    log.append("entered")
    yield
    log.append(leaf(2))  # a callee after its resume, at the depth of the frame that resumes it


def finish(g):
    return next(g, None)


def probe(states):
    states.append(_core.capture_state()["eval_installed"])  # from a frame below the ceiling


def calls_below(func, g, resume_below, states=None):
    for _ in range(200):
        func(50)  # below a depth-1 ceiling
    if states is not None:
        probe(states)
    if resume_below:
        finish(g)  # resumed from depth 2: its callee would be at depth 3


def predict_with_plumbing(func, resume_below, states=None):
    g = plumbing([])
    next(g)
    calls_below(func, g, resume_below, states)
    if not resume_below:
        next(g, None)  # resumed by the root: its callee leaf is at depth 1


@pytest.mark.parametrize("resume_below", [False, True])
def test_a_transparent_generator_suspended_around_the_work(resume_below):
    """The two engines agree wherever the transparent generator is resumed,
    and on 3.11+ the frames below the ceiling run without the hook while it
    is suspended (3.11 keeps it in for suspended spans, whose resume down
    there would change the tree; missing this one's changes nothing)."""
    from mlflow_profiler import _transparent

    _transparent.add(plumbing)
    func = fresh_function(8 + resume_below)
    out = run_engines(functools.partial(predict_with_plumbing, func, resume_below), depth=1)
    assert shape(out["native"]) == shape(out["reference"])
    (root,) = out["native"].to_tree()
    labels = [c["label"] for c in root["children"]]
    assert labels == (["calls_below"] if resume_below else ["calls_below", "leaf"]), labels
    assert_skipped_agree(out["native"], out["reference"])
    if sys.version_info >= (3, 11):
        states = []
        with profiling(depth=1):
            predict_with_plumbing(func, resume_below, states)
        assert states == [False]
