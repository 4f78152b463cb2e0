"""Imported by the package's .pth file at interpreter start, only when
MLFLOW_PROFILER_AUTOPROFILE is set: turns autoprofile on from the
environment (docs/autoprofile.md) with no change to the program.

MLflow is not imported here (that would cost every process seconds): a
meta-path hook waits for `mlflow.pyfunc` to be imported and patches it then.
A bad variable is reported on stderr, naming it, and profiling stays off:
the program itself always runs.

With an export destination, a SIGTERM handler is installed here, before
the program can install its own: uvicorn (`mlflow models serve`) restores
the handler it found and re-raises SIGTERM after its graceful shutdown, so
the process dies by the signal and atexit, which drains the export
queues, never runs. Ours drains them, then dies by the signal as before."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys
import time

_TARGET = "mlflow.pyfunc"


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"mlflow-profiler: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _report(message: str) -> None:
    _say(f"{message}; autoprofile stays off")


def _enable(settings) -> None:
    from . import _autoprofile, _delivery, _env

    try:
        _delivery.set_limits(settings["queue_size"], settings["flush_timeout"])
        _autoprofile.autoprofile(**_env.autoprofile_kwargs(settings))
    except Exception as exc:  # never break the program that is starting
        _report(f"could not enable autoprofile: {exc}")


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then patches the module it loaded."""

    def __init__(self, inner, settings) -> None:
        self._inner = inner
        self._settings = settings

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        _enable(self._settings)

    def __getattr__(self, name):  # resources, get_source, ... of the real loader
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, settings) -> None:
        self._settings = settings
        self._busy = False

    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        try:
            sys.meta_path.remove(self)  # one shot
        except ValueError:
            pass
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self._settings)
        return spec


_draining = False
_parent = 0  # os.getppid() when the handler was installed


def _on_sigterm(signum, frame) -> None:
    """Drains the delivery queues (at most MLFLOW_PROFILER_FLUSH_TIMEOUT), then
    dies by the signal. A second SIGTERM during the drain dies at once,
    unless the parent has died since: that one is the parent-death signal
    (PR_SET_PDEATHSIG, which `mlflow models serve` sets on its server), sent
    when a process group's SIGTERM kills the parent, not a second request."""
    global _draining
    if _draining and os.getppid() != _parent:
        return
    if not _draining:
        _draining = True
        delivery = sys.modules.get(f"{__package__}._delivery")
        if delivery is not None:  # not imported: nothing was ever queued
            import threading  # not at interpreter start: gevent must patch it first

            # In a thread, joined with a limit: the signal may have interrupted
            # this thread inside the queue's lock, which the drain needs.
            drain = threading.Thread(
                target=delivery.drain_at_exit, name="mlflow-profiler-drain", daemon=True
            )
            queued = delivery.statistics()["queued"]
            began = time.monotonic()
            drain.start()
            drain.join(delivery.flush_timeout() + 1.0)
            if queued:  # one line on the way out: the pod's log shows the drain happened
                _say(
                    f"SIGTERM: {queued} queued profiles, "
                    f"{delivery.statistics()['queued']} left after {time.monotonic() - began:.1f} s"
                )
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _drain_on_sigterm(settings) -> None:
    global _parent
    if not settings["drain_on_sigterm"] or not (
        settings["output_dir"] or settings["log_to_mlflow"]
    ):
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # never replace an inherited SIG_IGN
            _parent = os.getppid()
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread, or no SIGTERM here
        pass


def install() -> None:
    """Reads the environment and arranges for autoprofile to start."""
    from . import _env

    try:
        settings = _env.read()
    except _env.EnvError as exc:
        _report(str(exc))
        return
    if not settings["enabled"]:
        return
    _drain_on_sigterm(settings)
    if _TARGET in sys.modules:
        _enable(settings)
    else:
        sys.meta_path.insert(0, _Finder(settings))


install()
