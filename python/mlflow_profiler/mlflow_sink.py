"""Logging profiles to MLflow: artifacts, run metrics, collector summaries and
MLflow traces.

MLflow is imported when one of these functions is called, never by
``import mlflow_profiler``. Every function here works on the active run or on
the run named by ``run_id``; with ``run_id`` it can be called from any thread
(the delivery thread (_delivery.py) does). These are explicit calls, not best-effort
paths: a tracking server that is down raises MLflow's own error to the caller.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import re
import tempfile
import time
from collections import defaultdict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _processors

EXTRA_HINT = "pip install 'mlflow-profiler[mlflow]'"

# The files log_profile writes; session.save() picks the format from the name.
PROFILE_FILES = ("profile.json", "profile.html", "profile.trace.json")
SUMMARY_FILE = "profile_summary.json"

# mlflow.utils.validation: MAX_ENTITY_KEY_LENGTH and MAX_METRICS_PER_BATCH.
MAX_METRIC_NAME = 250
MAX_METRICS_PER_BATCH = 1000

METRIC_STATS = ("wall_ms", "running_ms", "waiting_ms", "self_ms", "calls")
SUMMARY_STATS = (
    "count",
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "self_mean_ms",
    "self_p95_ms",
)

# MLflow accepts [/\w.\- :] (Python's unicode \w). ':' is left out because a
# tracking server on Windows rejects it, '/' because it separates the path.
_BAD_CHARS = re.compile(r"[^\w.\- ]")
_LABEL_PUNCTUATION = re.compile(r"[\[\]]|[:,](?= )")
# A path segment is a file name in the file store: keep it well under the
# 255-byte limit of most file systems, whatever its script.
_SEGMENT_MAX_BYTES = 100
_PREFIX_MAX = 100
_HASH_CHARS = 8

Path = Tuple[str, ...]


def import_mlflow(what: str):
    """The mlflow module, or an ImportError that names the extra to install."""
    try:
        import mlflow
        from mlflow.tracking import MlflowClient  # noqa: F401  (fails on a broken install too)
    except ImportError as exc:
        raise ImportError(
            f"mlflow_profiler.{what} needs MLflow, which could not be imported ({exc}): {EXTRA_HINT}"
        ) from exc
    return mlflow


def _client(mlflow):
    from mlflow.tracking import MlflowClient

    return MlflowClient()


def resolve_run_id(mlflow, run_id: Optional[str], what: str) -> str:
    """`run_id` if given, else the active run's id, else a RuntimeError that
    says how to get one."""
    if run_id is not None:
        if not isinstance(run_id, str) or not run_id:
            raise TypeError(
                f"{what}: run_id must be a run id (a non-empty str) or None, got {run_id!r}"
            )
        return run_id
    run = mlflow.active_run()
    if run is None:
        raise RuntimeError(
            f"mlflow_profiler.{what}: there is no active MLflow run: "
            "call it inside `with mlflow.start_run():` or pass run_id=..."
        )
    return run.info.run_id


def check_session(session: Any, what: str):
    """Raises TypeError unless `session` is a ProfileSession."""
    from ._session import ProfileSession

    if not isinstance(session, ProfileSession):
        raise TypeError(
            f"mlflow_profiler.{what}(session): session must be a ProfileSession "
            f"(from profiling() or load()), got {type(session).__name__}"
        )
    return session


def _check_artifact_path(artifact_path: Any, what: str) -> Optional[str]:
    if artifact_path is None:
        return None
    if not isinstance(artifact_path, str):
        raise TypeError(
            f"{what}: artifact_path must be a str or None, got {type(artifact_path).__name__}"
        )
    cleaned = artifact_path.strip("/")
    if artifact_path.startswith("/") or ".." in cleaned.split("/"):
        raise ValueError(
            f"{what}: artifact_path must be a relative path inside the run's artifacts, got {artifact_path!r}"
        )
    return cleaned or None


def _artifact_uri(client, run_id: str, artifact_path: Optional[str]) -> str:
    root = client.get_run(run_id).info.artifact_uri.rstrip("/")
    return root if not artifact_path else f"{root}/{artifact_path}"


# -- artifacts ----------------------------------------------------------------


def log_profile(
    session,
    artifact_path: str = "profile",
    *,
    run_id: Optional[str] = None,
    log_as_trace: bool = False,
) -> str:
    """Logs a profile to an MLflow run as artifacts and returns their URI.

    Under `artifact_path` (default ``profile``) it writes ``profile.json``
    (the profile document: ``mlflow_profiler.load()`` reads it back),
    ``profile.html`` (the self-contained report, viewable in the run's
    Artifacts tab) and ``profile.trace.json`` (Chrome trace, for Perfetto).
    The run is `run_id` if given, else the active run; without either it
    raises RuntimeError. The configured span processors run first
    (``configure(span_processors=...)``). With ``log_as_trace=True`` the
    profile is also recorded as an MLflow trace linked to the run (see
    ``log_profile_trace``; needs MLflow 3.10 or later, checked before
    anything is written)::

        with mlflow.start_run():
            with mlflow_profiler.profiling(depth=2, capture_io=True) as session:
                model.predict(df)
            mlflow_profiler.log_profile(session)

        mlflow_profiler.log_profile(session, run_id=run_id, log_as_trace=True)

    Returns the artifact URI of the directory, e.g.
    ``mlflow-artifacts:/1/<run id>/artifacts/profile``. MLflow's errors (an
    unknown run, a tracking server that cannot be reached) reach the caller.
    With MLFLOW_PROFILER_STORE set, the profile is also added to that store
    (docs/store.md) with the run id and the artifact URI as labels; a store
    that fails is logged once and never raises.
    """
    check_session(session, "log_profile")
    return log_processed_profile(
        _processors.process(session),
        artifact_path,
        run_id=run_id,
        log_as_trace=log_as_trace,
        store=os.environ.get("MLFLOW_PROFILER_STORE"),
    )


def log_processed_profile(
    exported,
    artifact_path: Optional[str] = "profile",
    *,
    run_id: Optional[str] = None,
    log_as_trace: bool = False,
    store: Optional[str] = None,
) -> str:
    """log_profile for a session that ``_processors.process()`` already
    returned (the delivery thread (_delivery.py)): the span processors are not applied
    a second time. `store`: also add it there (labelled with the run)."""
    check_session(exported, "log_profile")
    artifact_path = _check_artifact_path(artifact_path, "log_profile")
    mlflow = import_mlflow("log_profile")
    if log_as_trace:
        from . import _mlflow_trace

        _mlflow_trace.check_supported(mlflow)
    rid = resolve_run_id(mlflow, run_id, "log_profile")
    client = _client(mlflow)
    with tempfile.TemporaryDirectory(prefix="mlflow_profiler-") as tmp:
        for name in PROFILE_FILES:
            exported.save(os.path.join(tmp, name))
        client.log_artifacts(rid, tmp, artifact_path)
    uri = _artifact_uri(client, rid, artifact_path)
    if store:
        from . import store as _store

        _store.add_quietly(store, exported, labels={"run_id": rid, "artifact_uri": uri})
    if log_as_trace:
        from . import _mlflow_trace

        _mlflow_trace.record_trace(
            exported, mlflow, run_id=rid, tags={"mlflow_profiler.artifact_uri": uri}
        )
    return uri


def log_profile_trace(
    session,
    *,
    run_id: Optional[str] = None,
    experiment_id: Optional[str] = None,
    max_spans: int = 2000,
) -> Optional[str]:
    """Records a profile as an MLflow trace and returns its trace id.

    One MLflow span per profile span, with the profile's real start and end
    times, the I/O summaries as inputs and outputs, and module, file, line,
    thread, flags, active, waiting and running time as attributes (``mlflow_profiler.*``).
    Several roots (threads, several calls) hang under one ``profile`` span.
    The trace goes to the experiment of `run_id` (or `experiment_id`, or the
    active run's, or the current experiment) and is linked to the run, so it
    shows in the run's and the experiment's Traces tab. Above `max_spans`
    spans the trace keeps the shallowest levels that fit and says how many it
    left out (attribute ``mlflow_profiler.spans_omitted``); the artifacts of
    ``log_profile`` always hold everything.

    Needs MLflow 3.10 or later (ImportError otherwise). Returns None, and
    logs why, when MLflow Tracing is disabled or its sampling dropped the
    trace. MLflow writes the trace in the background, as it does every trace
    (``MLFLOW_ENABLE_ASYNC_TRACE_LOGGING``), and at exit;
    ``mlflow.flush_trace_async_logging()`` waits for it::

        trace_id = log_profile_trace(session, run_id=run.info.run_id)
        mlflow.flush_trace_async_logging()
        mlflow.get_trace(trace_id).data.spans
    """
    check_session(session, "log_profile_trace")
    from . import _mlflow_trace

    mlflow = import_mlflow("log_profile_trace")
    _mlflow_trace.check_supported(mlflow)
    rid = run_id
    if rid is None and experiment_id is None:
        active = mlflow.active_run()
        rid = active.info.run_id if active is not None else None
    elif rid is not None:
        rid = resolve_run_id(mlflow, rid, "log_profile_trace")
    return _mlflow_trace.record_trace(
        _processors.process(session),
        mlflow,
        run_id=rid,
        experiment_id=experiment_id,
        max_spans=max_spans,
    )


# -- metric names ---------------------------------------------------------------


def _digest(path: Sequence[str]) -> str:
    data = "\x00".join(path).encode("utf-8", "backslashreplace")
    return hashlib.blake2b(data, digest_size=_HASH_CHARS // 2).hexdigest()


def _clean_segment(name: str) -> str:
    # Brackets, colons and commas of the tree's own labels are dropped, not
    # replaced: "predict [pyfunc FraudScorer]" -> "predict pyfunc FraudScorer",
    # "[mlflow: input checks, context]" -> "mlflow input checks context".
    s = _BAD_CHARS.sub("_", _LABEL_PUNCTUATION.sub("", name))
    if s in ("", ".", ".."):  # empty or relative segments make MLflow reject the name as a path
        s = "_" * max(1, len(s))
    if len(s.encode("utf-8")) > _SEGMENT_MAX_BYTES:
        room = _SEGMENT_MAX_BYTES - _HASH_CHARS - 1
        s = s.encode("utf-8")[:room].decode("utf-8", "ignore") + "-" + _digest((name,))
    return s


def _clean_prefix(prefix: Any, what: str) -> List[str]:
    if not isinstance(prefix, str):
        raise TypeError(f"{what}: prefix must be a str, got {type(prefix).__name__}")
    if len(prefix) > _PREFIX_MAX:
        raise ValueError(
            f"{what}: prefix must be at most {_PREFIX_MAX} characters, got {len(prefix)}"
        )
    return [_clean_segment(p) for p in prefix.split("/") if p]


def _shorten(lead: List[str], segments: List[str], path: Path, limit: int) -> str:
    # Keeps the root (which model) and as many of the deepest names as fit
    # (where the time went); the hash of the whole path keeps it unique.
    marker = "...-" + _digest(path)
    head = lead + segments[:1]
    if len("/".join(head + [marker])) > limit:
        head = list(lead)
    tail: List[str] = []
    for seg in reversed(segments[1:]):
        if len("/".join(head + [marker, seg] + tail)) > limit:
            break
        tail.insert(0, seg)
    return "/".join(head + [marker] + tail)


def metric_bases(
    paths: Sequence[Path], prefix: Any, stats: Sequence[str], what: str = "metrics"
) -> Dict[Path, str]:
    """MLflow metric name stems for call paths: ``<prefix>/<name>/.../<name>``,
    to which ``/<stat>`` is appended (every stat in `stats` fits).

    Each display name becomes one segment: brackets, and a ':' or ',' before
    a space, are dropped (``predict [pyfunc Churn]`` -> ``predict pyfunc
    Churn``); other characters MLflow does not accept (and ':') become ``_``; ``.``/``..``/empty segments become underscores; a
    segment over 100 bytes is cut and gets an 8-hex hash of the name. A name
    over MLflow's 250 characters keeps the root and the deepest names that fit
    around ``...-<hash of the path>``. Two paths that would get the same
    name (``a:b`` and ``a_b``) stay apart: each one whose names were changed
    gets ``-<hash>``. Names of unchanged paths never depend on the others.
    """
    lead = _clean_prefix(prefix, what)
    limit = MAX_METRIC_NAME - 1 - max(len(s) for s in stats)
    out: Dict[Path, str] = {}
    altered: Dict[Path, bool] = {}
    for path in paths:
        path = tuple(path)
        if path in out:
            continue
        segments = [_clean_segment(p) for p in path]
        base = "/".join(lead + segments)
        changed = segments != list(path)
        if len(base) > limit:
            base, changed = _shorten(lead, segments, path, limit), False  # already unique
        out[path] = base
        altered[path] = changed
    groups: Dict[str, List[Path]] = defaultdict(list)
    for path, base in out.items():
        groups[base].append(path)
    for base, members in groups.items():
        if len(members) < 2:
            continue
        for path in members:
            if altered[path]:
                candidate = f"{base}-{_digest(path)}"
                if len(candidate) > limit:
                    candidate = _shorten(lead, [_clean_segment(p) for p in path], path, limit)
                out[path] = candidate
    return out


# -- run metrics ------------------------------------------------------------------


def _check_step(step: Any, what: str) -> int:
    if step is None:
        return 0
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"{what}: step must be an int or None, got {type(step).__name__}")
    return int(step)


def _log_metrics(mlflow, run_id: str, values: Dict[str, float], step: int) -> None:
    from mlflow.entities import Metric

    client = _client(mlflow)
    timestamp = int(time.time() * 1000)
    metrics = [Metric(key, float(value), timestamp, step) for key, value in values.items()]
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])


# A render depth below every capture: the view of every captured span, the
# MLflow calls grouped below the captured depth included (to_flat(None) shows
# those down to the captured depth only).
_EVERYTHING = 1 << 30


def profile_path_figures(session, depth: Optional[int] = None) -> Dict[Path, Dict[str, float]]:
    """Per call path of `session` (display names root -> span, the paths of
    ``to_flat(depth)``) down to render depth `depth` (None: everything
    captured), summed over the calls of that path:

    - ``wall_ms``: the time shown (``to_flat()``'s ``duration_ns``);
    - ``waiting_ms``: of it, the time suspended at an await or yield or off
      the CPU, at any depth below (``waiting_ns``);
    - ``running_ms``: the rest, ``wall_ms - waiting_ms``;
    - ``self_ms``: the span's own running code: its running time less the
      running time of its children in the same lane (thread and task), never
      below 0. Taken from the full capture, not cut at `depth`: a path at
      `depth` with captured children does not count their running time as
      its own. A span at the capture ceiling had no children recorded: its
      self time includes the running time of the functions it called;
    - ``calls``.

    Spans still open at the end count up to the session's end."""
    if depth is not None and depth < 0:
        depth = None
    rows = session.to_flat(_EVERYTHING)
    paths: List[Path] = []
    child_running = [0] * len(rows)
    for r in rows:
        parent = r["parent_index"]
        paths.append((paths[parent] if parent is not None else ()) + (r["label"],))
        if parent is not None:
            p = rows[parent]
            if p["thread_id"] == r["thread_id"] and p["task"] == r["task"]:
                child_running[parent] += max(0, r["duration_ns"] - r["waiting_ns"])
    figures: Dict[Path, List[int]] = {}
    for i, r in enumerate(rows):
        if depth is not None and len(paths[i]) > depth + 1:
            continue
        running = max(0, r["duration_ns"] - r["waiting_ns"])
        fig = figures.setdefault(paths[i], [0, 0, 0, 0, 0])
        fig[0] += r["duration_ns"]
        fig[1] += running
        fig[2] += r["duration_ns"] - running
        fig[3] += max(0, running - child_running[i])
        fig[4] += 1
    return {
        p: {
            "wall_ms": w / 1e6,
            "running_ms": run / 1e6,
            "waiting_ms": wait / 1e6,
            "self_ms": s / 1e6,
            "calls": n,
        }
        for p, (w, run, wait, s, n) in figures.items()
    }


def _check_top(top: Any, what: str) -> Optional[int]:
    if top is None:
        return None
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or top < 1:
        raise ValueError(f"{what}: top must be an int >= 1 or None, got {top!r}")
    return int(top)


def _check_metric_depth(depth: Any, what: str) -> Optional[int]:
    if depth is None:
        return None
    if isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or depth < -1:
        raise ValueError(
            f"{what}: depth must be an int >= 0, -1 or None (everything), got {depth!r}"
        )
    return None if depth == -1 else int(depth)


def _keep_top(paths: Sequence[Path], wall: Dict[Path, float], top: Optional[int]) -> List[Path]:
    """The roots, and the `top` other paths with the most wall time (ties by
    name, so that the same profile always keeps the same ones)."""
    if top is None:
        return list(paths)
    roots = [p for p in paths if len(p) == 1]
    others = sorted((p for p in paths if len(p) > 1), key=lambda p: (-wall[p], p))[:top]
    return roots + others


def log_profile_metrics(
    session,
    *,
    run_id: Optional[str] = None,
    prefix: str = "profile",
    depth: Optional[int] = 1,
    top: Optional[int] = None,
    step: Optional[int] = None,
) -> Dict[str, float]:
    """Logs span durations of a profile as run metrics and returns them by name.

    Per call path (display names from the root to the span, as in
    ``to_flat()``'s ``call_path``), summed over the calls of that path in
    the session: ``<prefix>/<path>/wall_ms``, ``.../waiting_ms`` (of the
    wall time, suspended at an await or yield or off the CPU, at any depth),
    ``.../running_ms`` (the rest), ``.../self_ms`` (its own running code:
    running time less its captured children's in the same lane, at any
    depth; at the capture ceiling it includes the functions it called) and
    ``.../calls`` (see ``profile_path_figures``). `depth` logs the paths down to that
    render depth: by default 1, the root and its direct steps, a few charts
    a user can read; None or -1 logs everything captured. `top` keeps, besides
    the roots, only the `top` paths with the most wall time. `step` is
    MLflow's step (default 0), e.g. a batch number. Names are made acceptable
    to MLflow (see ``metric_bases``): ``predict.<locals>.<lambda>`` becomes
    ``predict._locals_._lambda_``.
    Logged with ``log_batch``, at most 1000 metrics a call::

        with mlflow.start_run():
            mlflow_profiler.log_profile_metrics(session)
        # profile/predict/wall_ms, profile/predict/preprocess/self_ms, ...
    """
    check_session(session, "log_profile_metrics")
    depth = _check_metric_depth(depth, "log_profile_metrics")
    top = _check_top(top, "log_profile_metrics")
    mlflow = import_mlflow("log_profile_metrics")
    step = _check_step(step, "log_profile_metrics")
    rid = resolve_run_id(mlflow, run_id, "log_profile_metrics")
    figures = profile_path_figures(_processors.process(session), depth)
    kept = _keep_top(list(figures), {p: f["wall_ms"] for p, f in figures.items()}, top)
    figures = {p: figures[p] for p in kept}
    bases = metric_bases(list(figures), prefix, METRIC_STATS, "log_profile_metrics")
    values = {
        f"{bases[p]}/{stat}": fig[stat] for p, fig in figures.items() for stat in METRIC_STATS
    }
    _log_metrics(mlflow, rid, values, step)
    return values


# -- collector summaries ----------------------------------------------------------


def _summary_paths(summary: Any) -> Dict[str, Path]:
    what = "log_profile_summary"
    if not isinstance(summary, Mapping):
        raise TypeError(
            f"{what}(summary): summary must be the dict of ProfileCollector.summary(), "
            f"got {type(summary).__name__}"
        )
    out: Dict[str, Path] = {}
    for key, entry in summary.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{what}: summary keys must be call paths (non-empty str), got {key!r}")
        if not isinstance(entry, Mapping):
            raise TypeError(
                f"{what}: summary[{key!r}] must be a dict of statistics, got {type(entry).__name__}"
            )
        path = entry.get("path")
        if path is None:
            path = key.split("/")
        elif (
            not isinstance(path, (list, tuple))
            or not path
            or not all(isinstance(p, str) and p for p in path)
        ):
            raise ValueError(
                f"{what}: summary[{key!r}]['path'] must be a non-empty list of names, got {path!r}"
            )
        for stat in SUMMARY_STATS:
            if stat not in entry:
                raise ValueError(
                    f"{what}: summary[{key!r}] has no {stat!r} (expected the statistics of "
                    f"ProfileCollector.summary(): {', '.join(SUMMARY_STATS)})"
                )
            value = entry[stat]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, numbers.Real)
            ):
                raise TypeError(
                    f"{what}: summary[{key!r}][{stat!r}] must be a number, got {value!r}"
                )
        out[key] = tuple(path)
    return out


def _json_default(value: Any):
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"log_profile_summary: {type(value).__name__} is not JSON serializable")


def log_profile_summary(
    summary,
    *,
    run_id: Optional[str] = None,
    prefix: str = "profile_summary",
    artifact_path: Optional[str] = "profile",
    depth: Optional[int] = 1,
    top: Optional[int] = None,
    step: Optional[int] = None,
) -> Dict[str, float]:
    """Logs ``ProfileCollector.summary()`` as run metrics and a JSON artifact;
    returns the metrics by name.

    Per call path: ``<prefix>/<path>/<stat>`` for count, mean_ms, p50_ms,
    p95_ms, p99_ms, max_ms, self_mean_ms and self_p95_ms (names made
    acceptable to MLflow as in ``log_profile_metrics``; a statistic that is
    None is not logged), and the whole dict as
    ``<artifact_path>/profile_summary.json``. As metrics, by default the paths
    down to depth 1 (the roots and their direct steps); `depth` None or -1
    logs every path, `top` only the roots and the `top` paths with the
    highest mean. The artifact always holds every path. Raises TypeError or
    ValueError, naming the entry, for anything that is not a summary::

        with mlflow.start_run():
            mlflow_profiler.log_profile_summary(collector.summary())
        # profile_summary/predict/p95_ms, profile_summary/predict/preprocess/count, ...
    """
    paths = _summary_paths(summary)
    depth = _check_metric_depth(depth, "log_profile_summary")
    top = _check_top(top, "log_profile_summary")
    shown = [k for k, p in paths.items() if depth is None or len(p) <= depth + 1]
    mean = {paths[k]: float(summary[k]["mean_ms"] or 0.0) for k in shown}
    kept = set(_keep_top([paths[k] for k in shown], mean, top))
    paths = {k: paths[k] for k in shown if paths[k] in kept}
    artifact_path = _check_artifact_path(artifact_path, "log_profile_summary")
    mlflow = import_mlflow("log_profile_summary")
    step = _check_step(step, "log_profile_summary")
    rid = resolve_run_id(mlflow, run_id, "log_profile_summary")
    text = json.dumps(summary, indent=1, default=_json_default)
    bases = metric_bases(list(paths.values()), prefix, SUMMARY_STATS, "log_profile_summary")
    values = {
        f"{bases[path]}/{stat}": float(summary[key][stat])
        for key, path in paths.items()
        for stat in SUMMARY_STATS
        if summary[key][stat] is not None
    }
    _log_metrics(mlflow, rid, values, step)
    artifact_file = f"{artifact_path}/{SUMMARY_FILE}" if artifact_path else SUMMARY_FILE
    _client(mlflow).log_text(rid, text, artifact_file)
    return values
