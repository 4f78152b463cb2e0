"""summarize(obj) and register_summarizer (docs/design/capture.md, "I/O summaries"; issue 3).

Each library type is checked field by field against the library's own public
API on real objects; a library that is not installed skips its tests.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import gc
import logging
import signal
import sys
import time
import weakref

import pytest

from mlflow_profiler import _core
from mlflow_profiler._summaries import IOSummary, register_summarizer, summarize


def qualified(t: type) -> str:
    name = f"{t.__module__}.{t.__qualname__}"
    return name[len("builtins.") :] if name.startswith("builtins.") else name


def records(caplog, text: str) -> list:
    return [r for r in caplog.records if r.name == "mlflow_profiler" and text in r.getMessage()]


# --- the dataclass ---------------------------------------------------------------


def test_iosummary_is_frozen_with_defaults():
    s = IOSummary(type_name="MyEmbedding", shape=(1000, 128))
    assert (s.dtype, s.length, s.size_bytes, s.device, s.repr_short) == (None,) * 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.dtype = "float32"
    assert s == IOSummary("MyEmbedding", (1000, 128))
    assert hash(s) == hash(IOSummary("MyEmbedding", (1000, 128)))
    if sys.version_info >= (3, 10):
        assert not hasattr(s, "__dict__")  # slots


def test_summarize_returns_a_real_iosummary():
    s = summarize([1, 2])
    assert type(s) is IOSummary
    assert s == IOSummary(type_name="list", length=2, size_bytes=sys.getsizeof([1, 2]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.length = 3
    assert dataclasses.replace(s, length=3).length == 3


def test_docstring_examples():
    pytest.importorskip("numpy")
    import doctest

    from mlflow_profiler import _summaries

    result = doctest.testmod(_summaries, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0
    assert _core._summarizer_count() == 0  # the example unregistered what it registered


# --- builtins ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, 3],
        (1,),
        {"a": 1, "b": 2},
        {1, 2},
        frozenset(),
        [],
        collections.OrderedDict(a=1),
        collections.defaultdict(list),
        collections.Counter("abca"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_containers_length_and_shallow_size(value):
    for _ in range(2):  # the first call of a type measures what getsizeof adds to __sizeof__
        assert summarize(value) == IOSummary(
            type_name=qualified(type(value)), length=len(value), size_bytes=sys.getsizeof(value)
        )


def test_container_sizes_follow_growth():
    small, grown = {}, {}
    summarize(small)
    for i in range(1000):
        grown[i] = i
    items = list(range(10))
    summarize(items)
    items.extend(range(10_000))
    for v in (small, grown, items, set(range(1000)), tuple(range(50))):
        assert summarize(v).size_bytes == sys.getsizeof(v)


class SizedList(list):
    def __sizeof__(self):
        return 1234


def test_container_subclass_with_its_own_sizeof():
    assert summarize(SizedList([1])).size_bytes == sys.getsizeof(SizedList([1]))
    assert summarize(SizedList([1])).size_bytes == sys.getsizeof(SizedList([1]))


def test_namedtuple_is_a_tuple_with_its_own_name():
    Point = collections.namedtuple("Point", "x y")
    s = summarize(Point(1, 2))
    assert (
        s.type_name.endswith("Point")
        and s.length == 2
        and s.size_bytes == sys.getsizeof(Point(1, 2))
    )
    assert s.repr_short is None  # containers are never repr'd


def test_huge_and_recursive_containers_are_not_walked():
    big = [None] * 2_000_000
    assert summarize(big).length == 2_000_000
    loop: list = []
    loop.append(loop)
    assert summarize(loop) == IOSummary("list", length=1, size_bytes=sys.getsizeof(loop))
    d: dict = {}
    d["self"] = d
    assert summarize(d).length == 1


@pytest.mark.parametrize(
    "value, expected",
    [(42, "42"), (-7, "-7"), (1.5, "1.5"), (True, "True"), (1j, "1j"), (float("nan"), "nan")],
)
def test_scalars_have_their_repr(value, expected):
    assert summarize(value) == IOSummary(type_name=type(value).__name__, repr_short=expected)


def test_none_has_its_type_only():
    assert summarize(None) == IOSummary(type_name="NoneType")


def test_huge_int_is_not_converted_to_decimal():
    # repr of a 100k-digit int costs quadratic time (and raises past 4300 digits)
    s = summarize(10**100_000)
    assert s.type_name == "int" and s.repr_short == f"<{(10**100_000).bit_length()}-bit int>"
    assert summarize(2**200).repr_short == str(2**200)


def test_strings_length_and_repr():
    assert summarize("hello") == IOSummary(type_name="str", length=5, repr_short="'hello'")
    assert summarize(b"abc") == IOSummary(type_name="bytes", length=3, repr_short="b'abc'")
    assert summarize(bytearray(b"zz")) == IOSummary(
        type_name="bytearray", length=2, repr_short="bytearray(b'zz')"
    )
    assert summarize("it's").repr_short == repr("it's")


def test_long_strings_are_cut_inside_the_quotes():
    s = summarize("x" * 1000)
    assert s.length == 1000
    assert s.repr_short == "'" + "x" * 75 + "...'" and len(s.repr_short) == 80
    b = summarize(b"y" * 1000).repr_short
    assert b == "b'" + "y" * 74 + "...'" and len(b) == 80
    ba = summarize(bytearray(b"z" * 1000)).repr_short
    assert ba.startswith("bytearray(b'zzz") and ba.endswith("...')") and len(ba) <= 80
    assert len(summarize("é" * 500).repr_short) == 80  # characters, not bytes


def test_a_string_of_exactly_the_bound_is_not_cut():
    assert summarize("x" * 78).repr_short == repr("x" * 78)  # 80 characters with quotes
    assert summarize("x" * 79).repr_short.endswith("...'")


def test_escapes_are_never_cut_in_two():
    for tail in ("\n", "\x00", "\u2028", "\U0001f600\x01"):
        for n in range(70, 80):
            r = summarize("a" * n + tail * 20).repr_short
            body = r[1:-4]  # between the opening quote and "...'"
            assert r.endswith("...'") and len(r) <= 80
            # every backslash starts a complete escape of the original repr
            assert body in repr("a" * n + tail * 20)[1:-1]
            assert (
                not body.endswith("\\") and not body.endswith("\\x0") and not body.endswith("\\u20")
            )


def test_a_huge_string_costs_its_prefix_only():
    huge = "x" * 50_000_000
    t0 = time.perf_counter()
    s = summarize(huge)
    took = time.perf_counter() - t0
    t0 = time.perf_counter()
    repr(huge)
    full = time.perf_counter() - t0
    assert s.length == 50_000_000 and len(s.repr_short) == 80
    assert took * 20 < full, (took, full)


class Color(enum.IntEnum):
    RED = 1


class LoudStr(str):
    def __repr__(self):
        return "LoudStr!"


def test_subclasses_of_builtins_show_their_value_by_default():
    # their own __repr__ is arbitrary code: not run unless asked for
    assert summarize(Color.RED) == IOSummary(type_name=qualified(Color), repr_short="1")
    assert summarize(LoudStr("abc")) == IOSummary(
        type_name=qualified(LoudStr), length=3, repr_short="'abc'"
    )


def test_subclasses_of_builtins_keep_their_own_repr_when_asked_for(with_reprs):
    assert summarize(Color.RED) == IOSummary(type_name=qualified(Color), repr_short=repr(Color.RED))
    assert summarize(LoudStr("abc")) == IOSummary(
        type_name=qualified(LoudStr), length=3, repr_short="LoudStr!"
    )


# --- anything else -------------------------------------------------------------------


class Plain:
    pass


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


class Wordy:
    def __repr__(self):
        return "Wordy(" + ", ".join(f"field{i}={i}" for i in range(40)) + ")"


class QuotedRepr:
    def __repr__(self):
        return repr("q" * 200)


class Counted:
    calls = 0

    def __repr__(self):
        Counted.calls += 1
        return "Counted()"


def test_unknown_objects_show_their_type_only_and_their_repr_is_never_called():
    before = Counted.calls
    assert summarize(Point(1, 2)) == IOSummary(type_name=qualified(Point))
    assert summarize(Counted()) == IOSummary(type_name=qualified(Counted))
    assert Counted.calls == before
    import mlflow_profiler

    with mlflow_profiler.profiling(depth=0, capture_io=True) as session:
        summarize_me(Counted())
    assert Counted.calls == before
    assert session.spans[0].input_summary["x"] == IOSummary(type_name=qualified(Counted))
    with pytest.raises(TypeError, match="repr_objects"):
        mlflow_profiler.configure(repr_objects="yes")


def summarize_me(x):
    return None


def test_unknown_objects_type_name_and_repr(with_reprs):
    assert summarize(Point(1, 2)) == IOSummary(type_name=qualified(Point), repr_short="Point(1, 2)")
    assert summarize(ValueError("boom")) == IOSummary(
        type_name="ValueError", repr_short="ValueError('boom')"
    )


def test_no_repr_where_the_type_has_none_of_its_own():
    s = summarize(Plain())
    assert s == IOSummary(type_name=qualified(Plain))  # no "<... object at 0x...>"
    assert summarize(object()) == IOSummary(type_name="object")


def test_long_repr_is_cut_to_80_characters(with_reprs):
    s = summarize(Wordy()).repr_short
    assert len(s) == 80 and s.endswith("...") and s.startswith("Wordy(field0=0, ")
    q = summarize(QuotedRepr()).repr_short
    assert len(q) == 80 and q == "'" + "q" * 75 + "...'"


class RaisingRepr:
    def __repr__(self):
        raise RuntimeError("no repr for you")


class NotAStrRepr:
    def __repr__(self):
        return 42


def test_a_raising_repr_gives_no_repr_and_is_logged_once(caplog, with_reprs):
    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        for _ in range(3):
            assert summarize(RaisingRepr()) == IOSummary(type_name=qualified(RaisingRepr))
        assert summarize(NotAStrRepr()) == IOSummary(type_name=qualified(NotAStrRepr))
    logged = records(caplog, "RaisingRepr")
    assert len(logged) == 1
    assert "no repr for you" in logged[0].getMessage() and "RuntimeError" in logged[0].getMessage()
    assert len(records(caplog, "NotAStrRepr")) == 1


class SlowRepr:
    calls = 0

    def __repr__(self):
        SlowRepr.calls += 1
        if SlowRepr.calls > 1:  # the first call of a type has a warm-up allowance
            time.sleep(0.002)
        return "SlowRepr()"


class VerySlowFirstRepr:
    calls = 0

    def __repr__(self):
        VerySlowFirstRepr.calls += 1
        time.sleep(0.03)
        return "VerySlowFirstRepr()"


class SometimesSlowRepr:
    calls = 0

    def __repr__(self):
        SometimesSlowRepr.calls += 1
        if SometimesSlowRepr.calls % 2 == 0:  # as if preempted every other call
            time.sleep(0.002)
        return "SometimesSlowRepr()"


def test_a_slow_repr_is_not_called_again_for_its_type(caplog, with_reprs):
    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        assert summarize(SlowRepr()).repr_short == "SlowRepr()"
        assert summarize(SlowRepr()).repr_short == "SlowRepr()"  # slow once: maybe preempted
        assert (
            summarize(SlowRepr()).repr_short == "SlowRepr()"
        )  # slow twice in a row: the last call
        for _ in range(5):
            assert summarize(SlowRepr()) == IOSummary(type_name=qualified(SlowRepr))
        assert SlowRepr.calls == 3
        for _ in range(3):
            summarize(VerySlowFirstRepr())
        assert VerySlowFirstRepr.calls == 2  # beyond even the first call's allowance, twice
        for _ in range(6):
            assert summarize(SometimesSlowRepr()).repr_short == "SometimesSlowRepr()"
    logged = records(caplog, qualified(SlowRepr) + " took")
    assert len(logged) == 1 and "not called again" in logged[0].getMessage()
    assert len(records(caplog, qualified(VerySlowFirstRepr) + " took")) == 1
    assert len(records(caplog, qualified(SometimesSlowRepr))) == 0


# --- never raises ----------------------------------------------------------------------


class Hostile:
    def __getattribute__(self, name):
        raise RuntimeError(f"no {name}")

    def __repr__(self):
        raise RuntimeError("no repr")

    def __len__(self):
        raise RuntimeError("no len")


class LyingClass:
    @property
    def __class__(self):
        return list


class Meta(type):
    def __getattribute__(cls, name):
        raise RuntimeError("metaclass says no")


class HostileMeta(metaclass=Meta):
    pass


class FakeNumpy:
    """Calls itself numpy.ndarray: must not be read as numpy's struct."""


FakeNumpy.__module__ = "numpy"
FakeNumpy.__qualname__ = "ndarray"


class FakeFrame:
    """Calls itself a pandas DataFrame and breaks every attribute."""

    def __getattr__(self, name):
        raise KeyError(name)

    @property
    def _mgr(self):
        raise ValueError("no manager")

    @property
    def shape(self):
        raise ValueError("no shape")


FakeFrame.__module__ = "pandas"
FakeFrame.__qualname__ = "DataFrame"


class FakeTensor:
    shape = property(lambda self: 1 / 0)
    dtype = "not a dtype"
    device = property(lambda self: [].pop())

    def element_size(self):
        raise MemoryError


FakeTensor.__module__ = "torch"
FakeTensor.__qualname__ = "Tensor"


class WeirdModule:
    pass


WeirdModule.__module__ = 5


def test_summarize_never_raises():
    assert summarize(Hostile()) == IOSummary(type_name=qualified(Hostile))
    assert summarize(LyingClass()).type_name == qualified(
        LyingClass
    )  # the real type, not __class__
    assert summarize(HostileMeta()).type_name == f"{__name__}.HostileMeta"
    assert summarize(FakeNumpy()) == IOSummary(type_name="numpy.ndarray")
    assert summarize(FakeFrame()) == IOSummary(type_name="pandas.DataFrame")
    fake = summarize(FakeTensor())
    assert fake.type_name == "torch.Tensor" and fake.shape is None and fake.size_bytes is None
    assert summarize(WeirdModule()).type_name == "WeirdModule"
    assert summarize(HostileMeta).type_name == qualified(Meta)  # a class as the value


def test_a_keyboard_interrupt_inside_a_summarizer_is_not_lost():
    class Interrupting:
        pass

    def fn(obj):
        raise KeyboardInterrupt

    register_summarizer(Interrupting, fn)
    # A process started in the background by a non-interactive shell ignores
    # SIGINT, and then CPython has no handler to raise the interrupt with.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            s = summarize(Interrupting())  # the summary itself completes ...
            assert s.type_name.endswith("Interrupting")
            for _ in range(100_000):  # ... and the interrupt arrives in the caller's code
                pass
    finally:
        signal.signal(signal.SIGINT, previous)
        register_summarizer(Interrupting, None)


# --- register_summarizer -------------------------------------------------------------------


class Base:
    def __init__(self, n=3):
        self.n = n


class Child(Base):
    pass


class GrandChild(Child):
    pass


class Mixin:
    pass


class Both(Mixin, Child):
    pass


@pytest.fixture
def registry():
    """Registers through the public API and unregisters whatever the test registered."""
    registered = []

    def register(cls, fn):
        registered.append(cls)
        register_summarizer(cls, fn)

    yield register
    for cls in registered:
        register_summarizer(cls, None)
    assert _core._summarizer_count() == 0


def tagged(tag):
    return lambda obj: IOSummary(type_name=tag, length=obj.n if hasattr(obj, "n") else None)


def test_registered_summarizer_is_used(registry):
    registry(
        Base, lambda b: IOSummary(type_name="Base!", shape=[b.n, 2], dtype="float32", size_bytes=24)
    )
    assert summarize(Base(5)) == IOSummary(
        type_name="Base!", shape=(5, 2), dtype="float32", size_bytes=24
    )


def test_lookup_follows_the_mro_and_the_most_specific_wins(registry):
    registry(Base, tagged("base"))
    assert summarize(GrandChild()).type_name == "base"
    registry(Child, tagged("child"))
    assert summarize(GrandChild()).type_name == "child"
    assert summarize(Child()).type_name == "child"
    assert summarize(Base()).type_name == "base"
    registry(Mixin, tagged("mixin"))
    assert summarize(Both()).type_name == "mixin"  # Both's MRO: Mixin before Child


def test_registering_again_replaces_and_none_unregisters(registry):
    summarize(Base())  # the type is classified and cached before any registration
    registry(Base, tagged("first"))
    assert summarize(Base()).type_name == "first"
    registry(Base, tagged("second"))
    assert summarize(Base()).type_name == "second"
    register_summarizer(Base, None)
    assert summarize(Base()) == IOSummary(type_name=qualified(Base))
    register_summarizer(Base, None)  # unregistering twice is fine


def test_registered_summarizer_comes_before_builtin_handling(registry):
    registry(list, lambda v: IOSummary(type_name="my list", length=-1))
    assert summarize([1, 2]) == IOSummary(type_name="my list")  # a negative length is no length
    assert summarize((1, 2)).type_name == "tuple"


def test_a_raising_summarizer_is_logged_once_and_the_builtin_summary_used(registry, caplog):
    class Flaky:
        def __repr__(self):
            return "Flaky()"

    def broken(obj):
        raise ValueError("summarizer bug")

    registry(Flaky, broken)
    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        for _ in range(3):
            assert summarize(Flaky()) == IOSummary(
                type_name=qualified(Flaky)
            )  # its repr is never called
    logged = records(caplog, "summarizer bug")
    assert len(logged) == 1
    assert "Flaky" in logged[0].getMessage() and "ValueError" in logged[0].getMessage()


@pytest.mark.parametrize(
    "bad, why",
    [
        (lambda obj: {"type_name": "dict"}, "returned a value of type dict, not an IOSummary"),
        (lambda obj: None, "of type NoneType, not an IOSummary"),
        (lambda obj: IOSummary(type_name=3), "type_name is not a str"),
        (lambda obj: IOSummary(type_name="x", shape=("a", 2)), "shape is not a tuple of ints"),
        (lambda obj: IOSummary(type_name="x", shape=5), "shape is not a tuple of ints"),
        (lambda obj: IOSummary(type_name="x", length="3"), "length or size_bytes"),
        (lambda obj: IOSummary(type_name="x", dtype=object()), "dtype is not a str"),
    ],
    ids=["dict", "none", "type_name", "shape-items", "shape-int", "length", "dtype"],
)
def test_a_summarizer_returning_the_wrong_thing_is_logged_and_the_builtin_summary_used(
    registry, caplog, bad, why
):
    cls = type(f"Wrong_{id(bad)}", (), {"__repr__": lambda self: "W()"})
    registry(cls, bad)
    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        assert summarize(cls()) == IOSummary(type_name=qualified(cls))
        assert summarize(cls()) == IOSummary(type_name=qualified(cls))
    logged = records(caplog, cls.__name__)
    assert len(logged) == 1 and why in logged[0].getMessage()


def test_summarizer_fields_are_bounded_and_unknown_dims_are_none(registry):
    registry(Base, lambda b: IOSummary(type_name="B", shape=(None, 4), repr_short="r" * 500))
    s = summarize(Base())
    assert s.shape == (None, 4) and len(s.repr_short) == 80 and s.repr_short.endswith("...")


def test_a_summarizer_that_summarizes_itself_terminates(registry):
    registry(Base, lambda b: summarize(b))
    s = summarize(Base())
    assert s.type_name == qualified(Base)


def test_register_summarizer_checks_its_arguments():
    with pytest.raises(TypeError, match="cls must be a class"):
        register_summarizer("Base", tagged("x"))
    with pytest.raises(TypeError, match="fn must be a callable"):
        register_summarizer(Base, "not callable")
    assert _core._summarizer_count() == 0


# --- no reference survives, bounded cache -------------------------------------------------------


def test_summarize_keeps_no_reference(registry):
    point = Point(1, 2)
    base = Base()
    registry(Base, tagged("b"))
    for obj in (point, base, [1, 2], "text", Plain()):
        before = sys.getrefcount(obj)
        for _ in range(10):
            summarize(obj)
        assert sys.getrefcount(obj) == before


def test_type_cache_is_bounded_and_releases_classes():
    first = type("Throwaway0", (), {})
    ref = weakref.ref(first)
    summarize(first())
    del first
    for i in range(1, 1500):
        summarize(type(f"Throwaway{i}", (), {})())
    assert _core._summarize_cache_size() <= 512
    gc.collect()
    assert ref() is None


# --- numpy --------------------------------------------------------------------------------------

NUMPY_DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "longdouble",
    "complex64",
    "complex128",
    "object",
    "<U5",
    "S3",
    "M8[ns]",
    "M8[us]",
    "M8",
    "m8[s]",
    "M8[5s]",
    ">f8",
    ">i4",
    ">M8[ns]",
    ">U3",
    "U1",
    "S1",
    "m8[D]",
    "M8[3h]",
    "V8",
    [("a", "<i4"), ("b", "<f8")],
    ("f4", (2, 3)),
]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_numpy_arrays_of_every_dtype(dtype):
    np = pytest.importorskip("numpy")
    a = np.zeros((4, 3), dtype=dtype)
    for _ in range(2):  # the second call reads the cached dtype name
        assert summarize(a) == IOSummary(
            type_name="numpy.ndarray",
            shape=a.shape,
            dtype=str(a.dtype),
            length=4,
            size_bytes=a.nbytes,
        )


def test_numpy_variable_width_strings():
    np = pytest.importorskip("numpy")
    if not hasattr(np, "dtypes") or not hasattr(np.dtypes, "StringDType"):
        pytest.skip("numpy.dtypes.StringDType is numpy 2.0+")
    a = np.array(["a", "bcd", "e" * 100], dtype=np.dtypes.StringDType())
    assert summarize(a) == IOSummary("numpy.ndarray", (3,), str(a.dtype), 3, a.nbytes)


def test_numpy_array_exact_summary():
    np = pytest.importorskip("numpy")
    assert summarize(np.zeros((1000, 50))) == IOSummary(
        type_name="numpy.ndarray", shape=(1000, 50), dtype="float64", length=1000, size_bytes=400000
    )


def test_numpy_views_zero_d_and_empty():
    np = pytest.importorskip("numpy")
    base = np.arange(100, dtype="int32").reshape(10, 10)
    view = base[::2, 3:]
    assert summarize(view) == IOSummary("numpy.ndarray", (5, 7), "int32", 5, view.nbytes)
    assert summarize(np.array(3.0)) == IOSummary("numpy.ndarray", (), "float64", None, 8)
    assert summarize(np.empty((0, 4))) == IOSummary("numpy.ndarray", (0, 4), "float64", 0, 0)


def test_numpy_subclasses_report_their_own_type(tmp_path):
    np = pytest.importorskip("numpy")
    masked = np.ma.masked_array([1.0, 2.0], mask=[0, 1])
    mm = np.memmap(tmp_path / "m.bin", dtype="float32", mode="w+", shape=(3, 4))
    for a in (masked, mm):
        assert summarize(a) == IOSummary(
            type_name=qualified(type(a)),
            shape=a.shape,
            dtype=str(a.dtype),
            length=a.shape[0],
            size_bytes=a.nbytes,
        )
    del mm


@pytest.mark.parametrize(
    "value",
    [
        "float64(1.5)",
        "int8(3)",
        "bool_(True)",
        "str_('abc')",
        "datetime64('2020-01-01')",
        "complex64(1j)",
        "uint64(2**63)",
    ],
)
def test_numpy_scalars(value):
    np = pytest.importorskip("numpy")  # noqa: F841 (used by eval)
    x = eval("np." + value)
    assert summarize(x) == IOSummary(
        type_name=qualified(type(x)),
        shape=(),
        dtype=str(x.dtype),
        size_bytes=x.itemsize,
        repr_short=repr(x),
    )


def test_numpy_large_array_is_freed_after_summarize():
    np = pytest.importorskip("numpy")
    a = np.ones((2000, 1000))
    ref = weakref.ref(a)
    before = sys.getrefcount(a)
    summarize(a)
    _core._summarize_loop(a, 10)
    assert sys.getrefcount(a) == before
    del a
    gc.collect()
    assert ref() is None


# --- pandas -------------------------------------------------------------------------------------


def pandas_expected(obj, pd) -> IOSummary:
    """The summary from the public API (tens of microseconds; summarize reads internals)."""
    if isinstance(obj, pd.DataFrame):
        names = list(dict.fromkeys(str(d) for d in obj.dtypes))
        dtype = ",".join(names[:8]) + (",..." if len(names) > 8 else "") if names else None
        return IOSummary(
            type_name=qualified(type(obj)),
            shape=obj.shape,
            dtype=dtype,
            length=len(obj),
            size_bytes=int(obj.memory_usage(deep=False).sum()),
        )
    return IOSummary(
        type_name=qualified(type(obj)),
        shape=obj.shape,
        dtype=str(obj.dtype),
        length=len(obj),
        size_bytes=int(obj.memory_usage(deep=False)),
    )


def pandas_frames(pd, np):
    n = 50
    frames = {
        "numeric": pd.DataFrame(
            {
                "a": np.arange(n, dtype="float64"),
                "b": np.arange(n),
                "c": np.ones(n, "float32"),
                "d": np.arange(n) % 2 == 0,
            }
        ),
        "single block": pd.DataFrame(np.zeros((n, 10))),
        "object": pd.DataFrame({"o": pd.Series(["x"] * n, dtype=object), "f": np.zeros(n)}),
        "strings": pd.DataFrame({"s": [f"s{i}" for i in range(n)], "f": np.zeros(n)}),
        "categorical": pd.DataFrame(
            {"c": pd.Categorical(["u", "v"] * (n // 2)), "i": np.arange(n)}
        ),
        "extension": pd.DataFrame(
            {
                "I": pd.array(range(n), dtype="Int64"),
                "B": pd.array([True] * n, dtype="boolean"),
                "F": pd.array([1.5] * n, dtype="Float32"),
            }
        ),
        "datetimes": pd.DataFrame(
            {
                "t": pd.date_range("2020", periods=n),
                "tz": pd.date_range("2020", periods=n, tz="UTC"),
                "td": pd.to_timedelta(np.arange(n), unit="s"),
            }
        ),
        "interleaved": pd.DataFrame(
            {
                "a": np.zeros(n),
                "b": np.arange(n),
                "c": np.ones(n),
                "d": ["x"] * n,
                "e": np.arange(n),
            }
        ),
        "multiindex": pd.DataFrame(
            {"v": np.arange(4.0)},
            index=pd.MultiIndex.from_arrays([[1, 1, 2, 2], ["a", "b", "a", "b"]]),
        ),
        "int index": pd.DataFrame({"v": np.arange(4.0)}, index=[10, 20, 30, 40]),
        "str index": pd.DataFrame({"v": np.arange(3.0)}, index=["a", "b", "c"]),
        "datetime index": pd.DataFrame(
            {"v": np.arange(3.0)}, index=pd.date_range("2021", periods=3)
        ),
        "empty": pd.DataFrame(),
        "no rows": pd.DataFrame(
            {"a": pd.Series([], dtype="float64"), "b": pd.Series([], dtype="int8")}
        ),
        "no columns": pd.DataFrame(index=range(5)),
        "sliced": pd.DataFrame({"a": np.arange(100.0), "b": np.arange(100)}).iloc[10:60:3],
        "nine dtypes": pd.DataFrame(
            {
                f"c{i}": np.zeros(3, dtype=t)
                for i, t in enumerate(["f8", "f4", "f2", "i8", "i4", "i2", "i1", "u1", "u2", "?"])
            }
        ),
    }
    unconsolidated = pd.DataFrame({"a": np.zeros(n)})
    for i in range(5):
        unconsolidated[f"x{i}"] = np.arange(n) * i  # one block per insert
    frames["unconsolidated"] = unconsolidated
    engine = pd.DataFrame({"v": np.arange(4.0)}, index=[3, 1, 2, 5])
    engine.loc[2]  # builds the index's hash table, which memory_usage counts
    frames["index engine"] = engine
    return frames


def test_pandas_frames_match_the_public_api():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    for name, df in pandas_frames(pd, np).items():
        expected = pandas_expected(df, pd)
        assert summarize(df) == expected, name
        assert summarize(df) == expected, name  # again, from the caches


def test_pandas_frame_exact_summary():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    df = pd.DataFrame(np.zeros((1000, 50)))
    assert summarize(df) == IOSummary(
        type_name=qualified(pd.DataFrame),
        shape=(1000, 50),
        dtype="float64",
        length=1000,
        size_bytes=400000 + df.index.memory_usage(),
    )
    mixed = pd.DataFrame(
        {"a": np.zeros(3), "b": pd.Series(["x"] * 3, dtype=object), "c": np.zeros(3)}
    )
    assert summarize(mixed).dtype == "float64,object"


def test_pandas_series_and_indexes_match_the_public_api():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    n = 20
    values = [
        pd.Series(np.arange(n, dtype="float32")),
        pd.Series(["a", "b"] * (n // 2)),
        pd.Series(["a"] * n, dtype=object),
        pd.Series(pd.Categorical(["u", "v"] * (n // 2))),
        pd.Series(range(n), dtype="Int64"),
        pd.Series(pd.date_range("2020", periods=n, tz="Europe/Paris")),
        pd.Series(np.arange(4), index=pd.MultiIndex.from_arrays([[1, 1, 2, 2], [3, 4, 3, 4]])),
        pd.Series([], dtype="float64"),
        pd.Index([1, 2, 3]),
        pd.Index(["a", "b"]),
        pd.RangeIndex(1000),
        pd.RangeIndex(-5, 10**12, 7),
        pd.MultiIndex.from_arrays([[1, 2], ["a", "b"]]),
        pd.CategoricalIndex(["a", "b", "a"]),
        pd.DatetimeIndex(["2020-01-01", "2020-01-02"]),
        pd.Index([1.5, 2.5]),
    ]
    cached = pd.RangeIndex(10)
    cached.memory_usage()  # pandas caches RangeIndex.nbytes
    values.append(cached)
    built = pd.Index([5, 3, 9])
    built.get_loc(3)  # builds the hash table
    values.append(built)
    for v in values:
        assert summarize(v) == pandas_expected(v, pd), repr(v)


def test_pandas_extension_arrays():
    pd = pytest.importorskip("pandas")
    for arr in (
        pd.Categorical(["a", "b", "a"]),
        pd.array([1, None, 3], dtype="Int64"),
        pd.array(["x", "y"]),
        pd.date_range("2020", periods=3, tz="UTC").array,
    ):
        assert summarize(arr) == IOSummary(
            type_name=qualified(type(arr)),
            shape=(len(arr),),
            dtype=str(arr.dtype),
            length=len(arr),
            size_bytes=arr.memory_usage(deep=False) if hasattr(arr, "memory_usage") else arr.nbytes,
        )


def test_pandas_subclass_is_summarized_as_a_frame():
    pd = pytest.importorskip("pandas")

    class MyFrame(pd.DataFrame):
        @property
        def _constructor(self):
            return MyFrame

    df = MyFrame({"a": [1.0, 2.0]})
    assert summarize(df) == pandas_expected(df, pd)


def test_pandas_frame_is_freed_after_summarize():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    df = pd.DataFrame(np.ones((100_000, 10)))
    ref = weakref.ref(df)
    before = sys.getrefcount(df)
    summarize(df)
    _core._summarize_loop(df, 10)
    assert sys.getrefcount(df) == before
    del df
    gc.collect()
    assert ref() is None


# --- scipy.sparse, pyarrow, polars --------------------------------------------------------------


def test_scipy_sparse_formats():
    sp = pytest.importorskip("scipy.sparse")
    np = pytest.importorskip("numpy")
    dense = np.eye(6) + np.eye(6, k=1)
    arrays = {
        "csr": ("data", "indices", "indptr"),
        "csc": ("data", "indices", "indptr"),
        "bsr": ("data", "indices", "indptr"),
        "coo": ("data", "row", "col"),
        "dia": ("data", "offsets"),
    }
    for fmt in ("csr", "csc", "bsr", "coo", "dia", "lil", "dok"):
        for kind in ("matrix", "array"):
            m = getattr(sp, f"{fmt}_{kind}")(dense)
            size = sum(getattr(m, a).nbytes for a in arrays[fmt]) if fmt in arrays else None
            assert summarize(m) == IOSummary(
                type_name=qualified(type(m)),
                shape=(6, 6),
                dtype="float64",
                size_bytes=size,
                repr_short=f"nnz={m.nnz}",
            ), (fmt, kind)


def test_pyarrow_tables_and_arrays():
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [1, 2, 3], "d": [1.5, None, 2.0]})
    assert summarize(table) == IOSummary(
        type_name="pyarrow.lib.Table",
        shape=(3, 4),
        dtype="int64,string,double",
        length=3,
        size_bytes=table.nbytes,
    )
    batch = table.to_batches()[0]
    assert summarize(batch) == IOSummary(
        type_name="pyarrow.lib.RecordBatch",
        shape=(3, 4),
        dtype="int64,string,double",
        length=3,
        size_bytes=batch.nbytes,
    )
    for arr in (
        pa.array([1, 2, 3]),
        pa.array(["a", None]),
        pa.chunked_array([[1, 2], [3]]),
        pa.array([[1], [2, 3]]),
    ):
        assert summarize(arr) == IOSummary(
            type_name=qualified(type(arr)),
            dtype=str(arr.type),
            length=len(arr),
            size_bytes=arr.nbytes,
        )


def test_polars_frames_series_and_lazy_frames():
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [4, 5, 6]})
    assert summarize(df) == IOSummary(
        type_name=qualified(type(df)),
        shape=(3, 3),
        dtype="Int64,String",
        length=3,
        size_bytes=df.estimated_size(),
    )
    s = pl.Series("f", [1.0, 2.0])
    assert summarize(s) == IOSummary(
        type_name=qualified(type(s)),
        shape=(2,),
        dtype="Float64",
        length=2,
        size_bytes=s.estimated_size(),
    )
    lazy = df.lazy().filter(pl.col("a") > 1)
    assert summarize(lazy) == IOSummary(
        type_name=qualified(type(lazy))
    )  # never collected, never repr'd


def test_functions_and_bound_methods_are_named_without_addresses_or_the_receiver():
    calls = []

    class Estimator:
        def __repr__(self):  # an sklearn estimator's repr pretty-prints its parameters: slow
            calls.append(1)
            return "Estimator(...)"

        def fit(self):
            return self

    def helper():
        return None

    method, function = summarize(Estimator().fit), summarize(helper)
    assert method.type_name == "method" and function.type_name == "function"
    # Bounded like every repr (80 characters); these local qualnames are longer.
    assert f"<bound method {Estimator.fit.__qualname__}>".startswith(method.repr_short.rstrip("."))
    assert f"<function {helper.__qualname__}>".startswith(function.repr_short.rstrip("."))
    assert " at 0x" not in function.repr_short
    assert calls == []
    assert summarize(print).repr_short == "<built-in function print>"
