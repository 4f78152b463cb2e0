"""Where a sampled predict's added CPU time goes, by library, from perf's samples.

    sudo python bench/bench_sampled_where.py [--depth 2] [--seconds 5] [--rounds 3] [--json F]

One process, the tests' ChurnModel loaded through mlflow.pyfunc, a 64-row
frame, predicts in closed loops that alternate, --rounds times: autoprofile
at sample_rate 0 (every call takes the unsampled path), then at sample_rate
1.0 (every call is a sampled one, hot). `perf record -e cpu-clock` (the
kernel's software clock: no hardware counters needed, so it runs in VMs)
samples each loop; a library's share of the samples times the loop's time a
call is its microseconds a call, averaged over the rounds, and the
difference between the two kinds of loop is what sampling adds there. Each
loop starts after gc.collect(): a full collection (about 190 ms here, one
in several thousand predicts) lands in no loop by chance. The kernel's part is the system calls a session makes (the
thread's CPU clock for running vs waiting: views/waiting.h); the
interpreter's, that it runs the model differently while a session records
(the frame evaluation function, sys.monitoring's events); the extension's,
the profiler's own code.

Why: bench_spillover measures what a sampled call costs; this says where it
goes, which part is the profiler's own code and which the interpreter's or
the kernel's (bench/RESULTS.md, issue 45). Needs `perf` and permission to
attach to the process (root, or perf_event_paranoid <= 1).
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

SAMPLE_HZ = 2000


def _library(dso: str) -> str:
    """A short name for perf's DSO column: the interpreter, the extension,
    the kernel, or the library's file name."""
    if dso.startswith("[kernel"):
        return "kernel"
    if dso.startswith("libpython"):
        return "interpreter (libpython)"
    if dso.startswith("_core."):
        return "mlflow_profiler (_core)"
    return re.sub(r"\.cpython-.*|\.so.*", "", dso)


def _shares(data: str, sort: str) -> Dict[str, float]:
    """perf report's sample shares (percent) of `data`, by `sort` key."""
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", sort, "--stdio", "-g", "none"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares: Dict[str, float] = collections.defaultdict(float)
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*\S)", line)
        if m and not line.lstrip().startswith("#"):
            shares[m.group(2)] += float(m.group(1))
    return shares


def _loop(predict, seconds: float, data: str) -> Tuple[float, int]:
    """Predicts for `seconds` with perf sampling this process into `data`;
    returns (microseconds a call, calls)."""
    perf = subprocess.Popen(
        [
            "perf",
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            str(SAMPLE_HZ),
            "-p",
            str(os.getpid()),
            "-o",
            data,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # perf attached
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        predict()
        n += 1
    took = time.perf_counter() - t0
    perf.send_signal(2)
    perf.wait(timeout=60)
    return took * 1e6 / n, n


def main() -> None:
    """Prints microseconds a call by library for both loops, and writes them to --json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("bench_sampled_where: needs perf (apt-get install linux-perf)")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _mlflow_models

    import mlflow_profiler

    d = tempfile.mkdtemp()
    model = _mlflow_models.load_churn_in_new_store(d)
    df = _mlflow_models.frame(64)

    def predict() -> None:
        model.predict(df)

    loops: Dict[str, Dict[str, object]] = {}
    for _ in range(args.rounds):
        for name, rate in (("unsampled", 0.0), ("sampled", 1.0)):
            mlflow_profiler.autoprofile(depth=args.depth, sample_rate=rate)
            for _ in range(50):
                predict()
            gc.collect()
            data = os.path.join(d, f"perf-{name}.data")
            per_call, calls = _loop(predict, args.seconds, data)
            acc = loops.setdefault(
                name,
                {
                    "us_a_call": 0.0,
                    "calls": 0,
                    "by_library": collections.Counter(),
                    "by_symbol": collections.Counter(),
                },
            )
            w = 1.0 / args.rounds
            acc["us_a_call"] += per_call * w  # type: ignore[operator]
            acc["calls"] += calls  # type: ignore[operator]
            for dso, pct in _shares(data, "dso").items():
                acc["by_library"][_library(dso)] += pct * per_call / 100 * w  # type: ignore[index]
            for k, pct in _shares(data, "dso,sym").items():
                acc["by_symbol"][k] += pct * per_call / 100 * w  # type: ignore[index]
    mlflow_profiler.autoprofile(disable=True)
    stats = mlflow_profiler.last_profile().statistics()

    u, s = loops["unsampled"], loops["sampled"]
    added = s["us_a_call"] - u["us_a_call"]  # type: ignore[operator]
    libs = sorted(set(u["by_library"]) | set(s["by_library"]))  # type: ignore[arg-type]
    rows: List[Tuple[str, float, float, float]] = []
    for lib in libs:
        a = u["by_library"].get(lib, 0.0)  # type: ignore[union-attr]
        b = s["by_library"].get(lib, 0.0)  # type: ignore[union-attr]
        rows.append((lib, a, b, b - a))
    rows.sort(key=lambda r: -abs(r[3]))
    sym_delta = collections.Counter()
    for k in set(u["by_symbol"]) | set(s["by_symbol"]):  # type: ignore[arg-type]
        sym_delta[k] = s["by_symbol"].get(k, 0.0) - u["by_symbol"].get(k, 0.0)  # type: ignore[union-attr]
    print(
        f"python {sys.version.split()[0]}, depth {args.depth}, {args.rounds} rounds of {args.seconds:.0f} s loops: "
        f"unsampled {u['us_a_call']:.0f} us a call ({u['calls']} calls), "
        f"sampled {s['us_a_call']:.0f} us ({s['calls']}): +{added:.0f} us"
    )
    print(
        f"a sampled call records {stats['span_count']} spans, {stats['events_captured']} events; "
        f"the profiler counts {stats['profiler_overhead_ns'] / 1e3:.1f} us of its own work in it"
    )
    print(f"{'library':<28} {'unsampled':>10} {'sampled':>10} {'added':>8}  (us a call)")
    for lib, a, b, delta in rows[:10]:
        print(f"{lib:<28} {a:10.1f} {b:10.1f} {delta:+8.1f}")
    print("functions adding the most (us a call):")
    for k, v in sym_delta.most_common(12):
        print(f"  {v:+6.1f}  {k}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "python": sys.version.split()[0],
                    "depth": args.depth,
                    "seconds": args.seconds,
                    "rounds": args.rounds,
                    "sample_hz": SAMPLE_HZ,
                    "loops": {
                        k: {kk: vv for kk, vv in v.items() if kk != "by_symbol"}
                        for k, v in loops.items()
                    },
                    "added_us": added,
                    "by_library_added_us": {r[0]: r[3] for r in rows},
                    "functions_added_us": dict(sym_delta.most_common(40)),
                    "session": {
                        k: stats[k]
                        for k in ("span_count", "events_captured", "profiler_overhead_ns")
                    },
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
