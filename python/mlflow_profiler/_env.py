"""Environment variables: every operational toggle of the no-code-change
path (the .pth bootstrap and `mlflow-profiler-run`), read and validated in
one place. docs/autoprofile.md has the table; keep the two in step."""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(ValueError):
    """A variable with a value we cannot use; the message names it."""


def _bool(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise EnvError(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def _number(name: str, raw: str, convert, check, what: str):
    """`raw` converted, then checked by `check` (the same rule the API
    applies to the argument); either failure is an EnvError naming `name`."""
    try:
        value = convert(raw.strip())
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not {what}") from None
    try:
        return check(value)
    except (TypeError, ValueError) as exc:
        raise EnvError(f"{name}={raw!r}: {exc}") from None


def _at_least(minimum, unit=""):
    def check(value):
        if math.isnan(value) or value < minimum:
            raise ValueError(f"must be >= {minimum}{unit}")
        return value

    return check


def parse_depth(name: str, raw: str) -> int:
    """A depth ceiling from text; EnvError names `name` (a variable or a flag)."""
    from ._session import _check_depth

    return _number(
        name,
        raw,
        int,
        lambda v: _check_depth("depth", v),
        "an integer: use -1 (unlimited) or a depth >= 0",
    )


def parse_rate(name: str, raw: str) -> float:
    """A sample rate from text; EnvError names `name` (a variable or a flag)."""
    from ._autoprofile import _check_rate

    return _number(name, raw, float, _check_rate, "a number: use a sample rate in [0, 1], e.g. 0.1")


def _positive_int(name: str, raw: str) -> int:
    return _number(name, raw, int, _at_least(1), "an integer >= 1")


def _seconds(name: str, raw: str) -> float:
    return _number(name, raw, float, _at_least(0, " seconds"), "a number of seconds")


def _text(name: str, raw: str) -> Optional[str]:
    return raw or None


class Variable(NamedTuple):
    name: str
    key: str  # the autoprofile() argument or setting it feeds
    parse: Callable[[str, str], Any]
    default: Any
    doc: str


VARIABLES = (
    Variable(
        "MLFLOW_PROFILER_AUTOPROFILE",
        "enabled",
        _bool,
        False,
        "Turns autoprofile on at interpreter start (through the package's .pth hook).",
    ),
    Variable("MLFLOW_PROFILER_DEPTH", "depth", parse_depth, 2, "Depth ceiling; -1 is unlimited."),
    Variable(
        "MLFLOW_PROFILER_SAMPLE_RATE",
        "sample_rate",
        parse_rate,
        1.0,
        "Probability that a predict call is profiled, in [0, 1].",
    ),
    Variable(
        "MLFLOW_PROFILER_CAPTURE_IO",
        "capture_io",
        _bool,
        False,
        "Summarize arguments and return values (shape, dtype, bytes).",
    ),
    Variable(
        "MLFLOW_PROFILER_CAPTURE_IO_DEPTH",
        "capture_io_depth",
        parse_depth,
        None,
        "Deepest level whose I/O is summarized (default: the depth).",
    ),
    Variable(
        "MLFLOW_PROFILER_MAX_EVENTS",
        "max_events",
        _positive_int,
        1_000_000,
        "Event buffer per thread and session; drops beyond it are counted.",
    ),
    Variable(
        "MLFLOW_PROFILER_ALL_THREADS",
        "all_threads",
        _bool,
        False,
        "Also profile threads that predict starts.",
    ),
    Variable(
        "MLFLOW_PROFILER_CPU_TIME",
        "cpu_time",
        _bool,
        False,
        "Record each span's CPU time (its thread's CPU clock).",
    ),
    Variable(
        "MLFLOW_PROFILER_ALLOC_BYTES",
        "alloc_bytes",
        _bool,
        False,
        "Record the bytes each span allocates through Python's allocators.",
    ),
    Variable(
        "MLFLOW_PROFILER_LOG_TO_MLFLOW",
        "log_to_mlflow",
        _bool,
        False,
        "Log each profile to MLflow from a background thread.",
    ),
    Variable(
        "MLFLOW_PROFILER_LOG_AS_TRACE",
        "log_as_trace",
        _bool,
        False,
        "Also record each logged profile as an MLflow trace.",
    ),
    Variable(
        "MLFLOW_PROFILER_OUTPUT_DIR",
        "output_dir",
        _text,
        None,
        "Write each profile to this directory as profile-<time>-<pid>-<n>.json.gz.",
    ),
    Variable(
        "MLFLOW_PROFILER_STORE",
        "store",
        _text,
        None,
        "Add each profile to this store: a SQLite path or a postgresql:// URL (docs/store.md); "
        "log_profile() adds to it too.",
    ),
    Variable(
        "MLFLOW_PROFILER_RUN_ID",
        "run_id",
        _text,
        None,
        "Run the profiles are logged to (default: one run per process).",
    ),
    Variable(
        "MLFLOW_PROFILER_EXPERIMENT",
        "experiment",
        _text,
        "mlflow-profiler",
        "Experiment of the per-process run when no run id is given.",
    ),
    Variable(
        "MLFLOW_PROFILER_ARTIFACT_PATH",
        "artifact_path",
        _text,
        "profiles",
        "Artifact directory under the run; each profile gets a subdirectory.",
    ),
    Variable(
        "MLFLOW_PROFILER_QUEUE_SIZE",
        "queue_size",
        _positive_int,
        64,
        "Profiles waiting for export; beyond it they are dropped and counted.",
    ),
    Variable(
        "MLFLOW_PROFILER_FLUSH_TIMEOUT",
        "flush_timeout",
        _seconds,
        5.0,
        "Seconds the exit hook (or a SIGTERM) waits for queued profiles.",
    ),
    Variable(
        "MLFLOW_PROFILER_DRAIN_ON_SIGTERM",
        "drain_on_sigterm",
        _bool,
        True,
        "On SIGTERM, write or log the queued profiles, then die by the signal as before.",
    ),
)


def read(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Every variable's value (its default when unset). Raises EnvError, whose
    message names the variable, for a value that cannot be used."""
    env = os.environ if environ is None else environ
    out: Dict[str, Any] = {}
    for var in VARIABLES:
        raw = env.get(var.name)
        out[var.key] = var.default if raw is None else var.parse(var.name, raw)
    return out


def autoprofile_kwargs(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The autoprofile() arguments among `settings`."""
    keys = (
        "depth",
        "sample_rate",
        "capture_io",
        "capture_io_depth",
        "max_events",
        "all_threads",
        "cpu_time",
        "alloc_bytes",
        "log_to_mlflow",
        "log_as_trace",
        "output_dir",
        "store",
    )
    return {k: settings[k] for k in keys}
