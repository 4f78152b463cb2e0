"""The delivery thread of autoprofile(log_to_mlflow=True / output_dir=...):
one daemon thread fed through a bounded queue. `predict` only does a
non-blocking put; a full queue drops the profile and counts it. flush() and
interpreter exit drain the queue (with a time limit).

Files only (output_dir, no MLflow, no span processors): the profile is built
in `predict` (~30 us) and handed to the extension's writer thread (SCHED_IDLE,
never holds the GIL), bounded the same way. A Python thread here would take
the GIL twice per profile, and each hand-over stalls the thread serving
requests (bench/RESULTS.md: +18% p50 on a closed loop, against +1% without)."""

from __future__ import annotations

import atexit
import itertools
import os
import queue
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Tuple

from ._log import log_once, warn_at_exit

DEFAULT_QUEUE_SIZE = 64
DEFAULT_FLUSH_TIMEOUT_S = 5.0
# A tracking server that does not accept a connection is not asked again for
# this long (doubling while it stays down, up to the maximum): MLflow's own
# client would retry each request for minutes, logging every retry.
SINK_BACKOFF_S = 30.0
SINK_BACKOFF_MAX_S = 300.0
SINK_CONNECT_TIMEOUT_S = 1.0

_lock = threading.Lock()
_queue: Optional[queue.Queue] = None
_thread: Optional[threading.Thread] = None
_queue_size = DEFAULT_QUEUE_SIZE
_flush_timeout_s = DEFAULT_FLUSH_TIMEOUT_S
# sink_down: not sent to MLflow because its tracking server was unreachable
_counts = {"submitted": 0, "exported": 0, "dropped": 0, "failed": 0, "sink_down": 0}
_sequence = itertools.count(1)  # next() on it is atomic under the GIL; `+= 1` on an int is not
_pid = os.getpid()
_stamp = (-1, "")  # (UTC second, its "%Y%m%dT%H%M%S"): one strftime per second, not per profile
_run_id: Optional[str] = None  # the run profiles are logged to, created on first use
_run_is_ours = False  # created here (ended at exit), not MLFLOW_PROFILER_RUN_ID
_down_until = 0.0  # time.monotonic() before which the tracking server is not tried
_backoff_s = 0.0  # the current back-off; 0 while the server answers
_env_settings: Optional[Dict[str, Any]] = None
_atexit_registered = False


def set_limits(queue_size: Optional[int] = None, flush_timeout_s: Optional[float] = None) -> None:
    """Queue capacity (profiles) and how long flush at exit may wait; applies
    to a queue created after the call."""
    global _queue_size, _flush_timeout_s
    if queue_size is not None:
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"export queue size must be an int >= 1, got {queue_size!r}")
        _queue_size = queue_size
    if flush_timeout_s is not None:
        if not flush_timeout_s >= 0:
            raise ValueError(f"flush timeout must be >= 0 seconds, got {flush_timeout_s!r}")
        _flush_timeout_s = float(flush_timeout_s)


_counts_lock = threading.Lock()


def _bump(key: str) -> None:
    with _counts_lock:  # `+=` on a dict item is not atomic across threads
        _counts[key] += 1


def _log_queue_full() -> None:
    log_once(
        "export-full",
        f"mlflow_profiler: the export queue is full ({_queue_size} profiles); "
        "profiles are being dropped and counted (mlflow_profiler.statistics()['export']). "
        "Lower the sample rate or raise MLFLOW_PROFILER_QUEUE_SIZE",
    )


def _log_export_failure(cause: str) -> None:
    log_once(
        "export-failed",
        f"mlflow_profiler: exporting a profile failed ({cause}); the model keeps "
        "serving, failures are counted in mlflow_profiler.statistics()['export']",
    )


def submit(session, config) -> bool:
    """Queues a finished session for export without blocking; False (and
    counted as dropped) when the queue is full."""
    if config.output_dir and not config.log_to_mlflow and not config.store:
        from . import _processors

        if not _processors.span_processors():
            return _submit_file(session, config)
    q = _queue
    if q is None:
        q = _start()
    _bump("submitted")
    try:
        q.put_nowait((session, config))
        return True
    except queue.Full:
        _bump("dropped")
        _log_queue_full()
        return False


def _profile_name() -> str:
    """profile-<UTC time>-<pid>-<sequence>: unique per process, sorts by time."""
    global _stamp
    seq = next(_sequence)
    second = int(time.time())
    if _stamp[0] != second:
        _stamp = (second, time.strftime("%Y%m%dT%H%M%S", time.gmtime(second)))
    return f"profile-{_stamp[1]}-{_pid}-{seq:06d}"


def _submit_file(session, config) -> bool:
    from . import _core

    _register_atexit()
    _report_writer_failures()
    path = os.path.join(config.output_dir, _profile_name() + ".json.gz")
    if _core.write_in_background(session._built(), path, _queue_size):
        return True
    _log_queue_full()
    return False


_writer_failures_seen = 0


def _report_writer_failures() -> None:
    """Logs the writer thread's failures once (it cannot log: no GIL)."""
    global _writer_failures_seen
    from . import _core

    if _core.background_writer_failures() > _writer_failures_seen:
        stats = _core.background_writer_stats()
        _writer_failures_seen = stats["failed"] + stats["sync_failures"]
        _log_export_failure(stats["last_error"])


def _register_atexit() -> None:
    global _atexit_registered
    if _atexit_registered:  # every sampled request passes here: no lock once done
        return
    with _lock:
        if not _atexit_registered:
            atexit.register(drain_at_exit)
            _atexit_registered = True


def _start() -> queue.Queue:
    global _queue, _thread
    _register_atexit()
    with _lock:
        if _queue is None:
            _queue = queue.Queue(maxsize=_queue_size)
            _thread = threading.Thread(
                target=_worker, args=(_queue,), name="mlflow-profiler-export", daemon=True
            )
            _thread.start()
        return _queue


def _worker(q: queue.Queue) -> None:
    while True:
        item = q.get()
        try:
            if item is None:
                return
            session, config = item
            _export(session, config)
            _bump("exported")
        except _SinkDown:
            _bump("sink_down")
        except Exception as exc:
            _bump("failed")
            _log_export_failure(repr(exc))
        finally:
            q.task_done()


class _SinkDown(Exception):
    """The tracking server did not accept a connection: counted apart."""


def _export(session, config) -> None:
    from . import _processors

    processed = _processors.process(session)
    name = _profile_name()
    if config.output_dir:
        os.makedirs(config.output_dir, exist_ok=True)
        processed.save(os.path.join(config.output_dir, name + ".json.gz"))
    if config.store:
        from . import store

        store.add_quietly(config.store, processed, labels=_store_labels(processed))
    if config.log_to_mlflow:
        from . import mlflow_sink

        if not _sink_up():
            raise _SinkDown
        try:
            # Already through the span processors: not applied twice.
            mlflow_sink.log_processed_profile(
                processed,
                artifact_path=f"{_artifact_root()}/{name}",
                run_id=_target_run(),
                log_as_trace=config.log_as_trace,
            )
        except Exception:
            _sink_up()  # the server went away meanwhile: back off from now on
            raise


def _store_labels(session) -> dict:
    """The model's name and version where autoprofile knows them."""
    meta = session._built().meta
    out = {}
    for key, meta_key in (
        ("model", "model.class"),
        ("run_id", "model.run_id"),
        ("model_uri", "model.uri"),
    ):
        if meta.get(meta_key):
            out[key] = meta[meta_key]
    return out


def _tracking_endpoint() -> Optional[Tuple[str, int]]:
    """(host, port) of an http(s) tracking URI that is reached directly; None
    for a local store, or a server reached through a proxy (HTTPS_PROXY):
    there a direct connection says nothing, and MLflow's client decides."""
    import mlflow

    uri = urllib.parse.urlsplit(mlflow.get_tracking_uri())
    if uri.scheme not in ("http", "https") or not uri.hostname:
        return None
    try:
        port = uri.port
    except ValueError:
        return None
    if urllib.request.getproxies().get(uri.scheme) and not urllib.request.proxy_bypass(
        uri.hostname
    ):
        return None
    return uri.hostname, port or (443 if uri.scheme == "https" else 80)


def _sink_up() -> bool:
    """Whether to send to MLflow now: not while backing off; else whether the
    tracking server accepts a TCP connection (one connect, no retries). The
    first failure of an outage is logged once; so is the recovery."""
    global _down_until, _backoff_s
    now = time.monotonic()
    if now < _down_until:
        return False
    endpoint = _tracking_endpoint()
    if endpoint is None:
        return True
    try:
        socket.create_connection(endpoint, timeout=SINK_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        first = _backoff_s == 0
        _backoff_s = min(SINK_BACKOFF_MAX_S, _backoff_s * 2 or SINK_BACKOFF_S)
        _down_until = now + _backoff_s
        if first:
            warn_at_exit(
                "mlflow_profiler: the MLflow tracking server at %s:%d does not answer (%s); profiles "
                "are not sent to MLflow while it is down (tried again after %.0f s, then less often), "
                "and are counted in mlflow_profiler.statistics()['export']['sink_down']",
                endpoint[0],
                endpoint[1],
                exc.strerror or exc,
                _backoff_s,
            )
        return False
    if _backoff_s:
        warn_at_exit(
            "mlflow_profiler: the MLflow tracking server at %s:%d answers again; profiles are sent to "
            "it from now on",
            endpoint[0],
            endpoint[1],
        )
    _backoff_s = 0.0
    return True


def _settings() -> Dict[str, Any]:
    """The MLFLOW_PROFILER_* settings, read once per process."""
    global _env_settings
    if _env_settings is None:
        from . import _env

        _env_settings = _env.read()
    return _env_settings


def _artifact_root() -> str:
    return _settings()["artifact_path"]


def _target_run() -> str:
    """MLFLOW_PROFILER_RUN_ID, else one run per process, created on first
    use in MLFLOW_PROFILER_EXPERIMENT (default "mlflow-profiler"), ended
    (FINISHED) when the process exits."""
    global _run_id, _run_is_ours
    if _run_id is None:
        settings = _settings()
        run_id = settings["run_id"]
        if not run_id:
            from mlflow.tracking import MlflowClient

            client = MlflowClient()
            name = settings["experiment"]
            experiment = client.get_experiment_by_name(name)
            experiment_id = (
                experiment.experiment_id if experiment else client.create_experiment(name)
            )
            run = client.create_run(
                experiment_id,
                run_name=f"{socket.gethostname()}-{os.getpid()}",
                tags={
                    "mlflow_profiler.host": socket.gethostname(),
                    "mlflow_profiler.pid": str(os.getpid()),
                },
            )
            run_id = run.info.run_id
            _run_is_ours = True
        _run_id = run_id
    return _run_id


def flush(timeout: Optional[float] = None) -> bool:
    """Waits until every queued profile is exported (or failed), and makes the
    files written to `output_dir` durable (one syncfs per filesystem); True
    if the queue drained within `timeout` seconds (None: no limit)."""
    from . import _core

    deadline = None if timeout is None else time.monotonic() + timeout
    q = _queue
    if q is not None:
        with q.all_tasks_done:
            while q.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                q.all_tasks_done.wait(left)
    left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
    drained = _core.flush_background_writes(left)
    _report_writer_failures()
    return drained


def statistics() -> Dict[str, Any]:
    """submitted, exported, dropped (queue full), failed, sink_down (not sent:
    the tracking server was unreachable), queued: the Python delivery thread's and
    the file writer thread's together."""
    from . import _core

    q = _queue
    out: Dict[str, Any] = dict(_counts)
    writer = _core.background_writer_stats()
    out["submitted"] += writer["submitted"] + writer["dropped"]
    out["exported"] += writer["written"]
    out["dropped"] += writer["dropped"]
    out["failed"] += writer["failed"]
    out["queued"] = (q.unfinished_tasks if q is not None else 0) + writer["queued"]
    out["run_id"] = _run_id
    return out


def flush_timeout() -> float:
    """Seconds the exit drain waits (MLFLOW_PROFILER_FLUSH_TIMEOUT)."""
    return _flush_timeout_s


def drain_at_exit() -> None:
    """flush() for at most flush_timeout() seconds, then a warning naming
    what was still queued, dropped or failed, and the end (FINISHED) of the
    run this process created. Registered with atexit; the bootstrap's SIGTERM
    handler calls it too."""
    drained = flush(_flush_timeout_s)
    counts = statistics()
    if not drained:
        warn_at_exit(
            "mlflow_profiler: %d profiles were still being exported at exit (waited %.0f s)",
            counts["queued"],
            _flush_timeout_s,
        )
    if counts["dropped"] or counts["failed"] or counts["sink_down"]:
        warn_at_exit(
            "mlflow_profiler: export summary: %d submitted, %d exported, %d dropped (queue full), "
            "%d failed, %d not sent (tracking server down)",
            counts["submitted"],
            counts["exported"],
            counts["dropped"],
            counts["failed"],
            counts["sink_down"],
        )
    _end_run()


def _end_run() -> None:
    """Ends the run created for this process's profiles, if the tracking
    server is there to hear it (a run left RUNNING reads as a live server)."""
    global _run_is_ours
    if not _run_is_ours or _run_id is None:
        return
    _run_is_ours = False
    try:
        if _sink_up():
            from mlflow.tracking import MlflowClient

            MlflowClient().set_terminated(_run_id, "FINISHED")
    except Exception as exc:  # at exit: say so, never raise
        warn_at_exit("mlflow_profiler: could not end the profiles' run %s: %r", _run_id, exc)


def _after_fork_in_child() -> None:
    # The worker thread does not survive fork; the child starts its own.
    global _queue, _thread, _run_id, _run_is_ours, _env_settings, _pid, _down_until, _backoff_s
    _queue = None
    _thread = None
    _pid = os.getpid()
    _run_id = None
    _run_is_ours = False
    _down_until = _backoff_s = 0.0
    _env_settings = None
    for key in _counts:
        _counts[key] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
