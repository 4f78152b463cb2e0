"""Depth 0 on a predict of bench_overhead (`calls`, the default: the
predict's own frame resumes generators, sums generator expressions and
recurses; or `tabular`), interleaved in one process, warm and cold.

Each round times, in a shuffled order, a bare predict twice (bare2 is the
noise floor), one inside `profiling(depth=d)` for each d of `--depths`
(start and stop timed), the same predict with a depth-0 session started
before the timer (what the session costs inside the predict), and an empty
depth-0 session alone. Each is timed warm (right after a predict) and cold
(after `gc.collect()`, as bench_overhead.py times every sample: a full
collection walks every object and leaves the caches cold). Prints each
median over the bare one of its condition and the excess in microseconds: a
session's cost is a fixed number of microseconds, not a share of the
predict, so `--rows` at two sizes tells the two apart.

    PYTHONPATH=<mlflow_profiler> python bench/d0_interleaved.py [--rounds 400] \\
        [--workload calls] [--rows 600] [--depths 0,1] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_overhead  # noqa: E402

import mlflow_profiler as mp  # noqa: E402

clock = time.perf_counter_ns


def variants(work, depths=(0,)):
    """name -> a function that times one predict (or session) and returns ns;
    `depths`: the ceilings whose session around the predict is timed too."""

    def bare() -> int:
        t = clock()
        work()
        return clock() - t

    def around(depth: int):
        def run() -> int:
            t = clock()
            with mp.profiling(depth=depth):
                work()
            return clock() - t

        return run

    def d0_inside() -> int:
        with mp.profiling(depth=0):
            t = clock()
            work()
            dt = clock() - t
        return dt

    def session_alone() -> int:
        t = clock()
        with mp.profiling(depth=0):
            pass
        return clock() - t

    out = {"bare": bare, "bare2": bare}
    out.update((f"d{d}", around(d)) for d in depths)
    out.update(d0_inside=d0_inside, session=session_alone)
    return out


def measure(work, rounds: int, seed: int, depths=(0,)) -> dict:
    """{condition: {variant: [ns, ...]}}, every variant in both conditions
    interleaved per round in a shuffled order."""
    runs = variants(work, depths)
    order = [(cond, name) for cond in ("warm", "cold") for name in runs]
    times: dict = {cond: {name: [] for name in runs} for cond in ("warm", "cold")}
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for cond, name in order:
            if cond == "cold":
                gc.collect()
            else:
                work()  # the caches as a predict leaves them
            times[cond][name].append(runs[name]())
    return times


def summarize(times: dict) -> dict:
    """{condition: {variant: {median_us, ratio, excess_us}}} against the
    condition's bare median."""
    out = {}
    for cond, by in times.items():
        base = statistics.median(by["bare"])
        meds = {name: statistics.median(ts) for name, ts in by.items()}
        out[cond] = {
            name: {"median_us": m / 1e3, "ratio": m / base, "excess_us": (m - base) / 1e3}
            for name, m in meds.items()
        }
    return out


def main() -> None:
    """Runs the rounds and prints median / median of bare per variant and condition."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--workload", choices=("calls", "tabular"), default="calls")
    ap.add_argument(
        "--rows", type=int, help="predict size (bench_overhead's: calls 600, tabular 300)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--depths", default="0", help="ceilings timed around the predict, e.g. 0,1")
    ap.add_argument("--json", help="write the samples and medians here")
    args = ap.parse_args()
    calls = args.workload == "calls"
    rows = args.rows or (bench_overhead.CALLS_ROWS if calls else bench_overhead.TABULAR_ROWS)
    make = bench_overhead.make_calls if calls else bench_overhead.make_tabular
    work = make(rows)
    for _ in range(20):
        work()
    depths = tuple(int(d) for d in args.depths.split(","))
    times = measure(work, args.rounds, args.seed, depths)
    summary = summarize(times)
    print(f"# {args.workload}({rows}), Python {platform.python_version()}, {args.rounds} rounds")
    print(f"{'variant':14s} {'warm':>18s} {'cold (gc.collect)':>24s}")
    for name in times["warm"]:
        w, c = summary["warm"][name], summary["cold"][name]
        print(
            f"{name:14s} {w['ratio']:.4f} {w['excess_us']:+7.1f} us   "
            f"{c['ratio']:.4f} {c['excess_us']:+7.1f} us"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "workload": args.workload,
                    "rows": rows,
                    "rounds": args.rounds,
                    "depths": list(depths),
                    "python": platform.python_version(),
                    "summary": summary,
                    "samples_ns": times,
                },
                f,
            )


if __name__ == "__main__":
    main()
