"""Every copy of a shared constant equals its one definition.

Event kinds and flags, function kinds, the USDT flags, span flags and I/O
roles are defined once in C++ headers (userspace/, bpf/mlprof_usdt.h); the
reference engine, the USDT tests and the HTML report's script keep copies.
The copies are found by searching candidate files (globs), not by path, so
that they survive files being split or moved; a definition or a copy that is
not found fails the test, never skips it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

import pytest

from mlflow_profiler import _core

ROOT = Path(__file__).resolve().parents[2]
HEADERS = ("userspace/**/*.h", "bpf/*.h", "pyext/**/*.h")
PYTHON_PACKAGE = ("python/mlflow_profiler/**/*.py",)
PYTHON_TESTS = ("tests/python/**/*.py",)
SCRIPTS = ("userspace/**/*.js",)


def _files(patterns: Iterable[str]) -> List[Path]:
    found = sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})
    assert found, f"no file matches {list(patterns)} under {ROOT}"
    return found


def _norm(name: str) -> str:
    """CFunction, C_FUNCTION and c_function compare equal."""
    return name.replace("_", "").upper()


# -- C++ definitions --------------------------------------------------------------


def _c_int(expr: str) -> int:
    expr = re.sub(r"(?<=[0-9a-fA-F])[uUlL]+\b", "", expr.strip())
    if not re.fullmatch(r"[0-9a-fA-FxX<() ]+", expr):
        raise ValueError(f"not a constant: {expr!r}")
    return int(eval(expr, {"__builtins__": {}}))  # digits, 0x, << and parentheses only


def _enum(name: str) -> Tuple[Path, Dict[str, int]]:
    """The enumerators of `enum [class] name` in the one header defining it."""
    pattern = re.compile(r"\benum\s+(?:class\s+)?" + name + r"\b[^{;]*\{(.*?)\};", re.S)
    hits = [(h, m.group(1)) for h in _files(HEADERS) for m in pattern.finditer(h.read_text())]
    assert (
        len(hits) == 1
    ), f"enum {name}: defined in {[str(h) for h, _ in hits]}, expected one header"
    header, body = hits[0]
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", body, flags=re.S)
    values: Dict[str, int] = {}
    for item in body.split(","):
        if item.strip():
            key, _, value = item.partition("=")
            assert value, f"{header}: enum {name}: {key.strip()} has no explicit value"
            values[key.strip()] = _c_int(value)
    return header, values


def _defines(prefix: str) -> Dict[str, int]:
    """#define PREFIX<NAME> <int> across the headers, by NAME."""
    pattern = re.compile(
        r"^#define\s+" + prefix + r"(\w+)\s+(0x[0-9a-fA-F]+|[0-9]+)[uUlL]*\b", re.M
    )
    out: Dict[str, int] = {}
    for h in _files(HEADERS):
        for m in pattern.finditer(h.read_text()):
            assert m.group(1) not in out, f"#define {prefix}{m.group(1)} twice"
            out[m.group(1)] = int(m.group(2), 0)
    assert out, f"no #define {prefix}* in {HEADERS}"
    return out


def _strip(values: Dict[str, int], prefix: str) -> Dict[str, int]:
    assert all(k.startswith(prefix) for k in values), (prefix, sorted(values))
    return {_norm(k[len(prefix) :]): v for k, v in values.items()}


# -- Python copies ----------------------------------------------------------------


def _py_int(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.LShift, ast.BitOr)):
        left, right = _py_int(node.left), _py_int(node.right)
        return left << right if isinstance(node.op, ast.LShift) else left | right
    raise ValueError(ast.dump(node))


def _module_ints(path: Path) -> Dict[str, int]:
    """Module-level NAME = int (and A, B = 1, 2) assignments of a file."""
    out: Dict[str, int] = {}
    for stmt in ast.parse(path.read_text(), str(path)).body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target, value = stmt.targets[0], stmt.value
        pairs = []
        if isinstance(target, ast.Name):
            pairs = [(target, value)]
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            pairs = list(zip(target.elts, value.elts))
        for t, v in pairs:
            if isinstance(t, ast.Name):
                try:
                    out[t.id] = _py_int(v)
                except ValueError:
                    pass
    return out


def _python_copies(patterns: Iterable[str], prefix: str, anchor: str) -> Dict[Path, Dict[str, int]]:
    """Per file that assigns `anchor` at module level: its PREFIX* ints, normalized."""
    out = {}
    for path in _files(patterns):
        ints = _module_ints(path)
        if anchor in ints:
            out[path] = {
                _norm(k[len(prefix) :]): v for k, v in ints.items() if k.startswith(prefix)
            }
    return out


def _check_copies(
    copies: Dict[Path, Dict[str, int]], definition: Dict[str, int], what: str, complete: bool
) -> None:
    for path, values in copies.items():
        rel = path.relative_to(ROOT)
        unknown = sorted(set(values) - set(definition))
        assert not unknown, f"{rel}: {what} {unknown} are not in the definition {definition}"
        wrong = {k: (v, definition[k]) for k, v in values.items() if v != definition[k]}
        assert not wrong, f"{rel}: {what} differ from the definition, (copy, definition): {wrong}"
        if complete:
            missing = sorted(set(definition) - set(values))
            assert not missing, f"{rel}: {what} {missing} are missing"


# -- the contracts -----------------------------------------------------------------


def test_event_kinds():
    _, kinds = _enum("EventKind")
    kinds = _strip(kinds, "k")
    copies = _python_copies(PYTHON_PACKAGE, "K_", "K_CALL")
    assert copies, "the reference engine's event kinds (K_CALL = ...) are in no file of the package"
    _check_copies(copies, kinds, "event kinds", complete=True)


def test_event_flags():
    _, flags = _enum("EventFlag")
    flags = _strip(flags, "kEv")
    copies = _python_copies(PYTHON_PACKAGE, "EV_", "EV_EXCEPTION")
    assert (
        copies
    ), "the reference engine's event flags (EV_EXCEPTION = ...) are in no file of the package"
    _check_copies(copies, flags, "event flags", complete=True)


def test_function_kinds():
    _, kinds = _enum("FunctionKind")
    kinds = _strip(kinds, "k")
    package = _python_copies(PYTHON_PACKAGE, "FN_", "FN_PYTHON")
    assert (
        package
    ), "the reference engine's function kinds (FN_PYTHON = ...) are in no file of the package"
    _check_copies(package, kinds, "function kinds", complete=True)
    tests = _python_copies(PYTHON_TESTS, "FN_", "FN_PYTHON")
    assert any(
        p.name == "test_usdt.py" for p in tests
    ), "test_usdt.py's FN_PYTHON, FN_C, FN_BLOCK not found"
    _check_copies(tests, kinds, "function kinds", complete=True)


def test_report_kind_names():
    """The report's KIND_NAMES is indexed by FunctionKind: one name per kind, in order."""
    _, kinds = _enum("FunctionKind")
    hits = []
    for path in _files(SCRIPTS):
        for m in re.finditer(r"\bKIND_NAMES\s*=\s*\[(.*?)\]", path.read_text(), re.S):
            hits.append((path, re.findall(r'"([^"]*)"', m.group(1))))
    assert hits, "KIND_NAMES = [...] is in no script under userspace/"
    expect = {"kPython": "Python function", "kC": "C function", "kBlock": "profile_block region"}
    assert sorted(expect) == sorted(
        kinds
    ), f"FunctionKind changed ({sorted(kinds)}): update this test and the report"
    for path, names in hits:
        assert len(names) == len(kinds), f"{path}: {names} for {len(kinds)} kinds"
        for kind, value in kinds.items():
            assert (
                names[value] == expect[kind]
            ), f"{path}: KIND_NAMES[{value}] is {names[value]!r}, kind {kind}"


def test_usdt_flags_in_tests():
    """test_usdt.py's copies of mlprof_usdt.h's span and session flags."""
    for prefix, anchor in (("SPAN_", "SPAN_EXCEPTION"), ("SESSION_", "SESSION_CAPTURE_IO")):
        definition = _strip(_defines("MLPROF_" + prefix), "")
        copies = _python_copies(PYTHON_TESTS, prefix, anchor)
        assert any(p.name == "test_usdt.py" for p in copies), f"test_usdt.py's {anchor} not found"
        _check_copies(copies, definition, f"USDT {prefix}flags", complete=False)


def test_core_span_flags():
    """_core.SPAN_FLAGS (what the report and documents are written with) is tree.h's table."""
    _, flags = _enum("SpanFlag")
    bits = {_norm(k[len("kSpan") :]): v for k, v in flags.items() if k.startswith("kSpan")}
    assert {_norm(k): v for k, v in _core.SPAN_FLAGS.items()} == bits


def test_core_io_roles():
    _, roles = _enum("IORole")
    assert {"kArgument": _core.IO_ARGUMENT, "kReturn": _core.IO_RETURN} == roles
    usdt = _defines("MLPROF_IO_")
    assert (usdt["ARGUMENT"], usdt["RETURN"]) == (_core.IO_ARGUMENT, _core.IO_RETURN)


@pytest.mark.parametrize("name", ["OFF_CPU_MIN_NS", "OFF_CPU_QUANTUM_NS"])
def test_core_constants_are_ints(name):
    """The constants Python reads from _core exist (stubbed in _core.pyi): the
    reference engine's off-CPU quantum, and the off-CPU minimum that
    test_overhead_cut.py sizes its waits by."""
    assert isinstance(getattr(_core, name), int)
