"""The pure-Python reference engine's own mechanics (the executable spec):
context identity, failures, the hook's chaining. Behaviour shared with the
native engine is tested in the other files, on both engines."""

from __future__ import annotations

import contextvars
import logging
import sys

import pytest
from _helpers import shape, walk

from mlflow_profiler import _reference, _reference_hook, profiling

pytestmark = pytest.mark.reference_only


def leaf(x):
    return x + 1


def test_engine_attributes():
    with profiling(depth=3, engine="reference") as session:
        engine = session._engine
        assert engine.state == "collecting"
        assert sys.getprofile() is _reference._dispatch
        leaf(1)
    assert engine.state == "finalized"
    assert engine.hook == "reference"
    assert engine.failures == []
    assert 0 < engine.start_ns < engine.end_ns
    assert engine.profile() is engine.profile()  # built once
    assert engine.profile().meta["engine"] == "reference"
    engine.stop()  # idempotent
    with pytest.raises(RuntimeError, match="records once"):
        engine.start(session)


def test_a_copied_context_gets_its_own_lane():
    # Python gives no handle on the current Context; the reference tells them
    # apart with a private ContextVar and Token.reset (see the module docstring).
    def in_copy():
        leaf(2)

    with profiling(depth=-1, engine="reference") as session:
        leaf(1)
        contextvars.copy_context().run(in_copy)
        contextvars.copy_context().run(in_copy)
        leaf(3)
    nodes = list(walk(session.to_tree()))
    assert [(n["label"].rsplit(".", 1)[-1], n["task"]) for n in nodes] == [
        ("leaf", 0),
        ("in_copy", 1),
        ("leaf", 1),
        ("in_copy", 2),
        ("leaf", 2),
        ("leaf", 0),
    ]


def test_the_same_context_entered_twice_is_one_lane():
    def in_ctx(x):
        leaf(x)

    ctx = contextvars.copy_context()
    with profiling(depth=-1, engine="reference") as session:
        other = contextvars.copy_context()
        other.run(in_ctx, 1)
        other.run(in_ctx, 2)
    tasks = [n["task"] for n in walk(session.to_tree())]
    assert tasks == [1, 1, 1, 1]
    del ctx


def test_context_marks_leave_user_variables_alone():
    var = contextvars.ContextVar("user_var", default="outer")

    def inner():
        var.set("inner")
        return leaf(1)

    with profiling(depth=-1, engine="reference"):
        ctx = contextvars.copy_context()
        ctx.run(inner)
        assert var.get() == "outer"
    assert ctx[var] == "inner"


def test_an_internal_failure_disables_capture_and_is_logged(monkeypatch, caplog):
    calls = {"n": 0}
    real = _reference_hook._lane_start

    def broken(L, code, frame, continued):
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("simulated")  # an Exception subclass: recorded, not raised
        real(L, code, frame, continued)

    monkeypatch.setattr(_reference_hook, "_lane_start", broken)

    def model():
        return leaf(1) + leaf(2) + leaf(3)

    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        with profiling(depth=-1, engine="reference") as session:
            assert model() == 9  # the model's result is untouched
            leaf(4)
    assert session.state == "finalized"
    failures = session.statistics()["failures"]
    assert len(failures) == 1 and "MemoryError" in failures[0]
    # what was recorded before the failure is kept; nothing after it
    labels = [n["label"].rsplit(".", 1)[-1] for n in walk(session.to_tree())]
    assert labels == ["model", "leaf"]
    assert "capture stopped early" in caplog.text


def test_a_chained_profile_function_is_called_first():
    order = []

    def tracer(frame, event, arg):
        if frame.f_code is leaf.__code__ and event == "call":
            order.append("tracer")

    real = _reference_hook._lane_start

    def spy(L, code, frame, continued):
        if code is leaf.__code__:
            order.append("reference")
        real(L, code, frame, continued)

    sys.setprofile(tracer)
    _reference_hook._lane_start = spy
    try:
        with profiling(depth=-1, engine="reference"):
            leaf(1)
    finally:
        _reference_hook._lane_start = real
        sys.setprofile(None)
    assert order == ["tracer", "reference"]


def test_user_code_classification():
    import json
    import sysconfig

    assert _reference.classify_user_code(__file__)
    assert not _reference.classify_user_code(json.__file__)
    assert not _reference.classify_user_code("<frozen importlib._bootstrap>")
    assert not _reference.classify_user_code("")
    assert _reference.classify_user_code("<dynamic-code>")  # cloudpickle: a class pickled by value
    assert _reference.classify_user_code("<dynamic-code>", "a_module_not_loaded")
    assert not _reference.classify_user_code(
        "<dynamic-code>", "json.decoder"
    )  # a library closure, pickled
    assert not _reference.classify_user_code("/x/lib/python3/site-packages/sklearn/base.py")
    assert not _reference.classify_user_code("/usr/lib/python3/dist-packages/numpy/core.py")
    stdlib = sysconfig.get_paths()["stdlib"]
    assert _reference.classify_user_code(stdlib + "-extra/mine.py")  # a path boundary, not a prefix


def test_session_ended_in_another_context_records_a_failure():
    session = profiling(engine="reference")
    ctx = contextvars.copy_context()
    ctx.run(session.activate)
    session.deactivate()  # the token belongs to ctx: cannot reset it here
    assert session.state == "finalized"
    assert any("different context" in f for f in session.statistics()["failures"])
    assert shape(session) == ()
