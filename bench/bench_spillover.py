"""What a sampled predict costs, and what it leaves behind for the next ones.

    python bench/bench_spillover.py [--rate 0.1] [--depth 2] [--blocks 50] [--export none|files]

One process, the ChurnModel of the tests loaded through mlflow.pyfunc, a
closed loop of predicts on a 64-row frame. Blocks of 60 predicts rotate
through: A (autoprofile off: the exact original predict) and C (autoprofile
at --rate). The C predicts are split by whether that call was sampled, and
the unsampled ones by how many calls ago the last sampled one was (+1 is the
call right after it). Each is printed as its p50 over A's p50. A block's
first sampled call is counted apart, with the calls up to the next sampled
one: it pays for autoprofile() having been switched on (the tool id claimed,
global events set, so every function re-checks its instrumentation when it
next runs: about 570 functions in this predict on 3.12, by bpftrace), which a server pays
once, not per sampled call.

Why: a profiler that changes interpreter state for a sampled call (3.12+
sys.monitoring instruments every function that runs; the PEP 523 frame
evaluation hook makes the interpreter stop inlining calls, and specialised
instructions fall back) can slow the calls after it, which sample_rate does
not divide. Figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=0.1)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=50)
    ap.add_argument("--export", choices=["none", "files"], default="none")
    args = ap.parse_args()
    import _mlflow_models

    import mlflow_profiler

    d = tempfile.mkdtemp()
    model = _mlflow_models.load_churn_in_new_store(d)
    df = _mlflow_models.frame(64)
    extra = {"output_dir": os.path.join(d, "profiles")} if args.export == "files" else {}
    clock = time.perf_counter_ns
    off, sampled, firsts, since = [], [], [], collections.defaultdict(list)
    for block in range(args.blocks + 1):  # the first block warms up
        for label in ("A", "C"):
            if label == "A":
                mlflow_profiler.autoprofile(disable=True)
            else:
                mlflow_profiler.autoprofile(depth=args.depth, sample_rate=args.rate, **extra)
            after = None  # calls since the last sampled one, in this block
            switched_on = label == "C"  # no sampled call yet since autoprofile() was called
            for _ in range(60):
                last = mlflow_profiler.last_profile()
                t = clock()
                model.predict(df)
                dt = clock() - t
                if label == "A":
                    if block:
                        off.append(dt)
                    continue
                if mlflow_profiler.last_profile() is not last:
                    if block:
                        (firsts if switched_on else sampled).append(dt)
                    after = None if switched_on else 0  # its aftermath is the switch's too
                    switched_on = False
                    continue
                if after is not None:
                    after += 1
                    if block:
                        since[min(after, 10)].append(dt)
    mlflow_profiler.autoprofile(disable=True)
    mlflow_profiler.flush()
    base = statistics.median(off)
    unsampled = [x for v in since.values() for x in v] or [base]  # rate 1.0: none
    print(
        f"python {sys.version.split()[0]}, rate {args.rate}, depth {args.depth}, export {args.export}: "
        f"A p50 {base / 1000:.0f} us (n={len(off)})"
    )
    print(
        f"sampled/A p50 {statistics.median(sampled) / base:.3f} (n={len(sampled)}); "
        f"unsampled/A p50 {statistics.median(unsampled) / base:.3f} (n={len(unsampled)})"
    )
    if firsts:
        print(
            f"first sampled call after autoprofile() switched on/A p50 "
            f"{statistics.median(firsts) / base:.3f} (n={len(firsts)})"
        )
    print(
        "after a sampled call, p50/A: "
        + " ".join(
            f"+{k}{'+' if k == 10 else ''} {statistics.median(v) / base:.3f}"
            for k, v in sorted(since.items())
        )
    )


if __name__ == "__main__":
    main()
