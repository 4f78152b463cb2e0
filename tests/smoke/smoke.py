"""The smoke test CI runs on every CPython that requires-python admits: the
installed package imports, records one session at depth 2 and one at -1
with the tree a user expects, saves a profile and loads it back, and
takes per-span CPU time and allocated bytes (refused on free-threaded builds).

    python tests/smoke/smoke.py      # exit status 0 when all of it works
"""

from __future__ import annotations

import os
import sys
import tempfile


def leaf(x):
    return x + 1


def numbers(n):
    for i in range(n):
        yield leaf(i)


def allocate(n):
    return bytearray(n)


def predict(rows):
    total = sum(numbers(rows))
    return [leaf(total)]


def main() -> int:
    import mlflow_profiler
    from mlflow_profiler import _core, profiling

    name = lambda label: label.rsplit(".", 1)[-1]  # noqa: E731 (3.9/3.10 have no co_qualname)
    with profiling(depth=2) as shallow:
        assert predict(3) == [7]
    paths = [tuple(name(p) for p in r["call_path"].split("/")) for r in shallow.to_flat()]
    assert paths == [
        ("predict",),
        ("predict", "numbers"),
        ("predict", "numbers", "leaf"),
        ("predict", "numbers", "leaf"),
        ("predict", "numbers", "leaf"),
        ("predict", "leaf"),
    ], paths

    with profiling(depth=-1) as full:
        assert predict(3) == [7]
    assert full.statistics()["span_count"] == len(paths)
    assert full.statistics()["failures"] == [] and shallow.statistics()["failures"] == []

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "predict.json.gz")
        shallow.save(path)
        loaded = mlflow_profiler.load(path)
        assert [r["call_path"] for r in loaded.to_flat()] == [
            r["call_path"] for r in shallow.to_flat()
        ]

    # Per-span CPU time and allocated bytes on every version; free-threaded
    # builds refuse the allocation counter with a warning and record none.
    import warnings

    from mlflow_profiler import _native

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiling(depth=1, cpu_time=True, alloc_bytes=True) as values:
            assert len(allocate(1 << 20)) == 1 << 20
    span = next(s for s in values.spans if name(s.label) == "allocate")
    assert span.cpu_ns is not None and span.cpu_ns >= 0, span
    if _native.FREE_THREADED:
        assert span.alloc_bytes is None, span
        assert any("free-threaded" in str(w.message) for w in caught), [
            str(w.message) for w in caught
        ]
    else:
        assert span.alloc_bytes is not None and span.alloc_bytes >= 1 << 20, span

    state = _core.capture_state()
    assert (
        not state["eval_installed"] and not state["global_frames"] and state["tool_id"] == -1
    ), state
    print(
        f"smoke ok: CPython {sys.version.split()[0]}, {shallow.statistics()['engine']}, "
        f"{shallow.statistics()['span_count']} spans at depth 2, {full.statistics()['span_count']} at -1"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
