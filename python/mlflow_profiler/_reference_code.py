"""The reference engine (_reference.py): what events name and how frames
read. The event kinds, flags and kinds of function mirrored from
userspace/core/model/event.h, reading a frame's bytecode (a first start, a yield,
a return, a throw), the user-code rule (core classify_user_code) and the
names of C functions (pyext/code_names.cpp cfunction_id)."""

from __future__ import annotations

import dis
import sys
import sysconfig
import types
from typing import Any, Dict, List, Tuple

# --- constants mirrored from userspace/core/model/event.h ----------------------------

K_CALL = 1
K_RETURN = 2
K_SUSPEND = 3
K_RESUME = 4
K_LABEL = 5
K_FOLD = 6  # coalesced resumes: id = the kCall's index (model/resume.h)
K_FOLD_COUNT = 7  # follows K_FOLD: id = the resumes, ts = the last one
K_MARK = 8  # an instant: id = its name (a label id), after an EV_RESOURCE label naming its resource
_MAX_FOLD = 0xFFFFFFFF
_CO_AWAITS = (
    0x80 | 0x100 | 0x200
)  # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR: never folded

EV_EXCEPTION = 1
EV_CFUNCTION = 2
EV_BLOCK = 4
EV_CONTINUED = 8
EV_CHILDREN_DROPPED = 16
EV_RELABEL = 32  # K_LABEL: for the innermost open span (a fold)
EV_WAIT = 64  # K_CALL: a selector's select waiting (loop_watch.cpp)
EV_RESOURCE = 128  # K_LABEL: names the resource the next call uses (model/resources.h)

FN_PYTHON = 0
FN_C = 1
FN_BLOCK = 2

# Entry kinds of a lane's stack of recorded open spans (engine.h EntryKind).
E_FRAME = 0
E_BLOCK = 1
E_CCALL = 2

_INT32_MAX = 2**31 - 1
_GEN_FLAGS = (
    0x20 | 0x80 | 0x200 | 0x100
)  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE

_PY = sys.version_info[:2]


def _op(name: str) -> int:
    return dis.opmap.get(name, -1)


_YIELD_VALUE = _op("YIELD_VALUE")
_YIELD_FROM = _op("YIELD_FROM")
_RESUME = _op("RESUME")
_RETURNS = frozenset(x for x in (_op("RETURN_VALUE"), _op("RETURN_CONST")) if x >= 0)
# 3.9/3.10: the caller of a generator resume is only dropping a reference to
# it (the generator is being finalized, which throws GeneratorExit into it).
_FINALIZING_CALLER_OPS = frozenset(
    x
    for x in (
        _op(n)
        for n in (
            "POP_TOP",
            "STORE_FAST",
            "STORE_NAME",
            "STORE_GLOBAL",
            "STORE_DEREF",
            "STORE_ATTR",
            "STORE_SUBSCR",
            "DELETE_FAST",
            "DELETE_NAME",
            "DELETE_GLOBAL",
            "DELETE_DEREF",
            "DELETE_ATTR",
            "DELETE_SUBSCR",
            "POP_BLOCK",
            "POP_EXCEPT",
            "JUMP_ABSOLUTE",
            "JUMP_FORWARD",
            "RETURN_VALUE",
            "ROT_TWO",
            "ROT_THREE",
            "ROT_FOUR",
        )
    )
    if x >= 0
)

_code_bytes: Dict[Any, bytes] = {}


def _bytecode(code) -> bytes:
    b = _code_bytes.get(code)
    if b is None:
        b = code.co_code  # 3.11+: the de-specialized, de-instrumented bytes
        if len(_code_bytes) > 50_000:
            _code_bytes.clear()
        _code_bytes[code] = b
    return b


def _op_at(code, offset: int) -> int:
    b = _bytecode(code)
    return b[offset] if 0 <= offset < len(b) else -1


def _is_first_start(frame) -> bool:
    """A 'call' event of generator code: the frame has not run yet."""
    lasti = frame.f_lasti
    if _PY < (3, 11):
        return lasti < 0
    b = _bytecode(frame.f_code)
    return 0 <= lasti < len(b) - 1 and b[lasti] == _RESUME and (b[lasti + 1] & 3) == 0


def _at_yield(frame) -> bool:
    """A 'return' event of generator code: the frame rests on a yield/await."""
    code = frame.f_code
    lasti = frame.f_lasti
    op = _op_at(code, lasti)
    if op == _YIELD_VALUE:
        return True
    if _PY < (3, 11):
        return _YIELD_FROM >= 0 and _op_at(code, lasti + 2) == _YIELD_FROM
    if _PY >= (3, 13) and op == _RESUME:
        b = _bytecode(code)
        return (b[lasti + 1] & 3) != 0 and _op_at(code, lasti - 2) == _YIELD_VALUE
    return False


def _at_return(frame) -> bool:
    return _op_at(frame.f_code, frame.f_lasti) in _RETURNS


def _resumed_by_throw(frame, arg) -> bool:
    """Version-specific signs that a generator resume is a throw()/close()."""
    if _PY >= (3, 12) and isinstance(arg, BaseException):
        return True
    if (3, 11) <= _PY < (3, 13):
        return _op_at(frame.f_code, frame.f_lasti) == _YIELD_VALUE
    if _PY < (3, 11):
        caller = frame.f_back
        if caller is not None:
            return _op_at(caller.f_code, caller.f_lasti) in _FINALIZING_CALLER_OPS
    return False


def _gen_frame(obj):
    for attr in ("gi_frame", "cr_frame", "ag_frame"):
        f = getattr(obj, attr, None)
        if f is not None:
            return f
    return None


def _is_generator_object(obj) -> bool:
    return isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType))


# --- user code classification (core classify_user_code) --------------------------


def _library_prefixes() -> List[str]:
    paths = sysconfig.get_paths()
    return sorted({p for p in (paths.get("stdlib"), paths.get("platstdlib")) if p})


_LIBRARY_PREFIXES = _library_prefixes()


def _under_prefix(file: str, prefix: str) -> bool:
    if not prefix or not file.startswith(prefix):
        return False
    if len(file) == len(prefix):
        return True
    return prefix[-1] in "/\\" or file[len(prefix)] in "/\\"


def classify_user_code(file: str, module: str = "") -> bool:
    """Same rule as userspace/core/model/functions.cpp classify_user_code: code
    cloudpickle pickled by value is the user's unless its module is a
    loaded library's."""
    if file == "<dynamic-code>":
        # The namespace, not getattr: a module __getattr__ may import or warn.
        namespace = getattr(sys.modules.get(module), "__dict__", None) if module else None
        module_file = namespace.get("__file__") if isinstance(namespace, dict) else None
        return not isinstance(module_file, str) or classify_user_code(module_file)
    if not file or file[0] == "<":
        return False
    for part in ("/site-packages/", "/dist-packages/", "\\site-packages\\", "\\dist-packages\\"):
        if part in file:
            return False
    return not any(_under_prefix(file, p) for p in _LIBRARY_PREFIXES)


# --- C function names (engine.cpp cfunction_id) ---------------------------------

_HEAPTYPE = 1 << 9


def _type_short(t: type) -> str:
    return t.__name__


def _type_module(t: type) -> str:
    # tp_name of a static type is "module.Name" (or a bare builtin name); a
    # Python class's tp_name has no dot, which the native engine reads as builtins.
    if t.__flags__ & _HEAPTYPE:
        return "builtins"
    mod = getattr(t, "__module__", None)
    return mod if isinstance(mod, str) and mod else "builtins"


def _function_with_code(value, code):
    """The function with `code` that a class namespace entry is or holds: a
    function, a staticmethod's or classmethod's, a property's accessor, or
    what one of these wraps (`__wrapped__` in its instance dict)."""
    for _ in range(4):
        if isinstance(value, types.FunctionType) and value.__code__ is code:
            return value
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
            continue
        if isinstance(value, property):
            return next(
                (
                    f
                    for f in (value.fget, value.fset, value.fdel)
                    if getattr(f, "__code__", None) is code
                ),
                None,
            )
        try:
            namespace = object.__getattribute__(value, "__dict__")
        except Exception:
            return None
        value = namespace.get("__wrapped__") if isinstance(namespace, dict) else None
        if value is None:
            return None
    return None


def _name_before_311(code, frame) -> str:
    """3.9/3.10 have no co_qualname: a method's name is the __qualname__ of
    the function with this code in the namespace of a class in its first
    argument's MRO (`self`, or `cls` holding a class), which is what the
    compiler makes co_qualname from on 3.11+; anything else keeps co_name
    (docs/capture.md, "Versions")."""
    name = code.co_name
    if code.co_argcount < 1 or code.co_varnames[0] not in ("self", "cls"):
        return name
    if frame is None or frame.f_code is not code:
        return name
    first_name = code.co_varnames[0]
    if first_name not in frame.f_locals:
        return name
    first = frame.f_locals[first_name]
    candidates = [type(first)]
    if first_name == "cls" and isinstance(first, type):
        candidates = [first, type(first)]
    for candidate in candidates:
        for cls in type.__getattribute__(candidate, "__mro__"):
            for value in type.__getattribute__(cls, "__dict__").values():
                fn = _function_with_code(value, code)
                if fn is not None:
                    return fn.__qualname__ or name
    return name


def _cfunction_info(callable_) -> Tuple[str, str]:
    if isinstance(callable_, types.BuiltinFunctionType):  # PyCFunction (function or bound method)
        self_ = getattr(callable_, "__self__", None)
        name = callable_.__name__
        if self_ is not None and not isinstance(self_, types.ModuleType):
            t = type(self_)
            return _type_short(t) + "." + name, _type_module(t)
        mod = callable_.__module__
        return name, mod if isinstance(mod, str) else "builtins"
    if isinstance(callable_, types.MethodDescriptorType):
        t = callable_.__objclass__
        return _type_short(t) + "." + callable_.__name__, _type_module(t)
    if isinstance(callable_, type):
        return _type_short(callable_), _type_module(callable_)
    named = getattr(callable_, "__name__", None)
    t = type(callable_)
    return (named if isinstance(named, str) and named else _type_short(t)), _type_module(t)


def _ckey(callable_):
    """Identity of a C call, equal for its c_call and c_return events (3.12+
    binds a method descriptor anew for each event)."""
    self_ = getattr(callable_, "__self__", None)
    if isinstance(callable_, types.BuiltinFunctionType):
        return (id(self_), callable_.__name__)
    return id(callable_)
