"""Span processors (docs/design/capture.md, "The API, by layer"): user
functions that see every span of a profile before it is exported, and may
relabel it, change its I/O summaries or remove it.
``configure(span_processors=[...])`` sets them;
``process(session)`` applies them (every delivery calls it). See
docs/processors.md."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _core
from ._log import log_once
from ._session import ProfileSession, SpanRecord
from ._summaries import IOSummary

# Replaced whole by configure(), never mutated: a reader on another thread
# sees the old tuple or the new one.
_processors: Tuple[Callable[[Any], Any], ...] = ()


def configure(
    *,
    span_processors: Optional[Sequence[Callable[[Any], Any]]] = None,
    repr_objects: Optional[bool] = None,
) -> None:
    """Sets process-wide options. Keyword-only; an option left as None keeps
    its current setting.

    repr_objects: whether the I/O summaries of ``capture_io`` call
    ``repr()`` on objects of types mlflow-profiler does not know (no
    registered summarizer) and on subclasses of builtins with a ``__repr__``
    of their own. Off by default: that is arbitrary code run inside the
    model's calls (a scikit-learn estimator's repr takes milliseconds), so
    such objects show their type only; numbers and strings always show a
    short repr, and ``register_summarizer`` gives a type a cheap summary.

    span_processors: functions called with each span (a ``SpanRecord``)
    before a profile is exported (``log_profile``, the delivery thread (_delivery.py)
    of ``autoprofile(log_to_mlflow=True)``, autoprofile's file output). A
    processor may change the span's ``label``, ``input_summary`` (a dict of
    argument name -> ``IOSummary``: replace, delete or add entries, or set
    None) and ``output_summary``; returning ``False`` removes the span with
    everything under it. A list or tuple replaces the processors, in order
    (``[]`` removes them all). A processor that raises, or leaves a value of
    the wrong type, is logged once (logger ``mlflow_profiler``); its changes
    to that span are discarded, the span is exported without its I/O
    summaries, and the profile is still exported. The session's own
    ``print_tree()``, ``to_json()`` and ``save()`` show the raw capture::

        from mlflow_profiler import IOSummary

        def redact_pii(span):
            if span.input_summary:
                for key in span.input_summary:
                    if 'ssn' in key.lower():
                        span.input_summary[key] = IOSummary(type_name="REDACTED")

        mlflow_profiler.configure(span_processors=[redact_pii])

    Raises TypeError if span_processors is not a list or tuple, or holds
    something that is not callable.
    """
    global _processors
    if repr_objects is not None:
        if not isinstance(repr_objects, bool):
            raise TypeError(
                f"repr_objects must be True or False, got {type(repr_objects).__name__}"
            )
        from . import _core

        _core._set_repr_objects(repr_objects)
    if span_processors is None:
        return
    if not isinstance(span_processors, (list, tuple)):
        raise TypeError(
            "span_processors must be a list or tuple of callables (each called with a SpanRecord), "
            f"got {type(span_processors).__name__}; pass [] to remove them"
        )
    for i, fn in enumerate(span_processors):
        if not callable(fn):
            raise TypeError(
                f"span_processors[{i}] is a {type(fn).__name__}, not a callable: a span processor "
                "is a function called with each SpanRecord"
            )
    _processors = tuple(span_processors)


def span_processors() -> Tuple[Callable[[Any], Any], ...]:
    """The configured span processors, in the order they run."""
    return _processors


def _name(fn: Any) -> str:
    """'module.qualname' of a processor, for logs and the profile's meta."""
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}.{qualname}" if module else str(qualname)


def _utf8_problem(text: str, what: str) -> Optional[str]:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} is not valid text (it cannot be encoded as UTF-8)"
    return None


def _summary_problem(summary: Any, what: str) -> Optional[str]:
    """Why `summary` cannot be exported, or None. Fields as IOSummary documents them."""
    if not isinstance(summary, IOSummary):
        return f"{what} is a {type(summary).__name__}, not an IOSummary (or None)"
    if not isinstance(summary.type_name, str):
        return f"{what}.type_name is a {type(summary.type_name).__name__}, not a str"
    problem = _utf8_problem(summary.type_name, f"{what}.type_name")
    if problem:
        return problem
    if summary.shape is not None and (
        not isinstance(summary.shape, tuple)
        or not all(
            d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in summary.shape
        )
    ):
        return f"{what}.shape is not a tuple of ints (None for an unknown dimension)"
    for field in ("dtype", "device", "repr_short"):
        value = getattr(summary, field)
        if value is not None and not isinstance(value, str):
            return f"{what}.{field} is a {type(value).__name__}, not a str or None"
    for field in ("length", "size_bytes"):
        value = getattr(summary, field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{what}.{field} is a {type(value).__name__}, not an int or None"
    return None


def _problem(span: Any, before: tuple) -> Optional[str]:
    """What a processor left on `span` that cannot be exported, or None.
    Values equal to the ones it was given are not checked again."""
    label, inputs, output = before
    if span.label != label or type(span.label) is not str:
        if not isinstance(span.label, str):
            return f"label is a {type(span.label).__name__}, not a str"
        if not span.label:
            return "label is empty"
        problem = _utf8_problem(span.label, "label")
        if problem:
            return problem
    if span.input_summary is not None and span.input_summary != inputs:
        if not isinstance(span.input_summary, dict):
            return f"input_summary is a {type(span.input_summary).__name__}, not a dict (or None)"
        for key, value in span.input_summary.items():
            if not isinstance(key, str):
                return f"input_summary has a key that is a {type(key).__name__}, not a str"
            problem = _utf8_problem(key, "an input_summary key")
            if problem:
                return problem
            if inputs is not None and inputs.get(key) is value:
                continue
            problem = _summary_problem(value, f"input_summary[{key!r}]")
            if problem:
                return problem
    if span.output_summary is not None and span.output_summary is not output:
        return _summary_problem(span.output_summary, "output_summary")
    return None


# Every field SpanRecord's constructor takes, read in one C call (dataclasses.replace
# costs several times more per span).
_init_fields = tuple(f.name for f in dataclasses.fields(SpanRecord) if f.init)
_read_fields = operator.attrgetter(*_init_fields)
_inputs_at = _init_fields.index("input_summary")


def _copy_span(span: SpanRecord) -> SpanRecord:
    """A new SpanRecord equal to `span`, with its own input_summary dict."""
    values = list(_read_fields(span))
    values[_inputs_at] = _copy_inputs(values[_inputs_at])
    return SpanRecord(*values)


def _copy_inputs(inputs: Optional[Dict[str, IOSummary]]) -> Optional[Dict[str, IOSummary]]:
    return None if inputs is None else dict(inputs)


def _io_rows(span: Any) -> List[tuple]:
    """(role, name, IOSummary) rows, as Profile.io_of gives them: arguments, then the return value."""
    rows = [
        (_core.IO_ARGUMENT, name, summary) for name, summary in (span.input_summary or {}).items()
    ]
    if span.output_summary is not None:
        rows.append((_core.IO_RETURN, "", span.output_summary))
    return rows


class _Run:
    """One application of the processors to one session."""

    def __init__(self, processors: Tuple[Callable[[Any], Any], ...]) -> None:
        self.processors = processors
        self.names = [_name(fn) for fn in processors]
        self.labels: Dict[int, str] = {}
        self.io: Dict[int, List[tuple]] = {}
        self.drop: List[int] = []
        self.dropped = 0  # spans removed, subtrees included
        self.failures = 0  # (span, processor) pairs that failed

    def span(self, index: int, original: Any) -> bool:
        """Offers span `index` to every processor; False if one removed it."""
        span = _copy_span(original)
        for fn, name in zip(self.processors, self.names):
            before = (span.label, _copy_inputs(span.input_summary), span.output_summary)
            try:
                result = fn(span)
                problem = _problem(span, before)
            except Exception as exc:  # a processor's bug must not lose the profile
                result, problem = None, f"raised {exc!r}"
            if problem is None:
                if result is False:
                    return False
                continue
            self.failures += 1
            log_once(
                f"span-processor:{name}:{id(fn)}",
                f"mlflow_profiler: span processor {name} failed on span {index} "
                f"({original.function or original.label}): {problem}. Its changes to the span were "
                "discarded and the span is exported without its I/O summaries; the other processors "
                "still run (further failures of this processor are not logged)",
            )
            # Fail closed: what it did not get to redact is not exported.
            span.label = before[0]
            span.input_summary = None
            span.output_summary = None
        if span.label != original.label:
            self.labels[index] = span.label
        if (
            span.input_summary != original.input_summary
            or span.output_summary != original.output_summary
        ):
            self.io[index] = _io_rows(span)
        return True

    def meta(self) -> Dict[str, str]:
        out = {"span_processors": ",".join(self.names)}
        if self.dropped:
            out["span_processors_dropped"] = str(self.dropped)
        if self.failures:
            out["span_processors_failures"] = str(self.failures)
        return out


def _apply(session: Any, processors: Tuple[Callable[[Any], Any], ...]) -> Any:
    run = _Run(processors)
    spans = session.spans
    removed = [False] * len(spans)
    for index, original in enumerate(spans):
        parent = original.parent_index
        if parent is not None and removed[parent]:  # parents come first
            removed[index] = True
            run.dropped += 1
            continue
        if not run.span(index, original):
            removed[index] = True
            run.drop.append(index)
            run.dropped += 1
    profile = _core.edit_profile(session._built(), run.labels, run.io, run.drop, run.meta())
    return ProfileSession._from_profile(profile)


def _without_io(
    session: Any, processors: Tuple[Callable[[Any], Any], ...], error: BaseException
) -> Any:
    """The profile with every I/O summary left out: what is exported when the
    processors could not be applied at all."""
    profile = session._built()
    meta = {
        "span_processors": ",".join(_name(fn) for fn in processors),
        "span_processors_error": f"not applied ({type(error).__name__}); I/O summaries left out",
    }
    return ProfileSession._from_profile(
        _core.edit_profile(profile, {}, {i: [] for i in range(profile.span_count)}, [], meta)
    )


def process(session: Any) -> Any:
    """The session as deliveries should see it: a new, finalized
    ProfileSession with the configured span processors applied, or `session`
    itself when none are configured. `session` is never modified.

    Each span, parents before children, is offered as a fresh SpanRecord to
    each processor in turn; spans under a removed span are not offered. If
    applying the processors fails in a way no processor caused (a bug), the
    profile is exported without I/O summaries (timings and names only), and
    if even that copy cannot be made, RuntimeError: never the unprocessed
    profile, which may hold what a processor was meant to redact. Raises the
    session's own RuntimeError if it has not finished.
    """
    processors = _processors  # one read: configure() may run on another thread
    if not processors:
        return session
    session._built()  # a session still collecting is the caller's error
    try:
        return _apply(session, processors)
    except Exception as exc:
        error = exc
    log_once(
        "span-processors:apply",
        f"mlflow_profiler: applying the span processors failed ({error!r}); the profile is exported "
        "without I/O summaries (timings and names only)",
    )
    try:
        return _without_io(session, processors, error)
    except Exception as exc:
        log_once(
            "span-processors:strip",
            f"mlflow_profiler: a copy of the profile without I/O summaries could not be made either "
            f"({exc!r}); the profile is not exported",
        )
        raise RuntimeError(
            "mlflow_profiler: the span processors could not be applied and the profile is not exported "
            f"unprocessed (it may hold data a processor should remove): {error!r}"
        ) from exc
