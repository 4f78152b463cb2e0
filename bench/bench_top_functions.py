"""`mlprof top --by function` over 100 sources (issue 41: top within 1 s):
a store of a recursive model's captures, timed through the Python API
(wall and CPU, median of the repeats) and as the command a user runs (a
new process: interpreter start and imports included), beside `top` by
path over the same store.

    python bench/bench_top_functions.py [--sources 100] [--calls 3] [--fib 12] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from mlflow_profiler import analysis, profiling
from mlflow_profiler._files import loads
from mlflow_profiler.store import open_store


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def timed(fn, repeat):
    """(median wall s, median CPU s of this process)."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=100)
    parser.add_argument("--calls", type=int, default=3, help="fib(N) calls a source")
    parser.add_argument("--fib", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with profiling(depth=-1, max_events=10_000_000) as session:
        for _ in range(args.calls):
            fib(args.fib)
    text = session.to_json()
    with tempfile.TemporaryDirectory(prefix="bench-topfn-") as tmp:
        db = os.path.join(tmp, "fib.db")
        with open_store(db) as store:
            for _ in range(args.sources):
                store.add(loads(text))
        result = analysis.top([db], by="function")
        calls = sum(r.calls for r in result.rows)
        print(
            f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {args.sources} sources, "
            f"{calls:,} spans ({calls // args.sources:,} a source), "
            f"{len(analysis.top([db]).rows)} call paths, {len(result.rows)} functions"
        )
        for name, fn in (
            ("top --by function (API)", lambda: analysis.top([db], by="function")),
            ("top by path (API)", lambda: analysis.top([db])),
        ):
            wall, cpu = timed(fn, args.repeat)
            print(f"{name}: wall {wall:.3f} s, CPU {cpu:.3f} s (median of {args.repeat})")
        cmd = [sys.executable, "-m", "mlflow_profiler._cli", "top", db, "--by", "function"]
        walls = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            walls.append(time.perf_counter() - t)
        print(
            f"mlprof top --by function (a new process): wall {statistics.median(walls):.3f} s "
            f"(median of {args.repeat})"
        )
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import mlflow_profiler.analysis, mlflow_profiler._cli"],
            check=True,
        )
        print(f"  of which interpreter start and imports: {time.perf_counter() - t:.3f} s")


if __name__ == "__main__":
    main()
