"""profiling() and ProfileSession() take the same options: profiling()'s
signature is their one definition, and ProfileSession.__init__ is given it
(_session._options_of). These tests hold what users see of both, and that
both constructors make the same session from the same options."""

from __future__ import annotations

import copy
import inspect
import pickle
import pydoc
import sys
import weakref
from unittest import mock

import pytest

from mlflow_profiler import ProfileSession, profiling

P = inspect.Parameter
PUBLIC = [
    # name, kind, default, annotation (a string: `from __future__ import annotations`)
    ("depth", P.POSITIONAL_OR_KEYWORD, 2, "int"),
    ("max_events", P.KEYWORD_ONLY, 1_000_000, "int"),
    ("all_threads", P.KEYWORD_ONLY, False, "bool"),
    ("capture_c_calls", P.KEYWORD_ONLY, False, "bool"),
    ("capture_io", P.KEYWORD_ONLY, False, "bool"),
    ("capture_io_depth", P.KEYWORD_ONLY, None, "Optional[int]"),
    ("engine", P.KEYWORD_ONLY, "native", "str"),
    ("cpu_time", P.KEYWORD_ONLY, False, "bool"),
    ("alloc_bytes", P.KEYWORD_ONLY, False, "bool"),
]
PRIVATE = [
    ("_transparent_codes", P.KEYWORD_ONLY, (), "tuple"),
    ("_meta", P.KEYWORD_ONLY, None, "Optional[Dict[str, str]]"),
]


def _described(fn):
    sig = inspect.signature(fn)
    params = [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]
    return params, sig.return_annotation


def test_profiling_signature():
    assert _described(profiling) == (PUBLIC, "ProfileSession")


def test_profiling_reads_as_its_python_function():
    """profiling()'s plain case runs in C (bind_session.cpp): what help(),
    inspect and a traceback show is still the Python function's."""
    text = pydoc.render_doc(profiling, renderer=pydoc.plaintext)
    # (3.13 puts a long signature on several lines; 3.14 shows no quotes)
    for part in ("profiling(", "depth: ", "= 2,", "max_events: ", "= 1000000,"):
        assert part in text, text
    assert "Profiles the calls made inside a ``with`` block." in text, text
    assert (profiling.__name__, profiling.__module__) == ("profiling", "mlflow_profiler._session")
    assert inspect.isroutine(profiling) and "profiling" in repr(profiling)
    with pytest.raises(TypeError, match=r"^profiling\(\) got an unexpected keyword argument"):
        profiling(dpth=1)


def test_profiling_pickles_copies_and_is_weakly_referenced_as_a_function_is():
    """What a program does with a function (multiprocessing pickles a
    target by reference, signal libraries hold weak references) it can do
    with profiling()."""
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(profiling, protocol)) is profiling
    assert copy.copy(profiling) is profiling and copy.deepcopy(profiling) is profiling
    assert weakref.ref(profiling)() is profiling


def test_an_autospec_of_profiling_checks_its_arguments():
    """mock.create_autospec models profiling() by its signature: a test
    double of it refuses what profiling() refuses."""
    double = mock.create_autospec(profiling)
    double(2, capture_io=True)
    double.assert_called_once_with(2, capture_io=True)
    with pytest.raises(TypeError):
        double(2, no_such_option=True)
    with pytest.raises(TypeError):
        double(1, 2)
    assert profiling.__call__(0).depth == 0


def test_profile_session_signature():
    assert _described(ProfileSession) == (PUBLIC + PRIVATE, "None")
    self_ = [("self", P.POSITIONAL_OR_KEYWORD, P.empty, P.empty)]
    assert _described(ProfileSession.__init__) == (self_ + PUBLIC + PRIVATE, "None")


def _options(session: ProfileSession):
    return (
        type(session._engine).__name__,
        session.depth,
        session.max_events,
        session.all_threads,
        session.capture_c_calls,
        session.capture_io,
        session.capture_io_depth,
        session.cpu_time,
        session.alloc_bytes,
        session._meta,
        session.state,
    )


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((), {}),
        ((0,), {}),
        (
            (-1,),
            dict(
                max_events=10,
                all_threads=True,
                capture_c_calls=True,
                capture_io=True,
                capture_io_depth=1,
                cpu_time=True,
                alloc_bytes=True,
            ),
        ),
        ((), dict(depth=3, capture_io=1, alloc_bytes=True)),
        # one at a time: an option that reached another's place shows
        ((), dict(depth=0)),
        ((), dict(max_events=7)),
        ((), dict(all_threads=True)),
        ((), dict(capture_c_calls=True)),
        ((), dict(capture_io=True)),
        ((), dict(capture_io=True, capture_io_depth=0)),
        ((), dict(cpu_time=True)),
        ((), dict(alloc_bytes=True)),
    ],
)
def test_both_constructors_make_the_same_session(engine, args, kwargs):
    assert _options(ProfileSession(*args, engine=engine, **kwargs)) == _options(
        profiling(*args, engine=engine, **kwargs)
    )


def _work():
    def leaf(i):
        return i

    def mid(i):
        return leaf(i) + leaf(i + 1)

    def gen():
        for i in range(3):
            yield mid(i)

    return sum(gen()) + sum(mid(i) for i in range(2))


@pytest.mark.parametrize("depth", [-1, 0, 1, 2, 5])
def test_the_default_session_records_what_the_general_path_does(depth):
    """profiling() with every option at its default takes a path of its own
    (no checks, the class's attribute defaults, an Engine made in C): it
    records what ProfileSession(), which binds and checks every option,
    records, and says the same of itself."""
    fast, general = profiling(depth), ProfileSession(depth)
    for session in (fast, general):
        with session:
            _work()
    paths = [[row["call_path"] for row in s.to_flat()] for s in (fast, general)]
    assert paths[0] == paths[1] and paths[0]
    stats = [s.statistics() for s in (fast, general)]
    for key in ("engine", "depth", "events_captured", "events_skipped", "span_count", "dropped"):
        assert stats[0][key] == stats[1][key], key
    assert _options(fast) == _options(general)


PLAIN = [(), (0,), (-1,), (3,), {"depth": 1}, {"engine": "native", "capture_io": False}]
GENERAL = [(True,), {"max_events": 10**6}, {"engine": "reference"}, {"capture_io_depth": 1}]


@pytest.mark.parametrize("call", PLAIN + GENERAL, ids=repr)
def test_the_plain_path_takes_exactly_the_calls_with_every_option_at_its_default(call, monkeypatch):
    """profiling()'s path in C (bind_session.cpp) takes a depth and options
    given their default objects themselves, outside serving; anything else (a
    bool depth, an equal but other int, another engine) goes to the Python
    function. Only the general path sets the options on the instance
    (_setup); the plain one leaves them to the class. (With MLflow's pyfunc
    loaded every call takes the general path: test_model_story.py, "plain".)"""
    monkeypatch.delitem(sys.modules, "mlflow.pyfunc", raising=False)
    args, kwargs = (call, {}) if isinstance(call, tuple) else ((), call)
    try:
        session = profiling(*args, **kwargs)
    except TypeError:
        assert call == (True,)  # the general path's check
        return
    assert ("max_events" in vars(session)) == (call in GENERAL)
    with session:
        _work()
    assert session.statistics()["span_count"] > 0


def test_the_default_session_records_once():
    session = profiling()
    with session:
        pass
    with pytest.raises(RuntimeError, match="records once"):
        session.activate()


def test_private_options_reach_the_session():
    session = ProfileSession(1, _meta={"k": "v"}, _transparent_codes=())
    assert session._meta == {"k": "v"} and session.depth == 1


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((), dict(depth=-2), ValueError, "depth"),
        ((), dict(depth=True), TypeError, "depth"),
        ((), dict(depth=2.0), TypeError, "depth"),
        ((), dict(max_events=0), ValueError, "max_events"),
        ((), dict(capture_io="yes"), TypeError, "capture_io"),
        ((), dict(engine="nope"), ValueError, "engine"),
        ((), dict(colour=True), TypeError, "colour"),
        ((1, 2), {}, TypeError, "positional"),
        ((1,), dict(depth=1), TypeError, "depth"),
    ],
)
def test_both_constructors_refuse_the_same_options(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        profiling(*args, **kwargs)
    with pytest.raises(error, match=match):
        ProfileSession(*args, **kwargs)
