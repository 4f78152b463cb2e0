"""ProfileCollector: statistics per call path over many sessions (issue 4;
being filled in)."""

from __future__ import annotations


class ProfileCollector:
    """Placeholder until the collector lands."""

    def __init__(self, *args, **kwargs) -> None:
        raise NotImplementedError("ProfileCollector is not implemented yet")
