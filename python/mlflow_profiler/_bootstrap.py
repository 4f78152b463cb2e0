"""Imported by the package's .pth file at interpreter start, only when
MLFLOW_PROFILER_AUTOPROFILE is set: turns autoprofile on from the
environment (docs/autoprofile.md) with no change to the program.

MLflow is not imported here (that would cost every process seconds): a
meta-path hook waits for `mlflow.pyfunc` to be imported and patches it then.
A bad variable is reported on stderr, naming it, and profiling stays off:
the program itself always runs."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

_TARGET = "mlflow.pyfunc"


def _report(message: str) -> None:
    try:
        sys.stderr.write(f"mlflow-profiler: {message}; autoprofile stays off\n")
    except Exception:
        pass


def _enable(settings) -> None:
    from . import _autoprofile, _env, _exporter

    try:
        _exporter.set_limits(settings["queue_size"], settings["flush_timeout"])
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
    if _TARGET in sys.modules:
        _enable(settings)
    else:
        sys.meta_path.insert(0, _Finder(settings))


install()
