"""I/O summaries (docs/design/capture.md, "I/O summaries"): what a value
flowing through a span looked like, as primitives only (type, shape, dtype,
length, bytes, device, a short repr). A summary never refers to the object it
describes.

The summaries are made in C++ (``_core.summarize``), by the same code that the
capture hooks call, so ``summarize(x)`` is exactly what ``capture_io=True``
records for ``x``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import _core, _log

if TYPE_CHECKING:  # mypy checks against 3.9, whose dataclass takes no slots
    _frozen = dataclasses.dataclass(frozen=True)
else:
    _frozen = (
        dataclasses.dataclass(slots=True, frozen=True)
        if sys.version_info >= (3, 10)
        else dataclasses.dataclass(frozen=True)
    )


@_frozen
class IOSummary:
    """What a value flowing through a span looked like; primitives only.

    ``type_name`` is the module and qualified name of the value's type
    (``"numpy.ndarray"``, ``"pandas.DataFrame"``; builtins without
    ``"builtins."``). A field that does not apply is None; in ``shape`` a
    dimension that is not known is None.

        >>> IOSummary(type_name="MyEmbedding", shape=(1000, 128), dtype="float32")
        IOSummary(type_name='MyEmbedding', shape=(1000, 128), dtype='float32', length=None, size_bytes=None, device=None, repr_short=None)
    """

    type_name: str
    shape: Optional[tuple] = None
    dtype: Optional[str] = None
    length: Optional[int] = None
    size_bytes: Optional[int] = None
    device: Optional[str] = None
    repr_short: Optional[str] = None


def summarize(obj: Any) -> IOSummary:
    """The I/O summary of ``obj``: what ``capture_io=True`` records for it.

    Recognised without importing any library: numpy arrays and scalars,
    pandas DataFrame/Series/Index (memory as ``memory_usage(deep=False)``),
    torch tensors (device included; nothing that syncs a device), scipy
    sparse matrices, pyarrow tables and arrays, polars frames and series,
    builtin containers (length and shallow ``sys.getsizeof``), strings and
    numbers (a short repr). Anything else gets its type name and a repr cut
    to 80 characters (none where the type has no ``__repr__`` of its own); a
    ``__repr__`` that raises gives none, and one slower than 100 us on two
    calls in a row is not called again for that type (a type's first call
    may take 20 ms: imports, caches). A summarizer registered with
    :func:`register_summarizer` comes first. Never raises, and keeps no
    reference to ``obj``.

        >>> import numpy as np
        >>> summarize(np.zeros((1000, 50)))
        IOSummary(type_name='numpy.ndarray', shape=(1000, 50), dtype='float64', length=1000, size_bytes=400000, device=None, repr_short=None)
        >>> summarize("hello")
        IOSummary(type_name='str', shape=None, dtype=None, length=5, size_bytes=None, device=None, repr_short="'hello'")
    """
    return _core.summarize(obj)


def register_summarizer(cls: type, fn: Optional[Callable[[Any], IOSummary]]) -> None:
    """Use ``fn(obj) -> IOSummary`` for instances of ``cls`` and its subclasses.

    A registered summarizer comes before the built-in handling. Where several
    registered classes are in an object's MRO, the most specific one wins.
    Registering a class again replaces its summarizer; ``fn=None`` removes
    it. ``fn`` runs inside the profiler's hooks: keep it cheap, and do not
    keep ``obj``. If it raises or returns something other than an IOSummary,
    the failure is logged once (logger ``mlflow_profiler``) and the built-in
    summary is used; on the main thread, SystemExit and KeyboardInterrupt
    (a signal handler's, which may run inside ``fn``) are raised again at the
    program's next instruction instead.

        >>> class MyEmbedding:
        ...     def __init__(self, n, dim):
        ...         self.n, self.dim = n, dim
        >>> register_summarizer(
        ...     MyEmbedding, lambda e: IOSummary(type_name="MyEmbedding", shape=(e.n, e.dim)))
        >>> summarize(MyEmbedding(1000, 128)).shape
        (1000, 128)
        >>> register_summarizer(MyEmbedding, None)
    """
    if not isinstance(cls, type):
        raise TypeError(
            f"register_summarizer(cls, fn): cls must be a class, not {type(cls).__name__}"
        )
    if fn is not None and not callable(fn):
        raise TypeError(
            f"register_summarizer(cls, fn): fn must be a callable returning an IOSummary "
            f"(or None to unregister), not {type(fn).__name__}"
        )
    _core._set_summarizer(cls, fn)


_core._io_setup(IOSummary, _log.log_once)
