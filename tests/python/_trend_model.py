"""One run of a small model, profiled, for tests/python/test_trend.py: a
process of its own, as a CI job's run would be.

    python _trend_model.py OUT.json [--calls N] [--slow-pct P] [--numpy DTYPE COLUMNS]

predict = featurize (a CPU loop of about 2 ms) -> score (about 3 ms, P
percent more iterations with --slow-pct) -> postprocess (microseconds:
under diff's floors). The steps compute, and the capture takes each span's
CPU time (cpu_time=True), which a loaded machine does not stretch as it
does wall time. With --numpy the data is an ndarray of DTYPE with COLUMNS
columns (the I/O drift test), else a list of floats; I/O capture is on
either way. Prints the program's own clock: the mean CPU ns per call of
predict and of score, and score's median (the oracle for the change trend
reports at its default statistic, the p50).
"""

import argparse
import json
import statistics
import time

from mlflow_profiler import profiling

FEATURIZE_LOOPS = 40_000
SCORE_LOOPS = 60_000


def spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


class Model:
    def __init__(self, slow_pct: float) -> None:
        self.score_loops = int(SCORE_LOOPS * (1 + slow_pct / 100))
        self.clock: list = []

    def featurize(self, X):
        spin(FEATURIZE_LOOPS)
        return X * 2

    def score(self, F):
        t = time.thread_time_ns()
        spin(self.score_loops)
        out = F.sum(axis=1) if hasattr(F, "sum") else [sum(F)]
        self.clock.append(time.thread_time_ns() - t)
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
    with profiling(depth=1, capture_io=True, cpu_time=True) as session:
        for _ in range(args.calls):
            t = time.thread_time_ns()
            model.predict(X)
            predict_ns.append(time.thread_time_ns() - t)
    session.save(args.out)
    print(
        json.dumps(
            {
                "predict_ns": sum(predict_ns) / len(predict_ns),
                "score_ns": sum(model.clock) / len(model.clock),
                "score_p50_ns": statistics.median(model.clock),
            }
        )
    )


if __name__ == "__main__":
    main()
