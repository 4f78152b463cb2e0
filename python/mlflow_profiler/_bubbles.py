"""The idle gaps and fan-outs of each session (docs/store.md, "Analysis"):
`analysis.bubbles`. `analysis` re-exports it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional

from . import _core
from ._errors import AnalysisError
from .analysis import _ns, profiles

# --- bubbles -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bubbles:
    """The idle gaps and fan-outs of each session (`bubbles()`): one dict per
    session, as analysis/bubbles.h computes them (times in ns)."""

    sessions: List[Dict[str, Any]]
    min_ns: int

    @property
    def total_bubble_ns(self) -> int:
        """All the sessions' bubbles together."""
        return sum(s["bubble_ns"] for s in self.sessions)

    def to_json(self) -> str:
        """The result as JSON (`mlprof bubbles --format json`)."""
        return json.dumps(
            {
                "min_ns": self.min_ns,
                "total_bubble_ns": self.total_bubble_ns,
                "sessions": self.sessions,
            },
            indent=2,
        )

    def to_text(self) -> str:
        """Per session: its window, its bubbles with what each thread or
        task waited in, and the utilization of its fan-outs."""
        lines = []
        for i, s in enumerate(self.sessions):
            window = s["window_end_ns"] - s["window_start_ns"]
            share = 100.0 * s["bubble_ns"] / window if window > 0 else 0.0
            label = s.get("label") or f"session {i + 1}"
            lines.append(
                f"{label}: {_ns(window)}, {len(s['bubbles'])} bubble{'s' if len(s['bubbles']) != 1 else ''} "
                f"of at least {_ns(self.min_ns)}, {_ns(s['bubble_ns'])} idle ({share:.1f}%)"
            )
            if not s["wait_data"]:
                lines.append(
                    "  no waiting data: nothing says when its threads waited (no selectors "
                    "watched, no blocking C call captured, no kernel data), so idle gaps cannot be told. "
                    "Capture with capture_c_calls=True (blocking calls) or under mlprof-ebpf (off-CPU time)"
                )
            for b in s["bubbles"]:
                start = b["start_ns"] - s["window_start_ns"]
                waits = (
                    ", ".join(f"{_lane(w)} in {w['span']}" for w in b["waiting"]) or "nothing open"
                )
                lines.append(f"  +{_ns(start)}: {_ns(b['end_ns'] - b['start_ns'])} idle; {waits}")
            for f in s["fan_outs"]:
                lanes = ", ".join(
                    f"{_lane(l)} {100.0 * l['busy_ns'] / f['wall_ns'] if f['wall_ns'] else 0:.0f}%"
                    for l in f["lanes"]
                )
                lines.append(
                    f"  fan-out {f['span']}: {len(f['lanes'])} lanes, utilization "
                    f"{100 * f['utilization']:.0f}%, at most {f['max_concurrency']} running at once, "
                    f"mean {f['mean_concurrency']:.2f} ({lanes})"
                )
        return "\n".join(lines) + "\n"


def _lane(lane: Mapping[str, Any]) -> str:
    return lane["thread_name"] + (f" task {lane['task']}" if lane["task"] else "")


def bubbles(inputs, *, where: Optional[Mapping[str, str]] = None, min_ms: float = 1.0) -> Bubbles:
    """The idle gaps ("bubbles") of each session of `inputs` (files, stores,
    runs or ProfileSessions, as top() takes): the stretches of at least
    `min_ms` in which none of its threads or tasks ran, with what each
    waited in, and the utilization of the threads or tasks it fanned out to."""
    items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    sessions = (
        items if items and all(hasattr(i, "_built") for i in items) else profiles(items, where)
    )
    min_ns = int(round(min_ms * 1e6))
    out = []
    for session in sessions:
        built = session._built()
        report = _core.find_bubbles(built, min_ns)
        report["label"] = built.meta.get(_core.STORE_LABEL_PREFIX + "model") or ""
        out.append(report)
    if not out:
        sel = ", ".join(f"{k}={v}" for k, v in (where or {}).items())
        raise AnalysisError(
            f"no session to look at in {', '.join(map(str, items)) or 'no input'}"
            + (f" with --where {sel}" if sel else "")
        )
    return Bubbles(sessions=out, min_ns=min_ns)
