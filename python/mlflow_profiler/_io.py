"""I/O summaries (spec 000, section 3.2). Placeholder with the data type only;
summarize() and register_summarizer() are being written (issue 3)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Optional

_frozen = (
    dataclasses.dataclass(slots=True, frozen=True)
    if sys.version_info >= (3, 10)
    else dataclasses.dataclass(frozen=True)
)


@_frozen
class IOSummary:
    """What a value flowing through a span looked like; primitives only."""

    type_name: str
    shape: Optional[tuple] = None
    dtype: Optional[str] = None
    length: Optional[int] = None
    size_bytes: Optional[int] = None
    device: Optional[str] = None
    repr_short: Optional[str] = None
