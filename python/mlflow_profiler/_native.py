"""Loads the C++ extension (mlflow_profiler._core).

- Built for another interpreter: an ImportError that names the interpreters
  it was built for and this one, instead of Python's "No module named".
- A free-threaded interpreter (3.14t): the extension needs the GIL, so
  loading it turns the GIL on for the process. CPython says so with a
  RuntimeWarning; it goes to the `mlflow_profiler` logger instead, since a
  warning raises under `-W error` (docs/capture.md). If the GIL stays off
  (PYTHON_GIL=0), native sessions refuse to start (FREE_THREADED)."""

from __future__ import annotations

import glob
import logging
import os
import re
import sys
import sysconfig
import warnings

from ._log import log_once


def _built_for() -> list:
    """The interpreters the extension files next to this module were built for."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for path in sorted(glob.glob(os.path.join(here, "_core.*"))):
        m = re.search(r"\.cpython-(\d)(\d+)(t?)-", os.path.basename(path))
        if m:
            out.append(f"CPython {m.group(1)}.{m.group(2)}{m.group(3)}")
        elif path.endswith((".so", ".pyd")):
            out.append(os.path.basename(path))
    return out


def this_interpreter() -> str:
    """'CPython 3.14t' and the like: this interpreter, as _built_for names them."""
    free = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.implementation.name.replace('cpython', 'CPython')} {sys.version_info[0]}.{sys.version_info[1]}{free}"


def load():
    """Imports and returns mlflow_profiler._core."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            from . import _core
    except ImportError as exc:
        built = _built_for()
        if not built or this_interpreter() in built:
            raise
        raise ImportError(
            f"mlflow_profiler's extension was built for {', '.join(built)}, and this is "
            f"{this_interpreter()} ({sys.executable}). Install it for this interpreter: "
            f"{os.path.basename(sys.executable)} -m pip install --force-reinstall mlflow-profiler"
        ) from exc
    for w in caught:
        if "global interpreter lock" in str(w.message):
            log_once("gil-enabled", f"mlflow_profiler: {w.message}", logging.INFO)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return _core


# A free-threaded build: the GIL may be off (PYTHON_GIL=0), and then the
# native engine, which needs it, refuses to start (ProfileSession.activate).
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
