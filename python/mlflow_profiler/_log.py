"""The `mlflow_profiler` logger. Internal failures go here, once per kind:
`warnings.warn` would raise inside user code under `-W error`."""

from __future__ import annotations

import logging

logger = logging.getLogger("mlflow_profiler")
_seen: set[str] = set()


def log_once(kind: str, message: str, level: int = logging.WARNING) -> None:
    """Logs `message` the first time `kind` is seen in this process."""
    if kind in _seen:
        return
    _seen.add(kind)
    try:
        logger.log(level, message)
    except Exception:  # a broken handler must not reach user code
        pass


def warn_at_exit(message: str, *args: object) -> None:
    """logger.warning from the exit drain (or the delivery thread, which may
    run into it). By then a handler's stream may be
    closed (pytest's capture, a daemon's log file): its failure is dropped
    instead of printed as a "--- Logging error ---" traceback, and the other
    handlers still get the record."""
    previous = logging.raiseExceptions
    logging.raiseExceptions = False
    try:
        logger.warning(message, *args)
    except Exception:  # a broken handler must not reach user code
        pass
    finally:
        logging.raiseExceptions = previous
