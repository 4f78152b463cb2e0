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
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from . import _core

__all__ = ["Top", "TopRow", "profiles", "top"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _is_store(target: str) -> bool:
    if target.startswith(("sqlite:///", "postgresql://", "postgres://")):
        return True
    try:
        with open(target, "rb") as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def profiles(inputs: Sequence[Union[str, os.PathLike]], where: Optional[Mapping[str, str]] = None) -> Iterator:
    """The profiles (ProfileSessions) of `inputs`: profile documents, and
    stores (a SQLite file, ``sqlite:///path``, ``postgresql://...``) whose
    every source matching `where` is read. `where` {key: value} matches a
    store source's model, version, run_id, host, type or pid, a label it was
    added with, or a key of its meta; for a file, a key of its meta."""
    from ._files import load
    from .store import open_store

    where = dict(where or {})
    for item in inputs:
        target = os.fspath(item)
        if _is_store(target):
            with open_store(target) as store:
                for source_id in store.source_ids(where):
                    yield store.load(source_id)
        else:
            session = load(target)
            meta = session._built().meta
            if all(meta.get(k) == v for k, v in where.items()):
                yield session


@dataclasses.dataclass(frozen=True)
class TopRow:
    """One call path: its calls, their wall, self and off-CPU times
    (milliseconds: p50, p95, p99, total; off-CPU None without kernel data),
    and its share of all the self time."""

    path: List[str]
    count: int
    sessions: int
    incomplete: int
    share: float
    wall: Dict[str, float]
    self_time: Dict[str, float]
    off_cpu: Optional[Dict[str, float]]


@dataclasses.dataclass(frozen=True)
class Top:
    """The call paths ranked by self time (`top()`)."""

    rows: List[TopRow]
    sessions: int
    self_total_ms: float
    where: Dict[str, str]

    def to_json(self) -> str:
        """The result as JSON (`mlprof top --format json`)."""
        return json.dumps({
            "sessions": self.sessions, "self_total_ms": self.self_total_ms, "where": self.where,
            "paths": [dataclasses.asdict(r) for r in self.rows],
        }, indent=2)

    def to_text(self, limit: Optional[int] = 20) -> str:
        """A table, most self time first: share, calls, wall and self p50,
        p95, p99, off-CPU p95 (where the agent measured it), path."""
        rows = self.rows if limit is None else self.rows[:limit]
        where = "".join(f", {k}={v}" for k, v in self.where.items())
        lines = [f"top: {self.sessions} session{'s' if self.sessions != 1 else ''}, {len(self.rows)} call "
                 f"path{'s' if len(self.rows) != 1 else ''}, {_ms(self.self_total_ms)} of self time{where}"]
        if not rows:
            return lines[0] + "\n"
        header = ["share", "calls", "wall p50", "p95", "p99", "self p50", "p95", "p99", "off-CPU p95", "path"]
        table = [header]
        for r in rows:
            table.append([f"{100 * r.share:.1f}%", f"{r.count:,}", _ms(r.wall["p50"]), _ms(r.wall["p95"]),
                          _ms(r.wall["p99"]), _ms(r.self_time["p50"]), _ms(r.self_time["p95"]),
                          _ms(r.self_time["p99"]), _ms(r.off_cpu["p95"]) if r.off_cpu else "-",
                          "/".join(r.path)])
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        for row in table:
            cells = [c.rjust(w) for c, w in zip(row[:-1], widths)]
            lines.append("  ".join(cells + [row[-1]]))
        if limit is not None and len(self.rows) > limit:
            lines.append(f"({len(self.rows) - limit} more paths: --limit)")
        return "\n".join(lines) + "\n"


def _ms(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return _core.format_duration(int(round(value * 1e6)))


def _figures(entry: Mapping[str, Any], prefix: str) -> Dict[str, float]:
    return {"p50": entry[prefix + "p50_ms"], "p95": entry[prefix + "p95_ms"], "p99": entry[prefix + "p99_ms"],
            "total": entry[prefix + "total_ms"]}


def top(inputs: Union[Sequence[Union[str, os.PathLike]], Iterable[Any]], *, where: Optional[Mapping[str, str]] = None,
        depth: Optional[int] = None) -> Top:
    """The bottlenecks by call path over `inputs` (files and stores, see
    profiles(); or ProfileSessions): per path the calls, the p50/p95/p99 of
    wall, self and off-CPU time, and its share of all the self time, most
    self time first. depth: paths deeper than this fold into their
    ancestors' self time."""
    stats = _core.CallPathStats(1_000_000)
    items = list(inputs)
    if items and all(hasattr(i, "_built") for i in items):
        sessions = items
    else:
        sessions = profiles(items, where)
    count = 0
    for session in sessions:
        stats.add(session._built(), -1 if depth is None else depth)
        count += 1
    summary = stats.summary(-1 if depth is None else depth)
    total = sum(e["self_total_ms"] for e in summary.values())
    rows = [
        TopRow(path=list(e["path"]), count=e["count"], sessions=e["sessions"], incomplete=e["incomplete"],
               share=(e["self_total_ms"] / total) if total > 0 else 0.0, wall=_figures(e, ""),
               self_time=_figures(e, "self_"), off_cpu=_figures(e, "off_cpu_") if e["off_cpu_count"] else None)
        for e in summary.values() if e["count"] > 0
    ]
    rows.sort(key=lambda r: (-r.self_time["total"], r.path))
    return Top(rows=rows, sessions=count, self_total_ms=total, where=dict(where or {}))
