"""profile_span and profile_block."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from _helpers import check_times, qn, shape, walk

from mlflow_profiler import profile_block, profile_span, profiling


def leaf(x):
    return x + 1


@profile_span("preprocess")
def preprocess(x):
    return leaf(x) * 2


@profile_span("stream")
def stream(n):
    for i in range(n):
        yield leaf(i)


@profile_span("fetch")
async def fetch(x):
    await asyncio.sleep(0)
    return leaf(x)


class Model:
    @profile_span("model.step")
    def step(self, x):
        return leaf(x)

    @profile_span
    def bare(self, x):
        return x


@profile_span
def bare_function(x):
    return leaf(x)


def test_label_replaces_the_auto_captured_node(engine):
    def run():
        return preprocess(1)

    with profiling(depth=-1, engine=engine) as session:
        assert run() == 4
    (root,) = session.to_tree()
    assert shape(session) == ((root["label"], (("preprocess", (("leaf", ()),)),)),)
    node = root["children"][0]
    assert node["function"] == "preprocess"  # the code's own name stays available
    assert "labelled" in node["flags"]
    assert node["is_user_code"]
    assert len(list(walk(session.to_tree()))) == 3  # no second node for the wrapper
    check_times(session)


def test_label_on_a_generator_function(engine):
    def run():
        return list(stream(3))

    with profiling(depth=-1, engine=engine) as session:
        assert run() == [1, 2, 3]
    (root,) = session.to_tree()
    (node,) = root["children"]
    assert node["label"] == "stream"
    assert node["function"] == "stream"
    assert set(node["flags"]) == {"labelled", "generator"}
    assert [c["label"] for c in node["children"]] == ["leaf"] * 3


def test_label_on_an_async_function(engine):
    async def main():
        with profiling(depth=1, engine=engine) as session:
            assert await fetch(1) == 2
        return session

    session = asyncio.run(main())
    nodes = [n for n in session.to_tree() if n["label"] == "fetch"]
    assert len(nodes) == 1
    assert nodes[0]["function"] == "fetch"
    assert "labelled" in nodes[0]["flags"] and "generator" in nodes[0]["flags"]
    assert [c["label"] for c in nodes[0]["children"]] == ["sleep", "leaf"]


def test_label_on_methods(engine):
    m = Model()
    with profiling(depth=-1, engine=engine) as session:
        m.step(1)
        m.bare(2)
    assert shape(session) == (("model.step", (("leaf", ()),)), ("Model.bare", ()))
    assert session.to_tree()[1]["function"] == qn("Model.bare")


def test_bare_decorator_uses_the_qualname(engine):
    with profiling(depth=-1, engine=engine) as session:
        bare_function(1)
    assert shape(session) == (("bare_function", (("leaf", ()),)),)
    assert bare_function.__name__ == "bare_function"
    assert bare_function.label == "bare_function"


def test_the_wrapper_is_a_functools_wrapper():
    # inspect.signature, inspect.unwrap and MLflow's signature inference read
    # through it; the function's own attributes are copied.
    def scale(df, factor: float = 2.0) -> float:
        """Scales."""
        return df * factor

    scale.tag = "kept"
    wrapped = profile_span(scale)
    assert wrapped.__wrapped__ is scale and inspect.unwrap(wrapped) is scale
    assert inspect.signature(wrapped) == inspect.signature(scale)
    assert wrapped.__doc__ == "Scales." and wrapped.tag == "kept"
    assert wrapped(3) == 6.0


def test_no_session_calls_through():
    sentinel = object()

    @profile_span("identity")
    def identity(x):
        return x

    assert identity(sentinel) is sentinel
    assert preprocess(1) == 4
    assert list(stream(2)) == [1, 2]
    assert asyncio.run(fetch(1)) == 2
    assert Model().step(1) == 2

    @profile_span("raises")
    def raises():
        raise KeyError("k")

    with pytest.raises(KeyError):
        raises()
    with profile_block("nothing") as blk:
        assert leaf(1) == 2
    assert blk.label == "nothing"


def test_the_wrappers_free_their_reference_to_their_type(engine):
    """profile_block and profile_span objects are of heap types: each holds
    a reference to its type, which its deallocation must give back (it did
    not: a block's type gained one reference a `with profile_block`)."""
    import sys

    def blocks_and_spans():  # its own frame: 3.9/3.10's profile function makes
        for _ in range(500):  # a locals dict of the frames it reports
            with profile_block("b"):
                pass
            profile_span("s")(leaf)

    block_type, span_type = type(profile_block("b")), type(profile_span("s")(leaf))
    with profiling(depth=2, engine=engine):  # the engine's first session imports its
        pass  # modules (the reference hook's tuple of our types, on 3.9/3.10)
    before = sys.getrefcount(block_type), sys.getrefcount(span_type)
    with profiling(depth=2, engine=engine):
        blocks_and_spans()
    after = sys.getrefcount(block_type), sys.getrefcount(span_type)  # not in the assert:
    assert after == before  # pytest's rewriting keeps the operand (one reference more)


def test_decorated_results_are_the_same_in_a_session(engine):
    sentinel = object()

    @profile_span("identity")
    def identity(x, *, k=None):
        return x, k

    div = profile_span("div")(lambda: 1 / 0)
    with profiling(engine=engine):
        same = identity(sentinel, k=3) == (sentinel, 3)
        listed = list(stream(2))
        try:
            div()
            raised = False
        except ZeroDivisionError:
            raised = True
    assert same and listed == [1, 2] and raised


def test_profile_block_nesting(engine):
    def run():
        with profile_block("outer"):
            leaf(1)
            with profile_block("inner"):
                leaf(2)
            leaf(3)

    with profiling(depth=-1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    assert shape(session) == (
        (root["label"], (("outer", (("leaf", ()), ("inner", (("leaf", ()),)), ("leaf", ()))),)),
    )
    outer = root["children"][0]
    assert "block" in outer["flags"] and outer["is_user_code"]
    check_times(session)


def test_decorators_inside_the_tree_at_the_right_depth(engine):
    def run():
        return preprocess(1) + stepper()

    def stepper():
        with profile_block("steps"):
            return Model().step(1)

    with profiling(depth=2, engine=engine) as session:
        run()
    depths = {n["label"]: n["depth"] for n in walk(session.to_tree())}
    assert depths["preprocess"] == 1
    assert depths["leaf"] == 2
    assert depths["steps"] == 2
    assert "model.step" not in depths  # depth 3: below the ceiling
    with profiling(depth=3, engine=engine) as session:
        run()
    depths = [(n["label"], n["depth"]) for n in walk(session.to_tree())]
    assert ("model.step", 3) in depths
    assert ("leaf", 4) not in depths


def test_calls_inside_a_block_at_the_ceiling_are_not_recorded(engine, request):
    def stepper():
        with profile_block("steps"):
            leaf(1)
            leaf(2)
            leaf(3)
        leaf(4)

    def run():
        stepper()

    with profiling(depth=2, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    assert shape(session) == (
        (root["label"], ((root["children"][0]["label"], (("steps", ()), ("leaf", ()))),)),
    )
    assert max(n["depth"] for n in walk(session.to_tree())) == 2


def test_block_below_the_ceiling_is_not_recorded(engine):
    def run():
        with profile_block("deep"):
            leaf(1)

    with profiling(depth=0, engine=engine) as session:
        run()
    assert len(shape(session)) == 1 and shape(session)[0][1] == ()
    assert session.statistics()["span_count"] == 1


def test_profile_span_on_a_builtin_is_a_block(engine):
    sort = profile_span("sorting")(sorted)

    def run():
        return sort([3, 1, 2])

    with profiling(depth=-1, engine=engine) as session:
        assert run() == [1, 2, 3]
    (root,) = session.to_tree()
    (node,) = root["children"]
    assert node["label"] == "sorting"
    assert "block" in node["flags"]


def test_profile_span_rejects_a_non_string_label():
    with pytest.raises(TypeError, match="label must be a str"):
        profile_span(123)
    with pytest.raises(TypeError, match="callable"):
        profile_span("x")(42)


def test_label_only_applies_to_its_own_call(engine):
    def run():
        preprocess(1)
        leaf(5)  # not labelled
        preprocess(2)

    with profiling(depth=1, engine=engine) as session:
        run()
    (root,) = session.to_tree()
    assert [c["label"] for c in root["children"]] == ["preprocess", "leaf", "preprocess"]
    assert [("labelled" in c["flags"]) for c in root["children"]] == [True, False, True]
