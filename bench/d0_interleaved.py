"""Depth 0 on a predict of bench_overhead (`--workload calls`, the default:
the predict's own frame resumes generators, sums generator expressions and
recurses; or `tabular`), interleaved in one process: each round times a bare
predict, one inside `profiling(depth=0)`, and an empty depth-0
session followed by a bare predict (the session's own cost), 400 rounds;
prints each median over the bare one. run.sh times contenders in separate
blocks; interleaving takes the machine's drift out of a 1-2% figure.

    PYTHONPATH=<mlflow_profiler> python bench/d0_interleaved.py [--rounds 400] [--workload calls]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_overhead  # noqa: E402

import mlflow_profiler as mp  # noqa: E402


def main() -> None:
    """Runs the rounds and prints median / median of bare per variant."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--workload", choices=("calls", "tabular"), default="calls")
    args = ap.parse_args()
    if args.workload == "calls":
        work = bench_overhead.make_calls(600)
    else:
        work = bench_overhead.make_tabular(200)
    for _ in range(20):
        work()

    def bare() -> int:
        t = time.perf_counter_ns()
        work()
        return time.perf_counter_ns() - t

    def depth0() -> int:
        t = time.perf_counter_ns()
        with mp.profiling(depth=0):
            work()
        return time.perf_counter_ns() - t

    def session_then_work() -> int:
        t = time.perf_counter_ns()
        with mp.profiling(depth=0):
            pass
        work()
        return time.perf_counter_ns() - t

    variants = {"bare": bare, "d0": depth0, "d0_then_work": session_then_work}
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            times[name].append(fn())
    base = statistics.median(times["bare"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:14s} {med / base:.4f}  {med / 1000:.1f} us")


if __name__ == "__main__":
    main()
