"""Helpers for the tests: tree shapes, walks and the time checks a user would do."""

from __future__ import annotations

import dis
import json
import os
import shutil
import sys
import threading
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from mlflow_profiler import ProfileSession, profiling

Shape = Tuple[Tuple[str, "Shape"], ...]


# Below every ceiling the native engine on 3.11+ runs frames with no hook at
# all (docs/capture.md): its events_skipped counts the frames below the
# ceiling that reached it, which is every one only on 3.9/3.10 (the profile
# function sees each frame) and in the reference engine.
NATIVE_SEES_EVERY_FRAME = sys.version_info < (3, 11)


def schedstat() -> Tuple[int, int]:
    """(on-CPU ns, run-queue ns) of the calling thread so far, from
    /proc/self/task/TID/schedstat: the kernel's oracle for time a busy
    machine kept a thread runnable but off the CPU, which a program's own
    clock counts as part of whatever it was timing."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        run, wait, _ = f.read().split()
    return int(run), int(wait)


def document_marks(session) -> Tuple[List[dict], dict]:
    """The session's document marks as dicts (names and resources as text),
    and the document itself."""
    doc = json.loads(session.to_json())
    rows = [dict(zip(doc["mark_fields"], r)) for r in doc.get("marks", [])]
    for r in rows:
        r["name"] = doc["strings"][r["name"]]
        r["resource"] = doc["strings"][r["resource"]] if r["resource"] else None
    return rows, doc


def instrumented(f) -> List[str]:
    """3.12+: the sys.monitoring-instrumented instructions of `f` as it is now."""
    return [i.opname for i in dis.get_instructions(f, adaptive=True) if "INSTRUMENTED" in i.opname]


def skipped_seen(engine: str, frames_below: int) -> Callable[[int], bool]:
    """What events_skipped may be for `frames_below` frames that ran below the ceiling."""
    if engine == "reference" or NATIVE_SEES_EVERY_FRAME:
        return lambda n: n == frames_below
    return lambda n: 0 <= n <= frames_below


def assert_skipped_agree(native: ProfileSession, reference: ProfileSession) -> None:
    """The native engine counts the skipped frames the reference counts, or
    (3.11+, where it does not see them) at most as many."""
    n = native.statistics()["events_skipped"]
    r = reference.statistics()["events_skipped"]
    assert n == r if NATIVE_SEES_EVERY_FRAME else 0 <= n <= r, (n, r)


def qn(qualname: str) -> str:
    """The displayed name of a function: its __qualname__ on 3.11+. On
    3.9/3.10 (no co_qualname) a method's is completed from `self` or `cls`,
    so only a function nested in another keeps its bare __name__."""
    if sys.version_info >= (3, 11):
        return qualname
    tail = qualname.rsplit("<locals>.", 1)[-1]
    return qualname if "." in tail else tail


def shape_of(nodes: List[dict]) -> Shape:
    """The shape of a to_tree() result: nested (label, children) tuples.
    Selector waits are left out: how many times an event loop waits depends
    on when other threads' results arrive, not on the engine."""
    return tuple((n["label"], shape_of(n["children"])) for n in nodes if "wait" not in n["flags"])


def shape(session: ProfileSession, depth: Optional[int] = None, **kw) -> Shape:
    return shape_of(session.to_tree(depth, **kw))


def prune(s: Shape, depth: int) -> Shape:
    """`s` without the nodes deeper than `depth` (0: roots only)."""
    return tuple((label, prune(children, depth - 1) if depth > 0 else ()) for label, children in s)


def shape_depth(s: Shape) -> int:
    """Deepest level present (0: roots only, -1: empty)."""
    if not s:
        return -1
    return 1 + max((shape_depth(c) for _, c in s), default=-1)


def walk(nodes: List[dict]) -> Iterator[dict]:
    """Pre-order walk of a to_tree() result."""
    stack = list(reversed(nodes))
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n["children"]))


def find(nodes: List[dict], label: str) -> List[dict]:
    return [n for n in walk(nodes) if n["label"] == label]


def labels(nodes: List[dict]) -> List[str]:
    return [n["label"] for n in walk(nodes)]


def count_shape(s: Shape, label: str) -> int:
    return sum((lab == label) + count_shape(c, label) for lab, c in s)


def same_lane(a: dict, b: dict) -> bool:
    return a["thread_id"] == b["thread_id"] and a["task"] == b["task"]


def check_times(session: ProfileSession) -> None:
    """What a user reading the times would expect: every span ends after it
    starts and inside the session, active time within wall time, a child
    runs inside its parent and the children's running times add up to at
    most the parent's. (Spans of another lane, a thread's target hung under the span
    that started it, may outlive that span, and spans still open or suspended
    when the session ended end with it: they are skipped.)"""
    roots = session.to_tree()
    stats = session.statistics()
    for n in walk(roots):
        assert n["start_ns"] <= n["end_ns"], n
        assert n["wall_ns"] == n["end_ns"] - n["start_ns"], n
        # The time shown: wall time, or a generator's running time (an
        # awaited one, on another lane or awaited by its parent, in flight:
        # its wall time). Of it, what waited.
        if "generator" in n["flags"]:
            assert 0 <= n["duration_ns"] <= n["active_ns"] or n["duration_ns"] == n["wall_ns"], n
        else:
            assert n["duration_ns"] == n["wall_ns"], n
        assert 0 <= n["waiting_ns"] <= n["duration_ns"], n
        assert stats["start_ns"] <= n["start_ns"], n
        if "open_at_end" not in n["flags"] and "suspended_at_end" not in n["flags"]:
            assert n["end_ns"] <= stats["end_ns"], n
        assert 0 <= n["active_ns"] <= n["wall_ns"], n
        kids = [
            c
            for c in n["children"]
            if same_lane(c, n)
            and "open_at_end" not in c["flags"]
            and "suspended_at_end" not in c["flags"]
        ]
        for c in kids:
            assert n["start_ns"] <= c["start_ns"] and c["end_ns"] <= n["end_ns"], (
                n["label"],
                c["label"],
            )
        # A generator's wall time holds its consumer's calls made while it was
        # suspended (siblings of it): its running time is what adds up.
        assert sum(c["active_ns"] for c in kids) <= n["wall_ns"], n["label"]
        assert_times_add_up(n)
        starts = [c["start_ns"] for c in n["children"]]
        assert starts == sorted(starts), "children are in start order"


def assert_times_add_up(node: dict) -> None:
    """The tree's promise (docs/capture.md, "Times add up"): a node's
    time as shown is at least the sum of its children's on its own lane
    (a thread hung under the span that started it runs beside it)."""
    kids = [c for c in node["children"] if same_lane(c, node)]
    total = sum(c["duration_ns"] for c in kids)
    assert total <= node["duration_ns"], (
        f"{node['label']}: {node['duration_ns']} ns shown, its children add up to {total} ns: "
        + ", ".join(f"{c['label']} {c['duration_ns']}" for c in kids)
    )


def run_engines(
    program: Callable[[], object], engines=("native", "reference"), **kw
) -> Dict[str, ProfileSession]:
    """Runs `program` once under each engine with the same options."""
    out = {}
    for engine in engines:
        with profiling(engine=engine, **kw) as session:
            program()
        out[engine] = session
    return out


def native_defect(request, engine: str, reason: str, when: bool = True) -> None:
    """Marks this run as an expected failure of the native engine (strict:
    the run must fail, so a fix shows up as XPASS). Only for defects of
    pyext/ against docs/capture.md; the reference run stays a plain test."""
    if engine == "native" and when:
        request.applymarker(pytest.mark.xfail(strict=True, reason="native: " + reason))


def require_tool(path, what: str, how: str):
    """Returns `path`, the external tool a test needs. If it is None: a skip
    that says how to install it, or a failure under MLPROF_REQUIRE_TOOLS=1
    (CI installs every tool; a skip there would hide an untested consumer)."""
    import os

    if path is None:
        if os.environ.get("MLPROF_REQUIRE_TOOLS") == "1":
            pytest.fail(f"{what} is required here (MLPROF_REQUIRE_TOOLS=1); install it: {how}")
        pytest.skip(f"{what} is not installed ({how})", allow_module_level=True)
    return path


def require_mlflow():
    """Returns the mlflow module. Without it: a skip that names the extra, or a
    failure under MLPROF_REQUIRE_MLFLOW=1 (CI installs it; a skip there would
    hide the whole integration)."""
    import os

    try:
        import mlflow
    except ImportError as exc:
        if os.environ.get("MLPROF_REQUIRE_MLFLOW") == "1":
            pytest.fail(
                f"MLflow is required here (MLPROF_REQUIRE_MLFLOW=1): {exc}; "
                "pip install 'mlflow-profiler[mlflow]'"
            )
        # allow_module_level: test modules call this at import
        pytest.skip(
            "MLflow is not installed (pip install 'mlflow-profiler[mlflow]')",
            allow_module_level=True,
        )
    return mlflow


def duckdb_with(extension: str, tmp_path):
    """A DuckDB connection with its `sqlite` or `postgres` extension loaded
    from the PyPI wheel (duckdb-extension-sqlite, -postgres), not from
    DuckDB's download server: CI has no access to it. The wheel names the
    file `sqlite.duckdb_extension`; LOAD wants the extension's canonical
    name, `sqlite_scanner`, so it is loaded from a copy of that name."""
    import glob
    import importlib
    import os
    import shutil

    try:
        duckdb = importlib.import_module("duckdb")
        package = importlib.import_module(f"duckdb_extension_{extension}")
    except ImportError:
        require_tool(
            None,
            f"duckdb and duckdb-extension-{extension}",
            f"pip install duckdb==1.5.5 duckdb-extension-{extension}==1.5.5",
        )
    (found,) = glob.glob(
        os.path.join(
            os.path.dirname(package.__file__), "extensions", "*", f"{extension}.duckdb_extension"
        )
    )
    copy = os.path.join(str(tmp_path), f"{extension}_scanner.duckdb_extension")
    shutil.copyfile(found, copy)
    con = duckdb.connect()
    con.execute(f"LOAD '{copy}'")
    return con


def tree_lines(text: str) -> list:
    """The node lines of a printed tree, without the footer that says how
    much of the profiler's own work was left out (printed when it reaches
    0.1 ms and 1% of the session, which a loaded machine's first sight of a
    few functions can)."""
    return [ln for ln in text.splitlines() if not ln.startswith("(profiler's own work: ")]


def require_bpf() -> str:
    """bpftrace, as root. Otherwise a skip, or a failure under MLPROF_REQUIRE_BPF=1."""
    why = None
    path = shutil.which("bpftrace")
    if path is None:
        why = "bpftrace is not installed (apt-get install bpftrace)"
    elif os.geteuid() != 0:
        why = "attaching USDT probes needs root (or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE)"
    if why:
        if os.environ.get("MLPROF_REQUIRE_BPF") == "1":
            pytest.fail(f"{why}; required here (MLPROF_REQUIRE_BPF=1)")
        pytest.skip(why)
    return path  # type: ignore[return-value]
