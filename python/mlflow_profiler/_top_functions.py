"""The function view of analysis.top (docs/store.md, "Analysis"): each
function's self and total time across profiles, with the sampled stacks'
functions where a profile has them. `analysis` re-exports it."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from .analysis import (
    _TIME_UNITS,
    _add_inputs,
    _html_page,
    _ns,
    _plural,
    _value,
    _write_page,
)


def _kernel_means(entry: Mapping[str, Any]) -> Optional[Dict[str, float]]:
    """The own thread's mean on-CPU, blocked, run-queue and GIL-wait ms per
    call (with the calls they are over), or None without kernel data."""
    n = entry["kernel_calls"]
    if not n:
        return None
    return {
        "calls": n,
        **{k: entry[f"{k}_total_ms"] / n for k in ("on_cpu", "blocked", "runq", "gil")},
    }


# --- top by function -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FunctionRow:
    """One function of `top(..., by="function")`: its name (a span's label,
    else the function's), file and line of definition (0: unknown), which
    together tell it apart; its calls; flat (ns), the self time of its calls
    (running time: a call's wall less its waiting, less its same-thread
    children's running time); cum (ns), the time of every call on a path
    through it, a call under another call of it counted once; each as a
    share of all the self time. `waiting` (ns): "flat_ns", its calls' own
    waits (suspended, or off the CPU, not in a same-thread child), and
    "cum_ns", the waits of the paths through it, recursion counted once.
    `display` is the name with a short file:line."""

    name: str
    file: str
    line: int
    display: str
    calls: int
    flat_ns: int
    cum_ns: int
    flat_share: float
    cum_share: float
    waiting: Optional[Dict[str, int]] = None


@dataclasses.dataclass(frozen=True)
class SampledFunctionRow:
    """One function of the sampled stacks: per value type (as
    SampledFunctions.value_types orders them) its samples' values as the leaf
    (flat) and of the samples whose stack holds it, once each (cum); the
    shares are of the ranking type's total."""

    name: str
    file: str
    line: int
    display: str
    flat: List[int]
    cum: List[int]
    flat_share: float
    cum_share: float


@dataclasses.dataclass(frozen=True)
class SampledFunctions:
    """The sampled-stack sources of a top by function: most flat value of
    the ranking type (the first time-valued type, else the first) first."""

    sources: int
    samples: int
    value_types: List[List[str]]
    rank_by: int
    rows: List[SampledFunctionRow]


@dataclasses.dataclass(frozen=True)
class FunctionTop:
    """Time per function (`top(inputs, by="function")`, `mlprof top --by
    function`), as pprof's -top: the span sources' functions ranked by flat
    time, and the sampled stacks' in `sampled` (None when there were none)."""

    rows: List[FunctionRow]
    sessions: int
    profiles: int
    total_ns: int
    where: Dict[str, str]
    depth: Optional[int] = None
    sampled: Optional[SampledFunctions] = None

    def to_json(self) -> str:
        """The result as JSON (`mlprof top --by function --format json`)."""
        return json.dumps(
            {
                "by": "function",
                "sessions": self.sessions,
                "profiles": self.profiles,
                "total_ns": self.total_ns,
                "where": self.where,
                "depth": self.depth,
                "functions": [dataclasses.asdict(r) for r in self.rows],
                "sampled": dataclasses.asdict(self.sampled) if self.sampled else None,
            },
            indent=2,
        )

    def headline(self) -> str:
        """The first line of to_text: what was read and the total."""
        where = "".join(f", {k}={v}" for k, v in self.where.items())
        depth = f", depth {self.depth}" if self.depth is not None else ""
        held = f" in {_plural(self.profiles, 'profile')}" if self.profiles != self.sessions else ""
        return (
            f"top by function: {_plural(self.sessions, 'session')}{held}, {_plural(len(self.rows), 'function')}, "
            f"{_ns(self.total_ns)} of self time{where}{depth}"
        )

    def to_text(self, limit: Optional[int] = 20) -> str:
        """pprof's -top table: flat, flat%, sum% (the flat shares so far),
        cum, cum%, calls, waiting (cum), function; then the sampled stacks'
        table, if any."""
        text = ""
        if self.sessions or not self.sampled:
            table = [["flat", "flat%", "sum%", "cum", "cum%", "calls", "waiting", "function"]]
            running = 0.0
            for r in self.rows:
                running += r.flat_share
                table.append(
                    [
                        _ns(r.flat_ns),
                        _pct(r.flat_share),
                        _pct(running),
                        _ns(r.cum_ns),
                        _pct(r.cum_share),
                        f"{r.calls:,}",
                        _ns(r.waiting["cum_ns"]) if r.waiting else "-",
                        r.display,
                    ]
                )
            text = _table_text(self.headline(), table, limit, "functions")
            if self.rows:
                text += (
                    "flat, cum: running time (a call's wall less its waiting); waiting: of the paths through "
                    "it, suspended at an await or yield, or off the CPU (asleep, in the run queue)\n"
                )
        if self.sampled:
            text += _sampled_functions_text(self.sampled, limit)
        return text

    def to_html(self, inputs: Optional[Sequence[str]] = None) -> str:
        """A self-contained HTML page of every function (`mlprof top --by
        function --html`): the table of to_text, sortable, with the report's
        look. It shows the span sources' functions, or the sampled stacks'
        when there are no span sources."""
        sampled = self.sampled if (self.sampled and not self.sessions) else None
        columns = [
            ("flat", "its calls' self time" if not sampled else "its samples as the leaf"),
            ("flat%", "flat over all the self time"),
            ("sum%", "the flat shares down to this row"),
            ("cum", "the time of the paths through it, recursion counted once"),
            ("cum%", ""),
        ]
        rows = []
        running = 0.0
        if sampled:
            kind, unit = (
                sampled.value_types[sampled.rank_by]
                if sampled.value_types
                else ("samples", "count")
            )
            for r in sampled.rows:
                running += r.flat_share
                flat, cum = r.flat[sampled.rank_by], r.cum[sampled.rank_by]
                cells: List[Tuple[str, Any]] = [
                    (_value(flat, unit), flat),
                    (_pct(r.flat_share), r.flat_share),
                    (_pct(running), running),
                    (_value(cum, unit), cum),
                    (_pct(r.cum_share), r.cum_share),
                ]
                rows.append({"cells": cells, "path": [r.display], "mark": None, "note": ""})
            facts = [
                (
                    "sampled stacks",
                    f"{_plural(sampled.sources, 'source')}, {sampled.samples:,} samples",
                ),
                ("ranked by", f"{kind} ({unit})"),
                ("functions", f"{len(sampled.rows):,}"),
            ]
            title = _sampled_functions_text(sampled, 0).splitlines()[0]
        else:
            columns.append(("calls", "its calls, recursive ones too"))
            columns.append(
                ("waiting", "the waits of the paths through it: suspended, or off the CPU")
            )
            for fr in self.rows:
                running += fr.flat_share
                waited = fr.waiting["cum_ns"] if fr.waiting else None
                cells = [
                    (_ns(fr.flat_ns), fr.flat_ns),
                    (_pct(fr.flat_share), fr.flat_share),
                    (_pct(running), running),
                    (_ns(fr.cum_ns), fr.cum_ns),
                    (_pct(fr.cum_share), fr.cum_share),
                    (f"{fr.calls:,}", fr.calls),
                    (_ns(waited), waited),
                ]
                rows.append({"cells": cells, "path": [fr.display], "mark": None, "note": ""})
            facts = [
                ("sessions", f"{self.sessions:,}"),
                ("functions", f"{len(self.rows):,}"),
                ("self time", _ns(self.total_ns)),
            ]
            title = self.headline()
        facts = ([("inputs", ", ".join(os.fspath(i) for i in inputs))] if inputs else []) + facts
        facts += (
            [("where", ", ".join(f"{k}={v}" for k, v in self.where.items()))] if self.where else []
        )
        return _html_page("top", title, facts, [], columns, rows, self.to_json())

    def write_html(
        self, path: Union[str, os.PathLike], inputs: Optional[Sequence[str]] = None
    ) -> str:
        """Writes to_html(inputs) to `path` (atomically); returns the path."""
        return _write_page(path, self.to_html(inputs))


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _table_text(headline: str, table: List[List[str]], limit: Optional[int], what: str) -> str:
    """A headline and a table whose last column is left-aligned text, cut at
    `limit` rows with a note of how many more."""
    shown = table if limit is None else table[: limit + 1]
    lines = [headline]
    if len(table) > 1:
        widths = [max(len(row[i]) for row in shown) for i in range(len(table[0]) - 1)]
        lines += [
            "  ".join([c.rjust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]) for row in shown
        ]
    if limit is not None and len(table) - 1 > limit:
        lines.append(f"({len(table) - 1 - limit} more {what}: --limit)")
    return "\n".join(lines) + "\n"


def _sampled_functions_text(sampled: SampledFunctions, limit: Optional[int]) -> str:
    """The sampled stacks' table by function, in the ranking type's values."""
    kind, unit = (
        sampled.value_types[sampled.rank_by] if sampled.value_types else ("samples", "count")
    )
    types = ", ".join(f"{t} ({u})" for t, u in sampled.value_types) or "none"
    headline = (
        f"sampled stacks by function: {_plural(sampled.sources, 'source')}, {sampled.samples:,} samples, "
        f"{_plural(len(sampled.rows), 'function')}; values {types}; ranked by {kind}"
    )
    table = [["flat", "flat%", "sum%", "cum", "cum%", "function"]]
    running = 0.0
    for r in sampled.rows:
        running += r.flat_share
        table.append(
            [
                _value(r.flat[sampled.rank_by], unit),
                _pct(r.flat_share),
                _pct(running),
                _value(r.cum[sampled.rank_by], unit),
                _pct(r.cum_share),
                r.display,
            ]
        )
    return _table_text(headline, table, limit, "functions")


def _short_files(functions: Sequence[Mapping[str, Any]]) -> List[str]:
    """Each function's name with a short `file:line`: the file's last path
    component, or as many more as it takes to tell apart functions of one
    name that the last one would not."""
    by_name: Dict[str, List[int]] = {}
    for i, f in enumerate(functions):
        by_name.setdefault(f["name"], []).append(i)
    out = [""] * len(functions)
    for name, members in by_name.items():
        parts = [functions[i]["file"].replace("\\", "/").split("/") for i in members]
        keep = 1
        while keep < max((len(p) for p in parts), default=1):
            shown = [("/".join(p[-keep:]), functions[i]["line"]) for p, i in zip(parts, members)]
            if len(set(shown)) == len(shown):
                break
            keep += 1
        for p, i in zip(parts, members):
            short = "/".join(p[-keep:])
            line = functions[i]["line"]
            where = f"{short}:{line}" if short and line else short
            out[i] = f"{name} ({where})" if where else name
    return out


def _sampled_functions(sampled: Mapping[str, Any]) -> Optional[SampledFunctions]:
    if not sampled["sources"]:
        return None
    types = [list(t) for t in sampled["value_types"]]
    rank_by = next((i for i, (_, unit) in enumerate(types) if unit in _TIME_UNITS), 0)
    functions = sampled["functions"]
    total = sum(f["flat"][rank_by] for f in functions) if types else 0
    share = (lambda v: v / total) if total > 0 else (lambda v: 0.0)  # noqa: E731
    rows = [
        SampledFunctionRow(
            name=f["name"],
            file=f["file"],
            line=f["line"],
            display=d,
            flat=f["flat"],
            cum=f["cum"],
            flat_share=share(f["flat"][rank_by]) if types else 0.0,
            cum_share=share(f["cum"][rank_by]) if types else 0.0,
        )
        for f, d in zip(functions, _short_files(functions))
    ]
    if types:
        rows.sort(key=lambda r: (-r.flat[rank_by], -r.cum[rank_by], r.name, r.file, r.line))
    return SampledFunctions(
        sources=sampled["sources"],
        samples=sampled["samples"],
        value_types=types,
        rank_by=rank_by,
        rows=rows,
    )


class _StacksAt:
    """What _add_inputs hands sampled stacks to: the FunctionStats, cut at `depth`."""

    def __init__(self, stats, depth: int):
        self._stats, self._depth = stats, depth

    def add(self, samples, depth: Optional[int] = None) -> None:
        self._stats.add(samples, self._depth if depth is None else depth)


def top_functions(
    inputs: Union[Sequence[Union[str, os.PathLike]], Iterable[Any]],
    *,
    where: Optional[Mapping[str, str]] = None,
    depth: Optional[int] = None,
) -> FunctionTop:
    """Time per function over `inputs` (files and stores, see profiles(); or
    ProfileSessions), as pprof's -top: per function its calls, flat time
    (its calls' self time) and cum time (the time of the call paths through
    it, counted once per path when it recurses), most flat first. A function
    is its name, file and line of definition. Sampled stacks (py-spy, pprof,
    folded ...) get flat (samples as the leaf) and cum (samples whose stack
    holds it) per value type in `sampled`. depth: deeper spans fold into
    their ancestor at the cut; deeper frames of sampled stacks likewise.
    The sums are the core's (views/function_stats.h)."""
    stats = _core.FunctionStats()
    cut = -1 if depth is None else depth
    _add_inputs(stats, inputs, where, cut, _StacksAt(stats, cut))
    summary = stats.summary()
    functions = summary["functions"]
    total = sum(f["flat_ns"] for f in functions)
    share = (lambda v: v / total) if total > 0 else (lambda v: 0.0)  # noqa: E731
    rows = [
        FunctionRow(
            name=f["name"],
            file=f["file"],
            line=f["line"],
            display=d,
            calls=f["calls"],
            flat_ns=f["flat_ns"],
            cum_ns=f["cum_ns"],
            flat_share=share(f["flat_ns"]),
            cum_share=share(f["cum_ns"]),
            waiting={"flat_ns": f["flat_waiting_ns"], "cum_ns": f["cum_waiting_ns"]},
        )
        for f, d in zip(functions, _short_files(functions))
    ]
    rows.sort(key=lambda r: (-r.flat_ns, -r.cum_ns, r.name, r.file, r.line))
    return FunctionTop(
        rows=rows,
        sessions=summary["sessions"],
        profiles=summary["profiles"],
        total_ns=total,
        where=dict(where or {}),
        depth=depth,
        sampled=_sampled_functions(summary["sampled"]),
    )
