"""The root span of a profiled predict_stream. Its own module because every
function in the profiler's other modules is transparent (never a node)."""

from __future__ import annotations


def stream_root(stream):
    """Re-yields `stream`; autoprofile labels this generator with the model."""
    yield from stream
