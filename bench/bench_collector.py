"""What ProfileCollector costs: ns per add() of a ~50-span profile, and the
memory it holds after 100k sessions, next to two ways of doing the same in
Python measured in the same run.

Not a test: it asserts nothing about time. Contenders, each fed the same 16
real captures (predict -> 7 steps -> 6 helpers each: 50 spans) round-robin:

  core        _core.CallPathStats.add(profile): the C++ statistics, through
              the binding (GIL released, mutex taken)
  collector   ProfileCollector.add(session): the public call, what
              collector.session() pays when its block ends
  py-exact    for scale: per path, the wall and self times appended to
              array('q') lists (exact quantiles, memory grows per sample);
              the (path, wall, self) rows are computed once beforehand, so
              this is the aggregation alone, the least Python could pay
  py-ddsketch the same rows into one `ddsketch` package DDSketch per path and
              kind (relative accuracy 0.01, as ours), if it is importable

ns per add: medians over --repeats runs of --number adds each. Memory after
--sessions adds: memory_bytes() and the process's RSS growth for core;
tracemalloc's count of Python allocations for the Python contenders.

    python bench/bench_collector.py [--repeats 11] [--number 2000] [--sessions 100000] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from array import array

import mlflow_profiler
from mlflow_profiler import _core, profiling

try:
    from ddsketch import DDSketch
except ImportError:  # optional peer
    DDSketch = None


# A model of 50 spans at depth 2: predict, 7 steps, 6 helpers under each.
def helper(n):
    total = 0
    for i in range(n):
        total += i
    return total


def load(n):
    for k in range(6):
        helper(n + k)


def clean(n):
    for k in range(6):
        helper(n + k)


def encode(n):
    for k in range(6):
        helper(n + k)


def scale(n):
    for k in range(6):
        helper(n + k)


def infer(n):
    for k in range(6):
        helper(n + k)


def rank(n):
    for k in range(6):
        helper(n + k)


def render(n):
    for k in range(6):
        helper(n + k)


def predict(n):
    for step in (load, clean, encode, scale, infer, rank, render):
        step(n)


def captures(count):
    """`count` finished sessions of predict() with different amounts of work."""
    out = []
    for i in range(count):
        n = 20 + 37 * i
        with profiling(depth=2) as session:
            predict(n)
        out.append(session)
    return out


def rows_of(session):
    """(path, wall_ns, self_ns) per complete span, as a Python peer would compute them."""
    rows = []
    stack = [(n, n["label"]) for n in session.to_tree()]
    while stack:
        n, path = stack.pop()
        kids = n["children"]
        self_ns = max(
            0,
            n["active_ns"]
            - sum(
                c["active_ns"]
                for c in kids
                if (c["thread_id"], c["task"]) == (n["thread_id"], n["task"])
            ),
        )
        rows.append((path, n["duration_ns"], self_ns))
        for c in kids:
            stack.append((c, path + "/" + c["label"]))
    return rows


class PyExact:
    def __init__(self):
        self.paths = {}

    def add(self, rows):
        for path, wall, self_ns in rows:
            entry = self.paths.get(path)
            if entry is None:
                entry = self.paths[path] = (array("q"), array("q"))
            entry[0].append(wall)
            entry[1].append(self_ns)


class PyDDSketch:
    def __init__(self):
        self.paths = {}

    def add(self, rows):
        for path, wall, self_ns in rows:
            entry = self.paths.get(path)
            if entry is None:
                entry = self.paths[path] = (DDSketch(0.01), DDSketch(0.01))
            entry[0].add(wall)
            entry[1].add(self_ns)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def time_adds(add, items, number, repeats):
    """Median ns per add over `repeats` runs of `number` adds."""
    runs = []
    k = len(items)
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for i in range(number):
            add(items[i % k])
        runs.append((time.perf_counter_ns() - t0) / number)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--smoke", action="store_true", help="tiny run to keep the script working")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.smoke:
        args.repeats, args.number, args.sessions = 1, 50, 500

    sessions = captures(16)
    profiles = [s._built() for s in sessions]
    rows = [rows_of(s) for s in sessions]
    spans = sorted({p.span_count for p in profiles})
    results = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "spans": spans,
        "ddsketch": DDSketch is not None,
        "ns_per_add": {},
        "memory": {},
    }

    # Time: a fresh aggregate per contender, warmed by one round first.
    core = _core.CallPathStats()
    collector = mlflow_profiler.ProfileCollector()
    exact, ddsk = PyExact(), (PyDDSketch() if DDSketch else None)
    contenders = [
        ("core", core.add, profiles),
        ("collector", collector.add, sessions),
        ("py-exact", exact.add, rows),
    ]
    if ddsk is not None:
        contenders.append(("py-ddsketch", ddsk.add, rows))
    for name, add, items in contenders:
        for item in items:
            add(item)
        results["ns_per_add"][name] = time_adds(add, items, args.number, args.repeats)

    # Memory after `sessions` adds, each contender from empty.
    gc.collect()
    core = _core.CallPathStats()
    rss0 = rss_bytes()
    for i in range(args.sessions):
        core.add(profiles[i % len(profiles)])
    results["memory"]["core"] = {
        "memory_bytes": core.memory_bytes(),
        "rss_growth": rss_bytes() - rss0,
        "paths": core.paths,
        "sessions": core.sessions,
    }
    summary = core.summary()
    del core
    peers = [("py-exact", PyExact)] + ([("py-ddsketch", PyDDSketch)] if DDSketch else [])
    for name, cls in peers:
        gc.collect()
        tracemalloc.start()
        agg = cls()
        for i in range(args.sessions):
            agg.add(rows[i % len(rows)])
        current, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        results["memory"][name] = {"python_bytes": current, "paths": len(agg.paths)}
        del agg

    print(
        f"Python {results['python']} ({results['machine']}), profiles of {spans} spans, "
        f"ddsketch {'yes' if DDSketch else 'not installed'}"
    )
    print(f"ns per add() (median of {args.repeats} x {args.number}):")
    for name, ns in results["ns_per_add"].items():
        print(f"  {name:<12} {ns:>10.0f} ns   {ns / max(spans):>7.1f} ns/span")
    print(f"memory after {args.sessions} sessions:")
    m = results["memory"]["core"]
    print(
        f"  core         memory_bytes {m['memory_bytes']:>12,d}   RSS growth {m['rss_growth']:>12,d}   "
        f"({m['paths']} paths, {m['memory_bytes'] // max(m['paths'], 1):,d} B/path)"
    )
    for name, _ in peers:
        m = results["memory"][name]
        print(f"  {name:<12} python allocations {m['python_bytes']:>12,d}   ({m['paths']} paths)")
    p = summary["predict"]
    print(
        f"predict over {args.sessions} sessions: p50 {p['p50_ms']:.3f} ms, p99 {p['p99_ms']:.3f} ms, "
        f"count {p['count']}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
