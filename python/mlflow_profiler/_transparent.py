"""Frames that are plumbing, not model code: never nodes, never counted
toward depth (docs/capture.md). One registry serves both engines: the native
one reads a per-code flag set through `_core.add_transparent`, the reference
one reads `CODES`."""

from __future__ import annotations

import sys
import types

from . import _core

CODES: set = set()
_done_modules: set = set()


def collect_codes(obj, seen: set) -> None:
    """Adds to `seen` the code objects of a function, method wrapper, class
    (all its attributes) or code object, and the code nested in them."""
    if isinstance(obj, types.CodeType):
        if obj not in seen:
            seen.add(obj)
            for const in obj.co_consts:
                collect_codes(const, seen)
    elif isinstance(obj, type):
        if obj not in seen:
            seen.add(obj)
            for value in vars(obj).values():
                collect_codes(value, seen)
    elif isinstance(obj, (staticmethod, classmethod)):
        collect_codes(obj.__func__, seen)
    elif isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                collect_codes(f, seen)
    elif isinstance(obj, types.FunctionType):
        collect_codes(obj.__code__, seen)


def add(obj) -> None:
    """Marks a function, class (all its methods) or code object transparent."""
    seen: set = set()
    collect_codes(obj, seen)
    for code in seen:
        if isinstance(code, types.CodeType) and code not in CODES:
            CODES.add(code)
            _core.add_transparent(code)


def add_module(module) -> None:
    """Marks every function and class method defined in `module` transparent."""
    for value in vars(module).values():
        if getattr(value, "__module__", None) == module.__name__:
            add(value)


def _stdlib_plumbing() -> bool:
    # Modules already imported only: importing asyncio here would cost every user.
    # A module still being imported (a session started from inside its import,
    # or from another thread meanwhile) lacks attributes: it is tried again at
    # the next session start (False: one was).
    complete = True
    cl = sys.modules.get("contextlib")
    if cl is not None and "contextlib" not in _done_modules and not hasattr(cl, "AsyncContextDecorator"):
        complete = False
    if cl is not None and "contextlib" not in _done_modules and hasattr(cl, "AsyncContextDecorator"):
        for name in ("_GeneratorContextManagerBase", "_GeneratorContextManager",
                     "_AsyncGeneratorContextManager", "ContextDecorator", "AsyncContextDecorator"):
            if hasattr(cl, name):
                add(getattr(cl, name))
        _done_modules.add("contextlib")
    if sys.modules.get("threading") is not None and not hasattr(sys.modules["threading"], "Thread"):
        complete = False
    th = getattr(sys.modules.get("threading"), "Thread", None)
    if th is not None and "threading" not in _done_modules:
        for name in ("_bootstrap", "_bootstrap_inner", "run", "_delete"):
            if hasattr(th, name):
                add(getattr(th, name))
        _done_modules.add("threading")
    asyncio = sys.modules.get("asyncio")
    events = getattr(asyncio, "events", None)
    tasks = getattr(asyncio, "tasks", None)
    if asyncio is not None and (events is None or tasks is None):
        complete = False
    if events is not None and tasks is not None and "asyncio" not in _done_modules:
        add(events.Handle._run)
        py_task = getattr(tasks, "_PyTask", None)
        if py_task is not None:
            for name in ("_Task__step", "_Task__wakeup", "_PyTask__step", "_PyTask__wakeup",
                         "_Task__step_run_and_handle_result"):
                if hasattr(py_task, name):
                    add(getattr(py_task, name))
        _done_modules.add("asyncio")
    return complete


_modules_seen = -1


def refresh() -> int:
    """Called at every session start: picks up plumbing modules imported since
    (nothing to do while no module was imported since the last look). Returns
    the len(sys.modules) it has nothing left to do for, -1 to be called again."""
    global _modules_seen
    if len(_done_modules) < 3 and len(sys.modules) != _modules_seen:
        _modules_seen = len(sys.modules) if _stdlib_plumbing() else -1
    return len(sys.modules) if len(_done_modules) >= 3 else _modules_seen
