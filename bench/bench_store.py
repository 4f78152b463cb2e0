"""The profile store's costs (issue 18, docs/store.md): adding a profile
(spans per second) and its bytes per span, reading it back, and top/diff
over many sources, beside writing and reading the same profile as a
.json.gz document in the same run. PostgreSQL too when a URL is given.

    python bench/bench_store.py [--spans 1000000] [--sources 10000] [--spans-per-source 100] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from mlflow_profiler import analysis, load, profiling
from mlflow_profiler.store import open_store


def _leaf(i):
    return i


def _node(n):
    return [_leaf(i) for i in range(n)]


def capture(spans: int):
    """A profile of about `spans` spans: calls of 100 leaves."""
    with profiling(depth=-1, max_events=4 * spans + 1000) as session:
        for _ in range(max(1, spans // 101)):
            _node(100)
    return session


def timed(fn, repeat=3):
    """(median wall seconds, the result); the median CPU seconds of this
    process go to CPU[0] (the machine is shared: CPU time says what the
    work costs, wall time what a user waits)."""
    times, cpu = [], []
    out = None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    CPU[0] = statistics.median(cpu)
    return statistics.median(times), out


CPU = [0.0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument(
        "--sources", type=int, default=10_000, help="small sources a store for top/diff"
    )
    parser.add_argument("--spans-per-source", type=int, default=100)
    parser.add_argument("--postgres", default=None, help="a postgresql:// URL to measure too")
    args = parser.parse_args()
    big = capture(args.spans)
    n = big._built().span_count
    tmp = tempfile.mkdtemp(prefix="bench-store-")
    print(f"one profile of {n:,} spans")

    doc = os.path.join(tmp, "p.json.gz")
    t_save, _ = timed(lambda: big.save(doc))
    t_load, _ = timed(lambda: load(doc))
    print(
        f"  .json.gz   save {t_save:.2f}s ({n / t_save / 1e3:.0f}k spans/s), "
        f"load {t_load:.2f}s ({n / t_load / 1e3:.0f}k spans/s), {os.path.getsize(doc) / n:.1f} B/span"
    )

    targets = [("sqlite", os.path.join(tmp, "s.db"))]
    if args.postgres:
        targets.append(("postgres", args.postgres))
    for name, target in targets:
        with open_store(target) as store:
            t_add, source = timed(lambda: store.add(big), repeat=1)
            t_read, _ = timed(lambda: store.load(source), repeat=1)
        size = ""
        if name == "sqlite":
            with open_store(target) as store:
                store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size = f", {os.path.getsize(target) / n:.1f} B/span (file after checkpoint)"
        print(
            f"  {name:9s}  add {t_add:.2f}s ({n / t_add / 1e3:.0f}k spans/s), "
            f"read back {t_read:.2f}s ({n / t_read / 1e3:.0f}k spans/s){size}"
        )

    # top and diff over many small sources: the figure is 1M spans
    # in 10k sessions (one per source here) for top, and two such stores for diff.
    small = [capture(args.spans_per_source) for _ in range(4)]
    stores = []
    for side in ("a", "b"):
        db = os.path.join(tmp, f"many-{side}.db")
        t = time.perf_counter()
        with open_store(db) as store:
            for i in range(args.sources):
                store.add(small[i % 4], labels={"version": side})
        stores.append(db)
        t_add = time.perf_counter() - t
    with open_store(stores[0]) as store:
        spans = sum(s["spans"] for s in store.sources())
    print(
        f"{args.sources:,} sources a store, {spans:,} spans: added in {t_add:.1f}s "
        f"({args.sources / t_add:.0f} sources/s, {spans / t_add / 1e3:.0f}k spans/s)"
    )
    t_top, result = timed(lambda: analysis.top([stores[0]]), repeat=3)
    print(
        f"  top over one store {t_top:.2f}s (CPU {CPU[0]:.2f}s; {spans / t_top / 1e3:.0f}k spans/s), "
        f"{len(result.rows)} paths"
    )
    t_diff, _ = timed(lambda: analysis.diff([stores[0]], [stores[1]]), repeat=3)
    print(
        f"  diff of the two stores (2000 resamples a side) {t_diff:.2f}s (CPU {CPU[0]:.2f}s; "
        f"{2 * spans / t_diff / 1e3:.0f}k spans/s)"
    )
    # The floor: Python's sqlite3 fetching the columns top reads, nothing done with them.
    with open_store(stores[0]) as store:
        t_fetch, _ = timed(
            lambda: store._conn.execute(
                "SELECT sample_id, stack_id, flags, end_ns - start_ns, COALESCE(active_ns, end_ns - start_ns), self_ns "
                "FROM samples"
            ).fetchall(),
            repeat=3,
        )
    print(f"  (sqlite3 fetching those rows alone: {t_fetch:.2f}s, CPU {CPU[0]:.2f}s)")


if __name__ == "__main__":
    main()
