"""One run of a small model, profiled, for tests/python/test_trend.py: a
process of its own, as a CI job's run would be.

    python _trend_model.py OUT.json [--calls N] [--slow-pct P] [--numpy DTYPE COLUMNS]

predict = featurize (a 10 ms wait) -> score (a 15 ms wait, P percent
longer with --slow-pct) -> postprocess (microseconds: under diff's floors).
The steps wait rather than compute: on this VM the CPU time of one loop
differs by up to 1.8x between processes with the host's load (two modes,
3 and 5.5 ms, for the same 60,000 iterations), while a 10 ms sleep's wall
time stays within 0.3% with four busy processes beside it. With --numpy
the data is an ndarray of DTYPE with COLUMNS columns (the I/O drift test),
else a list of floats; I/O capture is on either way. Prints the program's
own clock: the mean wall ns per call of predict and of score, and score's
p50 as the core takes it (the sample of rank floor((n-1)/2)): the oracle
for the change trend reports at its default statistic.
"""

import argparse
import json
import time

from mlflow_profiler import profiling

FEATURIZE_S = 0.010
SCORE_S = 0.015


class Model:
    def __init__(self, slow_pct: float) -> None:
        self.score_s = SCORE_S * (1 + slow_pct / 100)
        self.clock: list = []

    def featurize(self, X):
        time.sleep(FEATURIZE_S)
        return X * 2

    def score(self, F):
        t = time.perf_counter_ns()
        time.sleep(self.score_s)
        out = F.sum(axis=1) if hasattr(F, "sum") else [sum(F)]
        self.clock.append(time.perf_counter_ns() - t)
        return out

    def postprocess(self, s):
        return [v > 0 for v in s] if isinstance(s, list) else s > 0

    def predict(self, X):
        return self.postprocess(self.score(self.featurize(X)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--slow-pct", type=float, default=0.0)
    parser.add_argument("--numpy", nargs=2, metavar=("DTYPE", "COLUMNS"))
    args = parser.parse_args()
    if args.numpy:
        import numpy as np

        X = np.ones((8, int(args.numpy[1])), dtype=args.numpy[0])
    else:
        X = [1.0] * 10
    model = Model(args.slow_pct)
    predict_ns = []
    with profiling(depth=1, capture_io=True) as session:
        for _ in range(args.calls):
            t = time.perf_counter_ns()
            model.predict(X)
            predict_ns.append(time.perf_counter_ns() - t)
    session.save(args.out)
    print(
        json.dumps(
            {
                "predict_ns": sum(predict_ns) / len(predict_ns),
                "score_ns": sum(model.clock) / len(model.clock),
                "score_p50_ns": sorted(model.clock)[(len(model.clock) - 1) // 2],
            }
        )
    )


if __name__ == "__main__":
    main()
