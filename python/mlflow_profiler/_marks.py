"""Instants: points in time a span cannot show, such as a rate limit hit or a
retry (docs/capture.md, "Instants"). Recorded in the current lanes of the
session collecting here, as an event of kind kMark (model/event.h); nothing
happens outside a session."""

from __future__ import annotations

from typing import Optional

from . import _core


def mark(name: str, resource: Optional[str] = None) -> None:
    """Records an instant named `name` now, in the lanes of the session
    collecting in this thread and context, about `resource` (an endpoint, a
    host) when given. The Chrome trace draws it on the lane's track and
    across the resource's process; the document keeps it (table `marks`)."""
    if not isinstance(name, str) or not name:
        raise TypeError("mark: name must be a non-empty str")
    if resource is not None and (not isinstance(resource, str) or not resource):
        raise TypeError("mark: resource must be a non-empty str or None")
    _core.mark(name, resource)


def rate_limit_hit(resource: str, retry_after: Optional[float] = None) -> None:
    """An instant for a rate limit `resource` answered with (an HTTP 429):
    named "rate limited", with the wait it asked for when known
    ("rate limited, retry after 1.5s")."""
    name = "rate limited" if retry_after is None else f"rate limited, retry after {retry_after:g}s"
    mark(name, resource)


def retry(resource: str, attempt: int) -> None:
    """An instant for the `attempt`-th retry (1 for the first) of a call to
    `resource`, named "retry 1"."""
    mark(f"retry {attempt}", resource)
