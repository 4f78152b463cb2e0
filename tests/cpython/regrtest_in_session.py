"""CPython's own regression tests as an oracle: a test that passes without
the profiler must pass inside a session.

    python tests/cpython/regrtest_in_session.py [--all] [--depths 2,-1] [--jobs N] [--json out.json] [MODULE ...]

Each module runs in a child process inside one `profiling(depth=D)` session
(D in --depths; a D written `-1t` is `profiling(depth=-1, all_threads=True)`)
wrapped around the whole unittest run; --jobs runs that many
children at once. A test that fails or errors there is run again in more
children: in a session again, without the profiler and under cProfile. It
counts against us only if it fails again in the session and passes without
the profiler, and, for the tests that inspect profile hooks (CPython's own
"passes under cProfile" baseline), also under cProfile. Exit status 1 if any
test counts against us. Tests CPython skips stay skipped.

The modules default to MODULES below (what CI runs on each version; --all
adds MORE); they ship with every interpreter under lib/pythonX.Y/test.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

MODULES = [
    "test.test_generators",
    "test.test_coroutines",
    "test.test_asyncgen",
    "test.test_contextlib",
    "test.test_contextlib_async",
    "test.test_exceptions",
    "test.test_traceback",
    "test.test_frame",
    "test.test_threading",
    "test.test_asyncio.test_tasks",
    "test.test_asyncio.test_locks",
    "test.test_sys_setprofile",
]
if sys.version_info >= (3, 12):
    MODULES.append("test.test_monitoring")  # sys.monitoring, which the engine uses on 3.12+
# Also run in an all_threads session, which binds every thread they start
# and replaces threading's thread start function while it runs.
ALL_THREADS = [("test.test_threading", "-1t"), ("test.test_thread", "-1t")]
# Slower ones (weakref callbacks and finalizers, 10-15 s each at depth -1).
MORE = ["test.test_weakref", "test.test_finalization", "test.test_scope", "test.test_sys_settrace"]
# Seconds a child takes in CI (3.9-3.15 alike): the longest start first, so
# that --jobs children end together instead of the last long one running alone.
SECONDS = {
    "test.test_asyncio.test_tasks": 20,
    "test.test_threading": 13,
    "test.test_exceptions": 3,
    "test.test_traceback": 3,
}

# What each child runs: MODULE, MODE ("bare", "cprofile" or a depth), and
# optionally test ids to run alone. It prints one JSON line last.
CHILD = r"""
import json, signal, sys, unittest, io

# A job started in the background by a non-interactive shell ignores SIGINT,
# and processes the tests start inherit that: _thread.interrupt_main() then
# does nothing and test_threading's interrupt tests spin forever. Handled
# here, SIGINT is reset to the default in every process started from this one.
signal.signal(signal.SIGINT, signal.default_int_handler)

module, mode = sys.argv[1], sys.argv[2]
only = sys.argv[3:]


class Collect(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.setdefault(test.id(), "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[test.id()] = "fail"

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[test.id()] = "error"

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[test.id()] = "skip"

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes[test.id()] = "pass"

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes[test.id()] = "fail"

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.outcomes[test.id()] = "fail" if issubclass(err[0], test.failureException) else "error"


loader = unittest.TestLoader()
suite = loader.loadTestsFromNames(only) if only else loader.loadTestsFromName(module)
stream = io.StringIO()
runner = unittest.TextTestRunner(stream=stream, resultclass=Collect, verbosity=0)
stats = None
if mode == "bare":
    result = runner.run(suite)
elif mode == "cprofile":
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    try:
        result = runner.run(suite)
    finally:
        prof.disable()
else:
    from mlflow_profiler import profiling
    with profiling(depth=int(mode.rstrip("t")), all_threads=mode.endswith("t")) as session:
        result = runner.run(suite)
    s = session.statistics()
    stats = {k: s[k] for k in ("span_count", "dropped", "events_captured", "thread_count", "failures", "notes")}
sys.stdout.flush()
print(json.dumps({"outcomes": result.outcomes, "stats": stats, "log": stream.getvalue()[-20000:]}))
"""


def run(module: str, mode: str, only=(), timeout: int = 1200) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, module, mode, *only],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    seconds = time.monotonic() - t0
    lines = proc.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        # the child died (a crash, an exception outside unittest): every test counts
        out = {"outcomes": None, "stats": None, "log": proc.stderr[-20000:]}
    out["returncode"] = proc.returncode
    out["seconds"] = seconds
    return out


HOOK_WORDS = (
    "setprofile",
    "getprofile",
    "settrace",
    "gettrace",
    "sys.monitoring",
    "_getframe",
    "tracing",
)


def inspects_hooks(test_id: str) -> bool:
    """Tests whose baseline is cProfile: they set or look at the profile or
    trace functions, sys.monitoring tools or frame objects (a profiler's own
    callbacks are there). Told by the test's name and its method's source."""
    import inspect
    import unittest

    if any(w in test_id.lower() for w in ("profile", "trace", "monitoring")):
        return True
    try:
        suite = unittest.TestLoader().loadTestsFromName(test_id)
        (test,) = list(suite)
        source = inspect.getsource(getattr(test, test._testMethodName))
    except Exception:
        return False
    return any(w in source for w in HOOK_WORDS)


def judge(module: str, depth: str) -> dict:
    """One module at one depth: its row, with the tests that fail only in a session."""
    got = run(module, depth)
    outcomes = got["outcomes"]
    stats = got["stats"] or {}
    if outcomes is None:
        ours = [
            f"{module}: the child exited {got['returncode']} inside the session\n{got['log'][-3000:]}"
        ]
        failed = []
    else:
        failed = sorted(t for t, o in outcomes.items() if o in ("fail", "error"))
        ours = []
        if failed:
            # With --jobs, another module runs beside this one: a timing test
            # that failed under that load must fail again in a session of its
            # own before it counts.
            again = run(module, depth, failed)["outcomes"] or {}
            still = [t for t in failed if again.get(t, "fail") in ("fail", "error")]
            bare = (run(module, "bare", still)["outcomes"] or {}) if still else {}
            hooks = [t for t in still if inspects_hooks(t)]
            cprof = (run(module, "cprofile", hooks)["outcomes"] or {}) if hooks else {}
            for t in still:
                if bare.get(t) != "pass":
                    continue  # fails without the profiler too (this machine, this build)
                if t in hooks and cprof.get(t) != "pass":
                    continue  # a hook-inspecting test that cProfile fails too
                ours.append(t)
    return {
        "module": module,
        "depth": depth,
        "tests": len(outcomes or {}),
        "failed": len(failed),
        "ours": ours,
        "spans": stats.get("span_count"),
        "dropped": stats.get("dropped"),
        "notes": stats.get("notes"),
        "failures": stats.get("failures"),
        "seconds": round(got["seconds"], 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*")
    ap.add_argument("--all", action="store_true", help="also the slower modules (MORE)")
    ap.add_argument("--ci", action="store_true", help="the default set (what .ci/run runs)")
    ap.add_argument("--depths", default="2,-1", help="session depths, comma-separated")
    ap.add_argument(
        "--jobs", type=int, default=1, help="modules run at once (each in its own child)"
    )
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    depths = [d.strip() for d in args.depths.split(",") if d.strip()]
    if args.modules:
        jobs = [(m, d) for m in args.modules for d in depths]
    else:
        jobs = [(m, d) for m in MODULES + (MORE if args.all else []) for d in depths] + ALL_THREADS
    version = ".".join(map(str, sys.version_info[:2]))
    print(f"# CPython {sys.version.split()[0]} ({sys.executable}); depths {', '.join(depths)}")
    print(
        f"{'module':<34} {'depth':>5} {'tests':>6} {'failed':>6} {'ours':>5} {'spans':>9} {'dropped':>8} {'s':>6}"
    )
    rows, against = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [None] * len(jobs)
        for i in sorted(
            range(len(jobs)), key=lambda i: -SECONDS.get(jobs[i][0], 0)
        ):  # stable: ties keep their order
            futures[i] = pool.submit(judge, *jobs[i])
        for future in futures:  # printed in order, as each is ready
            row = dict(future.result(), version=version)
            rows.append(row)
            print(
                f"{row['module'][5:]:<34} {row['depth']:>5} {row['tests']:>6} {row['failed']:>6} "
                f"{len(row['ours']):>5} {row['spans'] if row['spans'] is not None else '-':>9} "
                f"{row['dropped'] if row['dropped'] is not None else '-':>8} {row['seconds']:>6.1f}",
                flush=True,
            )
            for t in row["ours"]:
                print(f"    FAILS ONLY IN THE SESSION: {t}")
            against += row["ours"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"# {len(against)} test(s) fail only inside a session")
    return 1 if against else 0


if __name__ == "__main__":
    sys.exit(main())
