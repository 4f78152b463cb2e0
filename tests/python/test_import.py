"""What `import mlflow_profiler` loads: the native engine's modules only. The
reference engine (the executable spec, 1,400 lines) is loaded the first time
a session asks for it, and works the same then."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import sys
    import mlflow_profiler
    print("after import:", "mlflow_profiler._reference" in sys.modules)
    with mlflow_profiler.profiling(depth=1):
        sum(range(3))
    print("after a native session:", "mlflow_profiler._reference" in sys.modules)

    def f():
        return len("abc")

    def g():
        return f()

    with mlflow_profiler.profiling(depth=1, engine="reference") as session:
        g()
    print("after a reference session:", "mlflow_profiler._reference" in sys.modules)
    print("tree:", [(s.label, s.depth) for s in session.spans])
""")


def test_the_reference_engine_is_loaded_only_when_asked_for():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        "after import: False",
        "after a native session: False",
        "after a reference session: True",
    ]
    # loaded inside nothing: the import's own frames are not in the tree
    assert lines[3] == "tree: [('g', 0), ('f', 1)]", lines[3]
