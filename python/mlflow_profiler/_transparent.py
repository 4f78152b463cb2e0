"""Frames that are plumbing, not model code: never nodes, never counted
toward depth (docs/capture.md). One registry serves both engines: the native
one reads a per-code flag set through `_core.add_transparent`, the reference
one reads `CODES`."""

from __future__ import annotations

import sys
import types

from . import _clients, _core, _labels
from ._snapshot import copy_of

CODES: set = set()
HIDDEN: set = set()  # transparent, and so is all they call (add_hidden)
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
            # A snapshot: another thread may set a class's or module's
            # attributes while this one is between items (GIL released).
            for value in copy_of(vars(obj)).values():
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
    for value in copy_of(vars(module)).values():  # a snapshot, as in collect_codes
        if getattr(value, "__module__", None) == module.__name__:
            add(value)


def _stdlib_plumbing() -> bool:
    # Modules already imported only: importing asyncio here would cost every user.
    # A module still being imported (a session started from inside its import,
    # or from another thread meanwhile) lacks attributes: it is tried again at
    # the next session start (False: one was).
    complete = True
    cl = sys.modules.get("contextlib")
    if (
        cl is not None
        and "contextlib" not in _done_modules
        and not hasattr(cl, "AsyncContextDecorator")
    ):
        complete = False
    if (
        cl is not None
        and "contextlib" not in _done_modules
        and hasattr(cl, "AsyncContextDecorator")
    ):
        for name in (
            "_GeneratorContextManagerBase",
            "_GeneratorContextManager",
            "_AsyncGeneratorContextManager",
            "ContextDecorator",
            "AsyncContextDecorator",
        ):
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
    meta = getattr(sys.modules.get("abc"), "ABCMeta", None)
    if meta is not None and "abc" not in _done_modules:
        # isinstance(x, SomeABC): the check is its caller's time, not a step.
        for name in ("__instancecheck__", "__subclasscheck__"):
            fn = meta.__dict__.get(name)
            if type(fn) is types.FunctionType:
                _add_hidden(fn.__code__)
        _done_modules.add("abc")
    asyncio = sys.modules.get("asyncio")
    parts = [getattr(asyncio, name, None) for name in _ASYNCIO_PARTS]
    if asyncio is not None and None in parts:
        complete = False
    if asyncio is not None and None not in parts and "asyncio" not in _done_modules:
        _asyncio_plumbing(asyncio)
        _done_modules.add("asyncio")
    return complete


# asyncio's modules that hold its plumbing; asyncio/__init__ imports them all.
_ASYNCIO_PARTS = ("events", "tasks", "futures", "base_events", "runners", "locks")


def _hide_finalizers(package: str) -> None:
    """Hides the `__del__` of the classes of a package's loaded modules: a
    response, session or transport freed in the model's frame is the
    library's housekeeping, not a step (12 `ClientResponse.__del__` and
    `_SelectorTransport.__del__` nodes under an aiohttp fan-out)."""
    for name, module in copy_of(sys.modules).items():
        if name != package and not name.startswith(package + "."):
            continue
        for value in copy_of(getattr(module, "__dict__", None)).values():
            if isinstance(value, type) and value.__dict__.get("__module__") == name:
                _hide_function(value.__dict__.get("__del__"))


def _hide_function(fn, nested=()) -> None:
    """Hides a function (and the functions named `nested` defined in it)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    _add_hidden(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and const.co_name in nested:
            _add_hidden(const)


def _asyncio_plumbing(asyncio) -> None:
    """The event loop's frames and asyncio's internal callbacks
    (docs/capture.md, "asyncio"), CPython 3.9-3.14.

    Transparent (wrappers; what they run counts at their caller's level):
    Handle._run, the pure-Python Task's step and wakeup, the `async with`
    halves of TaskGroup and of locks and semaphores, tasks._wrap_awaitable.
    Hidden (they and everything they call): its classes' finalizers, the loop's entry points
    (asyncio.run, Runner, run_until_complete, run_forever, _run_once, the
    selector's select under it), its shutdown coroutines and thread, and
    the callbacks asyncio schedules for itself (a future's
    _set_result_unless_cancelled, gather's _done_callback,
    _run_until_complete_cb ...): a lane that runs nothing else records
    nothing and is left out of the profile."""
    events, tasks, futures, base_events, runners, locks = (
        getattr(asyncio, n) for n in _ASYNCIO_PARTS
    )
    add(events.Handle._run)
    _hide_finalizers("asyncio")  # a transport closed where its last reference went
    py_task = getattr(tasks, "_PyTask", None)
    if py_task is not None:
        for name in (
            "_Task__step",
            "_Task__wakeup",
            "_PyTask__step",
            "_PyTask__wakeup",
            "_Task__step_run_and_handle_result",
        ):
            if hasattr(py_task, name):
                add(getattr(py_task, name))
    if hasattr(tasks, "_wrap_awaitable"):  # 3.9-3.11: ensure_future of a non-coroutine awaitable
        add(tasks._wrap_awaitable)
    mixin = getattr(locks, "_ContextManagerMixin", None)  # `async with lock:` -> Lock.acquire
    for cls in (mixin, getattr(locks, "Semaphore", None)):
        for name in ("__aenter__", "__aexit__"):
            fn = getattr(cls, "__dict__", {}).get(name)
            if type(fn) is types.FunctionType:
                add(fn)
    taskgroups = getattr(asyncio, "taskgroups", None)  # 3.11+
    group = getattr(taskgroups, "TaskGroup", None)
    if group is not None:
        for name in ("__aenter__", "__aexit__", "_aexit"):  # 3.14: __aexit__ awaits _aexit
            if name in group.__dict__:
                add(group.__dict__[name])
        if "_on_task_done" in group.__dict__:
            _hide_function(group.__dict__["_on_task_done"])
    # The loop's entry points: whatever runs in the caller's own context under
    # them is the loop's; the user's coroutines and callbacks run in copies.
    _hide_function(getattr(runners, "run", None))
    _hide_function(getattr(runners, "_cancel_all_tasks", None))
    runner = getattr(runners, "Runner", None)  # 3.11+
    for value in copy_of(getattr(runner, "__dict__", {})).values():
        if type(value) is types.FunctionType:
            _hide_function(value)
    loop = base_events.BaseEventLoop
    for name in (
        "run_until_complete",
        "run_forever",
        "_run_once",
        "_run_forever_setup",
        "_run_forever_cleanup",
        "shutdown_asyncgens",
        "shutdown_default_executor",
        "_do_shutdown",
        "_asyncgen_firstiter_hook",
        "_asyncgen_finalizer_hook",
        # What the C Task and Future call back into the loop for: a task
        # that finished schedules its done callbacks from its own
        # context, after its coroutine returned (a root of its lane).
        "call_soon",
        "call_soon_threadsafe",
        "_call_soon",
        "get_debug",
        "__del__",
    ):  # (the loop's finalizer: a warning if left open)
        _hide_function(loop.__dict__.get(name))
    # Callbacks asyncio schedules for itself.
    _hide_function(getattr(base_events, "_run_until_complete_cb", None))
    # The self-pipe reader that call_soon_threadsafe wakes (run_in_executor's
    # results): a handle made in the context where the loop was created.
    for module in ("selector_events", "unix_events"):
        for cls in copy_of(vars(getattr(asyncio, module, None) or types)).values():
            if isinstance(cls, type) and issubclass(cls, loop):
                for name in ("_read_from_self", "_process_self_data", "_write_to_self"):
                    _hide_function(cls.__dict__.get(name))
    for name in (
        "_set_result_unless_cancelled",
        "_copy_future_state",
        "_set_concurrent_future_state",
    ):
        _hide_function(getattr(futures, name, None))
    _hide_function(
        getattr(futures, "_chain_future", None),
        ("_set_state", "_call_check_cancel", "_call_set_state"),
    )
    _hide_function(getattr(tasks, "_release_waiter", None))
    for fn_name, nested in (
        ("gather", ("_done_callback",)),
        ("_wait", ("_on_completion",)),
        ("as_completed", ("_on_completion", "_on_timeout")),
        ("shield", ("_inner_done_callback", "_outer_done_callback")),
        ("_cancel_and_wait", ("_on_cancel",)),
        ("run_coroutine_threadsafe", ("callback",)),
    ):
        code = getattr(getattr(tasks, fn_name, None), "__code__", None)
        for const in getattr(code, "co_consts", ()):
            if isinstance(const, types.CodeType) and const.co_name in nested:
                _add_hidden(const)
    completer = getattr(tasks, "_AsCompletedIterator", None)  # 3.13+
    for name in ("_handle_completion", "_handle_timeout"):
        _hide_function(getattr(completer, "__dict__", {}).get(name))
    timeout = getattr(getattr(asyncio, "timeouts", None), "Timeout", None)  # 3.11+
    _hide_function(getattr(timeout, "__dict__", {}).get("_on_timeout"))
    try:  # uvloop's run (a Python wrapper of asyncio.run), when it is imported
        _hide_function(getattr(sys.modules.get("uvloop"), "run", None))
    except Exception:
        pass


# Libraries whose decorators wrap their public functions in frames that only
# forward: such a frame is never a node, so the function the user called is
# (pandas' DataFrame.groupby, not deprecate_nonkeyword_arguments' wrapper).
_LIBRARIES = frozenset(
    ("numpy", "pandas", "sklearn", "scipy", "mlflow", "xgboost", "lightgbm", "typing")
)
_scanned: set = set()


def _add_code(code) -> None:
    """A library's forwarding frame: transparent, and so is any code equal to
    it (cloudpickle rebuilds a class saved by value, wrappers included)."""
    if isinstance(code, types.CodeType) and code not in CODES:
        CODES.add(code)
        _core.add_transparent(code)


def _add_hidden(code) -> None:
    """A lookup's plumbing (a descriptor's __get__, an isinstance check): it
    and everything it calls are transparent, so its time is its caller's."""
    if isinstance(code, types.CodeType) and code not in HIDDEN:
        HIDDEN.add(code)
        CODES.add(code)
        _core.add_hidden(code)


def _forwarder_code(value):
    """The code of a function made by functools.wraps (it has __wrapped__ in
    its own __dict__: no attribute lookup that could run library code)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    if type(value) is types.FunctionType and "__wrapped__" in value.__dict__:
        wrapped = value.__dict__["__wrapped__"]
        if getattr(wrapped, "__code__", None) is not value.__code__:
            return value.__code__
    return None


def _scan_module(name: str, module) -> None:
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return
    numpy = name.startswith("numpy")
    for value in list(namespace.values()):
        if isinstance(value, type):
            if value.__dict__.get("__module__") != name:
                continue
            for attr in list(value.__dict__.values()):
                code = _forwarder_code(attr)
                if code is not None:
                    _add_code(code)
            continue
        code = _forwarder_code(value)
        if code is not None:
            _add_code(code)
        elif numpy and type(value) is types.FunctionType and value.__name__.endswith("_dispatcher"):
            _add_code(
                value.__code__
            )  # numpy's __array_function__ dispatchers: called before every np.mean
    _named_forwarders(name, module)


def _named_forwarders(name: str, module) -> None:
    """Forwarding frames a scan by __wrapped__ cannot see: made per class at
    run time, or a descriptor. Names are read from the module's namespace,
    never through getattr: a module __getattr__ can warn (pandas'
    CachedAccessor) or import."""
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return
    if name == "sklearn.utils._available_if":
        # `pipe.predict_proba` is an attribute lookup through this descriptor:
        # its check (`_final_estimator_has.<locals>.check`) is the lookup's.
        desc = namespace.get("_AvailableIfDescriptor")
        for attr, value in copy_of(getattr(desc, "__dict__", {})).items():
            if type(value) is types.FunctionType:
                (_add_hidden if attr == "__get__" else _add_code)(value.__code__)
    elif name == "pandas.core.accessor":
        # `.dt.hour`, `.str.lower()`: properties and methods made per attribute
        # that hand the call to the accessor's _delegate_property_get / _delegate_method.
        delegate = namespace.get("PandasDelegate")
        adder = getattr(getattr(delegate, "_add_delegate_accessors", None), "__func__", None)
        _add_nested(getattr(adder, "__code__", None), ("_getter", "_setter", "f"))
        # `s.dt` builds (or fetches) the accessor object: the lookup's.
        for cls_name in ("CachedAccessor", "Accessor"):
            get = getattr(namespace.get(cls_name), "__dict__", {}).get("__get__")
            if type(get) is types.FunctionType:
                _add_hidden(get.__code__)
    elif name == "pandas.core.dtypes.generic":
        # isinstance(x, ABCSeries) runs these metaclass checks: the caller's.
        factory = namespace.get("create_pandas_abc_type")
        for const in getattr(getattr(factory, "__code__", None), "co_consts", ()):
            if isinstance(const, types.CodeType) and const.co_name in (
                "_instancecheck",
                "_subclasscheck",
            ):
                _add_hidden(const)
    elif name == "mlflow.pyfunc":
        # PyFuncModel.predict hands the call to _predict, then to the flavor's
        # wrapper: not nodes, so the model's predict is one level under it.
        model = namespace.get("PyFuncModel")
        for attr in ("_predict", "_predict_stream"):
            value = getattr(model, "__dict__", {}).get(attr)
            if type(value) is types.FunctionType:
                _add_code(value.__code__)
        for attr in (
            "predict",
            "predict_stream",
        ):  # their nested helpers (_gen_with_context, 2.x _predict)
            fn = getattr(model, "__dict__", {}).get(attr)
            for _ in range(
                8
            ):  # through wrappers put on it (autoprofile's own) to MLflow's function
                if type(fn) is not types.FunctionType:
                    break
                _add_nested(fn.__code__, ("_predict", "_gen_with_context"))
                fn = fn.__dict__.get("__wrapped__")
    elif name == "mlflow.pyfunc.context":
        setter = namespace.get("set_prediction_context")
        _add_code(getattr(getattr(setter, "__wrapped__", setter), "__code__", None))
    elif name.startswith("mlflow.") and (
        name.count(".") <= 2 or name.startswith("mlflow.pyfunc.loaders.")
    ):
        # A flavor's pyfunc wrapper (_PythonModelPyfuncWrapper, _SklearnModelWrapper,
        # a ResponsesAgent's or ChatModel's loader): its predict forwards to the model.
        for cls_name, cls in list(namespace_items(module)):
            if (
                isinstance(cls, type)
                and cls_name.endswith("Wrapper")
                and cls.__dict__.get("__module__") == name
            ):
                for attr in ("predict", "predict_stream", "predict_proba"):
                    value = cls.__dict__.get(attr)
                    if type(value) is types.FunctionType:
                        _add_code(value.__code__)
    if name == "mlflow.pyfunc.utils.data_validation":
        # The wrapper MLflow puts on every PythonModel subclass's predict
        # (type-hint validation): its code is a constant of the decorator.
        wrap = namespace.get("_wrap_predict_with_pyfunc")
        _add_nested(getattr(wrap, "__code__", None), ("wrapper",))
        # A ResponsesAgent's, ChatAgent's predict and predict_stream: pydantic input.
        wrap = namespace.get("wrap_non_list_predict_pydantic")
        _add_nested(getattr(wrap, "__code__", None), ("wrapper",))
    elif name == "mlflow.tracing.fluent":
        # @mlflow.trace (and a ResponsesAgent's own tracing): the traced
        # function is the node; the span's bookkeeping is MLflow's, beside it.
        for maker in ("_wrap_function", "_wrap_generator"):
            _add_nested(getattr(namespace.get(maker), "__code__", None), ("wrapper",))


def namespace_items(module):
    namespace = getattr(module, "__dict__", None)
    return list(copy_of(namespace).items()) if isinstance(namespace, dict) else []


def _add_nested(code, names) -> None:
    """Marks the functions named `names` defined inside `code`, at any level."""
    for const in getattr(code, "co_consts", ()):
        if isinstance(const, types.CodeType):
            if const.co_name in names:
                _add_code(const)
            _add_nested(const, names)


def _user_module(module) -> bool:
    namespace = getattr(module, "__dict__", None)
    file = namespace.get("__file__") if isinstance(namespace, dict) else None
    return isinstance(file, str) and _core.is_user_file(file)


def _scan_libraries() -> None:
    """The libraries' forwarding frames, and the user's own functools.wraps
    decorators (a user's `@timed` around featurize: featurize is the node).
    `__main__` is scanned again whenever modules were imported since, since a
    script defines its functions after it starts."""
    for name, module in copy_of(sys.modules).items():
        if name in _scanned or module is None:
            continue
        if name.partition(".")[0] not in _LIBRARIES:
            try:
                if name != "__main__" and not _user_module(module):
                    _scanned.add(name)  # the standard library, other site-packages: no scan
                    continue
            except Exception:
                continue
        if name != "__main__":
            _scanned.add(name)
        try:
            _scan_module(name, module)
        except Exception:  # a module mid-import or an odd namespace: it only costs names
            pass


_modules_seen = -1


def refresh() -> int:
    """Called at every session start: picks up plumbing modules imported since
    (nothing to do while no module was imported since the last look). Returns
    the len(sys.modules) it has nothing left to do for, -1 to be called again."""
    global _modules_seen
    count = len(sys.modules)
    if count != _modules_seen:
        complete = _stdlib_plumbing() if len(_done_modules) < 4 else True
        _scan_libraries()
        _labels.refresh()
        wrappers, libraries = _clients.refresh()
        for wrapper in wrappers:  # aiohttp's, httpx's request: the block inside is the node
            add(wrapper)
        if wrappers:  # their own work (naming the host, instants) is no node
            for helper in _clients.helpers():
                _hide_function(helper)
        for library in libraries:
            _hide_finalizers(library)
        _modules_seen = count if complete else -1
    return _modules_seen
