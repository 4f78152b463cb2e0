"""Saving a profile to a file and reading it back.

The formats, the atomic write and the document reader are in the C++ core
(userspace/core/formats/export.h, file_io.h, json_read.h); this module is the Python
face of them.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _core
from ._session import ProfileSession

PathLike = Union[str, "os.PathLike[str]"]

# What ProfileLoadError.kind can be.
LOAD_ERROR_KINDS = ("truncated", "corrupt", "version", "io")


class ProfileLoadError(ValueError):
    """A file could not be read as a profile. The message says what is wrong
    and where; ``kind`` says which of:

    - ``"truncated"``: the file ends early (cut off while written or copied),
      or is empty;
    - ``"corrupt"``: not JSON, not a profile document, or a value in it is
      wrong (the message names it, e.g. ``spans[12]: parent 40 is not an
      earlier span``);
    - ``"version"``: written by a newer mlflow-profiler (upgrade to read it);
    - ``"io"``: the file exists but could not be read (``errno`` is set and
      ``__cause__`` is the OSError). A missing file is FileNotFoundError.

    ``path`` is the file (None for ``loads``)::

        try:
            session = mlflow_profiler.load("predict.json.gz")
        except mlflow_profiler.ProfileLoadError as err:
            print(err.kind, err)
    """

    errno: Optional[int] = None

    def __init__(self, message: str, kind: str = "corrupt", path: Optional[str] = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path

    def __reduce__(self):
        # Keeps kind and path across pickling (multiprocessing, logging handlers).
        return (type(self), (str(self), self.kind, self.path), {"errno": self.errno})


def save_profile(profile, path: PathLike, format: Optional[str] = None) -> str:
    """Writes a built profile (``session._built()``) to `path` and returns the path.

    The format follows the extension (.html, .json, .json.gz, .trace.json,
    .pb.gz, .speedscope.json, .folded) unless `format` names one ("json",
    "json_gz", "chrome_trace", "pprof", "speedscope", "folded", "html"). The
    file is written atomically: a temporary file next to it, fsync, rename;
    an interrupted save leaves the previous file or none, never a partial one.

    Raises ValueError for an unknown extension or format (the message lists
    the known ones) and OSError, with ``errno`` and ``filename``, when the
    file cannot be written (a full disk, a read-only directory)::

        save_profile(session._built(), "predict.json.gz")
        save_profile(session._built(), "predict.out", format="json")

    Most code calls ``ProfileSession.save(path)``, which calls this.
    """
    path_str = os.fsdecode(os.fspath(path))
    if format is not None and not isinstance(format, str):
        raise TypeError(f"format must be a format name (str) or None, got {type(format).__name__}")
    _core.save(profile, path_str, format)
    return path_str


def load(path: PathLike):
    """Reads a profile saved as .json or .json.gz into a finalized ProfileSession.

    The session renders and exports exactly as the one that was saved: the
    file holds the full capture, with its I/O summaries and generator
    segments. Documents of older versions are converted. Raises
    FileNotFoundError if there is no such file, and ProfileLoadError (see its
    ``kind``) if the file is truncated, corrupt, not a profile document or
    written by a newer mlflow-profiler; never returns a partial session::

        import mlflow_profiler
        session = mlflow_profiler.load("predict.json.gz")
        session.print_tree(depth=2)
        session.save("predict.html")
    """
    path_str = os.fsdecode(os.fspath(path))
    return ProfileSession._from_profile(_core.load_profile(path_str))


def loads(data: Union[bytes, str]):
    """Like load(), from the bytes of a document (plain or gzip-compressed)
    already in memory; ProfileLoadError's ``path`` is None::

        session = loads(previous.to_json())
        session = loads(artifact_bytes)      # e.g. a .json.gz fetched from MLflow
    """
    return ProfileSession._from_profile(_core.loads_profile(data))
