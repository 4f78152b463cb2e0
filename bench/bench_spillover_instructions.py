"""What a sampled predict and the calls after it cost, in instructions and
simulated cache misses (callgrind), beside autoprofile off.

    python bench/bench_spillover_instructions.py [--depth 2] [--cycles 4] [--json F]

bench_spillover.py times the same sequence by the clock, where a bin of
about 100 calls resolves about 5 points on this shared VM. This counts it:
the tests' ChurnModel through mlflow.pyfunc on a 64-row frame, in one
process under valgrind --tool=callgrind --cache-sim=yes (a 2 MB LL, as this
host's L2), with os.sched_yield() before each predict so that callgrind
dumps its counters there (--dump-before=sched_yield): one count per
predict. The sequence: 15 predicts with autoprofile off (A), 15 with it on
and unsampled (U), then --cycles times a sampled call (S) and 5 unsampled
ones (U+1 ... U+5), then 5 off again. Which call is sampled is chosen, not
drawn: autoprofile's random() is replaced by one that says yes for S. The
first sampled call after autoprofile() is switched on is counted apart
(S-first: it pays for the switch, once per server). Each kind is printed as
the median of its predicts over A's median; PYTHONHASHSEED=0.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

CHILD = r"""
import os, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import _mlflow_models
store_dir, depth, pattern = sys.argv[2], int(sys.argv[3]), sys.argv[4]
if pattern == "prepare":
    store, uri, _, _ = _mlflow_models.log_models_in_new_store(store_dir)
    open(os.path.join(store_dir, "uri"), "w").write(store + "\n" + uri)
    raise SystemExit(0)
import mlflow.pyfunc
import mlflow_profiler
from mlflow_profiler import _autoprofile
store, uri = open(os.path.join(store_dir, "uri")).read().split("\n")
with _mlflow_models.tracking_uri(store):
    model = mlflow.pyfunc.load_model(uri)
df = _mlflow_models.frame(64)
for _ in range(5):
    model.predict(df)
sample = [False]
_autoprofile._random = lambda: 0.0 if sample[0] else 0.99
state = None
for c in pattern:
    if c == "A" and state != "A":
        mlflow_profiler.autoprofile(disable=True)
        state = "A"
    elif c != "A" and state != "C":
        mlflow_profiler.autoprofile(depth=depth, sample_rate=0.1)
        state = "C"
    sample[0] = c == "S"
    last = mlflow_profiler.last_profile()
    os.sched_yield()
    model.predict(df)
    assert (mlflow_profiler.last_profile() is not last) == (c == "S"), c
os.sched_yield()
mlflow_profiler.autoprofile(disable=True)
"""


def kinds(pattern: str):
    """Each predict's kind: A, U (steady), S-first, S, U+k (k calls after a
    sampled one), A-after (autoprofile off again)."""
    out, first, since = [], True, None
    for c in pattern:
        if c == "A":
            out.append("A-after" if since is not None else "A")
        elif c == "S":
            out.append("S-first" if first else "S")
            since, first = 0, False
        elif since is None:
            out.append("U")
        else:
            since += 1
            out.append(f"U+{since}")
    return out


def totals(path: str):
    """The event totals of one callgrind dump, by name."""
    names = []
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                return dict(zip(names, map(int, line.split()[1:])))
    raise ValueError(f"no totals in {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    pattern = "A" * 15 + "U" * 15 + ("S" + "U" * 5) * args.cycles + "A" * 5
    tests = os.path.join(HERE, "..", "tests", "python")
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as d:
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        store = os.path.join(d, "store")
        os.mkdir(store)
        subprocess.run([sys.executable, child, tests, store, "0", "prepare"], env=env, check=True)
        out = os.path.join(d, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--cache-sim=yes",
                "--LL=2097152,16,64",
                "--dump-before=sched_yield",
                f"--callgrind-out-file={out}",
                sys.executable,
                child,
                tests,
                store,
                str(args.depth),
                pattern,
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        parts = sorted(glob.glob(out + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
        # Part 1 runs up to the first predict; then one part per predict.
        counts = [totals(p) for p in parts[1 : 1 + len(pattern)]]
    assert len(counts) == len(pattern), (len(counts), len(pattern))
    by_kind: dict = {}
    for i, (k, c) in enumerate(zip(kinds(pattern), counts)):
        if i >= 5:  # the first predicts of a block of A warm up
            by_kind.setdefault(k, []).append(c)
    med = {k: {e: statistics.median(c[e] for c in v) for e in EVENTS} for k, v in by_kind.items()}
    base = med["A"]
    print(
        f"python {sys.version.split()[0]}, depth {args.depth}: A {base['Ir']:,.0f} instructions a predict"
    )
    print(
        f"{'kind':8} {'n':>3} {'Ir/A':>7} {'+Ir':>9} {'+I1 miss':>9} {'+D1 miss':>9} {'+LL miss':>9}"
    )
    rows = {}
    for k in ("A", "U", "S-first", "S", "U+1", "U+2", "U+3", "U+4", "U+5", "A-after"):
        if k not in med:
            continue
        m = med[k]
        ll = sum(m[e] - base[e] for e in ("ILmr", "DLmr", "DLmw"))
        d1 = m["D1mr"] + m["D1mw"] - base["D1mr"] - base["D1mw"]
        rows[k] = dict(
            n=len(by_kind[k]),
            ratio=m["Ir"] / base["Ir"],
            ir=m["Ir"] - base["Ir"],
            i1=m["I1mr"] - base["I1mr"],
            d1=d1,
            ll=ll,
            median=m,
        )
        r = rows[k]
        print(
            f"{k:8} {r['n']:>3} {r['ratio']:7.4f} {r['ir']:>+9,.0f} {r['i1']:>+9,.0f} {d1:>+9,.0f} {ll:>+9,.0f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "python": sys.version.split()[0],
                    "depth": args.depth,
                    "pattern": pattern,
                    "kinds": rows,
                    "per_predict": list(zip(kinds(pattern), counts)),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
