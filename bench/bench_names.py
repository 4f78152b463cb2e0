"""What naming costs (issue 17): the first sight of a code, and a labeller
(Series.__truediv__, Series.dt.hour) per labelled call; and the wall time of
a pandas featurization at depth 3 against the unprofiled run and cProfile in
the same run. Both costs are the profiler's own work, cut from the span
times (statistics()["profiler_overhead_ns"]); this measures what they add to
the wall clock.

    python bench/bench_names.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import time

import numpy as np
import pandas as pd

from mlflow_profiler import profiling


def features(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    out["hour"] = df["ts"].dt.hour
    out["amount"] = df["amount"]
    out["ratio"] = df["amount"] / df.groupby("user")["amount"].transform("mean")
    out["merchant"] = df["merchant"].str.upper()
    return out


def frame(n: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame(
        {
            "ts": pd.date_range("2024-01-01", periods=n, freq="h"),
            "amount": rng.gamma(2.0, 50.0, n),
            "merchant": rng.choice(list("abc"), n),
            "user": rng.integers(0, 10, n),
        }
    )


def walk(nodes):
    for n in nodes:
        yield n
        yield from walk(n["children"])


def first_sight(count: int) -> float:
    """Microseconds of profiler work per code seen for the first time."""
    namespace: dict = {}
    exec("\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(count)), namespace)
    fns = [namespace[f"f{i}"] for i in range(count)]
    with profiling(depth=2) as session:
        for f in fns:
            f(1)
    return session.statistics()["profiler_overhead_ns"] / count / 1e3


def labelled(repeat: int) -> float:
    """Microseconds of profiler work per labelled call (s / t, s.dt.hour)."""
    s = pd.Series(np.arange(10.0))
    t = pd.Series(pd.date_range("2024-01-01", periods=10, freq="h"))
    s / 2, t.dt.hour  # first sights out of the way
    costs = []
    for _ in range(repeat):
        with profiling(depth=0) as session:
            for _ in range(10):
                s / 2
                t.dt.hour
        spans = session.statistics()["span_count"]
        costs.append(session.statistics()["profiler_overhead_ns"] / spans / 1e3)
    return statistics.median(costs)


def wall(repeat: int) -> dict:
    df = frame()
    for _ in range(20):
        features(df)
    runs = {"unprofiled": [], "mlflow_profiler depth 3": [], "cProfile": []}
    cut = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        features(df)
        runs["unprofiled"].append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        with profiling(depth=3) as session:
            features(df)
        runs["mlflow_profiler depth 3"].append(time.perf_counter_ns() - t0)
        cut.append(session.statistics()["profiler_overhead_ns"])
        prof = cProfile.Profile()
        t0 = time.perf_counter_ns()
        prof.enable()
        features(df)
        prof.disable()
        runs["cProfile"].append(time.perf_counter_ns() - t0)
    labels = [n["label"] for n in walk(session.to_tree())]
    base = statistics.median(runs["unprofiled"])
    return {
        "median_us": {k: statistics.median(v) / 1e3 for k, v in runs.items()},
        "ratio": {k: statistics.median(v) / base for k, v in runs.items()},
        "cut_us": statistics.median(cut) / 1e3,
        "labelled_spans": sum(
            1
            for x in labels
            if x.startswith(("Series.", "DataFrame."))
            and not x.startswith(
                (
                    "DataFrame.__getitem__",
                    "DataFrame.__setitem__",
                    "DataFrame.__init__",
                    "DataFrame.groupby",
                )
            )
        ),
        "spans": len(labels),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"first sight: {first_sight(2000):.2f} us per code (2,000 new functions)")
    print(f"labeller: {labelled(args.repeat):.2f} us per labelled call (s / 2, s.dt.hour)")
    w = wall(args.repeat)
    print(
        f"features(df) at depth 3: {w['spans']} spans, about {w['labelled_spans']} labelled; "
        f"profiler work cut from the times {w['cut_us']:.1f} us"
    )
    for k in w["median_us"]:
        print(f"  {k:26s} {w['median_us'][k]:8.0f} us  {w['ratio'][k]:.2f}x")


if __name__ == "__main__":
    main()
