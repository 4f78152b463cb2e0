"""Where a sampled predict's added time goes, hot and cold.

    python bench/bench_sampled_parts.py [--depth 2] [--rounds 200] [--json F]

One process, the tests' ChurnModel loaded through mlflow.pyfunc, a 64-row
frame, autoprofile at sample_rate 1.0. Each part of autoprofile's sampled
path is timed twice: *hot*, right after the same part ran, and *cold*, right
after one unprofiled predict (what a sampled call in serving meets: the
model's own work has just run through the caches). Beside them, the floor a
session cannot go below in the same state (a clock read, one object made and
freed, a ContextVar set and reset) and a peer's start and stop (cProfile's
enable and disable, empty).

Each part's figure includes the timer's two clock reads (the "timer" row):
cold, those alone are about a microsecond. Parts: begin (autoprofile's `_begin`: the prepared entry found, the session
started), end (`_end`: the session stopped, kept as last_profile(), which
frees the one before it), and call: the model's predict inside the session
minus the same predict without one, interleaved. Medians in microseconds.

Why: a session's start plus stop is ~2 us in a loop (bench_overhead's
`session` workload), while a sampled call pays several times that. This
says how much of the gap is the cache state the call starts in, and how far
each part is from the floor in that state (bench/RESULTS.md, issue 45).
"""

from __future__ import annotations

import argparse
import contextvars
import cProfile
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def main() -> None:
    """Prints each part's hot and cold median, and writes them to --json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _mlflow_models

    import mlflow_profiler
    from mlflow_profiler import _autoprofile

    d = tempfile.mkdtemp()
    model = _mlflow_models.load_churn_in_new_store(d)
    df = _mlflow_models.frame(64)
    mlflow_profiler.autoprofile(depth=args.depth, sample_rate=1.0)
    config = _autoprofile._config
    original = _autoprofile._patched["predict"][0]  # PyFuncModel.predict, unwrapped
    clock = time.perf_counter_ns
    var: contextvars.ContextVar = contextvars.ContextVar("bench", default=None)
    started: List = []

    def begin() -> None:
        started.append(_autoprofile._begin(model, config, original))

    def end() -> None:
        _autoprofile._end(started.pop()[0], config)

    def ctxvar() -> None:
        var.reset(var.set(1))

    profiler = cProfile.Profile()

    def cprofile() -> None:
        profiler.enable()
        profiler.disable()

    parts: Dict[str, Callable[[], None]] = {
        "timer (nothing timed)": lambda: None,
        "floor: a clock read": clock,
        "floor: object()": object,
        "floor: ContextVar set+reset": ctxvar,
        "peer: cProfile enable+disable": cprofile,
    }
    cold: Dict[str, List[int]] = {k: [] for k in [*parts, "begin", "end", "call"]}
    hot: Dict[str, List[int]] = {k: [] for k in cold if k != "call"}  # call: cold only
    call = _autoprofile._prepared_for(model, config, original, False).call

    def timed(fn: Callable[[], None]) -> int:
        t0 = clock()
        fn()
        return clock() - t0

    for _ in range(30):  # warm-up: prepared entry, imports, sites
        model.predict(df)
    for r in range(args.rounds):
        for name, fn in parts.items():
            original(model, df)
            cold[name].append(timed(fn))
            hot[name].append(timed(fn))
        # begin and end, cold: after an unprofiled predict each
        original(model, df)
        cold["begin"].append(timed(begin))
        original(model, df)
        cold["end"].append(timed(end))
        # hot: back to back, a session with nothing in it
        begin()
        end()
        hot["begin"].append(timed(begin))
        hot["end"].append(timed(end))
        # the call inside a session against the same call without one
        original(model, df)
        bare = timed(lambda: original(model, df))
        begin()
        inside = timed(lambda: call(model, df, None))
        end()
        cold["call"].append(inside - bare)
    mlflow_profiler.autoprofile(disable=True)
    med = {
        "hot": {k: statistics.median(v) / 1000 for k, v in hot.items()},
        "cold": {k: statistics.median(v) / 1000 for k, v in cold.items()},
    }
    version = sys.version.split()[0]
    print(f"python {version}, depth {args.depth}, {args.rounds} rounds; median us, each with")
    print("the timer's own two clock reads (its row); call: the predict's time inside a session")
    print("minus without one")
    print(f"{'part':32} {'hot':>8} {'cold':>8}")
    for k in med["cold"]:
        h = med["hot"].get(k)
        print(f"{k:32} {'-' if h is None else f'{h:.2f}':>8} {med['cold'][k]:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": version, "depth": args.depth, "rounds": args.rounds, **med}, f)


if __name__ == "__main__":
    main()
