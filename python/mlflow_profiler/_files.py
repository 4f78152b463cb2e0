"""Saving a profile to a file and reading it back (being written: issue 3)."""

from __future__ import annotations


class ProfileLoadError(ValueError):
    """A file could not be read as a profile: truncated, corrupt, or written by a
    newer version. `kind` says which."""

    def __init__(self, message: str, kind: str = "corrupt") -> None:
        super().__init__(message)
        self.kind = kind


def save_profile(profile, path, format=None) -> str:
    """Writes `profile` to `path` (not written yet)."""
    raise NotImplementedError("save: being written")


def load(path):
    """Reads a profile document back into a finalized ProfileSession (not written yet)."""
    raise NotImplementedError("load: being written")
