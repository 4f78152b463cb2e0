"""What `profile_span` and `profile_block` cost when no session is active.

Not a test: it asserts nothing about time. Each case is a timeit loop of 10
unrolled statements; every repeat runs every case once in a shuffled order
(drift on a shared machine spreads over all cases), and figures are medians
over repeats, in ns per statement. "over bare" is the case minus its
undecorated counterpart measured in the same run.

  span()          @profile_span("x") on `def f(): return None`, vs f()
  span(1, 2)      the same with two positional args, vs f(1, 2)
  span(1, b=2)    with a keyword arg, vs f(1, b=2)
  obj.span()      a decorated method, vs a plain method
  pywrap()        a plain Python wrapper that checks the ContextVar and
                  calls through (what a pure-Python profile_span would be)
  with block      `with profile_block("x"): pass`, vs an empty statement
  with blk        a profile_block made once, entered and left each time
  with lock       `with lock: pass` on a threading.Lock: a C context manager
                  from the standard library, for scale
  with nullctx    `with contextlib.nullcontext(): pass`: a Python one

    python bench/bench_noop.py [--repeats 21] [--number 200000] [--smoke]
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import random
import statistics
import sys
import threading
import timeit

from mlflow_profiler import _core, current_session, profile_block, profile_span

UNROLL = 10


def f(*args, **kwargs):
    return None


def g0():
    return None


def g2(a, b=None):
    return None


span0 = profile_span("x")(g0)
span2 = profile_span("x")(g2)


def _pywrap(func):
    var = _core.session_var

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if var.get(None) is None:
            return func(*args, **kwargs)
        return func(*args, **kwargs)  # (labelling would go here)

    return wrapper


pywrap0 = _pywrap(g0)


class C:
    def plain(self):
        return None

    @profile_span("m")
    def span(self):
        return None


obj = C()
blk = profile_block("y")
lock = threading.Lock()

try:
    from contextlib import nullcontext
except ImportError:  # pragma: no cover
    nullcontext = None

NS = {
    "g0": g0,
    "g2": g2,
    "span0": span0,
    "span2": span2,
    "pywrap0": pywrap0,
    "obj": obj,
    "profile_block": profile_block,
    "blk": blk,
    "nullcontext": nullcontext,
    "lock": lock,
}

# (name, statement, the baseline case it is compared with)
CASES = [
    ("bare()", "g0()", None),
    ("span()", "span0()", "bare()"),
    ("pywrap()", "pywrap0()", "bare()"),
    ("bare(1, 2)", "g2(1, 2)", None),
    ("span(1, 2)", "span2(1, 2)", "bare(1, 2)"),
    ("bare(1, b=2)", "g2(1, b=2)", None),
    ("span(1, b=2)", "span2(1, b=2)", "bare(1, b=2)"),
    ("obj.plain()", "obj.plain()", None),
    ("obj.span()", "obj.span()", "obj.plain()"),
    ("pass", "pass", None),
    ("with block", "with profile_block('x'): pass", "pass"),
    ("with blk", "with blk: pass", "pass"),
    ("with lock", "with lock: pass", "pass"),
    ("with nullctx", "with nullcontext(): pass", "pass"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--number", type=int, default=200_000, help="loop iterations per sample")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeats, args.number = 1, 1000
    assert current_session() is None, "no session may be active here"

    timers = {name: timeit.Timer("\n".join([stmt] * UNROLL), globals=NS) for name, stmt, _ in CASES}
    samples = {name: [] for name in timers}
    for t in timers.values():  # warm-up
        t.timeit(min(args.number, 10_000))
    order = list(timers)
    rng = random.Random(args.seed)
    for _ in range(args.repeats):
        rng.shuffle(order)
        for name in order:
            samples[name].append(timers[name].timeit(args.number) * 1e9 / (args.number * UNROLL))

    print(
        f"# python {platform.python_version()}; hook {_core.hook_name()}; {args.repeats} repeats x "
        f"{args.number} x {UNROLL} statements; ns per statement, median (p25-p75)"
    )
    print(f"{'case':<14} {'ns':>7} {'p25-p75':>13} {'over bare':>10}")
    med = {n: statistics.median(s) for n, s in samples.items()}
    out = {"python": platform.python_version(), "cases": {}}
    for name, _, base in CASES:
        s = sorted(samples[name])
        q = (s[len(s) // 4], s[(3 * len(s)) // 4])
        over = med[name] - med[base] if base else None
        print(
            f"{name:<14} {med[name]:>7.1f} {q[0]:>6.1f}-{q[1]:<6.1f} "
            + (f"{over:>+10.1f}" if over is not None else f"{'':>10}")
        )
        out["cases"][name] = {
            "median_ns": med[name],
            "p25": q[0],
            "p75": q[1],
            "over_bare_ns": over,
            "samples_ns": samples[name],
        }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
