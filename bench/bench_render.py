"""Tree build and JSON render of a real capture of about 1M events, from Python.

bench_core (C++) times the core on a synthetic 1M-event lane; this times the
same steps end to end on a real session: fib(N) captured at depth -1 (two
events per call), then the first result access (the engine hands its lanes to
the core, ids are remapped, the tree is built), then `to_json()` (the full
document as a Python str) and `format_tree(depth=3)`. Capture is not timed.
Median of repeats, each on a fresh capture.

    python bench/bench_render.py [--fib 27] [--repeats 5] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time

from mlflow_profiler import profiling


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fib", type=int, default=27, help="fib(27): 635,621 calls, 1.27M events")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.fib, args.repeats = 15, 1
    build, js, text = [], [], []
    events = spans = size = 0
    for _ in range(args.repeats):
        with profiling(depth=-1, max_events=4_000_000) as s:
            fib(args.fib)
        gc.collect()
        t0 = time.perf_counter()
        st = s.statistics()  # builds the profile
        t1 = time.perf_counter()
        doc = s.to_json()
        t2 = time.perf_counter()
        s.format_tree(depth=3)
        t3 = time.perf_counter()
        build.append(t1 - t0)
        js.append(t2 - t1)
        text.append(t3 - t2)
        events, spans, size = st["events_captured"], st["span_count"], len(doc)
        del s, doc
    b, j, t = (statistics.median(x) * 1e3 for x in (build, js, text))
    print(
        f"# python {platform.python_version()}; fib({args.fib}) at depth -1; median of {args.repeats}"
    )
    print(f"events {events:,}, spans {spans:,}, JSON {size / 1e6:.1f} MB")
    print(
        f"build (first access): {b:.1f} ms; to_json: {j:.1f} ms; build + JSON: {b + j:.1f} ms "
        f"({(b + j) * 1e6 / max(events, 1):.0f} ns/event, {(b + j) * 1e6 / max(events, 1) * 1e6 / 1e9:.3f} s "
        f"per 1M events); format_tree(depth=3): {t:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
