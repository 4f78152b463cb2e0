"""A model run as one process, for diff's tests and bench/bench_diff.py:
`python _diff_model.py OUT.json [--score-ms MS] [--spin N] [--twice] [--calls N]`.
predict() calls featurize (a 1 ms sleep), score (a CPU loop of --spin
iterations, then a sleep of --score-ms), once or, with --twice, twice, each with a
small `normalize` under it, and postprocess (a few microseconds). Profiles
the calls into OUT.json and prints the program's own clock: the mean and
the p50 time of score per predict call, in ns (the oracles for diff's
change, by its statistic), and the p50 of its thread CPU time. A p50 here
is the core's, the sample of rank floor((n-1)/2), not the mean of the
middle two: with 10 calls, in a run whose CPU time has two modes, the two
differ by up to 30%."""

from __future__ import annotations

import argparse
import json
import time

from mlflow_profiler import profiling


def featurize():
    time.sleep(0.001)


def normalize(x):
    return x / 3


def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def score(ms, n):
    spin(n)
    if ms:
        time.sleep(ms / 1e3)
    return normalize(1.0)


def postprocess(x):
    return round(x, 3)


def predict(ms, n, twice, clock, cpu):
    featurize()
    t, c = time.perf_counter_ns(), time.thread_time_ns()
    s = score(ms, n)
    if twice:
        s += score(ms, n)
    clock.append(time.perf_counter_ns() - t)
    cpu.append(time.thread_time_ns() - c)
    return postprocess(s)


def p50(values):
    """The core's p50 (views/path_stats.h): the sample of rank floor((n-1)/2)."""
    return sorted(values)[(len(values) - 1) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--score-ms", type=float, default=3.0)
    ap.add_argument("--spin", type=int, default=0)
    ap.add_argument("--twice", action="store_true")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--cpu-time", action="store_true")
    args = ap.parse_args()
    clock: list = []
    cpu: list = []
    with profiling(depth=-1, cpu_time=args.cpu_time) as session:
        for _ in range(args.calls):
            predict(args.score_ms, args.spin, args.twice, clock, cpu)
    session.save(args.out)
    print(
        json.dumps(
            {
                "score_ns": sum(clock) / len(clock),
                "score_p50_ns": p50(clock),
                "score_cpu_p50_ns": p50(cpu),
            }
        )
    )


if __name__ == "__main__":
    main()
