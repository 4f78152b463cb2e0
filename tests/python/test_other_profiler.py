"""Other profilers: cProfile and sys.setprofile functions keep working
during a session and are put back after it."""

from __future__ import annotations

import cProfile
import pstats
import sys

import pytest
from _helpers import instrumented, shape

from mlflow_profiler import _core, profiling


def during():
    return 1


def after():
    return 2


def counts(prof: cProfile.Profile):
    stats = pstats.Stats(prof)
    return {func[2]: value[1] for func, value in stats.stats.items()}  # name -> call count


def test_cprofile_is_active_again_after_the_session(engine):
    prof = cProfile.Profile()
    prof.enable()
    try:
        with profiling(depth=-1, engine=engine) as session:
            during()
        after()
        after()
    finally:
        prof.disable()
    assert counts(prof).get("after") == 2
    assert shape(session) == (("during", ()),)


def test_cprofile_keeps_counting_during_the_session(engine):
    if engine == "reference" and sys.version_info < (3, 12):
        pytest.skip(
            "before 3.12 cProfile is a C profile function that pure Python cannot chain to "
            "(see _reference.py); the reference puts it back when the session ends"
        )
    prof = cProfile.Profile()
    prof.enable()
    try:
        with profiling(depth=-1, engine=engine) as session:
            during()
            during()
            during()
    finally:
        prof.disable()
    assert counts(prof).get("during") == 3
    assert shape(session) == (("during", ()),) * 3


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_cprofile_keeps_its_monitoring_tool_id(engine):
    monitoring = sys.monitoring
    prof = cProfile.Profile()
    prof.enable()
    try:
        assert monitoring.get_tool(monitoring.PROFILER_ID) is not None
        owner = monitoring.get_tool(monitoring.PROFILER_ID)
        # C calls: the native engine needs sys.monitoring for them on every 3.12+
        with profiling(depth=-1, engine=engine, capture_c_calls=True) as session:
            during()
            ours = _core.tool_id()
            still = monitoring.get_tool(monitoring.PROFILER_ID)
        assert still == owner  # cProfile's id stays cProfile's
        if engine == "native":
            assert ours in (4, 3)  # one no standard tool uses
            assert monitoring.get_tool(ours) is None  # and freed when the session ended
        else:
            assert ours != monitoring.PROFILER_ID  # the reference engine uses sys.setprofile
        assert monitoring.get_tool(monitoring.PROFILER_ID) == owner
    finally:
        prof.disable()
    assert counts(prof).get("during") == 1
    assert shape(session, show_c_calls=False) == (("during", ()),)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_native_leaves_the_tool_ids_free():
    """The id the engine holds during a session is one no standard tool uses
    (a debugger 0, coverage 1, cProfile 2 or an optimizer 5 started meanwhile
    gets its own), and after the session every id is free again, with none
    of our events or callbacks left for the id's next holder."""

    def numbers():
        yield 1

    with profiling(engine="native", capture_c_calls=True):
        ours = _core.tool_id()
        standard = [sys.monitoring.get_tool(i) for i in (0, 1, 2, 5)]
        list(numbers())
    assert ours in (4, 3) and standard == [None] * 4
    assert [sys.monitoring.get_tool(i) for i in range(6)] == [None] * 6
    sys.monitoring.use_tool_id(ours, "the program's own tool")  # takes the id we held
    try:
        assert sys.monitoring.get_local_events(ours, numbers.__code__) == 0
        assert sys.monitoring.get_events(ours) == 0
        events = [v for k, v in vars(sys.monitoring.events).items() if k.isupper() and v]
        left = [sys.monitoring.register_callback(ours, e, None) for e in events]
        assert left == [None] * len(events)
    finally:
        sys.monitoring.free_tool_id(ours)
    prof = cProfile.Profile()
    prof.enable()  # takes PROFILER_ID
    try:
        during()
    finally:
        prof.disable()
    assert counts(prof).get("during") == 1


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_native_instruments_no_plain_function():
    """Plain Python frames come from the frame evaluation hook within the
    ceiling: no function a session runs is instrumented for its frames (and
    none has to be re-instrumented after it). Generators and coroutines are:
    their resumes may come from anywhere. On 3.13 a frame whose callees are
    within the ceiling gets CALL events, which keep its calls of classes
    from being specialized past the hook (docs/capture.md)."""

    def numbers():
        yield 1

    with profiling(engine="native", depth=2) as session:
        during()
        list(numbers())
        watched = sys.monitoring.get_local_events(_core.tool_id(), numbers.__code__)
    calls = sys.monitoring.events.CALL if sys.version_info[:2] == (3, 13) else 0
    assert watched == calls | sum(
        getattr(sys.monitoring.events, e)
        for e in ("PY_START", "PY_RESUME", "PY_YIELD", "PY_RETURN")
    )

    assert set(instrumented(during)) <= ({"INSTRUMENTED_CALL"} if calls else set())
    assert session.statistics()["engine"] == "eval_frame+sys.monitoring"
    assert shape(session)[:2] == (("during", ()), (numbers.__qualname__, ()))


def test_setprofile_function_is_restored(engine):
    events = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name in ("during", "after"):
            events.append((frame.f_code.co_name, event))

    sys.setprofile(tracer)
    try:
        with profiling(depth=-1, engine=engine) as session:
            during()
        restored = sys.getprofile()
        after()
    finally:
        sys.setprofile(None)
    assert restored is tracer
    # it kept receiving events during the session, and after it
    assert events == [
        ("during", "call"),
        ("during", "return"),
        ("after", "call"),
        ("after", "return"),
    ]
    assert shape(session) == (("during", ()),)


def test_setprofile_restored_after_an_exception(engine):
    def tracer(frame, event, arg):
        return None

    sys.setprofile(tracer)
    try:
        with pytest.raises(RuntimeError):
            with profiling(engine=engine):
                raise RuntimeError("x")
        restored = sys.getprofile()
    finally:
        sys.setprofile(None)
    assert restored is tracer


def test_no_profile_function_left_behind(engine):
    before = sys.getprofile()
    with profiling(engine=engine):
        during()
    assert sys.getprofile() is before
