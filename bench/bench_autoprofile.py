"""What autoprofile adds to a predict call that is not sampled (sample_rate=0),
and to a real MLflow predict.

    python bench/bench_autoprofile.py [--smoke]   # prints a table; see bench/RESULTS.md

1. The gate alone: our PyFuncModel.predict wrapper around a no-op function
   vs the no-op called directly, and vs the floor (a bare Python forwarding
   wrapper, what any patch costs), at sample_rate 0 and 0.1 (unsampled
   calls only pay the random() draw).
2. A real pyfunc model (logged and loaded with MLflow): predict with the
   patch at sample_rate=0 vs unpatched, interleaved rounds, median.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))


def per_call_ns(fn, n, *args):
    t = time.perf_counter_ns()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter_ns() - t) / n


def median_of(rounds, fn, n, *args):
    return statistics.median(per_call_ns(fn, n, *args) for _ in range(rounds))


def gate(rounds=9, n=300_000):
    from mlflow_profiler import _autoprofile

    def noop(self, data, params=None):
        return data

    def floor(self, *args, **kwargs):  # a bare forwarding patch
        return noop(self, *args, **kwargs)

    wrapped = _autoprofile._make_predict(noop)
    saved = _autoprofile._config
    try:
        _autoprofile._config = _autoprofile.AutoprofileConfig(sample_rate=0.0)
        obj, data = object(), [1]
        base = median_of(rounds, noop, n, obj, data)
        flo = median_of(rounds, floor, n, obj, data)
        r0 = median_of(rounds, wrapped, n, obj, data)
        _autoprofile._config = (
            None  # autoprofile(disable=True) with a wrapper left in another patch chain
        )
        off = median_of(rounds, wrapped, n, obj, data)
    finally:
        _autoprofile._config = saved
    return base, flo, r0, off


def real_model(rounds=15, n=300):
    import _mlflow_models
    import mlflow
    import mlflow.pyfunc

    import mlflow_profiler

    d = tempfile.mkdtemp()
    mlflow.set_tracking_uri(f"sqlite:///{d}/mlflow.db")
    churn_uri, _, _ = _mlflow_models.log_models()
    model = mlflow.pyfunc.load_model(churn_uri)
    df = _mlflow_models.frame(64)
    for _ in range(50):
        model.predict(df)
    plain, patched = [], []
    for _ in range(rounds):
        mlflow_profiler.autoprofile(disable=True)
        plain.append(per_call_ns(model.predict, n, df))
        mlflow_profiler.autoprofile(sample_rate=0.0)
        patched.append(per_call_ns(model.predict, n, df))
    mlflow_profiler.autoprofile(disable=True)
    return statistics.median(plain), statistics.median(patched), plain, patched


def main():
    smoke = "--smoke" in sys.argv  # CI: keeps the script working, figures meaningless
    print(f"Python {sys.version.split()[0]}")
    base, flo, r0, off = gate(rounds=1, n=1000) if smoke else gate()
    print("gate (ns per call, median of 9 x 300k):")
    print(f"  no-op called directly            {base:8.1f}")
    print(f"  floor: bare forwarding wrapper   {flo:8.1f}   (+{flo - base:.1f})")
    print(
        f"  autoprofile, sample_rate=0       {r0:8.1f}   (+{r0 - base:.1f}; +{r0 - flo:.1f} over the floor)"
    )
    print(f"  autoprofile disabled, wrapper    {off:8.1f}   (+{off - base:.1f})")
    plain, patched, p_all, q_all = real_model(rounds=1, n=5) if smoke else real_model()
    spread = (max(p_all) - min(p_all)) / plain * 100
    print("real pyfunc predict (us per call, median of 15 interleaved rounds x 300):")
    print(f"  unpatched                        {plain / 1000:8.1f}   (round spread {spread:.1f}%)")
    print(
        f"  autoprofile, sample_rate=0       {patched / 1000:8.1f}   (ratio {patched / plain:.4f}, "
        f"{patched - plain:+.0f} ns)"
    )


if __name__ == "__main__":
    main()
