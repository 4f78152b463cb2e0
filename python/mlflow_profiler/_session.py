"""ProfileSession and profiling(): the lifecycle of one capture and the views
of its result. Capture is done by an engine (the C++ one, or the pure-Python
reference for tests); the tree and every renderer live in the C++ core."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

from . import _core, _native, _transparent
from ._log import log_once
from ._summaries import IOSummary

_DEFAULT_MAX_EVENTS = 1_000_000
_new_object = object.__new__
_S = TypeVar("_S", bound="ProfileSession")
if TYPE_CHECKING:  # mypy checks against 3.9, whose dataclass takes no slots
    from dataclasses import dataclass as _dataclass

    from typing_extensions import Concatenate, ParamSpec

    _P = ParamSpec("_P")
else:
    _dataclass = (
        dataclasses.dataclass(slots=True) if sys.version_info >= (3, 10) else dataclasses.dataclass
    )


@_dataclass
class SpanRecord:
    """One captured call (docs/design/capture.md, "Spans"). Built lazily from
    the core on first access to `ProfileSession.spans`; holds primitives only."""

    label: str
    module: Optional[str]
    start_ns: int
    end_ns: Optional[int] = None  # None: still open or suspended when the session ended
    parent_index: Optional[int] = None
    depth: int = 0
    input_summary: Optional[Dict[str, IOSummary]] = None  # argument name -> summary (capture_io)
    output_summary: Optional[IOSummary] = None
    is_user_code: bool = False
    function: str = ""
    file: str = ""
    line: int = 0
    thread_id: int = 0
    thread_name: str = ""
    flags: tuple = ()
    active_ns: int = 0
    waiting_ns: int = 0  # of the wall time, suspended or off the CPU (docs/capture.md, "Waiting")
    cpu_ns: Optional[int] = None  # the thread's CPU time while it ran (cpu_time=True), inclusive
    alloc_bytes: Optional[int] = (
        None  # bytes allocated through Python's allocators (alloc_bytes=True), inclusive
    )
    resource: Optional[str] = (
        None  # what it used: profile_span/profile_block's resource= (docs/capture.md, "Resources")
    )

    @property
    def duration_ns(self) -> Optional[int]:
        """Wall time from first start to final return, None if it never returned."""
        return None if self.end_ns is None else self.end_ns - self.start_ns

    @property
    def duration_ms(self) -> Optional[float]:
        """duration_ns in milliseconds."""
        d = self.duration_ns
        return None if d is None else d / 1_000_000


def _io_inputs(rows: list) -> Optional[Dict[str, IOSummary]]:
    inputs = {name: summary for role, name, summary in rows if role == _core.IO_ARGUMENT}
    return inputs or None


def _io_output(rows: list) -> Optional[IOSummary]:
    for role, _name, summary in rows:
        if role == _core.IO_RETURN:
            return summary
    return None


def _import_reference():
    from . import _reference

    return _reference.ReferenceEngine


_REFERENCE_ENGINE: Any = None


def _reference_engine():
    """The reference engine's class, imported on first use (1,400 lines the
    native engine never needs), unseen by sessions running meanwhile.

    Cached only once the import has returned: a thread that finds the module
    in sys.modules while another still runs it would read a partly
    initialized module, whereas the import statement waits on its lock."""
    global _REFERENCE_ENGINE
    if _REFERENCE_ENGINE is None:
        _REFERENCE_ENGINE = _core._untraced(_import_reference)
    return _REFERENCE_ENGINE


def _prepare(
    depth,
    max_events,
    all_threads,
    capture_c_calls,
    capture_io,
    capture_io_depth,
    transparent_codes,
    meta,
    values,
) -> Tuple[Dict[str, Any], tuple]:
    """Checks a session's options once: (the attributes a ProfileSession
    gets, the Engine's arguments). Raises TypeError/ValueError as
    profiling() does."""
    depth = _check_depth("depth", depth)
    io_depth = _check_depth("capture_io_depth", capture_io_depth, allow_none=True)
    max_events = _check_max_events(max_events)
    all_threads = _check_flag("all_threads", all_threads)
    capture_c_calls = _check_flag("capture_c_calls", capture_c_calls)
    capture_io = _check_flag("capture_io", capture_io)
    folds: Tuple[List[Any], List[Any]] = ([], [])
    if not transparent_codes and "mlflow.pyfunc" in sys.modules:  # not under autoprofile
        # (no import statement: a session made inside another would record importlib's frames)
        folds = sys.modules[__package__ + "._autoprofile"].pyfunc_folds()
    attrs = {
        "depth": depth,
        "max_events": max_events,
        "all_threads": all_threads,
        "capture_c_calls": capture_c_calls,
        "capture_io": capture_io,
        "capture_io_depth": io_depth,
        "cpu_time": bool(values & 1),
        "alloc_bytes": bool(values & 2),
        "_meta": meta,  # provenance added to the profile's meta when it is built
    }
    engine_args = (
        depth,
        max_events,
        all_threads,
        capture_c_calls,
        capture_io,
        io_depth,
        list(transparent_codes),
        *folds,
        values,
    )
    return attrs, engine_args


def _check_depth(name: str, depth: Any, allow_none: bool = False) -> int:
    if (
        type(depth) is int and depth >= -1
    ):  # the common case first: a session start is on the hot path
        return depth
    if depth is None and allow_none:
        return -1
    if isinstance(depth, bool) or not isinstance(depth, int):
        raise TypeError(
            f"{name} must be an int (-1 for unlimited, 0 for the root only), "
            f"got {type(depth).__name__} {depth!r}"
        )
    if depth < -1:
        raise ValueError(f"{name} must be -1 (unlimited) or >= 0, got {depth}")
    return depth


def _check_flag(name: str, value: Any) -> bool:
    """True or False; also numpy's booleans and the ints 0 and 1. Anything
    else (``capture_io="yes"``) is a TypeError, not silently true."""
    if value is True or value is False:  # the common case first (hot path)
        return value
    if type(value).__name__ in ("bool_", "bool") or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def _check_max_events(max_events: Any) -> int:
    if type(max_events) is int and max_events >= 1:
        return max_events
    if isinstance(max_events, bool) or not isinstance(max_events, int):
        raise TypeError(f"max_events must be an int, got {type(max_events).__name__}")
    if max_events < 1:
        raise ValueError(f"max_events must be >= 1 (events per thread), got {max_events}")
    return max_events


def _values_mask(cpu_time: Any, alloc_bytes: Any) -> int:
    """The engines' ``values`` bits (model/span_value.h ValueKind) of the
    per-span value options, checked like the other flags. The one place that
    knows them: profiling(), ProfileSession and autoprofile pass it on."""
    return (_check_flag("cpu_time", cpu_time) << 0) | (_check_flag("alloc_bytes", alloc_bytes) << 1)


# The one definition of a session's options: ProfileSession() takes them
# too (_options_of). In _setup's order, but for the value options (cpu_time,
# alloc_bytes): last, as _setup takes them as one mask.
def profiling(
    depth: int = 2,
    *,
    max_events: int = _DEFAULT_MAX_EVENTS,
    all_threads: bool = False,
    capture_c_calls: bool = False,
    capture_io: bool = False,
    capture_io_depth: Optional[int] = None,
    engine: str = "native",
    cpu_time: bool = False,
    alloc_bytes: bool = False,
) -> ProfileSession:
    """Profiles the calls made inside a ``with`` block.

    depth: 0 records the root calls only, n records n levels below them, -1
    records everything. max_events bounds each thread's buffer (drops are
    counted). all_threads also captures threads started during the session.
    capture_c_calls records C functions (folded into their caller when
    rendered unless show_c_calls=True). capture_io summarizes the arguments
    and return value of every recorded call (type, shape, dtype, bytes,
    device; never a reference to the data) down to capture_io_depth
    (default: the whole depth). cpu_time records each recorded span's CPU
    time (its thread's CPU clock), alloc_bytes the bytes it allocated through
    Python's allocators (inclusive, not net); both cost a little per recorded
    span (docs/capture.md, "Per-span CPU time and allocated bytes")::

        with profiling(depth=2) as session:
            model.predict(df)
        session.print_tree()
    """
    return ProfileSession._make(
        depth,
        max_events,
        all_threads,
        capture_c_calls,
        capture_io,
        capture_io_depth,
        engine,
        (),
        None,
        _values_mask(cpu_time, alloc_bytes),
    )


_PROFILING = inspect.signature(profiling)
_DEFAULTS = {name: p.default for name, p in _PROFILING.parameters.items()}
_POSITIONAL = [n for n, p in _PROFILING.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
# ProfileSession._make's arguments after depth when every other option is
# profiling()'s default (ProfileCollector.session() without options).
_MAKE_DEFAULTS = (
    *(_DEFAULTS[name] for name in list(_DEFAULTS)[1:-2]),
    (),
    None,
    _values_mask(_DEFAULTS["cpu_time"], _DEFAULTS["alloc_bytes"]),
)


def _bind_options(args: tuple, options: Dict[str, Any]) -> Dict[str, Any]:
    """profiling()'s options by name, defaults filled in, from the arguments
    given to ProfileSession(). As _PROFILING.bind, which gives the message
    when they do not fit, at a tenth of its cost."""
    bound = {**_DEFAULTS, **options}
    fits = len(args) <= len(_POSITIONAL) and len(bound) == len(_DEFAULTS)
    for name, value in zip(_POSITIONAL, args):
        fits = fits and name not in options
        bound[name] = value
    if not fits:  # an unknown name, a name given twice, too many by position
        try:
            _PROFILING.bind(*args, **options)
        except TypeError as exc:
            raise TypeError(f"ProfileSession() {exc}") from None
    return bound


def _options_of(
    public: Callable[_P, Any],
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, _P], None]]:
    """Gives ProfileSession.__init__ the options of `public` (profiling()),
    their one definition: its signature is `public`'s parameters after
    `self` and before its own keyword-only ones (the profiler's private
    options), for inspect and help(); mypy and IDEs read the same through
    the ParamSpec (without the private ones)."""

    def apply(init: Callable[..., None]) -> Any:
        own = inspect.signature(init)
        params = list(own.parameters.values())
        private = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        init.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[params[0], *inspect.signature(public).parameters.values(), *private]
        )
        return init

    return apply


class ProfileSession:
    """One capture of a call tree, and its views.

    States: idle -> collecting -> finalized. Use it through ``profiling()``::

        with profiling(depth=2) as session:
            model.predict(df)
        session.print_tree()
        session.print_tree(depth=1)     # same capture, rendered shallower
    """

    # Slots for what every session sets and the C session path reads and
    # writes (pyext/bind_session.cpp): at a fixed offset, where an attribute
    # in the instance dict cost ~300 instructions a read or a write (3.12).
    __slots__ = ("_engine", "depth", "__dict__", "__weakref__")

    # profiling()'s defaults, which _setup sets on each instance and
    # profiling()'s path for the defaults leaves to these.
    depth: int  # set on each instance
    max_events = _DEFAULT_MAX_EVENTS
    all_threads = False
    capture_c_calls = False
    capture_io = False
    capture_io_depth = -1
    cpu_time = False
    alloc_bytes = False
    _meta: Optional[Dict[str, str]] = None
    _profile: Optional[_core.Profile] = None
    _spans: Optional[List[SpanRecord]] = None

    @_options_of(profiling)
    def __init__(
        self,
        *args: Any,
        _transparent_codes: tuple = (),
        _meta: Optional[Dict[str, str]] = None,
        **options: Any,
    ) -> None:
        # profiling()'s options (its signature, given this one by
        # _options_of), in its order: _setup's, but for the value options,
        # last, which _setup takes as one mask. (Positional: _setup called
        # by keyword costs 0.7 us more.)
        *given, cpu_time, alloc_bytes = _bind_options(args, options).values()
        given += (_transparent_codes, _meta, _values_mask(cpu_time, alloc_bytes))
        self._setup(*given)

    @classmethod
    def _make(
        cls: Type[_S],
        depth,
        max_events,
        all_threads,
        capture_c_calls,
        capture_io,
        capture_io_depth,
        engine,
        transparent_codes,
        meta,
        values=0,
    ) -> _S:
        """ProfileSession(...) with every argument positional, for the
        profiler's own callers (profiling() among them). ProfileSession()
        binds profiling()'s options by name (_bind_options), and a class
        called with keywords packs them in a dict for __init__: together
        about 1 us more, a sixth of a session's start and stop."""
        self = _new_object(cls)
        self._setup(
            depth,
            max_events,
            all_threads,
            capture_c_calls,
            capture_io,
            capture_io_depth,
            engine,
            transparent_codes,
            meta,
            values,
        )
        return self

    def _setup(
        self,
        depth,
        max_events,
        all_threads,
        capture_c_calls,
        capture_io,
        capture_io_depth,
        engine,
        _transparent_codes,
        _meta,
        values=0,
    ) -> None:
        if engine not in ("native", "reference"):
            raise ValueError(f"engine must be 'native' or 'reference', got {engine!r}")
        attrs, engine_args = _prepare(
            depth,
            max_events,
            all_threads,
            capture_c_calls,
            capture_io,
            capture_io_depth,
            _transparent_codes,
            _meta,
            values,
        )
        for name, value in attrs.items():  # through a subclass's descriptors, if any
            setattr(self, name, value)
        # The native Engine, the reference engine, or a _LoadedEngine.
        self._engine: Any = (
            _core.Engine(*engine_args) if engine == "native" else _reference_engine()(*engine_args)
        )

    # -- lifecycle -------------------------------------------------------------

    @property
    def state(self) -> str:
        """'idle', 'collecting' or 'finalized'."""
        return self._engine.state

    def activate(self, _levels_above: int = 1) -> None:
        """Starts capture in the current context. Raises RuntimeError if the
        session already ran: a session records once. (`_levels_above`: the
        profiler's own frames between the caller whose calls are the roots
        and this method, this one included.)"""
        if self._engine.state != "idle":  # each engine records once
            raise RuntimeError(
                f"this ProfileSession is {self._engine.state}: a session records once; "
                "create a new one with profiling()"
            )
        gil_off = _native.FREE_THREADED and not sys._is_gil_enabled()  # type: ignore[attr-defined]
        if gil_off and isinstance(self._engine, _core.Engine):
            raise RuntimeError(
                "mlflow_profiler's native capture needs the GIL, and this free-threaded "
                "interpreter runs without it (PYTHON_GIL=0 or -X gil=0). Run it with the GIL "
                "(the default once mlflow_profiler is imported), or pass engine='reference'"
            )
        _transparent.refresh()
        self._engine.start(self, _levels_above)

    def deactivate(self) -> None:
        """Ends capture. Idempotent; never raises into the profiled code."""
        try:
            if not self._engine.stop():  # nothing to log
                return
            for failure in self._engine.failures:
                log_once("capture:" + failure, f"mlflow_profiler: capture stopped early: {failure}")
            for note in getattr(self._engine, "notes", ()):  # capture went on another way
                log_once("capture-note:" + note, f"mlflow_profiler: {note}", logging.INFO)
        except Exception as exc:  # pragma: no cover - a profiler bug must not break the model
            log_once("deactivate", f"mlflow_profiler: ending the session failed: {exc!r}")

    # activate() and deactivate() in C, without their frames (pyext/bind_session.cpp):
    # a subclass, a reference engine or an error goes to them.
    __enter__ = _core.session_enter
    __exit__ = _core.session_exit

    # The C wrappers call these when the current session runs on the reference engine.
    def _label_call(self, label, func, args, kwargs, resource=None):
        return self._engine.label_call(label, func, args, kwargs, resource)

    def _block_enter(self, label, resource=None, automatic=False):
        return self._engine.block_enter(label, resource, automatic)

    def _wait_call(self, _label, select, args, kwargs):
        return self._engine.wait_call(select, args, kwargs)

    def _mark(self, name, resource=None):
        return self._engine.mark(name, resource)

    # -- results ---------------------------------------------------------------

    def _built(self):
        if self._profile is None:
            state = self._engine.state
            if state != "finalized":
                raise RuntimeError(
                    f"the session is {state}: render or export it after the "
                    "`with profiling()` block has ended"
                )
            profile = self._engine.profile()
            if "tool" not in profile.meta:  # what made it: the store's provenance (docs/store.md)
                from . import __version__

                profile.set_meta("tool", f"mlflow-profiler@{__version__}")
            for key, value in (self._meta or {}).items():
                profile.set_meta(key, value)
            self._profile = profile
        return self._profile

    def statistics(self) -> Dict[str, Any]:
        """Events captured, events skipped below the ceiling, drops per thread,
        threads seen, duration, and ``profiler_overhead_ns``: the time the
        profiler spent inside the session summarizing I/O (``capture_io``),
        which is left out of every span's time."""
        state = self._engine.state
        out: Dict[str, Any] = {"state": state, "engine": self._engine.hook, "depth": self.depth}
        if state != "finalized":
            return out
        p = self._built()
        stats = p.stats
        threads = p.threads
        out.update(
            events_captured=stats["events_captured"],
            events_skipped=stats["events_skipped"],
            unmatched_returns=stats["unmatched_returns"],
            dropped=sum(t["dropped"] for t in threads.values()),
            threads=threads,
            thread_count=len({t["thread_id"] for t in threads.values()}),
            span_count=p.span_count,
            start_ns=p.start_ns,
            end_ns=p.end_ns,
            duration_ns=p.end_ns - p.start_ns,
            profiler_overhead_ns=int(p.meta.get("profiler_overhead_ns", 0)),
            failures=list(self._engine.failures),
            notes=list(getattr(self._engine, "notes", ())),
        )
        return out

    @property
    def spans(self) -> List[SpanRecord]:
        """Every captured span, parents before children (built on first access)."""
        if self._spans is None:
            spans = []
            for fields in self._built().span_rows():  # SpanRecord's fields by name, and "io"
                io = fields.pop("io")
                spans.append(
                    SpanRecord(
                        **fields, input_summary=_io_inputs(io), output_summary=_io_output(io)
                    )
                )
            self._spans = spans
        return self._spans

    @property
    def traces(self) -> List[Dict[str, Any]]:
        """The trace context of each session that had one, as a dict: pid (0
        in process), session, trace_id (32 hex digits) and span_id (16): the
        OpenTelemetry or MLflow span active where the session started
        (docs/capture.md, "Traces"). Empty when there was none."""
        return list(self._built().traces)

    @property
    def trace_id(self) -> Optional[str]:
        """The trace id of the span active where the session started, or
        None. With MLflow 3, the MLflow trace is ``"tr-" + trace_id``."""
        traces = self._built().traces
        return traces[0]["trace_id"] if traces else None

    @property
    def span_id(self) -> Optional[str]:
        """The id of the span active where the session started, or None."""
        traces = self._built().traces
        return traces[0]["span_id"] if traces else None

    @property
    def captured_depth(self) -> int:
        """The ceiling the session recorded at (-1: unlimited)."""
        return self.depth

    def format_tree(
        self,
        depth: Optional[int] = None,
        show_io: bool = True,
        collapse_frameworks: bool = False,
        user_modules: Optional[List[str]] = None,
        show_c_calls: bool = False,
    ) -> str:
        """The text tree (docs/design/capture.md), as a string (see print_tree)."""
        depth = _check_depth("depth", depth, allow_none=True)
        return self._built().render_text(
            depth, collapse_frameworks, list(user_modules or []), show_c_calls, bool(show_io)
        )

    def print_tree(
        self,
        depth: Optional[int] = None,
        show_io: bool = True,
        collapse_frameworks: bool = False,
        user_modules: Optional[List[str]] = None,
        show_c_calls: bool = False,
        file=None,
    ) -> None:
        """Prints the call tree with wall-clock times.

        depth: render depth (default: everything captured); deeper than the
        capture renders what was captured and says so. collapse_frameworks:
        merge library subtrees into "[package]" nodes. user_modules: module
        prefixes to treat as user code. show_c_calls: show C-function spans
        instead of folding them into their caller. show_io: under each span
        with I/O summaries (capture_io=True), its ``in:``/``out:`` lines.
        """
        text = self.format_tree(depth, show_io, collapse_frameworks, user_modules, show_c_calls)
        print(
            text,
            end="" if text.endswith("\n") else "\n",
            file=file if file is not None else sys.stdout,
        )

    def to_tree(
        self,
        depth: Optional[int] = None,
        collapse_frameworks: bool = False,
        user_modules: Optional[List[str]] = None,
        show_c_calls: bool = True,
    ) -> List[dict]:
        """Root nodes as nested dicts, each with its `children`, as
        print_tree shows them: ``duration_ns`` is the time shown (a
        generator's running time under its consumer, so a node's time is at
        least its children's on one thread; a coroutine its parent awaited,
        or a task, its wall time in flight), ``waiting_ns`` what of that time
        it waited (docs/capture.md, "Running vs waiting"; the span's own
        figure is ``SpanRecord.waiting_ns``, of its wall time), ``wall_ns``
        end minus start, ``active_ns`` the time it ran. MLflow's grouped
        calls below the captured depth show when ``depth`` asks for them."""
        depth = _check_depth("depth", depth, allow_none=True)
        return self._built().to_tree(
            depth, collapse_frameworks, list(user_modules or []), show_c_calls
        )

    def to_flat(
        self,
        depth: Optional[int] = None,
        collapse_frameworks: bool = False,
        user_modules: Optional[List[str]] = None,
        show_c_calls: bool = True,
    ) -> List[dict]:
        """One dict per span in pre-order, with `call_path` and `duration_ms`."""
        depth = _check_depth("depth", depth, allow_none=True)
        return self._built().to_flat(
            depth, collapse_frameworks, list(user_modules or []), show_c_calls
        )

    def to_json(self, depth: Optional[int] = None) -> str:
        """The versioned profile document (docs/format.md); `depth` gives a view."""
        depth = _check_depth("depth", depth, allow_none=True)
        return self._built().to_json(depth)

    def save(self, path, format: Optional[str] = None) -> str:
        """Writes the full capture to `path` atomically and returns the path.

        The format follows the extension: .html (self-contained report),
        .json / .json.gz (the profile document, readable by load()),
        .trace.json (Chrome/Perfetto), .pb.gz (pprof), .speedscope.json,
        .folded (flamegraph tools). `format` overrides it by name ("json",
        "json_gz", "chrome_trace", "pprof", "speedscope", "folded", "html")::

            session.save("predict.html")
        """
        from ._files import save_profile

        return save_profile(self._built(), path, format)

    @classmethod
    def _from_profile(cls, profile) -> ProfileSession:
        """A finalized session around a Profile read back by load()."""
        session = cls.__new__(cls)
        session.depth = profile.captured_depth
        session.max_events = 0
        session.all_threads = False
        session.capture_c_calls = False
        session.capture_io = False
        session.capture_io_depth = -1
        session._engine = _LoadedEngine(profile)
        session._profile = profile
        session._spans = None
        session._meta = None
        return session

    def __repr__(self) -> str:
        return f"<ProfileSession depth={self.depth} state={self._engine.state}>"


_core.set_session_class(ProfileSession)


# profiling()'s plain case (a depth, every other option at its default,
# outside serving) in C: the Python function's frame and keyword-only
# defaults were a quarter of an empty session's start and stop
# (bench/RESULTS.md, "Empty session"). The Python function takes every
# other call, and inspect, help() and mypy read it.
_transparent.add(profiling)  # add_module(_session) sees the C callable only
profiling = _core.profiling_in_c(profiling)


class _LoadedEngine:
    """Stands in for the capture engine of a session read from a file: it is
    finalized and holds the profile it was read into."""

    state = "finalized"
    failures = ()

    def __init__(self, profile) -> None:
        self._profile = profile
        self.hook = profile.meta.get("engine", "loaded")

    def profile(self):
        return self._profile

    def stop(self) -> None:
        pass


def current_session() -> Optional[ProfileSession]:
    """The session collecting in the current context, or None."""
    return _core.session_var.get(None)
