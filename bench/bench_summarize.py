"""What an I/O summary costs: summarize(obj) per value type (issue 3 target:
at most 1 us for a numpy array and for a DataFrame).

Not a test: it asserts nothing about time. Three ways per value, in ns per
call, medians over repeats (every repeat runs every case once, in a shuffled
order, so drift on a shared machine spreads over all of them; each loop runs
up to --number calls, fewer where a call is slow, about 20 ms):

  native    a C++ loop calling summarize_object(obj, &summary) with a fresh
            IOSummary each time: what the capture hooks pay per argument
  python    mlflow_profiler.summarize(obj): the same plus building the
            frozen IOSummary dataclass, through a Python call
  public    for scale, the same facts read through each library's public
            Python API (shape, str(dtype), nbytes / memory_usage(deep=False)
            / getsizeof, repr): what a pure-Python summarizer would pay

Values: a numpy array (1000 x 50 float64), DataFrames of 1000 rows and 10
columns with numpy dtypes (float64, int64, float32, int32, bool, object,
datetime64) and with pandas extension columns (pandas 3 str, category,
Int64), a Series, a torch tensor if torch imports, a list, a str, a custom
object with a __repr__, an int.

    python bench/bench_summarize.py [--repeats 15] [--number 20000] [--smoke] [--json FILE]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # numpy's idle BLAS threads spin on a 2-core machine

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import timeit  # noqa: E402

from mlflow_profiler import _core  # noqa: E402
from mlflow_profiler._summaries import summarize  # noqa: E402


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


def public_array(a):
    return a.shape, str(a.dtype), a.nbytes


def public_frame(df):
    dtypes = ",".join(dict.fromkeys(str(d) for d in df.dtypes))
    return df.shape, dtypes, int(df.memory_usage(deep=False).sum())


def public_series(s):
    return s.shape, str(s.dtype), int(s.memory_usage(deep=False))


def public_tensor(t):
    return tuple(t.shape), str(t.dtype), str(t.device), t.element_size() * t.numel()


def public_container(v):
    return len(v), sys.getsizeof(v)


def public_repr(v):
    return type(v).__qualname__, repr(v)[:80]


def cases(smoke: bool) -> list:
    """(name, value, public summarizer or None)."""
    out = []
    rows = 10 if smoke else 1000
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        out.append(("numpy 1000x50 f8", np.zeros((rows, 50)), public_array))
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None and np is not None:
        kinds = ["float64", "int64", "float32", "int32", "bool"]
        numeric = {f"n{i}": (np.arange(rows) % 2).astype(kinds[i % 5]) for i in range(8)}
        df = pd.DataFrame(
            {
                **numeric,
                "o": pd.Series(["x"] * rows, dtype=object),
                "t": pd.date_range("2020", periods=rows),
            }
        )
        out.append(("DataFrame 10 numpy", df, public_frame))
        ext = pd.DataFrame(
            {
                **{k: v for k, v in list(numeric.items())[:7]},
                "s": [f"s{i % 7}" for i in range(rows)],
                "c": pd.Categorical(["u", "v"] * (rows // 2)),
                "i": pd.array(range(rows), dtype="Int64"),
            }
        )
        out.append(("DataFrame 10 ext", ext, public_frame))
        out.append(("Series f8", df["n0"], public_series))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        out.append(("torch 8x128 f4", torch.zeros(8, 128), public_tensor))
    out.append(("list[3]", [1, 2, 3], public_container))
    out.append(("str[5]", "hello", public_repr))
    out.append(("object w/ __repr__", Point(1, 2), public_repr))
    out.append(("int", 12345, public_repr))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument(
        "--smoke", action="store_true", help="tiny inputs, 2 repeats: checks that it runs"
    )
    ap.add_argument("--json", help="also write the medians here")
    args = ap.parse_args()
    if args.smoke:
        args.repeats, args.number = 2, 200
    todo = cases(args.smoke)
    timings = {(name, how): [] for name, _, _ in todo for how in ("native", "python", "public")}

    def measure(value, public, how, n):
        if how == "native":
            return _core._summarize_loop(value, n)
        fn = summarize if how == "python" else public
        return timeit.timeit(lambda: fn(value), number=n) / n * 1e9

    # Warm the caches (type classification, dtype names, a type's first
    # repr) and size each loop to about 20 ms: the public DataFrame path
    # costs a millisecond a call.
    calls = {}
    for name, value, public in todo:
        for how in ("native", "python", "public"):
            once = measure(value, public, how, 10)
            calls[(name, how)] = max(10, min(args.number, int(20e6 / max(once, 1.0))))
    for _ in range(args.repeats):
        work = [(c, how) for c in todo for how in ("native", "python", "public")]
        random.shuffle(work)
        for (name, value, public), how in work:
            timings[(name, how)].append(measure(value, public, how, calls[(name, how)]))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# bench_summarize: Python {platform.python_version()}, {args.repeats} repeats of up to {args.number} "
        f"calls (about 20 ms each), load {load:.1f}"
    )
    print(f"{'value':22s} {'native':>9s} {'python':>9s} {'public':>9s}   ns per call (median)")
    medians = {}
    for name, value, _ in todo:
        row = {
            how: statistics.median(timings[(name, how)]) for how in ("native", "python", "public")
        }
        medians[name] = row
        print(f"{name:22s} {row['native']:9.0f} {row['python']:9.0f} {row['public']:9.0f}")
    print("\nsummaries:")
    for name, value, _ in todo:
        print(f"  {name:22s} {summarize(value)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "python": platform.python_version(),
                    "repeats": args.repeats,
                    "number": args.number,
                    "load": load,
                    "ns_per_call": medians,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
