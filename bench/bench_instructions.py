"""Instructions per profiled call and per session, counted by callgrind.

Wall-clock ratios on a shared 2-core machine move by 10-20% from run to run;
an instruction count does not move at all. This counts, for one interpreter,
the user-space instructions (valgrind --tool=callgrind) that a workload costs
over the same workload without a profiler:

  fib     fib(N) (21,891 calls for N=20) at depth -1, 0 and 2, and cProfile
  tabular bench_overhead's tabular predict (200 rows: comprehensions and a
          generator per row) at depth -1, 0, 1 and 2, and cProfile, per predict;
          every run does one more predict after the session, so a cost the
          session leaves behind (3.14+: freeing a sys.monitoring tool id makes
          each function re-check its instrumentation) counts too
  calls   bench_overhead's calls predict (600 rows: the predict's own frame
          resumes a generator, sums a generator expression and recurses, per
          row), the same depths and cProfile
  steady  both predicts in the fourth session at one site, at depth -1, 1,
          2 and 3: 3.12+ picks windows or global events per site from what
          its first sessions cost (docs/capture.md, "Sites")
  session an empty `with profiling(depth=2)` block, 2,000 times

Instructions are not time (a clock read is one instruction and ~16 ns here,
a cache miss costs no instruction), so RESULTS.md keeps the wall-clock
figures of run.sh beside these. Usage:

  python bench/bench_instructions.py [--fib 20] [--sessions 2000]

with mlflow_profiler importable by that python. Needs valgrind.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import sys
what, n = sys.argv[1], int(sys.argv[2])
if len(sys.argv) > 3:  # bench_overhead's tabular or calls predict, warmed up first
    sys.path.insert(0, sys.argv[3])
    import bench_overhead
    work = getattr(bench_overhead, "make_" + sys.argv[4])(n)
    for _ in range(3):
        work()
else:
    def fib(k): return k if k < 2 else fib(k - 1) + fib(k - 2)
    work = lambda: fib(n)
if what == "cprofile":
    import cProfile
    p = cProfile.Profile(); p.enable(); work(); p.disable()
elif what == "cprofile-bare":
    import cProfile
    p = cProfile.Profile(); p.enable(); p.disable(); work()
else:
    import mlflow_profiler as mp
    with mp.profiling(depth=2):  # warm-up: a call inside runs the hook's one-time set-up
        (lambda: None)()         # (the main thread's C stack bounds, from /proc/self/maps)
    if what == "bare":
        work()
    elif what == "nothing":  # the process and the warm-up without the measured predict
        pass
    elif what == "sessions":
        for _ in range(n):
            with mp.profiling(depth=2):
                pass
    elif what == "no-sessions":
        for _ in range(n):
            pass
    elif what.startswith(("steady", "warm")):
        # 3.12+ chooses windows or global events per site from what its
        # sessions cost (docs/capture.md, "Sites"): three sessions at one
        # site, then (steady) the measured one there.
        def at_site(depth):
            with mp.profiling(depth=depth):
                work()
        depth = int(what.split(":")[1])
        for _ in range(3):
            at_site(depth)
        if what.startswith("steady"):
            at_site(depth)
    else:
        with mp.profiling(depth=int(what)):
            work()
if len(sys.argv) > 3 and what not in ("nothing", "sessions", "no-sessions"):
    work()  # the next predict pays for what the session changed (3.14+: freeing a tool id)
"""


def instructions(script: str, *args: str) -> int:
    """User-space instructions of one run of `script` under callgrind."""
    # One hash seed for every run: string hashes move dict probing by up to
    # ±150 instructions per call of fib(15) from one run to the next.
    env = dict(os.environ, PYTHONHASHSEED="0")
    # And one address layout: with ASLR two runs of the same tabular predict
    # differed by up to 350k instructions (sets and dicts keyed by address).
    norandom = ["setarch", "-R"] if shutil.which("setarch") else []
    out = subprocess.run(
        [
            *norandom,
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            script,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if not m:
        raise RuntimeError(f"no callgrind total in: {out.stderr[-500:]}")
    return int(m.group(1))


def fib_calls(n: int) -> int:
    """How many calls fib(n) makes."""
    a, b = 1, 1  # calls(0), calls(1)
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b if n >= 1 else 1


def main() -> None:
    """Prints the table (markdown) for this interpreter."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fib", type=int, default=20)
    ap.add_argument("--tabular", type=int, default=200, help="rows of the tabular predict")
    ap.add_argument("--calls", type=int, default=600, help="rows of the calls predict")
    ap.add_argument("--sessions", type=int, default=2000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        n = str(a.fib)
        calls = fib_calls(a.fib)
        bare = instructions(script, "bare", n)
        per = {d: (instructions(script, d, n) - bare) / calls for d in ("-1", "0", "2")}
        cprof = (
            instructions(script, "cprofile", n) - instructions(script, "cprofile-bare", n)
        ) / calls
        here = os.path.dirname(os.path.abspath(__file__))
        predicts = {}
        for wl, rows in (("tabular", a.tabular), ("calls", a.calls)):
            t = str(rows)
            bare_t = instructions(script, "bare", t, here, wl)
            over = {d: instructions(script, d, t, here, wl) - bare_t for d in ("-1", "0", "1", "2")}
            over["cProfile"] = instructions(script, "cprofile", t, here, wl) - instructions(
                script, "cprofile-bare", t, here, wl
            )
            # bare runs the predict twice (the second after the session)
            predict = (bare_t - instructions(script, "nothing", t, here, wl)) // 2
            # The fourth session at one site, over a bare predict: what a
            # served model pays once its site has chosen its mechanism.
            steady = {
                d: instructions(script, f"steady:{d}", t, here, wl)
                - instructions(script, f"warm:{d}", t, here, wl)
                - predict
                for d in ("-1", "1", "2", "3")
            }
            predicts[wl] = (rows, predict, over, steady)
        s = str(a.sessions)
        session = (
            instructions(script, "sessions", s) - instructions(script, "no-sessions", s)
        ) / a.sessions
    v = "%d.%d" % sys.version_info[:2]
    print(
        f"| {v} | fib({a.fib}), per call | ours d-1 | ours d0 | ours d2 | cProfile | d-1 / cProfile |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {v} | instructions over bare | {per['-1']:.0f} | {per['0']:.0f} | {per['2']:.0f} | {cprof:.0f} "
        f"| {per['-1'] / cprof:.2f} |"
    )
    for wl, (rows, predict, over, steady) in predicts.items():
        print(
            f"\n| {v} | {wl}({rows}), per predict | ours d-1 | ours d0 | ours d1 | ours d2 | cProfile | d-1 / cProfile |"
        )
        print("|---|---|---|---|---|---|---|---|")
        print(
            f"| {v} | over bare (a bare predict: {predict:,}) | {over['-1']:,} | {over['0']:,} | {over['1']:,} "
            f"| {over['2']:,} | {over['cProfile']:,} | {over['-1'] / over['cProfile']:.2f} |"
        )
        print(
            f"| {v} | per cent of a bare predict | {100 * over['-1'] / predict:+.1f}% | {100 * over['0'] / predict:+.2f}% "
            f"| {100 * over['1'] / predict:+.1f}% | {100 * over['2'] / predict:+.1f}% | {100 * over['cProfile'] / predict:+.1f}% | |"
        )
        print(
            f"\n| {v} | {wl}({rows}), the fourth session at a site | ours d-1 | ours d1 | ours d2 | ours d3 |"
        )
        print("|---|---|---|---|---|---|")
        print(
            f"| {v} | per cent of a bare predict | {100 * steady['-1'] / predict:+.1f}% "
            f"| {100 * steady['1'] / predict:+.1f}% | {100 * steady['2'] / predict:+.1f}% "
            f"| {100 * steady['3'] / predict:+.1f}% |"
        )
    print(f"\n{v}: empty session start + stop: {session:,.0f} instructions")


if __name__ == "__main__":
    main()
