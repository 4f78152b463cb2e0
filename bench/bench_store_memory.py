"""Peak memory (RSS) of the profile store's operations on a 1M-span capture
(issue 18's target: at most 200 MB while adding or reading), each in a fresh
process, beside the interpreter with the package imported and a plain load
of the same document.

    python bench/bench_store_memory.py [--spans 1000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

# Each step runs in its own interpreter and prints its peak RSS (KiB).
_PEAK = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
_STEPS = {
    "import mlflow_profiler": "import mlflow_profiler",
    "load the .json.gz document": "import mlflow_profiler as m; m.load({doc!r})",
    "add the document to a store": "from mlflow_profiler.store import open_store\n"
    "with open_store({db!r}) as s: s.add({doc!r})",
    "read it back from the store": "from mlflow_profiler.store import open_store\n"
    "with open_store({db!r}) as s: s.load(s.source_ids()[0])",
    "top over the store": "from mlflow_profiler import analysis; analysis.top([{db!r}])",
    "diff of the store with itself": "from mlflow_profiler import analysis; analysis.diff([{db!r}], [{db!r}])",
}

_CAPTURE = """
from mlflow_profiler import profiling
def leaf(i):
    return i
def node(n):
    return [leaf(i) for i in range(n)]
with profiling(depth=-1, max_events=4 * {spans} + 1000) as s:
    for _ in range(max(1, {spans} // 101)):
        node(100)
s.save({doc!r})
print(s._built().span_count)
"""

_CAPTURE_AND_ADD = _CAPTURE.replace(
    "s.save({doc!r})\nprint(s._built().span_count)",
    """
s._built()
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
from mlflow_profiler.store import open_store
with open_store({db!r}) as store:
    store.add(s)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-store-mem-")
    doc, db = os.path.join(tmp, "p.json.gz"), os.path.join(tmp, "s.db")
    spans = int(
        subprocess.run(
            [sys.executable, "-c", _CAPTURE.format(spans=args.spans, doc=doc)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    print(f"a capture of {spans:,} spans; peak RSS of each step in a fresh {sys.executable}:")
    # The serving path: a capture in memory added as it is (no document).
    out = subprocess.run(
        [sys.executable, "-c", _CAPTURE_AND_ADD.format(spans=args.spans, db=db + "-live")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    print(f"  {'capture in process':32s} {int(out[0]) / 1024:7.1f} MiB")
    print(f"  {'  then add it to a store':32s} {int(out[1]) / 1024:7.1f} MiB")
    for label, code in _STEPS.items():
        out = subprocess.run(
            [sys.executable, "-c", code.format(doc=doc, db=db) + "\n" + _PEAK],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        print(f"  {label:32s} {int(out.split()[-1]) / 1024:7.1f} MiB")


if __name__ == "__main__":
    main()
