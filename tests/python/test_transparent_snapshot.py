"""_transparent scans modules' and classes' attributes while another thread
may be setting them: autoprofile in a served model once failed a session
start with "dictionary changed size during iteration". The scan works on a
snapshot. The change is caused here without threads: reading an attribute's
`__module__` sets another attribute of the module (a lazy loader does)."""

from __future__ import annotations

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
