"""A Python process serving a real MLflow pyfunc model under autoprofile()
with in-process sampling off (sample_rate=0): the agent's target in the e2e
tests. The model is saved with mlflow.pyfunc.save_model and loaded back with
load_model, as a serving process does.

Scripted mode (default), one JSON line each way on stdin/stdout:
  start              -> {"ready": pid, "tid": main thread's tid}
  "run MODE N"       -> {"calls": [{"t0", "t1", "tree", "traced"}...]}: N predict()
                        calls; t0/t1 are time.perf_counter_ns() (CLOCK_MONOTONIC)
                        around each, tree the in-process last_profile()'s shape
                        (nested [label, children]) or null when no session ran
  "attached"         -> {"attached": bool}: the session_begin semaphore is up
  "import"           -> {"imported": true} (with --late-import: now import the package)
  "quit" / EOF       -> exit 0
Loop mode (--loop MODE): predict() in MODE forever, --interval seconds apart
(containers, and the kill test).

Modes (predict() calls self._MODE()): nested (plain Python helpers, three levels), sleep (a 20 ms sleep),
spin (a CPU-bound loop), compute (a short loop that never blocks), threads
(two worker threads started, 5 ms each, joined), hang (sleeps 60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import warnings


with warnings.catch_warnings():
    # MLflow's type-hint advice when a PythonModel class is created: not ours.
    warnings.simplefilter("ignore")
    import mlflow.pyfunc

    class E2EModel(mlflow.pyfunc.PythonModel):
        mode = "nested"
        spin_iterations = 300_000

        def predict(self, context, model_input, params=None):
            return getattr(self, "_" + self.mode)()

        # nested: predict -> _nested -> _clean, _features -> (_ratio, _log), _score
        def _clean(self):
            return [x for x in range(200)]

        def _ratio(self):
            return 3 / 7

        def _log(self):
            return 2.0 ** 0.5

        def _features(self):
            return self._ratio() + self._log()

        def _score(self):
            return sum(range(500))

        def _nested(self):
            self._clean()
            self._features()
            return self._score()

        def _sleep(self):
            time.sleep(0.020)

        def _spin(self):
            x = 0
            for i in range(self.spin_iterations):
                x += i * i
            return x

        def _compute(self):
            x = 0
            for i in range(20_000):
                x ^= i
            return x

        def _work(self):
            time.sleep(0.005)

        def _spawn(self):
            workers = [threading.Thread(target=self._work, name=f"worker-{i}") for i in range(2)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()

        def _threads(self):
            self._spawn()

        def _hang(self):
            time.sleep(60)


def build_model():
    """An E2EModel saved to a temporary directory and loaded back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(tempfile.mkdtemp(prefix="mlprof-e2e-model-"), "model")
        mlflow.pyfunc.save_model(path, python_model=E2EModel(), pip_requirements=[])
        return mlflow.pyfunc.load_model(path)


def shape(nodes):
    return [[n["label"], shape(n["children"])] for n in nodes]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default=None)
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--late-import", action="store_true",
                    help="import mlflow_profiler only on the 'import' command (the agent is already waiting)")
    args = ap.parse_args()

    model = build_model()
    impl = model.unwrap_python_model()
    mp = None

    def enable():
        nonlocal mp
        import mlflow_profiler

        mp = mlflow_profiler
        mp.autoprofile(depth=args.depth, sample_rate=0.0)

    if not args.late_import:
        enable()

    if args.loop:
        impl.mode = args.loop
        print(json.dumps({"ready": os.getpid(), "tid": threading.get_native_id()}), flush=True)
        while True:
            model.predict([0])
            time.sleep(args.interval)

    print(json.dumps({"ready": os.getpid(), "tid": threading.get_native_id()}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "import":
            enable()
            reply = {"imported": True}
        elif words[0] == "attached":
            from mlflow_profiler import _core

            reply = {"attached": bool(_core.usdt_attached())}
        elif words[0] == "run":
            impl.mode = words[1]
            n = int(words[2]) if len(words) > 2 else 1
            calls = []
            previous = mp.last_profile() if mp is not None else None
            for _ in range(n):
                t0 = time.perf_counter_ns()
                model.predict([0])
                t1 = time.perf_counter_ns()
                session = mp.last_profile() if mp is not None else None
                # A call that ran unprofiled leaves the previous session there: null.
                # Every span (the agent's document holds them all): a depth
                # past the capture's also opens MLflow's grouped calls below it.
                tree = (shape(session.to_tree(depth=1_000))
                        if session is not None and session is not previous else None)
                previous = session
                traced = mp.statistics()["traced"] if mp is not None else 0
                calls.append({"t0": t0, "t1": t1, "tree": tree, "traced": traced})
            reply = {"calls": calls}
        else:
            reply = {"error": f"unknown command {words[0]!r}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
