"""autoprofile(): profiles MLflow's `PyFuncModel.predict` (and
`predict_stream`) with no change to the model (docs/design/capture.md,
"autoprofile" and "Safety guarantees").

The patch goes on MLflow's wrapper class, never on the user's: the original
function objects are kept and put back exactly by `autoprofile(disable=True)`.
A call is sampled at random (`random() < sample_rate`, docs/design/capture.md,
"autoprofile").
A call that was not sampled is still profiled while a tracer (mlprof-ebpf,
bpftrace) is attached to the extension's session_begin USDT probe: it is
switched on from outside, with no restart, and such a session updates
last_profile() but is not exported in-process (docs/usdt.md).
The root span is `PyFuncModel.predict`, labelled with the model; MLflow's
delegation frames and the user's own `PythonModel.predict` are transparent
for that session only, so the root's depth-1 children are what the user's
predict calls (docs/decisions/0003-depth-counts-from-the-root.md).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import random
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from . import _core, _stream
from ._log import log_once
from ._session import (
    ProfileSession,
    _check_depth,
    _check_flag,
    _check_max_events,
    _prepare,
    _values_mask,
)

_MISSING_MLFLOW = (
    "autoprofile() patches MLflow's PyFuncModel and needs MLflow: "
    "pip install 'mlflow-profiler[mlflow]'"
)


@dataclasses.dataclass(frozen=True)
class AutoprofileConfig:
    """What autoprofile() was called with (validated)."""

    depth: int = 2
    sample_rate: float = 1.0
    capture_io: bool = False
    capture_io_depth: Optional[int] = None
    max_events: int = 1_000_000
    all_threads: bool = False
    values: int = 0  # cpu_time/alloc_bytes as the engines' bits (_session._values_mask)
    log_to_mlflow: bool = False
    log_as_trace: bool = False
    output_dir: Optional[str] = None
    collector: Any = None
    store: Optional[str] = None


_config: Optional[AutoprofileConfig] = None  # read once per predict call; None: pass through
_lock = threading.Lock()
_patched: Dict[str, Tuple[Any, Any]] = {}  # attribute -> (original from __dict__, our wrapper)
_last: contextvars.ContextVar = contextvars.ContextVar("mlflow_profiler_last_profile", default=None)
_sampled = 0  # sessions started by autoprofile in this process
_traced = 0  # of those, started only because a tracer was attached (not sampled)
_random = random.random


def _check_rate(sample_rate: Any) -> float:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, float)):
        raise TypeError(
            f"sample_rate must be a number in [0, 1], got {type(sample_rate).__name__} {sample_rate!r}"
        )
    rate = float(sample_rate)
    if not 0.0 <= rate <= 1.0:  # NaN fails both comparisons
        raise ValueError(
            f"sample_rate must be in [0, 1] (0: never, 1: every call), got {sample_rate!r}"
        )
    return rate


def autoprofile(
    depth: int = 2,
    sample_rate: float = 1.0,
    *,
    capture_io: bool = False,
    capture_io_depth: Optional[int] = None,
    max_events: int = 1_000_000,
    all_threads: bool = False,
    cpu_time: bool = False,
    alloc_bytes: bool = False,
    log_to_mlflow: bool = False,
    log_as_trace: bool = False,
    output_dir: Optional[str] = None,
    collector: Any = None,
    store: Optional[str] = None,
    disable: bool = False,
) -> None:
    """Profiles every sampled ``predict`` of every MLflow pyfunc model.

    Patches ``mlflow.pyfunc.PyFuncModel.predict`` (and ``predict_stream``)
    once; calling it again changes the settings, ``disable=True`` puts the
    exact original functions back. Each call is profiled with probability
    ``sample_rate``; the result is ``last_profile()`` in the calling thread
    or task. ``log_to_mlflow`` / ``output_dir`` / ``store`` (a profile
    store: a SQLite path or a postgresql:// URL, docs/store.md) export each
    profile from a background thread through a bounded queue (``flush()``
    drains it); ``cpu_time`` / ``alloc_bytes`` record each span's CPU time and
    allocated bytes, as in ``profiling()``;
    ``collector`` (a ProfileCollector) adds each profile to its statistics::

        mlflow_profiler.autoprofile(depth=2, sample_rate=0.1)
        model = mlflow.pyfunc.load_model(uri)
        model.predict(df)
        mlflow_profiler.last_profile().print_tree()
        mlflow_profiler.autoprofile(disable=True)
    """
    global _config
    if disable:
        _unpatch()
        return
    config = AutoprofileConfig(
        depth=_check_depth("depth", depth),
        sample_rate=_check_rate(sample_rate),
        capture_io=_check_flag("capture_io", capture_io),
        capture_io_depth=None
        if capture_io_depth is None
        else _check_depth("capture_io_depth", capture_io_depth),
        max_events=_check_max_events(max_events),
        all_threads=_check_flag("all_threads", all_threads),
        values=_values_mask(cpu_time, alloc_bytes),
        log_to_mlflow=_check_flag("log_to_mlflow", log_to_mlflow),
        log_as_trace=_check_flag("log_as_trace", log_as_trace),
        output_dir=None if output_dir is None else str(output_dir),
        collector=collector,
        store=None if store is None else str(store),
    )
    if collector is not None and not callable(getattr(collector, "add", None)):
        raise TypeError(f"collector must be a ProfileCollector, got {type(collector).__name__}")
    try:
        import mlflow.pyfunc  # noqa: F401
    except ImportError as exc:
        raise ImportError(_MISSING_MLFLOW) from exc
    from mlflow.pyfunc import PyFuncModel

    with _lock:
        _config = config
        _patch(PyFuncModel)
        # Sampled sessions one after another: the sys.monitoring tool id and
        # its local events stay between them (docs/capture.md).
        _core.keep_capture_between_sessions(True)


def _patch(cls) -> None:
    for name, make in (("predict", _make_predict), ("predict_stream", _make_predict_stream)):
        original = cls.__dict__.get(name)
        if original is None or name in _patched:
            continue  # MLflow without predict_stream (older), or patched already
        wrapper = make(original)
        _patched[name] = (original, wrapper)
        setattr(cls, name, wrapper)


def _unpatch() -> None:
    global _config
    with _lock:
        _config = None
        _core.keep_capture_between_sessions(False)
        if not _patched:
            return
        import sys

        cls = sys.modules["mlflow.pyfunc"].PyFuncModel
        for name, (original, wrapper) in list(_patched.items()):
            if cls.__dict__.get(name) is wrapper:
                setattr(cls, name, original)
            else:
                # Someone patched on top of us: putting ours back would drop
                # theirs. Our wrapper stays in their chain and passes through
                # (_config is None).
                log_once(
                    f"unpatch:{name}",
                    f"mlflow_profiler: PyFuncModel.{name} was patched again after "
                    "autoprofile(); its wrapper is left in place and no longer profiles",
                )
            del _patched[name]


def is_enabled() -> bool:
    """True while autoprofile() is on."""
    return _config is not None


def last_profile() -> Optional[ProfileSession]:
    """The last session autoprofile() recorded in this thread or asyncio task
    (each has its own), or None."""
    return _last.get()


def statistics() -> Dict[str, Any]:
    """autoprofile's counters: sessions sampled, sessions profiled only
    because a tracer was attached (``traced``, not exported), and the
    background export queue's (submitted, exported, dropped, failed, queued)."""
    from . import _delivery

    return {
        "enabled": _config is not None,
        "sampled": _sampled,
        "traced": _traced,
        "export": _delivery.statistics(),
    }


# -- the wrappers ---------------------------------------------------------------


def _make_predict(original):
    # A closure variable, not a global: the unsampled path reads it per call.
    # usdt_attached() is the session_begin semaphore (a load in C).
    attached = _core.usdt_attached
    if _has_signature(original, ("self", "data", "params")):
        # MLflow's own signature (2.10 to 3.x): no *args/**kwargs packing on
        # the unsampled path, which is what every call of a model pays.
        @functools.wraps(original)
        def predict(self, data, params=None):
            config = _config
            if config is None:
                return original(self, data, params)
            if config.sample_rate == 1.0 or _random() < config.sample_rate:
                return _sampled_call(original, config, self, (data, params), {})
            if attached():
                return _sampled_call(original, config, self, (data, params), {}, False)
            return original(self, data, params)

        return predict

    @functools.wraps(original)
    def predict_any(self, *args, **kwargs):
        config = _config
        if config is None:
            return original(self, *args, **kwargs)
        if config.sample_rate == 1.0 or _random() < config.sample_rate:
            return _sampled_call(original, config, self, args, kwargs)
        if attached():
            return _sampled_call(original, config, self, args, kwargs, False)
        return original(self, *args, **kwargs)

    return predict_any


def _has_signature(func, names) -> bool:
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    return (
        [p.name for p in params] == list(names)
        and all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
        and params[-1].default is None
    )


def _sampled_call(original, config, model, args, kwargs, sampled=True):
    """One profiled call; sampled False: only a tracer asked for it, so it is
    not handed to the collector or the delivery thread."""
    started = _begin(model, config, original, sampled=sampled)
    if started is None:
        return original(model, *args, **kwargs)
    session, call = started
    try:
        return call(model, *args, **kwargs)
    finally:
        _end(session, config, sampled)


def _make_predict_stream(original):
    @functools.wraps(original)
    def predict_stream(self, *args, **kwargs):
        stream = original(self, *args, **kwargs)  # created unprofiled: errors raise as before
        config = _config
        if config is None:
            return stream
        sampled = config.sample_rate == 1.0 or _random() < config.sample_rate
        if not sampled and not _core.usdt_attached():
            return stream
        started = _begin(self, config, _stream.stream_root, stream=True, sampled=sampled)
        if started is None:
            return stream
        session, root = started
        try:
            labelled = root(stream)  # a generator: the label goes to its first start
        except Exception as exc:  # pragma: no cover - a profiler bug must not break the model
            log_once("stream", f"mlflow_profiler: predict_stream profiling failed: {exc!r}")
            _end(session, config, sampled)
            return stream
        _pause(session)
        return _ProfiledStream(session, labelled, config, sampled)

    return predict_stream


class _ProfiledStream:
    """The stream handed back by a sampled predict_stream. It records while
    the stream is advanced; the consumer's code between chunks is not part
    of the profile (the session is paused there). The session ends when the
    stream is exhausted, raises, is closed, or is dropped unread."""

    def __init__(
        self, session: ProfileSession, stream, config: AutoprofileConfig, sampled: bool = True
    ) -> None:
        self._session: Optional[ProfileSession] = session
        self._stream = stream
        self._config = config
        self._sampled = sampled

    def __iter__(self) -> _ProfiledStream:
        return self

    def __next__(self):
        if self._session is None:
            return next(self._stream)
        _resume(self._session)
        try:
            chunk = next(self._stream)
        except BaseException:
            self._finish(resumed=True)
            raise
        _pause(self._session)
        return chunk

    def close(self) -> None:
        """Closes the underlying stream and ends the session."""
        session = self._session
        if session is not None:
            _resume(session)  # the stream's cleanup runs inside the session
        try:
            close = getattr(self._stream, "close", None)
            if close is not None:
                close()
        finally:
            self._finish(resumed=session is not None)

    def _finish(self, resumed: bool = False) -> None:
        session, self._session = self._session, None
        if session is not None:
            if not resumed:
                _resume(session)  # stop() resets the context variable in this context
            _end(session, self._config, self._sampled)

    def __del__(self) -> None:
        try:
            self._finish()
        except Exception:  # pragma: no cover
            pass


def _pause(session: ProfileSession) -> None:
    try:
        session._engine.pause()
    except Exception as exc:  # pragma: no cover - a profiler bug must not break the model
        log_once("pause", f"mlflow_profiler: pausing a predict_stream session failed: {exc!r}")


def _resume(session: ProfileSession) -> None:
    try:
        session._engine.resume()
    except Exception as exc:  # pragma: no cover
        log_once("resume", f"mlflow_profiler: resuming a predict_stream session failed: {exc!r}")


def _begin(model, config: AutoprofileConfig, original, stream: bool = False, sampled: bool = True):
    """Starts a session for one call; returns (session, the labelled
    original) or None if the profiler failed (the call then runs unprofiled).
    sampled False: started because a tracer is attached (counted apart)."""
    global _sampled, _traced
    try:
        prepared = _prepared_for(model, config, original, stream)
        # A started session, flagged AUTOPROFILE in its session_begin probe.
        # levels_above 1: the roots are what the wrapper that called _begin calls.
        session = _core.start_prepared(prepared.template, prepared.attrs, prepared.site, 1)
        if sampled:
            _sampled += 1
        else:
            _traced += 1
        return session, prepared.call
    except Exception as exc:
        log_once("begin", f"mlflow_profiler: autoprofile could not start a session: {exc!r}")
        return None


class _Prepared:
    """What every session of one model under one configuration starts from:
    the options checked, the names and plumbing found, the root's wrapper
    made, once (a sampled call does none of it: bench/RESULTS.md, issue 45)."""

    __slots__ = ("model", "config", "original", "attrs", "template", "call", "site")

    def __init__(self, model, config, original, attrs, template, call, site) -> None:
        self.model = model  # a weak reference to the model, or None
        self.config = config
        self.original = original
        self.attrs = attrs  # the session's attributes
        self.template = template  # its Engine's options (_core.EngineTemplate)
        self.call = call
        self.site = site


# id(model) -> _Prepared, one dict per method; an entry goes with its model.
_prepared: Tuple[Dict[int, _Prepared], Dict[int, _Prepared]] = ({}, {})


def _prepared_for(model, config: AutoprofileConfig, original, stream: bool) -> _Prepared:
    cache = _prepared[stream]
    key = id(model)
    p = cache.get(key)
    if p is not None and p.config is config and p.original is original and p.model() is model:
        return p
    info = _model_info(model, stream)
    attrs, engine_args = _prepare(
        config.depth,
        config.max_events,
        config.all_threads,
        False,
        config.capture_io,
        config.capture_io_depth,
        info.transparent_codes,
        info.meta,
        config.values,
    )
    template = _core.EngineTemplate(*engine_args)
    call = _core.SpanFunction(original, info.label)

    def forget(_ref: Any) -> None:
        cache.pop(key, None)

    try:
        ref = weakref.ref(model, forget)
    except TypeError:  # a model that cannot be weakly referenced: prepared each call
        return _Prepared(None, config, original, attrs, template, call, info.site)
    p = cache[key] = _Prepared(ref, config, original, attrs, template, call, info.site)
    return p


def _end(session: ProfileSession, config: AutoprofileConfig, sampled: bool = True) -> None:
    _core.session_exit(session)  # deactivate(), without its frame
    try:
        _last.set(session)
        if not sampled:
            return  # a tracer's session: exported only if in-process sampling chose it
        if config.collector is not None:
            config.collector.add(session)
        if config.log_to_mlflow or config.output_dir or config.store:
            from . import _delivery

            _delivery.submit(session, config)
    except Exception as exc:
        log_once("end", f"mlflow_profiler: autoprofile could not hand the profile on: {exc!r}")


# -- what the model is, and which frames are plumbing -----------------------------


@dataclasses.dataclass(frozen=True)
class _ModelInfo:
    label: str
    meta: Dict[str, str]
    transparent_codes: Tuple[Any, ...]
    # The model's implementation class: its sessions share a choice of
    # capture mechanism (docs/capture.md, "Sites"); None: the wrapper's.
    site: Any = None


# Keyed by the model's implementation class: the plumbing and the names do
# not change per instance. Weak keys: a class defined in a test goes away.
_info_cache: weakref.WeakKeyDictionary[type, Tuple[str, Tuple[Any, ...], str]] = (
    weakref.WeakKeyDictionary()
)


def _model_info(model, stream: bool = False) -> _ModelInfo:
    impl = model.__dict__.get("_PyFuncModel__model_impl")
    if impl is None:
        impl = getattr(model, "_model_impl", None)
    inner = getattr(impl, "python_model", None)  # a PythonModel (pyfunc flavor)
    if inner is None:
        inner = _raw_model(impl)
    key = type(inner) if inner is not None else type(impl)
    cached = _info_cache.get(key) if inner is not None else None
    if cached is None:
        cached = _describe(model, impl, inner)
        if inner is not None:
            try:
                _info_cache[key] = cached
            except TypeError:
                pass
    class_name, codes, flavor = cached
    meta = {"model.flavor": flavor, "model.class": class_name}
    meta.update(_model_location(model))
    method = "predict_stream" if stream else "predict"
    label = f"{method} [{flavor} {class_name}]" if class_name else f"{method} [{flavor}]"
    return _ModelInfo(label, meta, codes, key if inner is not None and not stream else None)


def _raw_model(impl):
    get_raw = getattr(type(impl), "get_raw_model", None)
    if get_raw is None:  # MLflow 2.x flavor wrappers without get_raw_model
        return impl.__dict__.get("sklearn_model") if hasattr(impl, "__dict__") else None
    try:
        return get_raw(impl)
    except Exception:
        return None


def _describe(model, impl, inner) -> Tuple[str, Tuple[Any, ...], str]:
    import sys

    loader = ""
    try:
        loader = str(model._model_meta.flavors["python_function"]["loader_module"] or "")
    except Exception:
        pass
    flavor = loader[len("mlflow.") :] if loader.startswith("mlflow.") else (loader or "pyfunc")
    if flavor.startswith("pyfunc"):
        flavor = "pyfunc"
    class_name = type(inner).__qualname__ if inner is not None else type(impl).__qualname__
    codes: List[Any] = []
    cls = type(model)
    for name in ("_predict", "_predict_stream"):
        _add_codes(cls.__dict__.get(name), codes)
    # Functions nested in the originals are MLflow plumbing: predict_stream's
    # _gen_with_context (3.x), predict's inner _predict (2.x).
    for name in ("predict", "predict_stream"):
        original = _patched.get(name, (None, None))[0]
        for const in getattr(getattr(original, "__code__", None), "co_consts", ()):
            if inspect.iscode(const) and const not in codes:
                codes.append(const)
    context = sys.modules.get("mlflow.pyfunc.context")
    if context is not None:
        _add_codes(getattr(context, "set_prediction_context", None), codes)
    # MLflow's flavor wrapper (_PythonModelPyfuncWrapper, _SklearnModelWrapper, ...).
    if type(impl).__module__.startswith("mlflow."):
        for name in ("predict", "predict_stream", "_convert_input"):
            _add_codes(type(impl).__dict__.get(name), codes)
    # The user's PythonModel.predict and MLflow's wrappers around it
    # (__init_subclass__ type-hint validation, a ResponsesAgent's or
    # ChatAgent's tracing and pydantic wrappers): its calls are depth 1.
    base = getattr(sys.modules.get("mlflow.pyfunc"), "PythonModel", None)
    if inner is not None and (
        getattr(impl, "python_model", None) is inner
        or (base is not None and isinstance(inner, base))
    ):
        for name in ("predict", "predict_stream"):
            _add_codes(inspect.getattr_static(type(inner), name, None), codes)
    return class_name, tuple(codes), flavor


# profiling() around PyFuncModel.predict: (parents, [(code, label)]), keyed by
# PythonModel's subclasses (a class defined or loaded since changes it).
_folds_cache: list = [None, ([], [])]


def pyfunc_folds() -> Tuple[list, list]:
    """What a profiling() session folds (EngineOptions::fold_codes): the
    codes of `PyFuncModel.predict` (the parents) and, for each loaded
    PythonModel subclass that defines predict, its predict's codes (and what
    MLflow wraps around it) with the label autoprofile gives its root. A
    PythonModel's predict called by PyFuncModel.predict then names that span
    and its calls are the span's children: depth counts from the model's
    predict, as under autoprofile. Codes are matched by identity: two classes
    with the same source keep their own names. Empty while mlflow.pyfunc is
    not loaded."""
    import sys

    pyfunc = sys.modules.get("mlflow.pyfunc")
    base = getattr(pyfunc, "PythonModel", None)
    model_cls = getattr(pyfunc, "PyFuncModel", None)
    if base is None or model_cls is None:
        return [], []
    classes: List[type] = []
    todo = list(type.__subclasses__(base))
    while todo and len(classes) < 1000:
        cls = todo.pop()
        classes.append(cls)
        todo.extend(type.__subclasses__(cls))
    # Weak references, compared by identity: an id alone may be a dead
    # class's, reused by a new one (a stale cache kept its predict unfolded).
    key = _folds_cache[0]
    if key is not None and len(key) == len(classes) and all(r() is c for r, c in zip(key, classes)):
        return _folds_cache[1]
    key = [weakref.ref(c) for c in classes]
    parents: list = []
    _add_codes(_patched.get("predict", (model_cls.__dict__.get("predict"),))[0], parents)
    folds: list = []
    seen: set = set()
    for cls in classes:
        if "predict" not in cls.__dict__:
            continue  # inherited: named by the class that defines it
        found: list = []
        _add_codes(inspect.getattr_static(cls, "predict", None), found)
        for code in found:
            if id(code) not in seen and not code.co_flags & (
                inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
            ):
                seen.add(id(code))
                folds.append((code, f"predict [pyfunc {cls.__qualname__}]"))
    _folds_cache[:] = [key, (parents, folds)]
    return parents, folds


def _add_codes(func, out: list) -> None:
    """The code objects of `func` and of everything it wraps (__wrapped__)."""
    seen = 0
    while func is not None and seen < 8:
        if isinstance(func, (staticmethod, classmethod)):
            func = func.__func__
        code = getattr(func, "__code__", None)
        if code is not None and code not in out:
            out.append(code)
        func = getattr(func, "__wrapped__", None)
        seen += 1


def _model_location(model) -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        meta = model._model_meta
        model_id = getattr(meta, "model_id", None)
        run_id = getattr(meta, "run_id", None)
        artifact_path = getattr(meta, "artifact_path", None)
        if model_id:
            out["model.id"] = str(model_id)
            out["model.uri"] = f"models:/{model_id}"
        elif run_id and artifact_path:
            out["model.uri"] = f"runs:/{run_id}/{artifact_path}"
        if run_id:
            out["model.run_id"] = str(run_id)
    except Exception:
        pass
    return out
