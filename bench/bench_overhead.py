"""Capture overhead of mlflow_profiler next to real peers, in one run.

Not a test: it asserts nothing about time. It prints median wall times and
overhead ratios to the unprofiled run, for two workloads:

  fib      a call-heavy one: recursive fib(N), one call per sample
  tabular  a call-heavy pure-Python predict (rows of dicts, generators,
           comprehensions, a hand-written tree ensemble), ~16k calls
  calls    a call-heavy predict whose own frame does the calling (~16k
           calls): it resumes a generator per row, sums a generator
           expression per row inside `sum()`, and recurses 5 deep per row
  empty    a session around a call that does nothing, 100 per sample: the
           fixed cost of starting and stopping each profiler, with one span
  session  a session around `object()`, a C call no profiler records by
           default (not in the default set): start and stop alone, no span
  loop     a loop with no calls in it (not in the default set): the hook's
           cost on plain bytecode, which is not zero on 3.11
  predict  a realistic one: a scikit-learn Pipeline (ColumnTransformer with
           imputation, scaling and one-hot encoding, then a random forest)
           predicting a 1000-row pandas DataFrame, K predicts per sample

and these contenders, each started and stopped around every single call
(one session per fib(N), one per predict, as in production):

  base      unprofiled
  base2     unprofiled again: the noise floor of this run
  floor     a C hook that does nothing, on the same events as our engine
            (sys.monitoring with a no-op METH_FASTCALL callback on 3.12+,
            PyEval_SetProfile with a no-op C function on 3.9-3.11); needs
            the _mlprof_floor module that bench/run.sh builds
  floor-stamp the same hook, but each event reads the clock (rdtsc) and
            writes 16 bytes: a span's physical floor (two clock reads and
            its record) on top of the dispatch
  ours-d0   `with profiling(depth=0)`: the root spans only
  ours-d1   `with profiling(depth=1)`
  ours-d2   `with profiling(depth=2)`
  ours-d2-io `with profiling(depth=2, capture_io=True)`: arguments and return
            values of every recorded call summarized (issue 3: at most 2
            points above ours-d2 on predict)
  ours-d-1  `with profiling(depth=-1)` (full capture)
  cProfile  cProfile.Profile() enable/disable
  viztracer VizTracer(verbose=0), one tracer per sample, start/stop per call
  pyinstr   pyinstrument.Profiler() (sampling every 1 ms, its default)
  ref-d-1   `profiling(depth=-1, engine="reference")`: the pure-Python
            reference engine

Every repeat runs every contender once, in a shuffled order, so drift on a
shared machine spreads over all of them; figures are medians over repeats.
Each sample follows gc.collect(): no collection lands inside one, and each
starts with cold caches, which a session's fixed cost feels (depth 0 on 3.12+:
30-40 us cold against 13-27 warm; bench/d0_interleaved.py times both).
Post-processing (tree build, rendering, saving) is not timed for anyone.

    python bench/bench_overhead.py                # full run (2-3 minutes)
    python bench/bench_overhead.py --smoke        # each contender once, tiny inputs
    python bench/bench_overhead.py --json out.json --show-tree
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import types
from typing import Callable, Dict, List, Optional

perf_ns = time.perf_counter_ns

# --------------------------------------------------------------- workloads ---


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def make_fib(n: int) -> Callable[[], object]:
    def run() -> int:
        return fib(n)

    return run


def make_predict(rows: int, trees: int):
    """A fitted Pipeline and a call that predicts `rows` rows with it."""
    import numpy as np
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(0)

    def frame(n: int) -> pd.DataFrame:
        df = pd.DataFrame(
            {
                "age": rng.normal(40, 12, n),
                "income": rng.lognormal(10, 1, n),
                "tenure": rng.integers(0, 30, n).astype(float),
                "score": rng.normal(size=n),
                "city": rng.choice(["paris", "lyon", "nice", "lille", "nantes"], n),
                "plan": rng.choice(["free", "basic", "pro"], n),
                "channel": rng.choice(["web", "app", "store", "phone"], n),
            }
        )
        df.loc[rng.random(n) < 0.05, "income"] = np.nan
        return df

    numeric = ["age", "income", "tenure", "score"]
    categorical = ["city", "plan", "channel"]
    pipe = Pipeline(
        [
            (
                "prep",
                ColumnTransformer(
                    [
                        (
                            "num",
                            Pipeline(
                                [
                                    ("impute", SimpleImputer(strategy="median")),
                                    ("scale", StandardScaler()),
                                ]
                            ),
                            numeric,
                        ),
                        ("cat", OneHotEncoder(handle_unknown="ignore"), categorical),
                    ]
                ),
            ),
            (
                "model",
                RandomForestClassifier(n_estimators=trees, max_depth=10, n_jobs=1, random_state=0),
            ),
        ]
    )
    train = frame(4000)
    y = ((train["age"] > 40) ^ (train["plan"] == "pro") ^ (train["score"] > 1.0)).astype(int)
    pipe.fit(train, y)
    x = frame(rows)

    def run():
        return pipe.predict(x)

    run.pipe, run.x = pipe, x
    return run


# A call-heavy pure-Python predict: feature extraction over rows of dicts with
# generators and comprehensions, then a hand-written tree ensemble. About
# 16k Python calls per predict of 300 rows; no numpy, so the interpreter's
# own call path is what is measured.
def _rows(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    cities = ["paris", "lyon", "nice", "lille", "nantes"]
    return [
        {
            "age": rng.gauss(40, 12),
            "income": rng.lognormvariate(10, 1),
            "tenure": rng.randint(0, 30),
            "city": rng.choice(cities),
            "visits": [rng.random() for _ in range(5)],
        }
        for _ in range(n)
    ]


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def _scaled(row: dict, key: str, mean: float, std: float) -> float:
    return _clip((row[key] - mean) / std, -3.0, 3.0)


def _visit_stats(visits: list):
    total = 0.0
    for i, v in enumerate(visits):
        total += v
        yield total / (i + 1)


def _one_hot(city: str, cities=("paris", "lyon", "nice", "lille", "nantes")) -> list:
    return [1.0 if c == city else 0.0 for c in cities]


def _features(row: dict) -> list:
    running = list(_visit_stats(row["visits"]))
    return [
        _scaled(row, "age", 40, 12),
        _scaled(row, "income", 30000, 20000),
        _scaled(row, "tenure", 15, 9),
        max(running),
        sum(running) / len(running),
    ] + _one_hot(row["city"])


def _tree(x: list, t: int) -> float:
    if x[t % 5] > 0.1 * (t % 3):
        return _leaf(x, t, 1)
    return _leaf(x, t, -1)


def _leaf(x: list, t: int, sign: int) -> float:
    return sign * (0.5 + 0.01 * t) + 0.1 * x[5 + t % 5]


def _score(x: list, trees: int = 12) -> float:
    return sum(_tree(x, t) for t in range(trees))


# The tabular and calls predicts' sizes in a full run (d0_interleaved.py's too).
TABULAR_ROWS = 300
CALLS_ROWS = 600


def make_tabular(rows: int):
    data = _rows(rows)

    def predict() -> list:
        feats = [_features(r) for r in data]
        return [1 if _score(f) > 0 else 0 for f in feats]

    return predict


def _fields(row: dict):
    for key in ("age", "income", "tenure"):
        yield key, row[key]


def _parsed(rows: list):
    for row in rows:
        yield {key: _norm(key, v) for key, v in _fields(row)}


def _norm(key: str, v: float) -> float:
    return _clip(v / _SCALE[key], -3.0, 3.0)


_SCALE = {"age": 40.0, "income": 30000.0, "tenure": 15.0}


def _weight(key: str, v: float) -> float:
    return _clip(v * (0.5 if key == "age" else 0.25), -1.0, 1.0)


def _settle(x: float, n: int) -> float:
    return x if n == 0 else _settle(x * 0.5 + 0.1, n - 1)


def make_calls(rows: int):
    """A predict whose own frame does the calling: it resumes a generator
    per row, sums a generator expression per row (each item a resume from
    `sum`, a builtin) and starts a 5-deep recursion per row: about 26
    Python calls a row (27 on 3.11, whose comprehensions are frames), at
    depths 1 to 5."""
    data = _rows(rows)

    def predict() -> list:
        out = []
        for rec in _parsed(data):
            s = sum(_weight(k, v) for k, v in rec.items())
            out.append(_settle(s, 4))
        return out

    return predict


def noop():
    return None


def loop(n: int) -> int:
    """Bytecode with no calls in it: what a hook costs besides its callbacks."""
    x = 0
    for i in range(n):
        x += i * 2 - 1
    return x


# -------------------------------------------------------------- contenders ---
# A contender is run(fn, k) -> elapsed ns for k calls of fn, each call wrapped
# in its own start/stop of the profiler.


def run_plain(fn, k):
    t0 = perf_ns()
    for _ in range(k):
        fn()
    return perf_ns() - t0


def make_ours(depth: int, engine: str = "native", capture_io: bool = False):
    from mlflow_profiler import profiling

    def run(fn, k):
        t0 = perf_ns()
        for _ in range(k):
            with profiling(depth=depth, engine=engine, capture_io=capture_io):
                fn()
        return perf_ns() - t0

    return run


def own_site(run: Callable, workload: str) -> Callable:
    """A copy of `run` with a code object of its own, so that each workload's
    sessions are a site of their own (docs/capture.md, "Sites"), as each
    model's predict is: one site learning three predicts' shapes in turn
    measured its changes of mechanism, not a site's cost."""
    code = run.__code__.replace(co_name=f"{run.__code__.co_name}_{workload}")
    return types.FunctionType(
        code, run.__globals__, code.co_name, run.__defaults__, run.__closure__
    )


def run_cprofile(fn, k):
    t0 = perf_ns()
    for _ in range(k):
        p = cProfile.Profile()
        p.enable()
        fn()
        p.disable()
    return perf_ns() - t0


def make_viztracer():
    from viztracer import VizTracer

    def run(fn, k):
        # The tracer preallocates its 1M-entry ring buffer: built once per
        # sample, outside the timing, as a long-lived tracer would be.
        tracer = VizTracer(verbose=0, register_global=False)
        t0 = perf_ns()
        for _ in range(k):
            tracer.start()
            fn()
            tracer.stop()
        t = perf_ns() - t0
        tracer.clear()
        return t

    return run


def make_pyinstrument():
    from pyinstrument import Profiler

    def run(fn, k):
        t0 = perf_ns()
        for _ in range(k):
            p = Profiler()
            p.start()
            fn()
            p.stop()
        return perf_ns() - t0

    return run


def make_floor(stamp: bool = False):
    """No-op C hook on the events the native engine listens to; `stamp`:
    each event reads the clock and writes 16 bytes instead."""
    import _mlprof_floor  # built by bench/run.sh

    callback = _mlprof_floor.stamp if stamp else _mlprof_floor.noop

    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        ev = mon.events
        events = [ev.PY_START, ev.PY_RESUME, ev.PY_THROW, ev.PY_RETURN, ev.PY_UNWIND, ev.PY_YIELD]
        mask = 0
        for e in events:
            mask |= e
        tool = next(t for t in (5, 4, 3, 1, 0) if mon.get_tool(t) is None)

        def start():
            mon.use_tool_id(tool, "mlprof-bench-floor")
            for e in events:
                mon.register_callback(tool, e, callback)
            mon.set_events(tool, mask)

        def stop():
            mon.set_events(tool, 0)
            for e in events:
                mon.register_callback(tool, e, None)
            mon.free_tool_id(tool)

        what = "sys.monitoring, METH_FASTCALL callback: " + (
            "rdtsc + 16 bytes" if stamp else "no-op"
        )
    else:
        start = _mlprof_floor.set_stamp_profile if stamp else _mlprof_floor.set_profile
        stop = _mlprof_floor.clear_profile
        what = "PyEval_SetProfile, C function: " + ("rdtsc + 16 bytes" if stamp else "no-op")

    def run(fn, k):
        t0 = perf_ns()
        for _ in range(k):
            start()
            fn()
            stop()
        return perf_ns() - t0

    return run, what


def contenders(names: List[str]) -> Dict[str, Callable]:
    out: Dict[str, Callable] = {}
    for name in names:
        try:
            if name in ("base", "base2"):
                out[name] = run_plain
            elif name in ("floor", "floor-stamp"):
                out[name], what = make_floor(stamp=name == "floor-stamp")
                print(f"# {name}: {what}")
            elif name == "ours-d0":
                out[name] = make_ours(0)
            elif name == "ours-d1":
                out[name] = make_ours(1)
            elif name == "ours-d2":
                out[name] = make_ours(2)
            elif name == "ours-d2-io":
                out[name] = make_ours(2, capture_io=True)
            elif name == "ours-d-1":
                out[name] = make_ours(-1)
            elif name == "cProfile":
                out[name] = run_cprofile
            elif name == "viztracer":
                out[name] = make_viztracer()
            elif name == "pyinstr":
                out[name] = make_pyinstrument()
            elif name == "ref-d-1":
                from mlflow_profiler import _reference  # noqa: F401  (missing module: skip)

                out[name] = make_ours(-1, "reference")
            else:
                raise SystemExit(f"unknown contender {name!r}")
        except ImportError as exc:
            print(f"# {name}: skipped ({exc})")
    return out


ALL = [
    "base",
    "base2",
    "floor",
    "floor-stamp",
    "ours-d0",
    "ours-d1",
    "ours-d2",
    "ours-d2-io",
    "ours-d-1",
    "cProfile",
    "viztracer",
    "pyinstr",
    "ref-d-1",
]

# --------------------------------------------------------------- measuring ---


def count_calls(fn) -> Dict[str, int]:
    """Python and C calls made by one fn(), counted with sys.setprofile."""
    counts = {"call": 0, "c_call": 0}

    def prof(frame, event, arg):
        if event in counts:
            counts[event] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


def engine_stats(fn, depth: int, engine: str = "native") -> Optional[dict]:
    from mlflow_profiler import profiling

    try:
        with profiling(depth=depth, engine=engine) as s:
            fn()
        st = s.statistics()
        return {
            k: st.get(k)
            for k in ("engine", "events_captured", "events_skipped", "span_count", "dropped")
        }
    except Exception as exc:  # a profiler bug is reported, not fatal to the bench
        return {"error": repr(exc)}


def quantile(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def measure(
    fn, k: int, runners: Dict[str, Callable], repeats: int, seed: int
) -> Dict[str, List[int]]:
    times: Dict[str, List[int]] = {n: [] for n in runners}
    for name, run in runners.items():  # warm-up, untimed
        run(fn, 1)
    order = list(runners)
    rng = random.Random(seed)
    for _ in range(repeats):
        rng.shuffle(order)
        for name in order:
            gc.collect()
            times[name].append(runners[name](fn, k))
    return times


def summarize(times: Dict[str, List[int]], k: int, calls: int) -> List[dict]:
    """calls: Python calls per fn() (ns_per_call divides the extra time by it)."""
    base = times["base"]
    med_base = statistics.median(base)
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        paired = [t / b for t, b in zip(ts, base)]
        rows.append(
            {
                "contender": name,
                "median_ms": med / k / 1e6,
                "ratio": med / med_base,
                "paired_p25": quantile(paired, 0.25),
                "paired_p50": quantile(paired, 0.5),
                "paired_p75": quantile(paired, 0.75),
                "ns_per_call": (med - med_base) / k / calls if calls else float("nan"),
                "samples_ms": [t / k / 1e6 for t in ts],
            }
        )
    return rows


def print_table(
    title: str,
    rows: List[dict],
    calls: Dict[str, int],
    per_call: bool,
    cprof: Optional[float],
    per_session: bool = False,
):
    print(f"\n## {title}")
    print(f"Python calls per run: {calls['call']:,}; C calls: {calls['c_call']:,}")
    head = (
        f"{'contender':<10} {'median ms':>10} {'ratio':>7} {'overhead':>9}"
        f" {'paired p50 (p25-p75)':>22}"
    )
    if per_call:
        head += f" {'ns/call':>8} {'vs cProf':>8}"
    if per_session:
        head += f" {'us/session over base':>21}"
    print(head)
    for r in rows:
        line = (
            f"{r['contender']:<10} {r['median_ms']:>10.4g} {r['ratio']:>7.3f} {100 * (r['ratio'] - 1):>8.1f}%"
            f" {r['paired_p50']:>7.3f} ({r['paired_p25']:.3f}-{r['paired_p75']:.3f})"
        )
        if per_call:
            line += f" {r['ns_per_call']:>8.1f}"
            if cprof and r["contender"] not in ("base", "base2"):
                line += f" {(r['ratio'] - 1) / cprof:>8.2f}"
        if per_session:
            line += f" {(r['median_ms'] - rows[0]['median_ms']) * 1e3:>21.2f}"
        print(line)
    print("ratio = median / median of base; paired = per-repeat contender/base, same repeat")


def run_meta() -> dict:
    """When, where and at which commit this run was made (bench/results.py shows it).

    The commit is the last one that changed anything outside bench/ (what is
    measured), so a run made beside a change of the benches names the code's
    commit; "uncommitted" lists changes outside bench/ not in it.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args):
        try:
            return subprocess.run(
                ["git", "-C", root, *args], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"

    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": os.getloadavg()[0],
        "commit": git("log", "-1", "--format=%h", "--", ".", ":!bench"),
        "uncommitted": git("status", "--short", "--", ".", ":!bench").splitlines(),
        "cpus": os.cpu_count(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--smoke", action="store_true", help="each contender once on tiny inputs (seconds)"
    )
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--fib", type=int, default=25, help="fib(N) for the call-heavy workload")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--predicts", type=int, default=4, help="predicts per sample")
    ap.add_argument("--sessions", type=int, default=100, help="sessions per sample, empty workload")
    ap.add_argument("--workloads", default="fib,tabular,calls,empty,predict")
    ap.add_argument("--contenders", default=",".join(ALL))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write raw samples and summaries here")
    ap.add_argument(
        "--show-tree", action="store_true", help="print ours' depth-2 tree of one predict"
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeats, args.fib, args.rows, args.trees, args.predicts, args.sessions = (
            1,
            12,
            50,
            5,
            1,
            2,
        )

    import mlflow_profiler
    from mlflow_profiler import _core

    print(
        f"# python {platform.python_version()} ({sys.executable}) on {platform.machine()}, "
        f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"# mlflow_profiler from {os.path.dirname(mlflow_profiler.__file__)}; hook {_core.hook_name()}"
    )
    versions = {}
    for mod in ("numpy", "pandas", "sklearn", "viztracer", "pyinstrument"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    print("# " + ", ".join(f"{m} {v}" for m, v in versions.items()))
    print(
        f"# repeats {args.repeats}, shuffled per repeat; fib({args.fib}); predict: {args.rows} rows, "
        f"{args.trees} trees, {args.predicts} predicts per sample"
    )

    runners = contenders([c for c in args.contenders.split(",") if c])
    result = {
        "python": platform.python_version(),
        "versions": versions,
        "args": vars(args),
        "meta": run_meta(),
        "workloads": {},
    }
    cprof_overhead = None
    for wl in args.workloads.split(","):
        if wl == "fib":
            fn, k, title = make_fib(args.fib), 1, f"fib({args.fib}), one call per sample"
        elif wl == "tabular":
            fn, k, title = (
                make_tabular(20 if args.smoke else TABULAR_ROWS),
                1,
                "tabular pure-Python predict, one call per sample",
            )
        elif wl == "calls":
            fn, k, title = (
                make_calls(40 if args.smoke else CALLS_ROWS),
                1,
                "a predict whose own frame resumes generators and recurses, one call per sample",
            )
        elif wl == "loop":
            n = 2000 if args.smoke else 300_000
            fn, k, title = (lambda: loop(n)), 1, f"loop({n}), no calls inside"
        elif wl == "empty":
            fn, k, title = (
                noop,
                args.sessions,
                f"empty session, {args.sessions} per sample, per session",
            )
        elif wl == "session":
            fn, k, title = (
                object,
                args.sessions,
                f"session around object(), {args.sessions} per sample, per session",
            )
        elif wl == "predict":
            fn, k = make_predict(args.rows, args.trees), args.predicts
            title = f"Pipeline.predict of {args.rows} rows ({args.trees} trees), per predict"
        else:
            raise SystemExit(f"unknown workload {wl!r}")
        calls = count_calls(fn)
        t0 = time.monotonic()
        sited = {n: own_site(r, wl) if n.startswith("ours") else r for n, r in runners.items()}
        times = measure(fn, k, sited, args.repeats, args.seed)
        rows = summarize(times, k, calls["call"])
        by = {r["contender"]: r for r in rows}
        cprof_overhead = by["cProfile"]["ratio"] - 1 if "cProfile" in by and wl == "fib" else None
        if wl in ("tabular", "calls") and "cProfile" in by:
            cprof_overhead = by["cProfile"]["ratio"] - 1
        print_table(
            title,
            rows,
            calls,
            per_call=(wl in ("fib", "tabular", "calls")),
            cprof=cprof_overhead,
            per_session=(wl in ("empty", "session")),
        )
        stats = {"d2": engine_stats(fn, 2), "d-1": engine_stats(fn, -1)}
        for d, st in stats.items():
            print(f"ours-{d} statistics: {st}")
        print(f"({time.monotonic() - t0:.1f} s)")
        result["workloads"][wl] = {
            "title": title,
            "calls": calls,
            "rows": rows,
            "engine_stats": stats,
        }
        if wl == "predict" and args.show_tree:
            from mlflow_profiler import profiling

            pipe, x = fn.pipe, fn.x
            engines = ["native"] + (["reference"] if "ref-d-1" in runners else [])
            for engine in engines:
                with profiling(depth=2, engine=engine) as s:
                    pipe.predict(x)
                print(f"\ndepth-2 tree of `pipe.predict(x)`, {engine} engine:")
                s.print_tree()
                result["workloads"][wl][f"tree_d2_{engine}"] = s.format_tree()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
