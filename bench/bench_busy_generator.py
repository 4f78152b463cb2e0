"""Issue 42 item 7: what a busy generator costs the document.

30 predicts, each `sum(i * i for i in range(20000))` at depth 2, in one
session; prints the document's size (JSON and gzip), its segments, the
events captured and the capture's wall time. Run it against builds before
and after resumes were coalesced (model/resume.h):

    PYTHONPATH=... python bench/bench_busy_generator.py [--predicts 30] [--resumes 20000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time

from mlflow_profiler import profiling


def busy(n):
    return sum(i * i for i in range(n))


def predict(n):
    return busy(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--predicts", type=int, default=30)
    ap.add_argument("--resumes", type=int, default=20000)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--engine", default="native")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with profiling(depth=args.depth, engine=args.engine) as session:
        for _ in range(args.predicts):
            predict(args.resumes)
    captured = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = session.to_json()
    written = time.perf_counter() - t0
    doc = json.loads(text)
    segments = json.dumps(doc["segments"], separators=(",", ":"))
    print(
        f"predicts {args.predicts} x {args.resumes} resumes, depth {args.depth}, engine {args.engine}"
    )
    print(
        f"  spans {len(doc['spans'])}, segments {len(doc['segments'])}, "
        f"events {session.statistics()['events_captured']}"
    )
    print(
        f"  document {len(text)} B JSON, {len(gzip.compress(text.encode()))} B gzip; "
        f"segments {len(segments)} B of it"
    )
    print(f"  capture {captured * 1e3:.1f} ms, to_json {written * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
