"""_transparent scans modules' and classes' attributes while another thread
may be setting them: autoprofile in a served model once failed a session
start with "dictionary changed size during iteration". The scan works on a
snapshot (a copy taken in one step). The change is caused here without
threads (reading an attribute's `__module__` sets another attribute of the
module, as a lazy loader does), and with one."""

from __future__ import annotations

import gc
import sys
import threading
import time
import types

from mlflow_profiler import _transparent


class _Lazy:
    """Reading its __module__ adds attributes to the module it lives in."""

    def __init__(self, module):
        self._module = module

    @property
    def __module__(self):  # noqa: D401 - a property standing for the attribute
        setattr(self._module, f"loaded_{len(vars(self._module))}", object())
        return self._module.__name__


def test_a_module_that_grows_while_scanned():
    module = types.ModuleType("lazy_mod")
    module.first = _Lazy(module)
    module.second = _Lazy(module)
    _transparent.add_module(module)  # raised RuntimeError before
    assert len(vars(module)) > 4


class _Cycle:
    """Garbage only the collector frees; its finalizer lets another thread run."""

    def __del__(self):
        for _ in range(50):  # bytecode: the interpreter may switch threads here
            pass


def test_a_scan_while_another_thread_imports():
    """The served model's failure: the scan's own allocations run the
    collector, a finalizer hands the GIL to a thread that imports, and
    sys.modules changes size between two items. Scans for 3 s against a
    thread that adds and removes modules, with the collector run every 50
    allocations over garbage whose finalizers run bytecode (before the fix:
    5 failures within the first second)."""
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            sys.modules[f"_churn_{i % MODULES}"] = types.ModuleType(f"_churn_{i % MODULES}")
            sys.modules.pop(f"_churn_{(i + MODULES // 2) % MODULES}", None)
            i += 1

    # A served model has thousands of modules: iterating them uses up
    # CPython's free list of pairs, so each item allocates, and an
    # allocation can run the collector.
    MODULES = 4000
    for i in range(MODULES // 2):
        sys.modules[f"_churn_{i}"] = types.ModuleType(f"_churn_{i}")
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    worker = threading.Thread(target=churn)
    errors = []
    gc.set_threshold(50)
    sys.setswitchinterval(1e-6)
    worker.start()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and len(errors) < 5:
            for _ in range(100):
                c = _Cycle()
                c.me = c
            try:
                _transparent._scan_libraries()
                _transparent.add_module(types)
            except RuntimeError as exc:
                errors.append(exc)
    finally:
        stop.set()
        worker.join()
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)
        for i in range(MODULES):
            sys.modules.pop(f"_churn_{i}", None)
    assert errors == []
