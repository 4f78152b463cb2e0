"""Names that depend on the call (docs/capture.md, "Names"): a library
function shared by many user-facing names gets, at each call, the name the
user wrote. pandas' `OpsMixin.__truediv__` called on a Series is
`Series.__truediv__`; `Properties._delegate_property_get(self, "hour")`,
which `s.dt.hour` runs, is `Series.dt.hour`.

A labeller takes the call's first two arguments and returns the label (a
str) or None (the function's own name). Both engines call it when such a
span starts: the native one through `_core.add_labeller` (untraced, its time
cut out as the profiler's), the reference one through `LABELLERS`. Labels
are cached per type, so a call costs a dict lookup in Python."""

from __future__ import annotations

import sys
import types
from typing import Any, Callable, Dict, Optional, Tuple

from . import _core
from ._snapshot import copy_of

LABELLERS: Dict[types.CodeType, Callable[[Any, Any], Optional[str]]] = {}

# pandas' binary and unary operators, defined once on mixins (OpsMixin) and
# inherited by Series, DataFrame and Index.
_OPERATORS = frozenset(
    f"__{op}__"
    for op in (
        "add",
        "radd",
        "sub",
        "rsub",
        "mul",
        "rmul",
        "truediv",
        "rtruediv",
        "floordiv",
        "rfloordiv",
        "mod",
        "rmod",
        "divmod",
        "rdivmod",
        "pow",
        "rpow",
        "and",
        "rand",
        "or",
        "ror",
        "xor",
        "rxor",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "matmul",
        "rmatmul",
        "neg",
        "pos",
        "abs",
        "invert",
    )
)


def _add(code, labeller) -> None:
    if isinstance(code, types.CodeType) and code not in LABELLERS:
        LABELLERS[code] = labeller
        _core.add_labeller(code, labeller)


def _receiver_method(name: str):
    """`Type.name` by the receiver's type: the class the user called it on."""
    cache: Dict[type, str] = {}

    def label(receiver, _other=None) -> str:
        cls = type(receiver)
        text = cache.get(cls)
        if text is None:
            text = cache[cls] = f"{cls.__name__}.{name}"
        return text

    return label


class _Accessors:
    """pandas accessor names (`dt`, `str`, `cat`, `sparse`) and the class
    they hang on, by accessor class, read from the descriptors pandas puts on
    Series, DataFrame and Index."""

    def __init__(self) -> None:
        self._by_class: Dict[type, Tuple[str, str]] = {}
        self._found: Optional[Dict[type, Tuple[str, str]]] = None

    def classes(self):
        """The accessor classes pandas registers."""
        return self._descriptors().keys()

    def name(self, accessor) -> str:
        """`Series.dt` for the accessor object of `s.dt`."""
        parent = accessor.__dict__.get("_orig", accessor.__dict__.get("_parent"))
        cls = type(accessor)
        found = self._by_class.get(cls)
        if found is None:
            found = ("?", "?")
            for acc, where in self._descriptors().items():
                if issubclass(acc, cls) or issubclass(cls, acc):
                    found = where
                    break
            self._by_class[cls] = found
        attr, owner = found
        # .cat keeps the Categorical, not the Series: name the class it hangs on.
        kind = type(parent).__name__
        return (
            f"{kind if kind in ('Series', 'DataFrame') or kind.endswith('Index') else owner}.{attr}"
        )

    def _descriptors(self) -> Dict[type, Tuple[str, str]]:
        if self._found is None:
            found: Dict[type, Tuple[str, str]] = {}
            pandas = sys.modules.get("pandas")
            for owner in ("Series", "DataFrame", "Index"):
                for attr, value in copy_of(
                    getattr(vars(pandas).get(owner), "__dict__", {})
                ).items():
                    accessor = getattr(value, "__dict__", {}).get(
                        "_accessor"
                    )  # CachedAccessor, Accessor
                    if isinstance(accessor, type):
                        found.setdefault(accessor, (attr, owner))
            self._found = found
        return self._found


_accessors = _Accessors()


def _delegate():
    """`Series.dt.hour` for an accessor's `_delegate_property_get(self, name)`,
    `Series.dt.strftime` for its `_delegate_method(self, name, ...)`."""

    def label(accessor, name=None) -> Optional[str]:
        if not isinstance(name, str) or not hasattr(accessor, "__dict__"):
            return None
        return f"{_accessors.name(accessor)}.{name}"

    return label


def _accessor_member(name: str):
    """`Series.str.upper` for StringMethods.upper, `Series.cat.codes` for
    CategoricalAccessor.codes: the accessor's owner, the accessor, the member."""

    def label(accessor, _other=None) -> Optional[str]:
        if not hasattr(accessor, "__dict__"):
            return None
        return f"{_accessors.name(accessor)}.{name}"

    return label


def _innermost_code(value):
    """The code that runs for a class attribute: a function's (through the
    functools.wraps wrappers, which are transparent), a property's getter."""
    if isinstance(value, property):
        value = value.fget
    seen = 0
    while type(value) is types.FunctionType and "__wrapped__" in value.__dict__ and seen < 8:
        value = value.__dict__["__wrapped__"]
        seen += 1
    return getattr(value, "__code__", None) if type(value) is types.FunctionType else None


_pandas_done = False


def refresh() -> None:
    """Registers the labellers of the libraries loaded (called at each session
    start while modules were imported since, by _transparent.refresh)."""
    global _pandas_done
    pandas = sys.modules.get("pandas")
    if _pandas_done or pandas is None or "Index" not in vars(pandas):
        return  # not loaded, or still being imported: tried again at the next start
    _pandas_done = True
    # Methods the user calls on a Series or a DataFrame that pandas defines
    # once on a base class: NDFrame.astype called on a DataFrame is DataFrame.astype.
    for module_name, cls_name in (
        ("pandas.core.generic", "NDFrame"),
        ("pandas.core.arraylike", "OpsMixin"),
        ("pandas.core.base", "IndexOpsMixin"),
    ):
        cls = getattr(sys.modules.get(module_name), "__dict__", {}).get(cls_name)
        for attr, value in copy_of(getattr(cls, "__dict__", {})).items():
            if attr in _OPERATORS or (
                not attr.startswith("_") and type(value) is types.FunctionType
            ):
                _add(_innermost_code(value), _receiver_method(attr))
    # Accessors (s.dt, s.str, s.cat): their members, by accessor and owner.
    for accessor in list(_accessors.classes()):
        for cls in accessor.__mro__:
            if not cls.__module__.startswith("pandas."):
                continue
            for attr, value in copy_of(cls.__dict__).items():
                if attr in ("_delegate_property_get", "_delegate_method"):
                    _add(_innermost_code(value), _delegate())
                elif not attr.startswith("_") and isinstance(value, (types.FunctionType, property)):
                    _add(_innermost_code(value), _accessor_member(attr))
