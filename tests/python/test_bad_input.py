"""Bad input gets a clear error; rendering edge cases say what they did."""

from __future__ import annotations

import pytest
from _helpers import shape

from mlflow_profiler import ProfileSession, profiling


def f():
    return g()


def g():
    return h()


def h():
    return 1


def test_negative_depth_is_a_value_error():
    with pytest.raises(ValueError, match="depth"):
        profiling(depth=-2)


def test_string_depth_is_a_type_error():
    with pytest.raises(TypeError, match="depth"):
        profiling(depth="2")
    with pytest.raises(TypeError, match="depth"):
        profiling(depth=True)
    with pytest.raises(TypeError, match="depth"):
        profiling(depth=1.5)


def test_bad_max_events_and_engine():
    with pytest.raises(ValueError, match="max_events"):
        profiling(max_events=0)
    with pytest.raises(TypeError, match="max_events"):
        profiling(max_events="10")
    with pytest.raises(ValueError, match="engine"):
        profiling(engine="fast")


@pytest.mark.parametrize("option", ["capture_io", "all_threads", "capture_c_calls"])
def test_a_flag_that_is_not_a_boolean_is_a_type_error(option):
    for value in ("yes", "no", 2, None, 1.0):  # "no" would have been silently true
        with pytest.raises(TypeError, match=option):
            profiling(**{option: value})
    for value, expected in ((True, True), (0, False), (1, True)):
        assert getattr(profiling(**{option: value}), option) is expected


def test_autoprofile_flags_are_checked_too():
    import mlflow_profiler  # checked before MLflow is imported: no MLflow needed

    for option in ("capture_io", "all_threads", "log_to_mlflow", "log_as_trace"):
        with pytest.raises(TypeError, match=option):
            mlflow_profiler.autoprofile(**{option: "yes"})
    assert not mlflow_profiler.statistics()["enabled"]  # a bad call changes nothing


def test_render_deeper_than_captured_is_clamped(engine):
    with profiling(depth=2, engine=engine) as session:
        f()
    text = session.format_tree(depth=10)
    assert [ln.split(":")[0] for ln in text.splitlines()[:3]] == ["f", "  g", "    h"]
    assert "captured at depth 2" in text and "depth 10 was requested" in text
    assert shape(session, depth=10) == shape(session)


def test_print_tree_clamped(engine, capsys):
    with profiling(depth=2, engine=engine) as session:
        f()
    session.print_tree(depth=10)
    out = capsys.readouterr().out
    assert "captured at depth 2" in out
    assert out.startswith("f: ")


def test_rendering_while_collecting_raises(engine):
    errors = []
    with profiling(engine=engine) as session:
        f()
        # (no pytest.raises in here: its frames would be captured)
        for render in (
            session.print_tree,
            session.format_tree,
            session.to_tree,
            session.to_flat,
            session.to_json,
            lambda: session.spans,
        ):
            try:
                render()
            except RuntimeError as exc:
                errors.append(exc)
    assert len(errors) == 6
    for exc in errors:
        assert "the session is collecting" in str(exc)
        assert "after the `with profiling()` block has ended" in str(exc)
    assert shape(session)[0] == ("f", (("g", (("h", ()),)),))


def test_rendering_before_start_raises(engine):
    session = profiling(engine=engine)
    with pytest.raises(RuntimeError, match="idle"):
        session.to_tree()


def test_reentering_a_finalized_session_raises(engine):
    session = profiling(engine=engine)
    with session:
        f()
    with pytest.raises(RuntimeError, match="records once"):
        with session:
            f()
    with pytest.raises(RuntimeError, match="records once"):
        session.activate()
    assert session.state == "finalized"
    assert shape(session) == (("f", (("g", (("h", ()),)),)),)  # the first capture is intact


def test_entering_a_collecting_session_again_raises(engine):
    session = profiling(engine=engine)
    with session:
        with pytest.raises(RuntimeError):
            session.activate()
        f()
    assert shape(session)[-1][0] == "f"


def test_deactivate_is_idempotent(engine):
    session = profiling(engine=engine)
    session.activate()
    f()
    session.deactivate()
    session.deactivate()
    assert session.state == "finalized"
    assert shape(session) == (("f", (("g", (("h", ()),)),)),)


def test_bad_render_depth(engine):
    with profiling(engine=engine) as session:
        f()
    with pytest.raises(ValueError, match="depth"):
        session.to_tree(depth=-2)
    with pytest.raises(TypeError, match="depth"):
        session.format_tree(depth="1")


class _Counting(ProfileSession):
    """A subclass that overrides deactivate (as ProfileCollector's sessions
    do): `with` must run it (the C __exit__ takes its short path for
    ProfileSession only)."""

    def __init__(self, engine):
        super().__init__(2, engine=engine)
        self.ended = 0

    def deactivate(self):
        self.ended += 1
        super().deactivate()


def test_a_subclass_deactivate_runs_under_with(engine):
    session = _Counting(engine)
    with session as entered:
        f()
    assert entered is session
    assert session.ended == 1
    assert session.state == "finalized"
    assert shape(session)[0] == (
        "f",
        (("g", (("h", ()),)),),
    )  # the roots are the with block's calls


def test_exit_with_an_exception_does_not_swallow_it(engine):
    session = profiling(engine=engine)
    with pytest.raises(KeyError):
        with session:
            f()
            raise KeyError("model")
    assert session.state == "finalized"
    assert shape(session) == (("f", (("g", (("h", ()),)),)),)


def test_enter_and_exit_called_by_hand(engine):
    session = profiling(engine=engine)
    assert session.__enter__() is session
    f()
    assert session.__exit__(None, None, None) is False
    assert session.__exit__(None, None, None) is False  # idempotent, like deactivate()
    assert shape(session) == (("f", (("g", (("h", ()),)),)),)
