"""mlflow-profiler: where does the time of this predict() go?

A session records the call tree of what runs inside it:

    from mlflow_profiler import profiling
    with profiling(depth=2) as session:
        model.predict(df)
    session.print_tree()
"""

from __future__ import annotations

import sysconfig as _sysconfig

from . import _native

_native.load()  # a clear error when the extension was built for another interpreter

from . import _core, _transparent
from ._autoprofile import autoprofile, last_profile, statistics
from ._collector import ProfileCollector
from ._core import profile_block
from ._delivery import flush
from ._files import ProfileLoadError, load
from ._marks import mark, rate_limit_hit, retry
from ._processors import configure
from ._session import ProfileSession, SpanRecord, current_session, profiling
from ._spans import profile_span
from ._summaries import IOSummary, register_summarizer, summarize
from .mlflow_sink import log_profile, log_profile_metrics, log_profile_summary, log_profile_trace

__version__: str = (
    _core.__version__
)  # pyproject.toml's version, compiled into the extension by CMake
__all__ = [
    "IOSummary",
    "ProfileCollector",
    "ProfileLoadError",
    "ProfileSession",
    "SpanRecord",
    "autoprofile",
    "configure",
    "current_session",
    "flush",
    "last_profile",
    "load",
    "log_profile",
    "log_profile_metrics",
    "log_profile_summary",
    "log_profile_trace",
    "mark",
    "profile_block",
    "profile_span",
    "profiling",
    "rate_limit_hit",
    "register_summarizer",
    "retry",
    "statistics",
    "summarize",
]


def _init() -> None:
    paths = _sysconfig.get_paths()
    prefixes = {paths.get("stdlib"), paths.get("platstdlib")}
    _core.set_library_prefixes(sorted(p for p in prefixes if p))
    from . import (
        _autoprofile,
        _collector,
        _delivery,
        _marks,
        _native,
        _processors,
        _session,
        _spans,
        mlflow_sink,
    )

    for module in (
        _session,
        _spans,
        _transparent,
        _native,
        _collector,
        _processors,
        mlflow_sink,
        _autoprofile,
        _delivery,
        _marks,
    ):
        _transparent.add_module(module)
    _transparent.refresh()


_init()
