"""ProfileCollector: statistics per call path over many sessions
(docs/design/capture.md, "The API, by layer"). The statistics live in the C++
core (views/path_stats.h, bound as ``_core.CallPathStats``): a collector holds
no session, only counts, exact min/max/sum and a quantile sketch per call path
(docs/collector.md)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _core
from ._log import log_once
from ._session import _MAKE_DEFAULTS, ProfileSession, _check_depth


class _CollectedSession(ProfileSession):
    """A ProfileSession that adds itself to its collector when it ends (the
    end of its ``with`` block, or deactivate()). It drops its link to the
    collector then, so a session kept by the user does not keep the collector."""

    _collector: Optional[ProfileCollector]

    def __init__(self, collector: ProfileCollector, depth: int, **profiling_kwargs: Any) -> None:
        super().__init__(depth, **profiling_kwargs)
        self._collector: Optional[ProfileCollector] = collector

    def deactivate(self) -> None:
        """Ends capture and adds the session to the collector, once. Never raises."""
        super().deactivate()
        collector, self._collector = self._collector, None
        if collector is not None:
            collector._add_quietly(self, -1)


class ProfileCollector:
    """Aggregates many profiling sessions into statistics per call path.

    A call path is the list of span names from the root down to a span, so
    ``forward`` under ``encoder`` and under ``decoder`` stay apart, and two calls
    of one path in a session are two samples of it. Memory does not grow with
    the number of sessions: per path, exact count, min, max and total, and
    p50/p95/p99 from a sketch within 1% relative error (docs/collector.md).
    At most ``max_paths`` paths are tracked; calls on paths past that are
    counted in ``statistics()["dropped_paths"]``. Safe to use from many threads
    at once::

        collector = mlflow_profiler.ProfileCollector()
        for batch in batches:
            with collector.session(depth=2):
                model.predict(batch)
        stats = collector.summary()
        stats["predict/preprocess"]["p95_ms"]
    """

    def __init__(self, max_paths: int = 10000) -> None:
        if isinstance(max_paths, bool) or not isinstance(max_paths, int):
            raise TypeError(
                f"max_paths must be an int, got {type(max_paths).__name__} {max_paths!r}"
            )
        if max_paths < 1:
            raise ValueError(
                f"max_paths must be >= 1 (distinct call paths tracked), got {max_paths}"
            )
        self._stats = _core.CallPathStats(max_paths)

    @property
    def max_paths(self) -> int:
        """The most distinct call paths tracked."""
        return self._stats.max_paths

    def session(self, depth: int = 2, **profiling_kwargs: Any) -> ProfileSession:
        """A new ProfileSession that is added to this collector when it ends.

        Takes the arguments of ``profiling()`` (depth, capture_io, all_threads,
        ...). The session is an ordinary one: it can be printed, saved or
        logged after its block. Adding it never raises into the block's code
        (a failure is logged once to the ``mlflow_profiler`` logger)::

            with collector.session(depth=2, capture_io=True) as session:
                model.predict(batch)
            session.print_tree()
        """
        if profiling_kwargs:
            return _CollectedSession(self, depth, **profiling_kwargs)
        # Positional, without binding options by name: 1 us less (a request's
        # session in serving starts here).
        session = _CollectedSession._make(depth, *_MAKE_DEFAULTS)
        session._collector = self
        return session

    def add(self, session: ProfileSession, depth: Optional[int] = None) -> bool:
        """Adds a finished session made elsewhere (``profiling()``, ``load()``,
        autoprofile's ``last_profile()``); returns whether it was added.

        depth: ignore spans deeper than this (their time stays in their
        parent's self time); None keeps everything captured. A session that
        has not finished, or any failure inside, is logged once and not
        added; only a wrong argument type raises::

            with mlflow_profiler.profiling(depth=3) as session:
                model.predict(batch)
            collector.add(session, depth=2)
        """
        if not isinstance(session, ProfileSession):
            raise TypeError(
                f"add() takes a ProfileSession (from profiling() or load()), got {type(session).__name__}"
            )
        return self._add_quietly(session, _check_depth("depth", depth, allow_none=True))

    def _add_quietly(self, session: ProfileSession, depth: int) -> bool:
        try:
            profile = session._built()
        except Exception as exc:
            log_once(
                "collector:unfinished",
                f"mlflow_profiler: ProfileCollector did not add a session: {exc}",
            )
            return False
        try:
            self._stats.add(profile, depth)
        except Exception as exc:  # pragma: no cover - a profiler bug must not break the model
            log_once("collector:add", f"mlflow_profiler: ProfileCollector.add failed: {exc!r}")
            return False
        return True

    def summary(self, depth: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
        """Statistics per call path, keyed by the names joined with "/",
        parents before children::

            {"predict": {"path": ["predict"], "depth": 0, "count": 100,
                         "sessions": 100, "incomplete": 0,
                         "mean_ms": 48.1, "min_ms": 45.0, "max_ms": 61.2,
                         "p50_ms": 47.3, "p95_ms": 52.1, "p99_ms": 58.4,
                         "total_ms": 4810.0,
                         "self_mean_ms": 3.1, ..., "self_total_ms": 310.0},
             "predict/preprocess": {...}}

        count: complete calls (the samples); sessions: sessions the path
        appeared in; incomplete: calls still open or suspended when their
        session ended (not samples). Times are wall time in milliseconds; the
        ``self_`` ones are running time (wall less waiting) less the
        children's running time, the ``waiting_`` ones the time the calls
        waited (suspended, or off the CPU at any depth). Min, max, mean and total
        are exact; the quantiles are within 1% of the exact sample of rank
        floor(q*(count-1)). A path with no complete call has None for them.
        depth: leave out paths deeper than this (0: the roots); it does not
        change self times, which are relative to the children that were added.
        """
        return self._stats.summary(_check_depth("depth", depth, allow_none=True))

    def statistics(self) -> Dict[str, int]:
        """The collector's own figures: sessions added, paths tracked,
        max_paths, dropped_paths (calls not recorded because their path was
        past max_paths; each such call counts) and memory_bytes (heap held)."""
        return self._stats.statistics()

    def reset(self) -> None:
        """Forgets every session added so far."""
        self._stats.reset()

    def __repr__(self) -> str:
        s = self._stats.statistics()
        return f"<ProfileCollector sessions={s['sessions']} paths={s['paths']}>"
