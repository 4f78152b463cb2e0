"""Logging profiles to MLflow (issue 4; being filled in)."""

from __future__ import annotations


def log_profile(session, artifact_path: str = "profile", *, run_id=None, log_as_trace: bool = False):
    """Placeholder."""
    raise NotImplementedError


def log_profile_metrics(session, *, run_id=None, prefix: str = "profile", depth=None, step=None):
    """Placeholder."""
    raise NotImplementedError


def log_profile_summary(summary, *, run_id=None, prefix: str = "profile_summary", artifact_path: str = "profile"):
    """Placeholder."""
    raise NotImplementedError
