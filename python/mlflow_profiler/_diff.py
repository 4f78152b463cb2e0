"""`mlprof diff`: a release gate that decides by runs (docs/store.md, "diff").

A run is one process's profiles: a store's source, a profile document, or
the sources sharing a label (`run_by`). Per run and call path the core
computes the path's time per root call (analysis/run_values.h); the two sides'
per-run values are compared with a rank test and a Hodges-Lehmann change
(analysis/run_compare.h), Holm-adjusted over the paths that matter; the verdict
is pass, regression or inconclusive. This module selects, gates and
formats; the statistics are the core's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from ._errors import AnalysisError

__all__ = ["Diff", "DiffPath", "DiffError", "diff"]

STATISTICS = ("mean", "p50", "p95")
QUANTITIES = ("wall", "cpu")
VERDICT_EXIT = {"pass": 0, "regression": 1, "inconclusive": 3}


class DiffError(AnalysisError):
    """The inputs cannot be compared: an empty or one-sided selection,
    different roots, no common path, no CPU time to gate on. `mlprof diff`
    exits 2 with its message."""


@dataclasses.dataclass(frozen=True)
class DiffPath:
    """One call path in A and B. a_ns/b_ns: the median over a side's runs of
    the path's time per root call (None: the side never reached the path's
    root). change: B/A - 1 (Hodges-Lehmann over runs), ci its interval
    (None: too few runs), p the Holm-adjusted one-sided p-value of "B is
    slower" (gated paths). verdict: regression, improvement, pass,
    inconclusive (gated paths), ungated, only_a, only_b."""

    path: List[str]
    a_ns: Optional[float]
    b_ns: Optional[float]
    runs_a: int
    runs_b: int
    calls_a: int
    calls_b: int
    share: float
    change: Optional[float]
    ci: Optional[Tuple[float, float]]
    p: Optional[float]
    gated: bool
    verdict: str
    runs_needed: int = 0
    wall_change: Optional[float] = None  # gated on cpu: the wall time's change beside it
    # The median over a side's runs of the path's waiting time per root call
    # (views/waiting.h: suspended, or off the CPU), beside the compared time.
    waiting_a_ns: Optional[float] = None
    waiting_b_ns: Optional[float] = None

    @property
    def name(self) -> str:
        """The path joined with '/'."""
        return "/".join(self.path)


@dataclasses.dataclass(frozen=True)
class Diff:
    """Two sides compared run by run (`diff()`)."""

    paths: List[DiffPath]
    runs_a: int
    runs_b: int
    profiles_a: int
    profiles_b: int
    root_calls_a: int
    root_calls_b: int
    statistic: str
    quantity: str
    threshold: float
    confidence: float
    min_share: float
    min_time_ns: float
    run_by: str
    notes: List[str]

    @property
    def verdict(self) -> str:
        """regression (a gated path slower beyond the threshold, significant
        after Holm), inconclusive (a gated path that cannot be told), or pass."""
        verdicts = {p.verdict for p in self.paths if p.gated}
        return (
            "regression"
            if "regression" in verdicts
            else "inconclusive"
            if "inconclusive" in verdicts
            else "pass"
        )

    @property
    def exit_code(self) -> int:
        """0 pass, 1 regression, 3 inconclusive (2, an input error, is raised as DiffError)."""
        return VERDICT_EXIT[self.verdict]

    def regressions(self) -> List[DiffPath]:
        """The paths whose verdict is regression."""
        return [p for p in self.paths if p.verdict == "regression"]

    def inconclusive(self) -> List[DiffPath]:
        """The gated paths that could not be told."""
        return [p for p in self.paths if p.verdict == "inconclusive"]

    def runs_needed(self) -> int:
        """Runs a side that would likely settle every inconclusive path (0: none is)."""
        return max((p.runs_needed for p in self.inconclusive()), default=0)

    def to_json(self) -> str:
        """The result as JSON (`mlprof diff --format json`): the settings, the
        verdict, and per path its figures (times in ns, changes in percent)."""

        def pct(x: Optional[float]) -> Optional[float]:
            return None if x is None else round(100 * x, 4)

        paths = [
            {
                "path": p.path,
                "a_ns": p.a_ns,
                "b_ns": p.b_ns,
                "runs_a": p.runs_a,
                "runs_b": p.runs_b,
                "calls_a": p.calls_a,
                "calls_b": p.calls_b,
                "share_pct": pct(p.share),
                "change_pct": pct(p.change),
                "ci_pct": None if p.ci is None else [pct(p.ci[0]), pct(p.ci[1])],
                "p_holm": p.p,
                "gated": p.gated,
                "verdict": p.verdict,
                "runs_needed": p.runs_needed,
                "wall_change_pct": pct(p.wall_change),
                "waiting_a_ns": p.waiting_a_ns,
                "waiting_b_ns": p.waiting_b_ns,
            }
            for p in self.paths
        ]
        return json.dumps(
            {
                "verdict": self.verdict,
                "exit_code": self.exit_code,
                "runs_needed": self.runs_needed(),
                "a": {
                    "runs": self.runs_a,
                    "profiles": self.profiles_a,
                    "root_calls": self.root_calls_a,
                },
                "b": {
                    "runs": self.runs_b,
                    "profiles": self.profiles_b,
                    "root_calls": self.root_calls_b,
                },
                "statistic": self.statistic,
                "quantity": self.quantity,
                "run_by": self.run_by,
                "threshold_pct": 100 * self.threshold,
                "confidence": self.confidence,
                "min_share_pct": 100 * self.min_share,
                "min_time_us": self.min_time_ns / 1e3,
                "notes": self.notes,
                "paths": paths,
            },
            indent=2,
        )

    def headline(self) -> str:
        """What was compared and how, in one line."""
        conf = f"{round(100 * self.confidence)}%"
        what = f"{self.statistic} {self.quantity} time per root call"
        return (
            f"diff: A {_runs(self.runs_a, self.root_calls_a)}, B {_runs(self.runs_b, self.root_calls_b)}; "
            f"{what}, runs by {self.run_by}; threshold {100 * self.threshold:g}%, {conf} intervals "
            f"(Mann-Whitney over runs), Holm over {_plural(sum(p.gated for p in self.paths), 'gated path')}"
        )

    def verdict_line(self) -> str:
        """The verdict with its exit status, and for inconclusive the runs needed."""
        v = self.verdict
        if v == "regression":
            return f"verdict: regression in {_plural(len(self.regressions()), 'path')} (exit 1)"
        if v == "inconclusive":
            return (
                f"verdict: inconclusive (exit 3): {_plural(len(self.inconclusive()), 'gated path')} cannot be "
                f"told at {100 * self.threshold:g}%; about {self.runs_needed():,} runs a side would tell"
            )
        return f"verdict: pass (exit 0): no gated path slower by {100 * self.threshold:g}% or more"

    def to_text(self, limit: Optional[int] = 20) -> str:
        """The headline, the verdict, a table (gated paths first: regressions,
        inconclusive, improvements, passes; then the others by time) and the
        regressions and inconclusive paths spelled out."""
        conf = f"{round(100 * self.confidence)}% CI"
        header = [
            "A",
            "B",
            "change",
            conf,
            "p (Holm)",
            "runs A/B",
            "waiting A",
            "waiting B",
            "verdict",
            "path",
        ]
        table = [header]
        shown = self.paths if limit is None else self.paths[:limit]
        for p in shown:
            table.append(
                [
                    _ns(p.a_ns),
                    _ns(p.b_ns),
                    _pct(p.change),
                    _ci(p.ci) if p.change is not None else "-",
                    "-" if p.p is None else f"{p.p:.2g}",
                    f"{p.runs_a}/{p.runs_b}",
                    _ns(p.waiting_a_ns),
                    _ns(p.waiting_b_ns),
                    p.verdict.replace("_", " "),
                    p.name,
                ]
            )
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        lines = [self.headline(), *self.notes, self.verdict_line()]
        for row in table:
            lines.append("  ".join([c.rjust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]))
        if limit is not None and len(self.paths) > limit:
            lines.append(f"({len(self.paths) - limit} more paths: --limit)")
        for p in self.regressions():
            lines.append(
                f"regression: {p.name}: {_ns(p.a_ns)} -> {_ns(p.b_ns)} per root call ({_pct(p.change)}, "
                f"{conf} {_ci(p.ci)}, p {p.p:.2g})"
            )
        for p in self.inconclusive():
            lines.append(
                f"inconclusive: {p.name}: {_pct(p.change)}, {conf} {_ci(p.ci)}; about "
                f"{p.runs_needed:,} runs a side would tell"
            )
        return "\n".join(lines) + "\n"

    def to_html(self, a: Optional[str] = None, b: Optional[str] = None) -> str:
        """A self-contained HTML page of every path (`mlprof diff --html`),
        regressions marked red and improvements green, with the verdict and
        the settings; `a` and `b` say what was compared (the title names them)."""
        from .analysis import _html_page

        conf = f"{round(100 * self.confidence)}%"
        title = f"diff: A {a} vs B {b}" if a and b else self.headline()
        facts = [
            ("A", f"{a + ', ' if a else ''}{_runs(self.runs_a, self.root_calls_a)}"),
            ("B", f"{b + ', ' if b else ''}{_runs(self.runs_b, self.root_calls_b)}"),
            (
                "compared",
                f"{self.statistic} {self.quantity} time per root call, runs by {self.run_by}",
            ),
            (
                "gate",
                f"threshold {100 * self.threshold:g}%, {conf} intervals, Holm over "
                f"{sum(p.gated for p in self.paths)} gated paths",
            ),
            ("verdict", self.verdict),
        ]
        notes = [self.verdict_line(), *self.notes]
        columns = [
            ("A", "median over A's runs of the time per root call"),
            ("B", ""),
            ("change", "B/A - 1, Hodges-Lehmann over runs"),
            (f"{conf} CI", "of the change"),
            ("p (Holm)", "one-sided, B slower"),
            ("runs A/B", ""),
            (
                "waiting A",
                "median over A's runs of the waiting time per root call: suspended, or off the CPU",
            ),
            ("waiting B", ""),
            ("verdict", ""),
        ]
        rows = []
        for p in self.paths:
            mark = {"regression": "regression", "improvement": "improvement"}.get(p.verdict)
            cells = [
                (_ns(p.a_ns), p.a_ns),
                (_ns(p.b_ns), p.b_ns),
                (_pct(p.change), p.change),
                (_ci(p.ci) if p.change is not None else "-", None if p.ci is None else p.ci[0]),
                ("-" if p.p is None else f"{p.p:.2g}", p.p),
                (f"{p.runs_a}/{p.runs_b}", min(p.runs_a, p.runs_b)),
                (_ns(p.waiting_a_ns), p.waiting_a_ns),
                (_ns(p.waiting_b_ns), p.waiting_b_ns),
                (p.verdict.replace("_", " "), p.verdict),
            ]
            rows.append({"cells": cells, "path": p.path, "mark": mark, "note": ""})
        return _html_page("diff", title, facts, notes, columns, rows, self.to_json())

    def write_html(
        self, path: Union[str, os.PathLike], a: Optional[str] = None, b: Optional[str] = None
    ) -> str:
        """Writes to_html(a, b) to `path` (atomically); returns the path."""
        from .analysis import _write_page

        return _write_page(path, self.to_html(a, b))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _runs(runs: int, root_calls: int) -> str:
    return f"{_plural(runs, 'run')} ({_plural(root_calls, 'root call')})"


def _ns(value: Optional[float]) -> str:
    return "-" if value is None else _core.format_duration(int(round(value)))


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _ci(ci: Optional[Tuple[float, float]]) -> str:
    return (
        "[no interval: too few runs]"
        if ci is None
        else f"[{100 * ci[0]:+.1f}%, {100 * ci[1]:+.1f}%]"
    )


def _add_side(
    values, side: str, inputs, where: Optional[Mapping[str, str]], run_by: str, depth: int
) -> Dict:
    """Adds one side's profiles to `values` (a _core.RunPathValues), each
    run keyed `side:...`; returns {"runs": [run index], "profiles": n, "selected": what was read}."""
    from .analysis import _expand, _is_store, _run_id, profiles
    from .store import StoreError, open_store

    runs: List[int] = []
    seen = set()

    def run(key: str) -> int:
        index = values.run(f"{side}:{key}")
        if index not in seen:
            seen.add(index)
            runs.append(index)
        return index

    count = 0
    selected: List[str] = []
    items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if items and all(hasattr(i, "_built") for i in items):  # ProfileSessions: one run each
        for n, session in enumerate(items):
            meta = session._built().meta
            values.add(
                session._built(), run(str(n) if run_by == "source" else meta.get(run_by, "")), depth
            )
        return {"runs": runs, "profiles": len(items), "selected": [f"{len(items)} sessions"]}
    for target in [t for item in items for t in _expand(os.fspath(item))]:
        if _run_id(target) is None and _is_store(target):
            with open_store(target) as store:
                ids = store.source_ids(where)
                rows = {r["source_id"]: r for r in store.sources()}
                ids = [i for i in ids if rows[i]["kind"] == "spans"]
                keys = [
                    f"{target}#{i}" if run_by == "source" else store._provenance(i, rows[i], run_by)
                    for i in ids
                ]
                missing = [i for i, k in zip(ids, keys) if k == ""]
                if missing:
                    raise DiffError(
                        f"--run-by {run_by}: {_plural(len(missing), 'source')} of {target} "
                        f"(id {missing[0]}) {'has' if len(missing) == 1 else 'have'} no {run_by!r}"
                    )
                added = values.add_store(
                    store._driver, store._driver.dialect, ids, [run(k) for k in keys], depth
                )
                if isinstance(added, tuple):
                    raise StoreError(added[1], kind=added[0], target=store.target)
                count += added
                selected.append(f"{target}: {_plural(len(ids), 'source')} of {len(rows)}")
            continue
        n = 0
        for n, session in enumerate(profiles([target], where), 1):
            meta = session._built().meta
            if run_by != "source" and not meta.get(run_by):
                raise DiffError(f"--run-by {run_by}: {target} has no {run_by!r} in its meta")
            values.add(
                session._built(),
                run(f"{target}#{n}" if run_by == "source" else meta[run_by]),
                depth,
            )
            count += 1
        selected.append(f"{target}: {_plural(n, 'profile')}")
    return {"runs": runs, "profiles": count, "selected": selected}


def _describe(inputs, where: Optional[Mapping[str, str]], option: str) -> str:
    sel = ", ".join(f"{k}={v}" for k, v in (where or {}).items())
    names = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    shown = ", ".join(
        os.fspath(i) if isinstance(i, (str, os.PathLike)) else type(i).__name__ for i in names
    )
    return f"{shown}" + (f" with {option} {sel}" if sel else "")


def diff(
    a,
    b,
    *,
    where_a: Optional[Mapping[str, str]] = None,
    where_b: Optional[Mapping[str, str]] = None,
    run_by: str = "source",
    statistic: str = "p50",
    quantity: str = "wall",
    threshold: float = 10.0,
    confidence: float = 0.95,
    min_share: float = 5.0,
    min_time_us: float = 20.0,
    depth: Optional[int] = None,
) -> Diff:
    """Compares two sides run by run and gates the paths that matter.

    a, b: stores, profile documents, directories of them, MLflow runs (see
    analysis.profiles()), or lists of ProfileSessions (one run each).
    run_by: what a run is: "source" (each store source or document) or a key
    whose value groups sources into runs (pid, a label such as job, a meta key).
    statistic: per run, the p50 (default: robust to the preemptions of a
    shared machine), mean or p95 over its root calls of the path's time per
    root call (a step in fewer than half the root calls has a p50 of 0: use
    the mean for it). quantity: wall, or cpu (cpu_time=True or
    the agent's on-CPU time; the wall time's change is shown beside it).
    threshold: the change in percent that counts as a regression. A path is
    gated when it is a root, or its time per root call is at least
    min_share percent of its root's and at least min_time_us on either side.

    Raises DiffError when the sides cannot be compared (an empty side, no
    common root, no CPU time)."""
    if statistic not in STATISTICS:
        raise DiffError(f"--statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    if quantity not in QUANTITIES:
        raise DiffError(f"--quantity must be one of {', '.join(QUANTITIES)}, got {quantity!r}")
    if not 0 < confidence < 1:
        raise DiffError(f"--confidence must be between 0 and 1, got {confidence}")
    if threshold < 0 or min_share < 0 or min_time_us < 0:
        raise DiffError("--threshold, --min-share and --min-time-us must be >= 0")
    cut = -1 if depth is None else depth
    values = _core.RunPathValues(1_000_000)
    side_a = _add_side(values, "A", a, where_a, run_by, cut)
    side_b = _add_side(values, "B", b, where_b, run_by, cut)
    roots = values.root_calls()
    for side, option, inputs, where in (
        (side_a, "--where-a", a, where_a),
        (side_b, "--where-b", b, where_b),
    ):
        if not side["runs"] or not any(roots[r] for r in side["runs"]):
            name = "A" if option == "--where-a" else "B"
            raise DiffError(
                f"{name} has no complete root call to compare: {_describe(inputs, where, option)} "
                f"selected {'; '.join(side['selected']) or 'nothing'}"
            )
    ra, rb = side_a["runs"], side_b["runs"]
    measured = values.values(statistic, quantity)
    if quantity == "cpu" and not any(v is not None for _, vals, _ in measured for v in vals):
        raise DiffError(
            "--quantity cpu: no span has CPU time (profile with cpu_time=True, or the eBPF agent)"
        )
    wall = values.values(statistic, "wall") if quantity == "cpu" else None
    waiting = values.values(statistic, "waiting")

    def side_values(vals: Sequence[Optional[float]], runs: Sequence[int]) -> List[float]:
        return [v for v in (vals[r] for r in runs) if v is not None]

    root_a = {tuple(p) for p, vals, _ in measured if len(p) == 1 and side_values(vals, ra)}
    root_b = {tuple(p) for p, vals, _ in measured if len(p) == 1 and side_values(vals, rb)}
    if not root_a & root_b:
        raise DiffError(
            f"different roots: A's are {', '.join(sorted(r[0] for r in root_a))}; B's are "
            f"{', '.join(sorted(r[0] for r in root_b))}: nothing to compare"
        )
    notes = []
    for only, side_name in ((root_a - root_b, "A"), (root_b - root_a, "B")):
        if only:
            notes.append(
                f"note: roots only in {side_name}, not compared: {', '.join(sorted(r[0] for r in only))}"
            )

    rows = []
    root_median: Dict[str, Tuple[float, float]] = {}
    for path, vals, calls in measured:
        xa, xb = side_values(vals, ra), side_values(vals, rb)
        if tuple(path[:1]) not in root_a & root_b:
            continue
        ma = statistics.median(xa) if xa else None
        mb = statistics.median(xb) if xb else None
        if len(path) == 1:
            root_median[path[0]] = (ma or 0.0, mb or 0.0)
        rows.append((path, xa, xb, ma, mb, sum(calls[r] for r in ra), sum(calls[r] for r in rb)))
    sides, gated, shares = [], [], []
    min_time_ns = min_time_us * 1e3
    for path, xa, xb, ma, mb, ca, cb in rows:
        ra_med, rb_med = root_median.get(path[0], (0.0, 0.0))
        share = max((ma or 0) / ra_med if ra_med else 0.0, (mb or 0) / rb_med if rb_med else 0.0)
        both = ca > 0 and cb > 0
        gate = both and (
            len(path) == 1 or (share >= min_share / 100 and max(ma or 0, mb or 0) >= min_time_ns)
        )
        sides.append((xa, xb) if both else ([], []))
        gated.append(gate)
        shares.append(share)
    results = _core.gate_runs(sides, gated, threshold / 100, confidence)
    wall_changes: Dict[Tuple[str, ...], Optional[float]] = {}
    if wall is not None:
        wall_rows = [(p, side_values(v, ra), side_values(v, rb)) for p, v, _ in wall]
        wall_results = _core.gate_runs(
            [(x, y) if x and y else ([], []) for _, x, y in wall_rows],
            [False] * len(wall_rows),
            threshold / 100,
            confidence,
        )
        wall_changes = {tuple(p): r["change"] for (p, _, _), r in zip(wall_rows, wall_results)}
    waits: Dict[Tuple[str, ...], Tuple[Optional[float], Optional[float]]] = {}
    for p, v, _ in waiting:
        wa, wb = side_values(v, ra), side_values(v, rb)
        waits[tuple(p)] = (
            statistics.median(wa) if wa else None,
            statistics.median(wb) if wb else None,
        )
    paths = []
    for (path, xa, xb, ma, mb, ca, cb), share, res in zip(rows, shares, results):
        verdict = res["verdict"] or ("only_b" if ca == 0 else "only_a" if cb == 0 else "ungated")
        paths.append(
            DiffPath(
                path=list(path),
                a_ns=ma,
                b_ns=mb,
                runs_a=len(xa),
                runs_b=len(xb),
                calls_a=ca,
                calls_b=cb,
                share=share,
                change=res["change"] if ca and cb else None,
                ci=res["ci"] if ca and cb else None,
                p=res["holm_greater"] if res["gated"] else None,
                gated=res["gated"],
                verdict=verdict,
                runs_needed=res["runs_needed"],
                wall_change=wall_changes.get(tuple(path)),
                waiting_a_ns=waits.get(tuple(path), (None, None))[0] if ca else None,
                waiting_b_ns=waits.get(tuple(path), (None, None))[1] if cb else None,
            )
        )
    order = {"regression": 0, "inconclusive": 1, "improvement": 2, "pass": 3}
    paths.sort(
        key=lambda p: (
            order.get(p.verdict, 4) if p.gated else 5,
            -abs(p.change or 0) if p.gated else -max(p.a_ns or 0, p.b_ns or 0),
            p.name,
        )
    )
    return Diff(
        paths=paths,
        runs_a=len(ra),
        runs_b=len(rb),
        profiles_a=side_a["profiles"],
        profiles_b=side_b["profiles"],
        root_calls_a=sum(roots[r] for r in ra),
        root_calls_b=sum(roots[r] for r in rb),
        statistic=statistic,
        quantity=quantity,
        threshold=threshold / 100,
        confidence=confidence,
        min_share=min_share / 100,
        min_time_ns=min_time_ns,
        run_by=run_by,
        notes=notes,
    )
