"""What one sampled predict adds in the scoring path, interleaved in one
process (no server, no HTTP): `scoring_server.invocations()` on ChurnModel,
rounds of 100 calls with autoprofile off, at sample_rate 1.0 and at 0.1
(depth 2), median per-call time of each mode over the rounds.

    python bench/bench_sampled_cost.py [--rounds 12] [--keep-events]

--keep-events holds an idle `profiling()` session in another thread for the
whole run, so the hook stays installed between autoprofile's sessions: on
3.12+ this separates what a session records from what the interpreter
spends turning sys.monitoring's global events on and off (bench/RESULTS.md).
Needs MLflow and the tests' models (tests/python)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def main() -> None:
    """Prints per-call time with autoprofile off and the added time per mode."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=100, help="timed calls per mode and round")
    ap.add_argument("--keep-events", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _mlflow_models
    from mlflow.pyfunc import scoring_server as ss

    import mlflow_profiler

    model = _mlflow_models.load_churn_in_new_store(tempfile.mkdtemp())
    df = _mlflow_models.frame(64)
    data = json.dumps(
        {"dataframe_split": json.loads(df.to_json(orient="split", index=False))}
    ).encode()
    schema = model.metadata.get_input_schema()

    def call():
        ss.invocations(data, "application/json", model, schema)

    if args.keep_events:
        stop = threading.Event()

        def keeper():
            with mlflow_profiler.profiling(depth=0):
                stop.wait()

        threading.Thread(target=keeper, daemon=True).start()
        time.sleep(0.2)
    modes = {"off": None, "sample_rate 1.0": 1.0, "sample_rate 0.1": 0.1}
    per_call = {k: [] for k in modes}
    for _ in range(100):
        call()
    for _ in range(args.rounds):
        for name, rate in modes.items():
            if rate is not None:
                mlflow_profiler.autoprofile(depth=2, sample_rate=rate)
            for _ in range(20):  # past the switch
                call()
            t = time.perf_counter()
            for _ in range(args.calls):
                call()
            per_call[name].append((time.perf_counter() - t) / args.calls * 1e6)
            mlflow_profiler.autoprofile(disable=True)
    base = statistics.median(per_call["off"])
    print(
        f"python {sys.version.split()[0]}{' (events kept on)' if args.keep_events else ''}: "
        f"off {base:.0f} us per call; "
        + ", ".join(
            f"{k} +{statistics.median(v) - base:.0f} us" for k, v in per_call.items() if k != "off"
        )
    )


if __name__ == "__main__":
    main()
