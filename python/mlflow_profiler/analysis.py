"""Questions over many profiles (docs/store.md, "Analysis"): where the time
goes, by call path, across files and stores.

    from mlflow_profiler import analysis

    result = analysis.top(["profiles.db"], where={"model": "fraud"})
    print(result.to_text(limit=10))

The statistics are the core's (core/path_stats: the ProfileCollector's
call-path statistics, with off-CPU time where the agent gave it); this
module picks the profiles and ranks the paths.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from ._errors import AnalysisError

__all__ = [
    "AnalysisError",
    "Bubbles",
    "Diff",
    "DiffError",
    "DiffPath",
    "FunctionRow",
    "FunctionTop",
    "Sampled",
    "SampledFunctionRow",
    "SampledFunctions",
    "SampledRow",
    "Top",
    "TopRow",
    "bubbles",
    "diff",
    "profiles",
    "top",
    "top_functions",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _is_store(target: str) -> bool:
    if target.startswith(("sqlite:///", "postgresql://", "postgres://")):
        return True
    try:
        with open(target, "rb") as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def _run_id(target: str) -> Optional[str]:
    """The run id of `runs:/<id>` or of a bare 32-hex MLflow run id."""
    if target.startswith("runs:/"):
        return target[len("runs:/") :].strip("/").split("/")[0]
    if (
        len(target) == 32
        and all(c in "0123456789abcdef" for c in target)
        and not os.path.exists(target)
    ):
        return target
    return None


def _run_profiles(run_id: str) -> Iterator:
    """The profiles an MLflow run holds: every `profile.json` among its
    artifacts (log_profile's, and the serving delivery thread's one per profile)."""
    import tempfile

    from ._files import load
    from .mlflow_sink import _client, import_mlflow

    client = _client(import_mlflow("mlprof diff of run ids"))
    found: List[str] = []
    todo = [""]
    while todo:
        folder = todo.pop()
        for f in client.list_artifacts(run_id, folder or None):
            if f.is_dir:
                todo.append(f.path)
            elif f.path.rsplit("/", 1)[-1] == "profile.json":
                found.append(f.path)
    with tempfile.TemporaryDirectory(prefix="mlprof-run-") as tmp:
        for path in sorted(found):
            yield load(client.download_artifacts(run_id, path, tmp))


def _expand(target: str) -> List[str]:
    """A directory stands for the profile documents in it."""
    if os.path.isdir(target):
        names = sorted(n for n in os.listdir(target) if n.endswith((".json", ".json.gz")))
        return [os.path.join(target, n) for n in names]
    return [target]


def profiles(
    inputs: Sequence[Union[str, os.PathLike]], where: Optional[Mapping[str, str]] = None
) -> Iterator:
    """The profiles (ProfileSessions) of `inputs`: profile documents,
    directories of them, MLflow runs (a run id or ``runs:/<id>``: every
    ``profile.json`` among its artifacts), and stores (a SQLite file,
    ``sqlite:///path``, ``postgresql://...``) whose every source matching
    `where` is read. `where` {key: value} matches a
    store source's model, version, run_id, host, type or pid, a label it was
    added with, or a key of its meta; for a file, a key of its meta."""
    from ._files import load
    from .store import open_store

    where = dict(where or {})
    targets = [t for item in inputs for t in _expand(os.fspath(item))]
    for target in targets:
        run_id = _run_id(target)
        if run_id is not None:
            yield from _run_profiles(run_id)
        elif _is_store(target):
            with open_store(
                target, create=False
            ) as store:  # reading: a store that is not there is an error
                for source_id in store.source_ids(where):
                    yield store.load(source_id)
        else:
            session = load(target)
            meta = session._built().meta
            if all(meta.get(k) == v for k, v in where.items()):
                yield session


@dataclasses.dataclass(frozen=True)
class TopRow:
    """One call path: its calls, their wall, self, waiting and off-CPU
    times (milliseconds: p50, p95, p99, total; off-CPU None without kernel
    data), and its share of all the self time. Self time is running time:
    the call's wall less its waiting, less its same-thread children's
    running time (views/path_stats.h). Waiting (`waiting`) is the part of the
    wall the call was suspended at an await or yield, or off the CPU (asleep
    in sleep, a lock, select or I/O, or in the run queue) at any depth, also
    below the capture's depth ceiling. `kernel` (the agent's data; None
    without): where the calls' own thread spent its time, mean milliseconds
    per call: on_cpu, blocked (asleep), runq (waiting for a CPU), gil (of
    blocked, waiting for the GIL), over `calls` calls."""

    path: List[str]
    count: int
    sessions: int
    incomplete: int
    share: float
    wall: Dict[str, float]
    self_time: Dict[str, float]
    off_cpu: Optional[Dict[str, float]]
    kernel: Optional[Dict[str, float]] = None
    waiting: Optional[Dict[str, float]] = None


@dataclasses.dataclass(frozen=True)
class SampledRow:
    """One call path of sampled stacks (py-spy, pprof, a sampled speedscope
    or folded stacks, which have no calls to time): per value type, as
    Sampled.value_types orders them, the values of the samples whose leaf
    it is (self) and of those at or under it (total); its share of the
    ranking type's self values."""

    path: List[str]
    self_values: List[int]
    total_values: List[int]
    share: float


@dataclasses.dataclass(frozen=True)
class Sampled:
    """The sampled-stack sources of a top(): their paths, most self value of
    the ranking type (the first time-valued type, else the first) first."""

    sources: int
    samples: int
    value_types: List[List[str]]
    rank_by: int
    rows: List[SampledRow]


@dataclasses.dataclass(frozen=True)
class Top:
    """The call paths ranked by self time (`top()`); `sampled` holds the
    stores' sampled-stack sources (None when there were none)."""

    rows: List[TopRow]
    sessions: int
    self_total_ms: float
    where: Dict[str, str]
    sampled: Optional[Sampled] = None
    profiles: Optional[int] = None  # the documents or stored sources read, when not one per session

    def to_json(self) -> str:
        """The result as JSON (`mlprof top --format json`)."""
        return json.dumps(
            {
                "sessions": self.sessions,
                "profiles": self.profiles,
                "self_total_ms": self.self_total_ms,
                "where": self.where,
                "paths": [dataclasses.asdict(r) for r in self.rows],
                "sampled": dataclasses.asdict(self.sampled) if self.sampled else None,
            },
            indent=2,
        )

    def to_text(self, limit: Optional[int] = 20) -> str:
        """A table, most self (running) time first: share, calls, wall and
        self p50, p95, p99, waiting p95, off-CPU p95 (only where the agent
        measured it), then with the
        agent's data the mean per call of the own thread's on-CPU, blocked,
        run-queue and GIL-wait time, path; then the sampled stacks' paths,
        if any."""
        text = self._spans_text(limit) if self.sessions or not self.sampled else ""
        return text + (_sampled_text(self.sampled, limit) if self.sampled else "")

    def _spans_text(self, limit: Optional[int]) -> str:
        rows = self.rows if limit is None else self.rows[:limit]
        lines = [self._headline()]
        if not rows:
            return lines[0] + "\n"
        kernel = any(r.kernel for r in rows)
        off_cpu = any(r.off_cpu for r in rows)
        header = [
            "share",
            "calls",
            "wall p50",
            "p95",
            "p99",
            "self p50",
            "p95",
            "p99",
            "waiting p95",
        ]
        header += ["off-CPU p95"] if off_cpu else []
        header += ["on-CPU", "blocked", "runq", "GIL"] if kernel else []
        header.append("path")
        table = [header]
        for r in rows:
            cells = [
                f"{100 * r.share:.1f}%",
                f"{r.count:,}",
                _ms(r.wall["p50"]),
                _ms(r.wall["p95"]),
                _ms(r.wall["p99"]),
                _ms(r.self_time["p50"]),
                _ms(r.self_time["p95"]),
                _ms(r.self_time["p99"]),
                _ms(r.waiting["p95"]) if r.waiting else "-",
            ]
            if off_cpu:
                cells.append(_ms(r.off_cpu["p95"]) if r.off_cpu else "-")
            if kernel:
                cells += [
                    _ms(r.kernel[k]) if r.kernel else "-"
                    for k in ("on_cpu", "blocked", "runq", "gil")
                ]
            table.append(cells + ["/".join(r.path)])
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        for row in table:
            cells = [c.rjust(w) for c, w in zip(row[:-1], widths)]
            lines.append("  ".join(cells + [row[-1]]))
        if limit is not None and len(self.rows) > limit:
            lines.append(f"({len(self.rows) - limit} more paths: --limit)")
        lines.append(_SELF_WAITING_LEGEND)
        if off_cpu:
            lines.append(
                "off-CPU: the call's time off the CPU while it was open, any thread (the agent's kernel "
                "data)"
            )
        if kernel:
            lines.append(
                "on-CPU, blocked, runq, GIL: mean per call of the call's own thread (the agent's kernel "
                "data): on the CPU, asleep, waiting for a CPU, and of asleep, waiting for the GIL"
            )
        return "\n".join(lines) + "\n"

    def _headline(self) -> str:
        where = "".join(f", {k}={v}" for k, v in self.where.items())
        held = (
            f" in {self.profiles} profile{'s' if self.profiles != 1 else ''}"
            if self.profiles is not None and self.profiles != self.sessions
            else ""
        )
        return (
            f"top: {self.sessions} session{'s' if self.sessions != 1 else ''}{held}, {len(self.rows)} call "
            f"path{'s' if len(self.rows) != 1 else ''}, {_ms(self.self_total_ms)} of self (running) "
            f"time{where}"
        )

    def to_html(self, inputs: Optional[Sequence[str]] = None) -> str:
        """A self-contained HTML page of every path (`mlprof top --html`):
        the same figures as to_text in a sortable table, with the report's
        look (the core's template and CSS). `inputs` (the stores and files
        read) go in the header.

            analysis.top(["profiles.db"]).write_html("top.html", inputs=["profiles.db"])
        """
        columns = [
            ("share", "its self (running) time over all the self time"),
            ("calls", "complete calls"),
            ("wall p50", "wall time, median"),
            ("wall p95", ""),
            ("wall p99", ""),
            ("self p50", "running time (wall less waiting) less the children's in the same thread"),
            ("self p95", ""),
            ("self p99", ""),
            (
                "waiting p95",
                "suspended at an await or yield, or off the CPU (asleep, in the run queue), "
                "at any depth",
            ),
        ]
        off_cpu = any(r.off_cpu for r in self.rows)
        if off_cpu:
            columns.append(("off-CPU p95", "time off the CPU (the agent's kernel data; - without)"))
        kernel = any(r.kernel for r in self.rows)
        if kernel:
            columns += [
                ("on-CPU", "the call's own thread on the CPU, mean per call"),
                ("blocked", "asleep (I/O, locks, sleep, the GIL), mean per call"),
                ("runq", "runnable, waiting for a CPU, mean per call"),
                ("GIL", "of blocked, waiting for the GIL, mean per call"),
            ]
        rows = []
        for r in self.rows:
            off = r.off_cpu["p95"] if r.off_cpu else None
            cells: List[Tuple[str, Any]] = [
                (f"{100 * r.share:.1f}%", r.share),
                (f"{r.count:,}", r.count),
            ]
            cells += [(_ms(r.wall[q]), r.wall[q]) for q in ("p50", "p95", "p99")]
            cells += [(_ms(r.self_time[q]), r.self_time[q]) for q in ("p50", "p95", "p99")]
            waited = r.waiting["p95"] if r.waiting else None
            cells.append((_ms(waited), waited))
            if off_cpu:
                cells.append((_ms(off), off))
            if kernel:
                cells += [
                    (_ms(r.kernel[k]) if r.kernel else "-", r.kernel[k] if r.kernel else None)
                    for k in ("on_cpu", "blocked", "runq", "gil")
                ]
            rows.append({"cells": cells, "path": list(r.path), "mark": None, "note": ""})
        facts = [("inputs", ", ".join(os.fspath(i) for i in inputs))] if inputs else []
        facts += [
            ("sessions", f"{self.sessions:,}"),
            ("call paths", f"{len(self.rows):,}"),
            ("self time", _ms(self.self_total_ms)),
        ]
        facts += (
            [("where", ", ".join(f"{k}={v}" for k, v in self.where.items()))] if self.where else []
        )
        return _html_page("top", self._headline(), facts, [], columns, rows, self.to_json())

    def write_html(
        self, path: Union[str, os.PathLike], inputs: Optional[Sequence[str]] = None
    ) -> str:
        """Writes to_html(inputs) to `path` (atomically); returns the path."""
        return _write_page(path, self.to_html(inputs))


def _html_page(kind: str, title: str, facts, notes, columns, rows, result_json: str) -> str:
    """The page of an analysis result: the payload analysis.js reads
    (userspace/core/render/report/analysis.js), in the core's template."""
    payload = {
        "kind": kind,
        "title": title,
        "facts": [list(f) for f in facts],
        "notes": list(notes),
        "columns": [{"name": n, "help": h} for n, h in columns],
        "rows": rows,
        "result": json.loads(result_json),
    }
    return _core.analysis_html(json.dumps(payload))


def _write_page(path: Union[str, os.PathLike], text: str) -> str:
    """Writes `text` to `path` as the core writes every output: through a
    temporary file in its directory and a rename (a reader sees the old page
    or the new one, never half), a new file 0644 less the umask."""
    path = os.fspath(path)
    _core.write_file(path, text.encode("utf-8"))
    return path


_TIME_UNITS = {
    "nanoseconds": 1,
    "ns": 1,
    "microseconds": 1_000,
    "us": 1_000,
    "milliseconds": 1_000_000,
    "ms": 1_000_000,
    "seconds": 1_000_000_000,
    "s": 1_000_000_000,
}


def _value(value: int, unit: str) -> str:
    scale = _TIME_UNITS.get(unit)
    if scale is not None:
        return _core.format_duration(int(value) * scale)
    return f"{value:,}" if unit == "count" else f"{value:,} {unit}"


def _sampled_text(sampled: Sampled, limit: Optional[int]) -> str:
    """The sampled stacks' table: share, self, total (of the ranking type), path."""
    kind, unit = (
        sampled.value_types[sampled.rank_by] if sampled.value_types else ("samples", "count")
    )
    types = ", ".join(f"{t} ({u})" for t, u in sampled.value_types) or "none"
    lines = [
        f"sampled stacks: {sampled.sources} source{'s' if sampled.sources != 1 else ''}, "
        f"{sampled.samples:,} samples, {len(sampled.rows)} call path{'s' if len(sampled.rows) != 1 else ''}; "
        f"values {types}; ranked by {kind} as the leaf (self)"
    ]
    rows = sampled.rows if limit is None else sampled.rows[:limit]
    table = [["share", f"self {kind}", f"total {kind}", "path"]]
    for r in rows:
        table.append(
            [
                f"{100 * r.share:.1f}%",
                _value(r.self_values[sampled.rank_by], unit),
                _value(r.total_values[sampled.rank_by], unit),
                "/".join(r.path),
            ]
        )
    if rows:
        widths = [max(len(row[i]) for row in table) for i in range(3)]
        lines += [
            "  ".join([c.rjust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]) for row in table
        ]
    if limit is not None and len(sampled.rows) > limit:
        lines.append(f"({len(sampled.rows) - limit} more paths: --limit)")
    return "\n".join(lines) + "\n"


def _sampled(totals) -> Optional[Sampled]:
    """The Sampled of a _core.StackPathTotals (None when it saw no source)."""
    summary = totals.summary()
    if not summary["sources"]:
        return None
    types = [list(t) for t in summary["value_types"]]
    rank_by = next((i for i, (_, unit) in enumerate(types) if unit in _TIME_UNITS), 0)
    total = sum(r["self"][rank_by] for r in summary["rows"]) if types else 0
    rows = [
        SampledRow(
            path=r["path"],
            self_values=r["self"],
            total_values=r["total"],
            share=(r["self"][rank_by] / total) if total > 0 else 0.0,
        )
        for r in summary["rows"]
    ]
    if types:
        rows.sort(key=lambda r: (-r.self_values[rank_by], -r.total_values[rank_by], r.path))
    return Sampled(
        sources=summary["sources"],
        samples=summary["samples"],
        value_types=types,
        rank_by=rank_by,
        rows=rows,
    )


_SELF_WAITING_LEGEND = (
    "self: the call's running time (its wall less its waiting) less its same-thread children's, "
    "the share is of all the self time; waiting: of the wall, suspended at an await or yield, "
    "or off the CPU (asleep in sleep, a lock, select or I/O, or in the run queue) at any depth"
)


def _ms(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return _core.format_duration(int(round(value * 1e6)))


def _figures(entry: Mapping[str, Any], prefix: str) -> Dict[str, float]:
    return {
        "p50": entry[prefix + "p50_ms"],
        "p95": entry[prefix + "p95_ms"],
        "p99": entry[prefix + "p99_ms"],
        "total": entry[prefix + "total_ms"],
    }


def _add_inputs(stats, inputs, where: Optional[Mapping[str, str]], depth: int, stacks=None) -> int:
    """Feeds `inputs` (files, stores, runs or ProfileSessions, see profiles())
    to a _core.CallPathStats; returns the number of profiles added. A store's
    sources are read as rows in ranges (store/store_scan.h), never built as
    trees one by one. Sampled stacks (a store's, or another tool's file)
    go to `stacks` (a _core.StackPathTotals) when given."""
    from .store import StoreError, open_store

    items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if items and all(hasattr(i, "_built") for i in items):
        for session in items:
            stats.add(session._built(), depth)
        return len(items)
    count = 0
    for target in [t for item in items for t in _expand(os.fspath(item))]:
        if _run_id(target) is None and _is_store(target):
            with open_store(target, create=False) as store:
                ids = store.source_ids(where)
                added = stats.add_store(store._driver, store._driver.dialect, ids, depth)
                if isinstance(added, tuple):
                    raise StoreError(added[1], kind=added[0], target=store.target)
                count += added
                if stacks is not None:
                    sampled = {
                        r[0]
                        for r in store._driver.query(
                            "SELECT source_id FROM sources WHERE sample_kind = 'stacks'", ()
                        )
                    }
                    for source_id in ids:
                        if source_id in sampled:
                            stacks.add(store.load_stacks(source_id), depth)
            continue
        if stacks is not None and os.path.isfile(target):
            with open(target, "rb") as f:
                data = f.read()
            if _core.detect_input(data) not in ("document", "unknown"):  # another tool's file
                imported = _core.import_profile(data)
                if isinstance(imported, tuple):
                    from ._files import ProfileLoadError

                    raise ProfileLoadError(
                        f"cannot import {target!r}: {imported[1]}", kind=imported[0], path=target
                    )
                if isinstance(imported, _core.StackSamples):
                    stacks.add(imported, depth)
                else:
                    stats.add(imported, depth)
                    count += 1
                continue
        for session in profiles([target], where):
            stats.add(session._built(), depth)
            count += 1
    return count


def top(
    inputs: Union[Sequence[Union[str, os.PathLike]], Iterable[Any]],
    *,
    where: Optional[Mapping[str, str]] = None,
    depth: Optional[int] = None,
    by: str = "path",
) -> Union[Top, FunctionTop]:
    """The bottlenecks by call path over `inputs` (files and stores, see
    profiles(); or ProfileSessions): per path the calls, the p50/p95/p99 of
    wall, self (running), waiting and off-CPU time, and its share of all the
    self time, most self time first: a call that slept or awaited ranks by
    the time it ran, its waits are in `waiting`. depth: paths deeper than
    this fold into their ancestors' self time (their waits stay waits). by="function": time per function instead
    (top_functions(), a FunctionTop)."""
    if by == "function":
        return top_functions(inputs, where=where, depth=depth)
    if by != "path":
        raise ValueError(f"by must be 'path' or 'function', got {by!r}")
    stats = _core.CallPathStats(1_000_000)
    stacks = _core.StackPathTotals()
    cut = -1 if depth is None else depth
    count = _add_inputs(stats, inputs, where, cut, stacks)
    summary = stats.summary(cut)
    total = math.fsum(
        e["self_total_ms"] for e in summary.values()
    )  # exact: the same whatever the paths' order
    rows = [
        TopRow(
            path=list(e["path"]),
            count=e["count"],
            sessions=e["sessions"],
            incomplete=e["incomplete"],
            share=(e["self_total_ms"] / total) if total > 0 else 0.0,
            wall=_figures(e, ""),
            self_time=_figures(e, "self_"),
            off_cpu=_figures(e, "off_cpu_") if e["off_cpu_count"] else None,
            kernel=_kernel_means(e),
            waiting=_figures(e, "waiting_"),
        )
        for e in summary.values()
        if e["count"] > 0
    ]
    rows.sort(key=lambda r: (-r.self_time["total"], r.path))
    sessions = stats.statistics()["session_count"]
    return Top(
        rows=rows,
        sessions=sessions,
        self_total_ms=total,
        where=dict(where or {}),
        sampled=_sampled(stacks),
        profiles=count,
    )


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _ns(value: Optional[int]) -> str:
    return "-" if value is None else _core.format_duration(int(value))


from ._bubbles import Bubbles, bubbles  # noqa: E402  (it imports this module's helpers)
from ._diff import Diff, DiffError, DiffPath, diff  # noqa: E402  (it imports this module's helpers)
from ._top_functions import (  # noqa: E402  (the same)
    FunctionRow,
    FunctionTop,
    SampledFunctionRow,
    SampledFunctions,
    _kernel_means,
    top_functions,
)
from ._trend import Trend, TrendError, TrendPath, trend  # noqa: E402  (the same)

__all__ += ["Trend", "TrendError", "TrendPath", "trend"]
