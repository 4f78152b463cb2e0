"""`mlprof trend`: a store's history, release by release (docs/store.md,
"trend").

    from mlflow_profiler import analysis

    result = analysis.trend("profiles.db", by="version", where={"model": "fraud"})
    print(result.to_text())
    result.exit_code          # 0 pass, 1 regression, 3 inconclusive

The sources are grouped into releases by a key, ordered, and per call path
the series of per-run values (analysis/run_values.h: the path's time per root
call, one value per source) is searched for change points by E-divisive
means with a permutation test (analysis/changepoints.h); the latest release gets
diff's verdict (analysis/trend.h). Steps whose arguments or return value changed
type, dtype or shape between releases are listed as I/O drift. This module
picks and orders the sources, gates the paths and formats; the figures are
the core's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import zlib
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _core
from ._errors import AnalysisError

__all__ = ["Trend", "TrendError", "TrendPath", "trend"]

# mlprof diff's defaults (_diff.diff; tests/python/test_trend.py checks they agree).
DEFAULT_THRESHOLD_PCT = 10.0
DEFAULT_CONFIDENCE = 0.95
DEFAULT_MIN_SHARE_PCT = 5.0
DEFAULT_MIN_TIME_US = 20.0
_STOP_AFTER = 10  # shuffles reaching the statistic that end a test early


class TrendError(AnalysisError):
    """An input or usage error of trend(): an empty selection, a key no
    source has, fewer than two releases (mlprof trend exits 2)."""


@dataclasses.dataclass(frozen=True)
class TrendPath:
    """One call path's history. `medians_ns`: per release (Trend.groups'
    order), the median of its runs' values (None: no run had one);
    `values_ns` the runs' values themselves. `change_points`: dicts with the
    release (`group`, its index), the change (fraction, B/A - 1) and its
    interval (`ci`, None when too few runs), the p-value, the runs either
    side; only changes beyond the threshold either way (`minor` counts the
    significant ones within it, left out). `latest`: the latest release's
    verdict (regression, improvement, pass, inconclusive) with its change,
    interval and the runs it would need; None for an ungated path or one
    absent from the latest release or with no history before it."""

    path: List[str]
    gated: bool
    medians_ns: List[Optional[float]]
    values_ns: List[List[float]]
    change_points: List[Dict[str, Any]]
    latest: Optional[Dict[str, Any]]
    minor: int = 0  # significant change points within +-threshold, left out


@dataclasses.dataclass(frozen=True)
class Trend:
    """The history of a store's sources grouped by `by` (`trend()`)."""

    store: str
    by: str
    order: str  # "version" or "time": how the releases were ordered
    where: Dict[str, str]
    groups: List[Dict[str, Any]]  # value, runs, sources, first_captured_unix_ns
    paths: List[TrendPath]
    drift: List[Dict[str, Any]]
    statistic: str
    quantity: str
    threshold_pct: float
    alpha: float  # 1 - confidence: the level over the gated paths
    permutations: int
    seed: int
    min_share_pct: float
    min_time_us: float
    fail_on: str
    run_by: str
    left_out: Dict[str, int]  # sources not used: without the key, sampled stacks
    tests: int  # the gated paths with values in two releases or more: the Bonferroni family
    fail_on_drift: bool = False

    def regressions(self) -> List[Tuple[TrendPath, Dict[str, Any]]]:
        """What fails the gate: (path, change point) of the gated paths whose
        change point at the latest release (fail_on "latest") or anywhere
        (fail_on "any") grew by more than the threshold."""
        out = []
        last = len(self.groups) - 1
        for p in self.paths:
            if not p.gated:
                continue
            for cp in p.change_points:
                if cp["change"] is None or cp["change"] * 100 <= self.threshold_pct:
                    continue
                if self.fail_on == "any" or cp["group"] == last:
                    out.append((p, cp))
        return out

    def inconclusive(self) -> List[TrendPath]:
        """The gated paths whose latest release could not be told apart from
        a regression of the threshold's size."""
        return [
            p for p in self.paths if p.gated and p.latest and p.latest["verdict"] == "inconclusive"
        ]

    @property
    def exit_code(self) -> int:
        """`mlprof trend`'s exit status: 1 regression (or I/O drift with
        fail_on_drift), else 3 when a gated path is inconclusive, else 0."""
        if self.regressions() or (self.fail_on_drift and self.drift):
            return 1
        return 3 if self.inconclusive() else 0

    @property
    def verdict(self) -> str:
        """regression, inconclusive or pass, as exit_code says."""
        return {0: "pass", 1: "regression", 3: "inconclusive"}[self.exit_code]

    def to_json(self) -> str:
        """The result as JSON (`mlprof trend --format json`)."""
        names = [g["value"] for g in self.groups]

        def point(cp):
            return {
                "release": names[cp["group"]],
                "group": cp["group"],
                "change_pct": _pct(cp["change"]),
                "ci_pct": [_pct(v) for v in cp["ci"]] if cp["ci"] else None,
                "p_value": cp["p_value"],
                "permutations": cp["permutations"],
                "runs_before": cp["runs_before"],
                "runs_after": cp["runs_after"],
                "before_ns": cp["before_ns"],
                "after_ns": cp["after_ns"],
                "kind": _kind(cp, self.threshold_pct),
            }

        def latest(lt):
            if lt is None:
                return None
            return {
                "release": names[lt["group"]],
                "verdict": lt["verdict"],
                "change_pct": _pct(lt["change"]),
                "ci_pct": [_pct(v) for v in lt["ci"]] if lt["ci"] else None,
                "runs_before": lt["runs_before"],
                "runs_latest": lt["runs_after"],
                "min_p_value": lt["min_p_value"],
                "runs_needed": lt["runs_needed"] or None,
            }

        return json.dumps(
            {
                "store": self.store,
                "by": self.by,
                "order": self.order,
                "where": self.where,
                "releases": self.groups,
                "statistic": self.statistic,
                "quantity": self.quantity,
                "threshold_pct": self.threshold_pct,
                "alpha": self.alpha,
                "tests": self.tests,
                "permutations": self.permutations,
                "seed": self.seed,
                "min_share_pct": self.min_share_pct,
                "min_time_us": self.min_time_us,
                "fail_on": self.fail_on,
                "run_by": self.run_by,
                "left_out": self.left_out,
                "paths": [
                    {
                        "path": p.path,
                        "gated": p.gated,
                        "medians_ns": p.medians_ns,
                        "values_ns": p.values_ns,
                        "change_points": [point(cp) for cp in p.change_points],
                        "minor_change_points": p.minor,
                        "latest": latest(p.latest),
                    }
                    for p in self.paths
                ],
                "drift": self.drift,
                "fail_on_drift": self.fail_on_drift,
                "verdict": self.verdict,
                "exit_code": self.exit_code,
            },
            indent=2,
        )

    def _headline(self) -> str:
        names = ", ".join(g["value"] for g in self.groups)
        runs = sum(g["runs"] for g in self.groups)
        gated = sum(1 for p in self.paths if p.gated)
        where = "".join(f", {k}={v}" for k, v in self.where.items())
        return (
            f"trend: {_plural(runs, 'run')} in {len(self.groups)} releases by {self.by} ({names}; in "
            f"{self.order} order){where}; {_plural(len(self.paths), 'call path')}, {gated} gated"
        )

    def to_text(self, limit: Optional[int] = 20) -> str:
        """The change points of the gated paths, the latest release's
        verdicts, a table of the paths' medians per release, the I/O drift
        and the verdict."""
        names = [g["value"] for g in self.groups]
        lines = [
            self._headline(),
            f"runs a release: {', '.join(str(g['runs']) for g in self.groups)}; {self.statistic} {self.quantity} "
            f"time per root call; change points by E-divisive means, alpha {self.alpha:g} over "
            f"{_plural(self.tests, 'gated path')}; threshold {self.threshold_pct:g}%",
        ]
        points = [(p, cp) for p in self.paths if p.gated for cp in p.change_points]
        points.sort(key=lambda pc: (pc[1]["group"], len(pc[0].path), pc[0].path))
        minor = sum(p.minor for p in self.paths if p.gated)
        lines.append(
            f"change points: {len(points)}"
            + (f" ({minor} more within +-{self.threshold_pct:g}% left out)" if minor else "")
        )
        for p, cp in points:
            lines.append(
                f"  {self.by} {names[cp['group']]}: {_change(cp)}  {_ns(cp['before_ns'])} -> "
                f"{_ns(cp['after_ns'])}  p={cp['p_value']:.2g}  {_kind(cp, self.threshold_pct)}  "
                f"{'/'.join(p.path)}"
            )
        last = names[-1]
        judged = [(p, p.latest) for p in self.paths if p.gated and p.latest]
        counts: Dict[str, int] = {}
        for _, lt in judged:
            counts[lt["verdict"]] = counts.get(lt["verdict"], 0) + 1
        lines.append(
            f"latest release {self.by} {last}: "
            + (", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no gated path to judge")
        )
        for p, lt in judged:
            if lt["verdict"] == "pass":
                continue
            note = ""
            if lt["verdict"] == "inconclusive":
                note = (
                    f" (no permutation of {lt['runs_before']}+{lt['runs_after']} runs reaches the level: "
                    if lt["min_p_value"] > self.alpha / max(self.tests, 1)
                    else " ("
                ) + f"about {lt['runs_needed']} runs in the latest release would tell)"
            lines.append(
                f"  {lt['verdict']}: {_change(lt)} against {lt['runs_before']} runs before{note}  "
                f"{'/'.join(p.path)}"
            )
        lines.append("")
        lines += self._table(limit)
        if self.drift:
            lines.append("")
            lines.append(f"I/O drift: {len(self.drift)}")
            for d in self.drift:
                lines.append(
                    f"  {self.by} {d['from']} -> {d['to']}: {'/'.join(d['path'])} "
                    f"{'argument ' + d['name'] if d['role'] == 'in' else 'return value'}: "
                    f"{' | '.join(d['old'])} -> {' | '.join(d['new'])} ({', '.join(d['changed'])} changed)"
                )
        left = ", ".join(f"{n} {what}" for what, n in self.left_out.items() if n)
        if left:
            lines.append(f"left out: {left}")
        lines.append(f"verdict: {self.verdict} (exit {self.exit_code})")
        return "\n".join(lines) + "\n"

    def _table(self, limit: Optional[int]) -> List[str]:
        names = [g["value"] for g in self.groups]
        rows = [p for p in self.paths if p.gated] + [p for p in self.paths if not p.gated]
        shown = rows if limit is None else rows[:limit]
        table = [["gated"] + names + ["path"]]
        for p in shown:
            cells = ["yes" if p.gated else "no"] + [_ns(m) for m in p.medians_ns]
            for cp in p.change_points:
                cells[1 + cp["group"]] = "|" + cells[1 + cp["group"]]
            table.append(cells + ["/".join(p.path)])
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
        out = [
            f"median per release ({self.statistic} {self.quantity} time per root call; | marks a change point):"
        ]
        out += [
            "  " + "  ".join([c.rjust(w) for c, w in zip(r[:-1], widths)] + [r[-1]]) for r in table
        ]
        if limit is not None and len(rows) > limit:
            out.append(f"  ({len(rows) - limit} more paths: --limit)")
        return out

    def to_html(self) -> str:
        """A self-contained page (`mlprof trend --html`): per path its median
        per release, sortable; paths with a regression marked."""
        from .analysis import _html_page

        names = [g["value"] for g in self.groups]
        bad = {id(p) for p, _ in self.regressions()}
        columns = [("gated", "above the floors (or a root): tested")]
        columns += [
            (f"{self.by} {n}", f"median over the release's {g['runs']} runs")
            for n, g in zip(names, self.groups)
        ]
        columns += [
            ("change points", "release: change [interval], p-value"),
            ("latest", "the latest release's verdict"),
        ]
        rows = []
        for p in self.paths:
            cells: List[Tuple[str, Any]] = [("yes" if p.gated else "no", 1 if p.gated else 0)]
            cells += [(_ns(m), m) for m in p.medians_ns]
            cps = "; ".join(
                f"{names[cp['group']]}: {_change(cp)} p={cp['p_value']:.2g}"
                for cp in p.change_points
            )
            cells.append((cps or "-", len(p.change_points)))
            cells.append(
                (p.latest["verdict"] if p.latest else "-", p.latest["verdict"] if p.latest else "")
            )
            mark = (
                "regression"
                if id(p) in bad
                else ("improvement" if p.latest and p.latest["verdict"] == "improvement" else None)
            )
            rows.append({"cells": cells, "path": list(p.path), "mark": mark, "note": ""})
        facts = [
            ("store", self.store),
            ("releases", f"{len(names)} by {self.by}: {', '.join(names)}"),
            ("runs", ", ".join(str(g["runs"]) for g in self.groups)),
            ("test", f"E-divisive means, alpha {self.alpha:g} over {self.tests} gated paths"),
            ("threshold", f"{self.threshold_pct:g}%"),
            ("verdict", self.verdict),
        ]
        notes = [
            f"I/O drift, {self.by} {d['from']} -> {d['to']}: {'/'.join(d['path'])} "
            f"{d['name'] if d['role'] == 'in' else 'return'}: {' | '.join(d['old'])} -> {' | '.join(d['new'])}"
            for d in self.drift
        ]
        return _html_page("trend", self._headline(), facts, notes, columns, rows, self.to_json())

    def write_html(self, path: Union[str, os.PathLike]) -> str:
        """Writes to_html() to `path` (atomically); returns the path."""
        from .analysis import _write_page

        return _write_page(path, self.to_html())


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _pct(fraction: Optional[float]) -> Optional[float]:
    return None if fraction is None else 100.0 * fraction


def _ns(value: Optional[float]) -> str:
    return "-" if value is None else _core.format_duration(int(round(value)))


def _change(c: Mapping[str, Any]) -> str:
    if c["change"] is None:
        return "-"
    ci = (
        f" [{100 * c['ci'][0]:+.1f}%, {100 * c['ci'][1]:+.1f}%]"
        if c["ci"]
        else " [interval: too few runs]"
    )
    return f"{100 * c['change']:+.1f}%{ci}"


def _kind(cp: Mapping[str, Any], threshold_pct: float) -> str:
    change = 100 * (cp["change"] or 0.0)
    return (
        "regression"
        if change > threshold_pct
        else ("improvement" if change < -threshold_pct else "change")
    )


_VERSION = re.compile(
    r"^[vV]?(\d+(?:\.\d+)*)(?:[-_.]?(dev|a|alpha|b|beta|rc|c|pre|preview)\.?(\d*))?$"
)
_PRE_RANK = {
    "dev": 0,
    "a": 1,
    "alpha": 1,
    "b": 2,
    "beta": 2,
    "c": 3,
    "rc": 3,
    "pre": 3,
    "preview": 3,
}


def _version_key(value: str) -> Optional[tuple]:
    """1 < 1.2 < 1.10 < 2.0rc1 < 2.0 (a missing part counts as 0); None when
    `value` is not a version."""
    m = _VERSION.match(value.strip())
    if not m:
        return None
    parts = [int(x) for x in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    pre = (0, _PRE_RANK[m.group(2).lower()], int(m.group(3) or 0)) if m.group(2) else (1, 0, 0)
    return (tuple(parts), pre)


def _shape_parts(shape: Optional[str]) -> Optional[List[int]]:
    if shape is None:
        return None
    try:
        return [int(d) for d in shape.split(",") if d != ""]
    except (AttributeError, TypeError, ValueError):  # SQLite keeps any type in any column
        from .store import StoreError

        raise StoreError(
            f"the store is damaged: a shape that is not sizes ({shape!r:.40})", kind="corrupt"
        ) from None


def _signature(type_name: str, dtype: str, shape: Optional[List[int]]) -> str:
    """`ndarray float64 (*, 10)`: the leading dimension is the batch, which
    varies with the request, so it shows as *."""
    text = type_name + (f" {dtype}" if dtype else "")
    if shape is not None:
        dims = ["*"] + ["?" if d < 0 else str(d) for d in shape[1:]] if shape else []
        text += " (" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return text


def _io_drift(store, ids_by_group: List[List[int]], names: List[str]) -> List[Dict[str, Any]]:
    """Per step and argument (or return value), the releases between which
    its type, dtype, rank, or a dimension other than the first (each the
    same in all the release's calls) changed."""
    driver = store._driver
    group_of = {sid: g for g, ids in enumerate(ids_by_group) for sid in ids}
    seen: Dict[Tuple[int, int, str], Dict[int, set]] = {}
    ids = sorted(group_of)
    for at in range(0, len(ids), 500):
        chunk = ids[at : at + 500]
        rows = driver.query(
            "SELECT se.source_id, s.stack_id, i.role, i.name, i.type, i.dtype, i.shape FROM io_summaries i "
            "JOIN samples s ON s.sample_id = i.sample_id JOIN lanes l ON l.lane_id = s.lane_id "
            "JOIN sessions se ON se.session_id = l.session_id WHERE se.source_id IN ("
            + ", ".join("?" * len(chunk))
            + ") GROUP BY se.source_id, s.stack_id, i.role, i.name, i.type, i.dtype, "
            "i.shape",
            tuple(chunk),
        )
        for source, stack, role, name, type_name, dtype, shape in rows:
            key = (int(stack), int(role), str(name))
            seen.setdefault(key, {}).setdefault(group_of[int(source)], set()).add(
                (type_name, dtype or "", shape)
            )
    if not seen:
        return []
    paths = _core.store_stack_paths(driver, driver.dialect, sorted({k[0] for k in seen}))
    out: List[Dict[str, Any]] = []
    for (stack, role, name), by_group in seen.items():
        previous = None
        for g in sorted(by_group):
            sigs = by_group[g]
            if previous is not None:
                changed = _changed(by_group[previous], sigs)
                if changed:
                    out.append(
                        {
                            "path": paths[stack],
                            "role": "in" if role == 0 else "out",
                            "name": name,
                            "from": names[previous],
                            "to": names[g],
                            "from_group": previous,
                            "to_group": g,
                            "changed": changed,
                            "old": sorted(
                                {
                                    _signature(t, d, _shape_parts(s))
                                    for t, d, s in by_group[previous]
                                }
                            ),
                            "new": sorted({_signature(t, d, _shape_parts(s)) for t, d, s in sigs}),
                        }
                    )
            previous = g
    out.sort(key=lambda d: (d["to_group"], d["path"], d["role"], d["name"]))
    return out


def _changed(old: set, new: set) -> List[str]:
    """What differs between two releases' (type, dtype, shape) sets."""
    changed = []
    if {t for t, _, _ in old} != {t for t, _, _ in new}:
        changed.append("type")
    if {d for _, d, _ in old} != {d for _, d, _ in new}:
        changed.append("dtype")
    shapes_old = [_shape_parts(s) for _, _, s in old]
    shapes_new = [_shape_parts(s) for _, _, s in new]
    ranks_old = {None if s is None else len(s) for s in shapes_old}
    ranks_new = {None if s is None else len(s) for s in shapes_new}
    if ranks_old != ranks_new:
        changed.append("shape")
    elif len(ranks_old) == 1 and None not in ranks_old:
        for axis in range(
            1, next(iter(ranks_old)) or 0
        ):  # None is not in them: every shape is a list
            a = {s[axis] for s in shapes_old if s is not None}
            b = {s[axis] for s in shapes_new if s is not None}
            if len(a) == 1 and len(b) == 1 and a != b:
                changed.append("shape")
                break
    return changed


def trend(
    store: Union[str, os.PathLike],
    *,
    by: str = "version",
    where: Optional[Mapping[str, str]] = None,
    order: str = "auto",
    run_by: str = "source",
    statistic: str = "p50",
    quantity: str = "wall",
    threshold: float = DEFAULT_THRESHOLD_PCT,
    confidence: float = DEFAULT_CONFIDENCE,
    min_share: float = DEFAULT_MIN_SHARE_PCT,
    min_time_us: float = DEFAULT_MIN_TIME_US,
    permutations: Optional[int] = None,
    seed: int = 0,
    fail_on: str = "latest",
    fail_on_drift: bool = False,
    depth: Optional[int] = None,
) -> Trend:
    """The history of a store (a SQLite path, ``sqlite:///path`` or
    ``postgresql://...``): its span sources matching `where` (as top()
    reads it) grouped into releases by `by` (a provenance column such as
    version, a label given at add, or a meta key). `order`: "version"
    (natural version order, 1.2 < 1.10 < 2.0rc1 < 2.0; every value must be
    one), "time" (by each release's earliest capture), or "auto" (version
    when every value is one, else time).

    A run is a source, or with `run_by` a key the sources of one run share
    (pid, a label such as job), within a release. Per call path and run the
    value is the `statistic` (mean, p50, p95) over the run's root calls of
    the path's `quantity` (wall, cpu) time per root call
    (analysis/run_values.h). As in diff, a path is gated when it is a root, or
    when in some release the median of its runs is at least `min_share`
    percent of its root's and in some release at least `min_time_us`.
    Each gated path's series (runs in release order) gets its change
    points by E-divisive means, each split tested by `permutations`
    shuffles (default: enough to resolve the level, at least 999) seeded
    by `seed` and the path, at 1 - confidence over the gated paths
    (Bonferroni); and the latest release diff's verdict against the runs
    since the change point before it. `threshold` (percent): the change
    that makes a regression. `fail_on`: "latest" (a regression change
    point where the latest release starts) or "any" (anywhere in the
    history) makes exit_code 1; `fail_on_drift` makes I/O drift do so too.

    Raises TrendError for an input or usage error (mlprof trend exits 2):
    no such store, an empty selection, a key no selected source has,
    fewer than two releases; StoreError for a store that cannot be read."""
    from .analysis import _is_store
    from .store import StoreError, _sqlite_path, open_store

    where = {str(k): str(v) for k, v in (where or {}).items()}
    target = os.fspath(store)
    checks = (
        ("--order", order, order in ("auto", "version", "time")),
        ("--statistic", statistic, statistic in ("mean", "p50", "p95")),
        ("--quantity", quantity, quantity in ("wall", "cpu")),
        ("--fail-on", fail_on, fail_on in ("latest", "any")),
        ("--confidence", confidence, 0 < confidence < 1),
        ("--threshold", threshold, threshold >= 0),
        ("--min-share", min_share, min_share >= 0),
        ("--min-time-us", min_time_us, min_time_us >= 0),
        ("--permutations", permutations, permutations is None or permutations >= 1),
        ("--by", by, bool(by)),
        ("--run-by", run_by, bool(run_by)),
    )
    for option, value, ok in checks:
        if not ok:
            raise TrendError(f"{option}: invalid value {value!r}")
    alpha = 1 - confidence
    if not target.startswith(("postgresql://", "postgres://")):
        path = _sqlite_path(target)
        if not os.path.exists(path):
            raise TrendError(f"{target}: no such store")
        if not _is_store(path):
            raise TrendError(f"{target}: not a store (mlprof add puts profiles in one)")
    with open_store(target) as st:
        rows = {r["source_id"]: r for r in st.sources()}
        selected = st.source_ids(where)
        if not selected:
            what = ", ".join(f"{k}={v}" for k, v in where.items())
            raise TrendError(
                f"{target}: no source matches --where {what} (mlprof show lists the sources)"
                if what
                else f"{target}: the store has no source"
            )
        spans = [s for s in selected if rows[s]["kind"] == "spans"]
        keyed = [(s, st._provenance(s, rows[s], by)) for s in spans]
        left_out = {
            "sampled-stack sources": len(selected) - len(spans),
            f"sources without {by}": sum(1 for _, v in keyed if not v),
        }
        keyed = [(s, v) for s, v in keyed if v]
        if not keyed:
            raise TrendError(
                f"{target}: --by {by}: no selected source has {by!r} (a provenance column such as "
                "version, a label given at add, or a meta key: mlprof show lists them)"
                if spans
                else f"{target}: the selected sources are sampled stacks, which have no calls to time"
            )
        run_key = {}
        for s, _ in keyed:
            run_key[s] = str(s) if run_by == "source" else st._provenance(s, rows[s], run_by)
            if not run_key[s]:
                raise TrendError(f"{target}: --run-by {run_by}: source {s} has no {run_by!r}")
        groups: Dict[str, List[int]] = {}
        for s, release in keyed:
            groups.setdefault(release, []).append(s)
        if len(groups) < 2:
            raise TrendError(
                f"{target}: one release only ({by}={next(iter(groups))}): a trend needs two or more"
            )

        def when(s: int) -> int:
            return rows[s]["captured_unix_ns"] or rows[s]["added_unix_ns"] or 0

        keys = {v: _version_key(v) for v in groups}
        if order == "version" and None in keys.values():
            bad = next(v for v, k in keys.items() if k is None)
            raise TrendError(
                f"--order version: {by}={bad!r} is not a version (1, 1.2, v2.0rc1 ...); use --order time"
            )
        used = (
            "version"
            if order == "version" or (order == "auto" and None not in keys.values())
            else "time"
        )

        def release_key(v: str) -> Tuple[Any, str]:
            return (keys[v], v) if used == "version" else (min(when(s) for s in groups[v]), v)

        names = sorted(groups, key=release_key)
        ids_by_group = [sorted(groups[v], key=lambda s: (when(s), s)) for v in names]
        ordered = [s for ids in ids_by_group for s in ids]

        values = _core.RunPathValues(1_000_000)
        group_of: List[int] = []  # per run
        run_of = []
        for g, ids in enumerate(ids_by_group):
            for s in ids:
                key = f"{g}\x00{run_key[s]}"  # a run never spans two releases
                n_runs = len(values.runs())
                run_of.append(values.run(key))
                if len(values.runs()) > n_runs:
                    group_of.append(g)
        added = values.add_store(
            st._driver, st._driver.dialect, ordered, run_of, -1 if depth is None else depth
        )
        if isinstance(added, tuple):
            raise StoreError(added[1], kind=added[0], target=st.target)
        series = values.values(statistic, quantity)
        if quantity == "cpu" and not any(v is not None for _, vals, _ in series for v in vals):
            raise TrendError(
                "--quantity cpu: no span has CPU time (profile with cpu_time=True, or the eBPF agent)"
            )
        drift = _io_drift(st, ids_by_group, names)

    n_groups = len(names)
    runs_in = [sum(1 for g in group_of if g == gg) for gg in range(n_groups)]

    def medians(vals) -> List[Optional[float]]:
        out = []
        for g in range(n_groups):
            got = [v for v, gg in zip(vals, group_of) if gg == g and v is not None]
            out.append(statistics.median(got) if got else None)
        return out

    per_path = [(list(p), list(v)) for p, v, _ in series]
    root_medians = {p[0]: medians(v) for p, v in per_path if len(p) == 1}
    gated = []
    for p, v in per_path:
        mine, root = medians(v), root_medians.get(p[0], [None] * n_groups)
        share = max((m / r if m is not None and r else 0.0) for m, r in zip(mine, root))
        most = max((m or 0.0) for m in mine)
        gated.append(len(p) == 1 or (share >= min_share / 100 and most >= min_time_us * 1e3))

    def releases(v) -> int:
        return len({g for x, g in zip(v, group_of) if x is not None})

    # The family: gated paths with values in two releases or more.
    tests = sum(1 for (p, v), gt in zip(per_path, gated) if gt and releases(v) >= 2)
    if permutations is None:
        permutations = max(999, math.ceil(20 * max(tests, 1) / alpha) - 1)
    last = n_groups - 1
    paths = []
    for (p, v), gt in zip(per_path, gated):
        runs = [
            [x for x, g in zip(v, group_of) if g == gg and x is not None] for gg in range(n_groups)
        ]
        cps: List[Dict[str, Any]] = []
        latest = None
        if gt and releases(v) >= 2:
            path_seed = (seed * 1_000_003 + zlib.crc32("/".join(p).encode())) % 2**64
            got = _core.path_trend(
                v,
                group_of,
                last,
                tests,
                threshold / 100.0,
                alpha,
                permutations,
                _STOP_AFTER,
                confidence,
                path_seed,
            )
            bounds = [cp["run"] for cp in got["change_points"]]
            for i, cp in enumerate(got["change_points"]):
                lo = bounds[i - 1] if i else 0
                hi = bounds[i + 1] if i + 1 < len(bounds) else len(v)
                before = [x for x in v[lo : cp["run"]] if x is not None]
                after = [x for x in v[cp["run"] : hi] if x is not None]
                cps.append(
                    {
                        **cp,
                        "before_ns": statistics.median(before),
                        "after_ns": statistics.median(after),
                    }
                )
            latest = got["latest"]
        paths.append(
            TrendPath(
                path=p,
                gated=gt,
                medians_ns=medians(v),
                values_ns=runs,
                change_points=cps,
                latest=latest,
                minor=got["minor"] if gt and releases(v) >= 2 else 0,
            )
        )
    groups_out = [
        {
            "value": n,
            "runs": runs_in[g],
            "sources": ids,
            "first_captured_unix_ns": min(when(s) for s in ids),
        }
        for g, (n, ids) in enumerate(zip(names, ids_by_group))
    ]
    return Trend(
        store=target,
        by=by,
        order=used,
        where=where,
        groups=groups_out,
        paths=paths,
        drift=drift,
        statistic=statistic,
        quantity=quantity,
        threshold_pct=threshold,
        alpha=alpha,
        permutations=permutations,
        seed=seed,
        min_share_pct=min_share,
        min_time_us=min_time_us,
        fail_on=fail_on,
        run_by=run_by,
        left_out=left_out,
        tests=tests,
        fail_on_drift=fail_on_drift,
    )


def add_parser(sub) -> None:
    """`mlprof trend`'s options (called by _cli._parser)."""
    p = sub.add_parser(
        "trend",
        help="a store's history by release: change points per call path, I/O drift",
        description="Groups a store's sources into releases (--by), finds change points in each gated call path's "
        "time per root call (E-divisive means, permutation test) and judges the latest release as "
        "diff does. Exit 0 pass, 1 regression (at the latest release; --fail-on any: anywhere), "
        "2 input or usage error, 3 inconclusive (too few runs or too noisy; the output says how many "
        "runs would tell).",
    )
    p.add_argument(
        "store", metavar="STORE", help="a store (SQLite path, sqlite:///path or postgresql://...)"
    )
    p.add_argument(
        "--by",
        default="version",
        metavar="KEY",
        help="what makes a release: a provenance column (version, model ...), a label or a meta key "
        "(default version)",
    )
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only sources whose model, version, run_id, host, type, label or meta matches (repeatable)",
    )
    p.add_argument(
        "--order",
        choices=("auto", "version", "time"),
        default="auto",
        help="releases in version order (1.2 < 1.10), by earliest capture, or auto: version when every "
        "value is one (default)",
    )
    p.add_argument(
        "--run-by",
        default="source",
        metavar="KEY",
        help="what one run is: source (default) or a key whose value groups a release's sources "
        "(pid, a label such as job)",
    )
    p.add_argument(
        "--statistic",
        choices=("mean", "p50", "p95"),
        default="p50",
        help="per run, over its root calls, of each path's time per root call (default p50, as diff's)",
    )
    p.add_argument(
        "--quantity",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time (default) or CPU time (cpu_time=True, or the agent's on-CPU time)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD_PCT,
        metavar="PCT",
        help=f"a change point slower by more than PCT%% is a regression (default {DEFAULT_THRESHOLD_PCT:g})",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="of the intervals; the tests' level over the gated paths is 1 - it (default 0.95)",
    )
    p.add_argument(
        "--fail-on",
        choices=("latest", "any"),
        default="latest",
        help="exit 1 for a regression at the latest release (default) or anywhere in the history",
    )
    p.add_argument(
        "--fail-on-drift",
        action="store_true",
        help="also exit 1 when a step's argument or return value changed type, dtype or shape",
    )
    p.add_argument(
        "--min-share",
        type=float,
        default=DEFAULT_MIN_SHARE_PCT,
        metavar="PCT",
        help=f"gate paths of at least PCT%% of their root's time (default {DEFAULT_MIN_SHARE_PCT:g}; "
        "roots always)",
    )
    p.add_argument(
        "--min-time-us",
        type=float,
        default=DEFAULT_MIN_TIME_US,
        metavar="US",
        help=f"and of at least US microseconds per root call (default {DEFAULT_MIN_TIME_US:g})",
    )
    p.add_argument(
        "--permutations",
        type=int,
        default=None,
        help="shuffles per test (default: enough to resolve the level, at least 999)",
    )
    p.add_argument("--seed", type=int, default=0, help="of the permutations (default 0)")
    p.add_argument("--depth", type=int, default=None, help="paths down to this depth")
    p.add_argument("--limit", type=int, default=20, help="rows of the table (default 20)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--html",
        metavar="OUT.html",
        default=None,
        help="also write a self-contained HTML page (written only when the trend could be made)",
    )
    p.set_defaults(run=run_cli)


def run_cli(args) -> int:
    """`mlprof trend`: 0 pass, 1 regression, 2 input or usage error, 3 inconclusive."""
    import sys

    from ._files import ProfileLoadError
    from .store import StoreError

    where = {}
    for pair in args.where:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            print(f"mlprof trend: --where takes KEY=VALUE, got {pair!r}", file=sys.stderr)
            return 2
        where[key] = value
    try:
        result = trend(
            args.store,
            by=args.by,
            where=where,
            order=args.order,
            run_by=args.run_by,
            statistic=args.statistic,
            quantity=args.quantity,
            threshold=args.threshold,
            confidence=args.confidence,
            min_share=args.min_share,
            min_time_us=args.min_time_us,
            permutations=args.permutations,
            seed=args.seed,
            fail_on=args.fail_on,
            fail_on_drift=args.fail_on_drift,
            depth=args.depth,
        )
    except (TrendError, StoreError, ProfileLoadError) as exc:
        print(f"mlprof trend: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(result.to_json())
    else:
        print(result.to_text(limit=args.limit), end="")
    if args.html:
        result.write_html(args.html)
        print(
            f"{args.html}: HTML page of {_plural(len(result.paths), 'call path')}", file=sys.stderr
        )
    return result.exit_code
