"""Bad input gets a clear error; rendering edge cases say what they did."""

from __future__ import annotations

import pytest

from mlflow_profiler import profiling

from _helpers import shape


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
        for render in (session.print_tree, session.format_tree, session.to_tree, session.to_flat,
                       session.to_json, lambda: session.spans):
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
