"""Recording a profile as an MLflow trace, through MLflow's public tracing API
(``mlflow.start_span_no_context`` and ``LiveSpan.end``), so that it shows in
the Traces tab next to GenAI traces.

Called after capture only (``log_profile(log_as_trace=True)``,
``log_profile_trace``, the delivery thread (_delivery.py)): never on the hot path.

Times: profile times are CLOCK_MONOTONIC ns; a span's epoch time is the
session's wall clock at its start (meta ``start_unix_ns``) plus its offset
from the session's start (``Profile.start_ns``), so the trace keeps the
profile's durations to the nanosecond.

MLflow 3.10 is the first release whose ``start_span_no_context`` takes
``metadata``: that is what links the trace to a run given by id. Earlier 3.x
releases link a trace to whichever run was started last in any thread, which
is wrong for the delivery thread (_delivery.py), so they are not supported.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from typing import Any, Dict, List, Optional

from ._log import log_once

MIN_MLFLOW = "3.10"
# TraceMetadataKey.SOURCE_RUN: the metadata that puts a trace in a run's Traces
# tab and makes search_traces(run_id=...) find it.
_SOURCE_RUN = "mlflow.sourceRun"
ROOT_NAME = "profile"
ATTR = "mlflow_profiler."
# MLflow span types (mlflow.entities.SpanType; the UI draws an icon for each,
# a "?" for none): the model's own code and the steps a user named are the
# chain; a library's functions and C functions are the tools it calls.
SPAN_TYPE_STEP = "CHAIN"
SPAN_TYPE_LIBRARY = "TOOL"


def span_type(span) -> str:
    """The MLflow span type of a profile span: CHAIN for the root, the user's
    code and labelled spans and blocks; TOOL for library and C functions."""
    if (
        span.parent_index is None
        or span.is_user_code
        or "block" in span.flags
        or "labelled" in span.flags
    ):
        return SPAN_TYPE_STEP
    return SPAN_TYPE_LIBRARY


def check_supported(mlflow) -> None:
    """Raises ImportError, naming the version needed, if this MLflow cannot
    record a profile as a trace."""
    fn = getattr(mlflow, "start_span_no_context", None)
    ok = False
    if fn is not None:
        try:
            ok = "metadata" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            ok = False
    if not ok:
        version = getattr(mlflow, "__version__", "unknown")
        raise ImportError(
            f"recording a profile as an MLflow trace needs MLflow >= {MIN_MLFLOW} (MLflow Tracing with "
            f"mlflow.start_span_no_context(metadata=...)); MLflow {version} is installed: "
            f"pip install -U 'mlflow>={MIN_MLFLOW}'"
        )


def summary_dict(summary) -> Dict[str, Any]:
    """An IOSummary as a JSON-ready dict, without the fields that do not apply."""
    out = {}
    for field in dataclasses.fields(summary):
        value = getattr(summary, field.name)
        if value is None:
            continue
        out[field.name] = list(value) if isinstance(value, tuple) else value
    return out


def _inputs(span) -> Optional[Dict[str, Any]]:
    if not span.input_summary:
        return None
    return {
        (name or f"arg{i}"): summary_dict(s)
        for i, (name, s) in enumerate(span.input_summary.items())
    }


def _kept(spans: list, max_spans: int) -> List[int]:
    """Indexes of the spans the trace holds: every level down to the deepest
    one that keeps the total within max_spans (parents before children)."""
    if len(spans) <= max_spans:
        return list(range(len(spans)))
    per_depth: Dict[int, int] = {}
    for s in spans:
        per_depth[s.depth] = per_depth.get(s.depth, 0) + 1
    total, ceiling = 0, -1
    for depth in sorted(per_depth):
        if total + per_depth[depth] > max_spans:
            break
        total += per_depth[depth]
        ceiling = depth
    if ceiling < 0:  # more roots than max_spans: the first ones
        return [i for i, s in enumerate(spans) if s.parent_index is None][:max_spans]
    return [i for i, s in enumerate(spans) if s.depth <= ceiling]


def _inside_groups(spans: list) -> set:
    """Indexes of the spans under a group span (flag "group": MLflow's own
    calls, grouped; parents come before children)."""
    inside: set = set()
    for i, s in enumerate(spans):
        p = s.parent_index
        if p is not None and (p in inside or "group" in spans[p].flags):
            inside.add(i)
    return inside


def _group_calls(spans: list, inside: set, top: int = 8) -> Dict[int, List[str]]:
    """Per group span: its direct calls, the longest first, as "name 0.62ms"
    (at most `top`, then how many more)."""
    calls: Dict[int, List[Any]] = {}
    for i in inside:
        p = spans[i].parent_index
        if "group" in spans[p].flags:
            calls.setdefault(p, []).append(spans[i])
    out: Dict[int, List[str]] = {}
    for g, members in calls.items():
        members.sort(key=lambda s: -(s.duration_ns or 0))
        lines = [f"{s.label} {(s.duration_ns or 0) / 1e6:.2f}ms" for s in members[:top]]
        if len(members) > top:
            lines.append(f"and {len(members) - top} more calls")
        out[g] = lines
    return out


def _span_attributes(span, end_ns: Optional[int] = None) -> Dict[str, Any]:
    """The span's attributes; `end_ns` stands for the end of a span still
    open when the session ended (its running time runs up to there)."""
    out = _fixed_attributes(span, end_ns)
    if getattr(span, "resource", None):  # what the call used (docs/capture.md, "Resources")
        out[ATTR + "resource"] = span.resource
    for name in ("cpu_ns", "alloc_bytes"):  # cpu_time/alloc_bytes, only when captured
        value = getattr(span, name, None)
        if value is not None:
            out[ATTR + name] = value
    return out


def _fixed_attributes(span, end_ns: Optional[int] = None) -> Dict[str, Any]:
    # waiting_ns: of the wall time, suspended at an await or yield or off the
    # CPU, at any depth; running_ns: the rest of the wall time.
    end = span.end_ns if span.end_ns is not None else end_ns
    wall = max(0, end - span.start_ns) if end is not None else 0
    return {
        ATTR + "module": span.module or "",
        ATTR + "function": span.function,
        ATTR + "file": span.file,
        ATTR + "line": span.line,
        ATTR + "thread_id": span.thread_id,
        ATTR + "thread_name": span.thread_name,
        ATTR + "flags": list(span.flags),
        ATTR + "active_ns": span.active_ns,
        ATTR + "waiting_ns": span.waiting_ns,
        ATTR + "running_ns": max(0, wall - span.waiting_ns),
        ATTR + "depth": span.depth,
        ATTR + "is_user_code": span.is_user_code,
    }


def record_trace(
    session,
    mlflow,
    *,
    run_id: Optional[str] = None,
    experiment_id: Optional[str] = None,
    tags: Optional[Dict[str, str]] = None,
    max_spans: int = 2000,
) -> Optional[str]:
    """Records the (already processed) finalized `session` as one MLflow trace
    and returns its id; None when MLflow Tracing is disabled or sampled the
    trace out (logged once). See mlflow_sink.log_profile_trace."""
    check_supported(mlflow)
    if isinstance(max_spans, bool) or not isinstance(max_spans, int) or max_spans < 1:
        raise ValueError(f"max_spans must be an int >= 1, got {max_spans!r}")
    from mlflow.tracking import MlflowClient

    if run_id is not None and experiment_id is None:
        experiment_id = MlflowClient().get_run(run_id).info.experiment_id

    profile = session._built()
    stats = session.statistics()
    meta = profile.meta
    origin = profile.start_ns
    try:
        wall_origin = int(meta["start_unix_ns"])
        clock = "start_unix_ns"
    except (KeyError, TypeError, ValueError):  # a document without it: anchor the end at now
        wall_origin = time.time_ns() - (profile.end_ns - origin)
        clock = "approximate"

    def epoch(t: int) -> int:
        return wall_origin + (t - origin)

    spans = session.spans
    # MLflow's grouped calls stay inside their group span (named, with its
    # time; its calls are listed in an attribute): the trace tells the
    # model's story, the profile artifact has every call.
    inside = _inside_groups(spans)
    kept = [i for i in _kept(spans, max_spans) if i not in inside]
    roots = [i for i in kept if spans[i].parent_index is None]
    group_calls = _group_calls(spans, inside)

    session_attrs = {
        ATTR + "host": meta.get("host", ""),
        ATTR + "pid": meta.get("pid", ""),
        ATTR + "python": meta.get("python", ""),
        ATTR + "engine": meta.get("engine", ""),
        ATTR + "captured_depth": session.captured_depth,
        ATTR + "span_count": len(spans),
        ATTR + "spans_omitted": len(spans) - len(kept),
        ATTR + "dropped_events": stats.get("dropped", 0),
        ATTR + "clock": clock,
    }
    trace_tags = {ATTR + "source": "mlflow-profiler"}
    if run_id is not None:
        trace_tags[ATTR + "run_id"] = run_id
    trace_tags.update(tags or {})
    root_kwargs: Dict[str, Any] = {"tags": trace_tags, "experiment_id": experiment_id}
    if run_id is not None:
        root_kwargs["metadata"] = {_SOURCE_RUN: run_id}

    started: List[Any] = []  # (live span, end time, outputs, status) in start order
    live_of: Dict[int, Any] = {}
    synthetic = None
    try:
        if len(roots) != 1:
            synthetic = mlflow.start_span_no_context(
                ROOT_NAME,
                span_type=SPAN_TYPE_STEP,
                attributes=session_attrs,
                start_time_ns=epoch(min([stats["start_ns"]] + [spans[i].start_ns for i in roots])),
                **root_kwargs,
            )
            if not _recording(synthetic):
                return None
            started.append(
                (
                    synthetic,
                    epoch(max([stats["end_ns"]] + [spans[i].end_ns or 0 for i in roots])),
                    None,
                    None,
                )
            )
        for i in kept:
            span = spans[i]
            if span.parent_index is None:
                parent = synthetic
            elif span.parent_index in live_of:
                parent = live_of[span.parent_index]
            else:  # not reached: a depth cut keeps every parent of a kept span
                continue
            end = span.end_ns if span.end_ns is not None else stats["end_ns"]
            attributes = _span_attributes(span, end)
            if i in group_calls:
                attributes[ATTR + "calls"] = group_calls[i]
            kwargs: Dict[str, Any] = {}
            if parent is None:  # the one root of the profile is the trace's root
                attributes.update(session_attrs)
                kwargs = root_kwargs
            live = mlflow.start_span_no_context(
                span.label,
                span_type=span_type(span),
                parent_span=parent,
                inputs=_inputs(span),
                attributes=attributes,
                start_time_ns=epoch(span.start_ns),
                **kwargs,
            )
            if parent is None and not _recording(live):
                return None
            live_of[i] = live
            outputs = summary_dict(span.output_summary) if span.output_summary is not None else None
            # an exception a caller caught (pandas probing an attribute) is no error
            status = "ERROR" if "exception" in span.flags and "caught" not in span.flags else "OK"
            started.append((live, epoch(end), outputs, status))
    finally:
        # Children end before their parents: the root's end exports the trace.
        for live, end_ns, outputs, status in reversed(started):
            live.end(outputs=outputs, status=status, end_time_ns=end_ns)
    # Not flushed: MLflow writes traces in the background (its async trace
    # logging) and at exit; flush_trace_async_logging() restarts MLflow's
    # writer threads and takes about a second.
    return started[0][0].trace_id


def _recording(span) -> bool:
    from mlflow.entities import NoOpSpan

    if isinstance(span, NoOpSpan):
        log_once(
            "trace:not-recorded",
            "mlflow_profiler: the profile was not recorded as an MLflow trace: MLflow gave a no-op "
            "span, because Tracing is disabled (mlflow.tracing.disable()), its sampling "
            "(MLFLOW_TRACE_SAMPLING_RATIO) dropped the trace, or starting the span failed (MLflow "
            "logs why, as 'Failed to start span')",
            logging.WARNING,
        )
        return False
    return True
