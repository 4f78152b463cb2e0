"""Errors of the analysis commands shared by their modules."""

from __future__ import annotations


class AnalysisError(ValueError):
    """Inputs that cannot be analysed as asked: an empty selection, sides
    that cannot be compared, an option that names nothing. The `mlprof`
    commands exit 2 with its message (docs/store.md)."""
