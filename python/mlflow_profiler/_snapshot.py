"""A consistent copy of a namespace another thread may be changing.

`list(d.items())` is not one step: each item is a new tuple, an allocation
can run the garbage collector, a finalizer it runs can hand the GIL to a
thread that imports, and the iteration then fails with "dictionary changed
size during iteration" (autoprofile in a served model, CI). `dict.copy()`
copies the table without running Python code (and under the dict's lock on
free-threaded builds)."""

from __future__ import annotations

from typing import Any, Dict


def copy_of(mapping: Any) -> Dict[Any, Any]:
    """A copy of a dict, a class's mappingproxy or anything with `copy()`
    returning a dict; {} for anything else (an odd namespace costs names, not
    the session)."""
    copy = getattr(mapping, "copy", None)
    try:
        result = copy() if copy is not None else None
    except Exception:
        return {}
    return result if isinstance(result, dict) else {}
