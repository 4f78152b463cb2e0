"""`profile_span`: label a function's span. The wrapper is the C type
`_core.SpanFunction`: with no session active a call costs one check."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, TypeVar, Union, overload

from . import _core

F = TypeVar("F", bound=Callable[..., Any])


def _wrap(func: F, label: Optional[str], resource: Optional[str] = None) -> F:
    if label is None:
        label = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    wrapper = _core.SpanFunction(func, label, resource)
    try:
        functools.update_wrapper(wrapper, func)
    except (AttributeError, TypeError):  # callables without __name__ etc.
        pass
    return wrapper  # type: ignore[return-value]


@overload
def profile_span(label: F) -> F: ...
@overload
def profile_span(
    label: Optional[str] = None, *, resource: Optional[str] = None
) -> Callable[[F], F]: ...


def profile_span(label: Union[str, Callable, None] = None, *, resource: Optional[str] = None):
    """Labels the span of every call to the decorated function.

    Works on plain, generator and async functions, and on methods. Inside a
    session the auto-captured node of the call takes the label (no extra
    node); with no session active the function runs as if undecorated::

        @profile_span("preprocess")
        def preprocess(df): ...

        @profile_span            # label = the function's __qualname__
        async def fetch(x): ...

    `resource` names what each call uses (an endpoint, a database, a host):
    the Chrome trace and the report draw each resource as a process with
    one track per slot in use, and the calls in flight and queued
    (docs/capture.md, "Resources")::

        @profile_span(resource="smart")   # a call in flight, holding a slot
        async def ask(prompt): ...
    """
    if callable(label):
        return _wrap(label, None, resource)
    if label is not None and not isinstance(label, str):
        raise TypeError(
            f"profile_span(label): label must be a str, got {type(label).__name__}; "
            "write @profile_span('name') or @profile_span"
        )

    def decorator(func: F) -> F:
        return _wrap(func, label, resource)

    return decorator
