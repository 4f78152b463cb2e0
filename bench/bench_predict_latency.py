"""In-process latency of a closed loop of predicts (the ChurnModel on a
64-row frame, no HTTP): autoprofile off, capturing only, and exporting to
files, at sample_rate 0.1 and depth 2; phases of 300 calls interleaved
(order reversed every other round).

    python bench/bench_predict_latency.py [--rounds 12]

p50 and p99 against the off phases. Separates what the capture costs from
what the export costs next to the thread serving predicts. Figures go to
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _mlflow_models

    import mlflow_profiler

    d = tempfile.mkdtemp()
    model = _mlflow_models.load_churn_in_new_store(d)
    df = _mlflow_models.frame(64)
    out = tempfile.mkdtemp()
    modes = ["off", "capture", "export"]
    times = {m: [] for m in modes}

    def phase(mode, n=300):
        if mode == "capture":
            mlflow_profiler.autoprofile(depth=2, sample_rate=0.1)
        elif mode == "export":
            mlflow_profiler.autoprofile(depth=2, sample_rate=0.1, output_dir=out)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            model.predict(df)
            times[mode].append(time.perf_counter_ns() - t0)
        if mode != "off":
            mlflow_profiler.autoprofile(disable=True)
            mlflow_profiler.flush()

    for _ in range(50):
        model.predict(df)
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            phase(mode)

    def q(xs, p):
        return statistics.quantiles(xs, n=100)[p - 1] / 1e3

    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds x 300 calls per mode")
    for mode, xs in times.items():
        print(
            f"{mode:8s} p50 {q(xs, 50):7.0f} us ({q(xs, 50) / q(times['off'], 50):.3f})   "
            f"p99 {q(xs, 99):7.0f} us ({q(xs, 99) / q(times['off'], 99):.3f})"
        )


if __name__ == "__main__":
    main()
