"""Per recorded span overhead of the per-span values (cpu_time, alloc_bytes).

One run measures, interleaved, a loop of N calls of a small recorded
function under profiling(depth=1) with the values off, cpu_time, alloc_bytes
and both, and reports ns per recorded span over "off" and the ratios. It also
measures what a reading costs at the least (the physical limit): the thread
CPU clock is clock_gettime(CLOCK_THREAD_CPUTIME_ID), a real system call (no
vDSO), read twice per span.

    python bench/bench_span_values.py              # ~20 s
    python bench/bench_span_values.py --smoke      # a second, checks it runs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import mlflow_profiler
from mlflow_profiler import _native

VARIANTS = {
    "off": {},
    "cpu_time": {"cpu_time": True},
    "alloc_bytes": {"alloc_bytes": True},
    "both": {"cpu_time": True, "alloc_bytes": True},
}


def leaf(x):
    return x


def leaf_alloc(x):
    return [[x], [x], [x], [x]]  # five small lists: what the counting wrapper costs per allocation


def loop(n):
    for i in range(n):
        leaf(i)


def loop_alloc(n):
    for i in range(n):
        leaf_alloc(i)


def one(kw, n, body=loop) -> float:
    """Seconds for n recorded calls (plus the session's fixed cost)."""
    t = time.perf_counter()
    with mlflow_profiler.profiling(depth=1, max_events=4 * n + 16, **kw):
        body(n)
    return time.perf_counter() - t


def clock_cost(n: int) -> dict:
    """ns per call of time.thread_time_ns (the syscall) and time.monotonic_ns
    (vDSO) from Python; their difference is the syscall's own cost."""
    out = {}
    for name, fn in (("thread_time_ns", time.thread_time_ns), ("monotonic_ns", time.monotonic_ns)):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter_ns() - t) / n)
        out[name] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.calls, args.repeats = 2_000, 2
    variants = dict(VARIANTS)
    if _native.FREE_THREADED:
        del variants["alloc_bytes"], variants["both"]  # refused there
    print(
        f"python {sys.version.split()[0]}, hook {mlflow_profiler._core.hook_name()}, "
        f"{args.calls} recorded spans x {args.repeats} repeats, median"
    )
    for title, body in (
        ("leaf() returns its argument", loop),
        ("leaf_alloc() makes 5 small lists", loop_alloc),
    ):
        times = {k: [] for k in variants}
        for kw in variants.values():
            one(kw, 1000, body)  # warm up: first sight of the codes
        for _ in range(args.repeats):  # interleaved: load drifts hit every variant alike
            for name, kw in variants.items():
                times[name].append(one(kw, args.calls, body))
        med = {k: statistics.median(v) for k, v in times.items()}
        span_ns = {k: med[k] / args.calls * 1e9 for k in med}
        if body is loop:
            per_span = span_ns
        print(f"\n{title}")
        print(f"{'variant':<12} {'ns/span':>9} {'over off':>9} {'ratio':>6}")
        for k in variants:
            print(
                f"{k:<12} {span_ns[k]:9.1f} {span_ns[k] - span_ns['off']:9.1f} {med[k] / med['off']:6.2f}"
            )
    clocks = clock_cost(args.calls)
    print()
    syscall = clocks["thread_time_ns"] - clocks["monotonic_ns"]
    print(
        f"clock from Python: thread_time_ns {clocks['thread_time_ns']:.1f} ns, monotonic_ns "
        f"{clocks['monotonic_ns']:.1f} ns: the CPU clock's system call ~{syscall:.1f} ns over the vDSO, "
        f"~{clocks['thread_time_ns'] - 30:.0f} ns a reading (less Python's ~30 ns call)"
    )
    if "cpu_time" in per_span:
        limit = 2 * (clocks["thread_time_ns"] - 30)
        print(
            f"cpu_time: {per_span['cpu_time'] - per_span['off']:.1f} ns/span over off; "
            f"physical limit two readings ~{limit:.0f} ns"
        )


if __name__ == "__main__":
    main()
