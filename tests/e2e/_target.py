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
(containers, and the kill test). With --brackets, each call also prints
{"bracket": [ta, tb, tc, td, run_delay_ns, switches]}: the main thread's
/proc/thread-self/schedstat read between ta and tb (before predict()) and
between tc and td (after), CLOCK_MONOTONIC ns, and what changed in between:
a count of switch-ins the kernel made that a bpftrace oracle can be checked
against.

Modes (predict() calls self._MODE()): nested (plain Python helpers, three levels), sleep (a 20 ms sleep),
resource (a 5 ms sleep in profile_block("ask llm", resource="llm")),
mixed (a 5 ms sleep, then a short CPU-bound loop), gil (a 30 ms pure-Python loop
against a thread spinning in pure Python: GIL waits), fsync (1 MiB written and
fsync'ed: a D-state wait; MLPROF_E2E_DISK_DIR picks the directory),
spin (a CPU-bound loop), compute (a short loop that never blocks), threads
(two worker threads started, 5 ms each, joined), linger (threads, then a
100 ms sleep that the workers' exits fall in), hang (sleeps 60 s), busy
(sum(i * i for i in range(20000)): a generator resumed 20,000 times); and for
the kernel's wait reasons and wakers, each in a span of its own that starts a
helper thread which, after 10 ms, ends the wait: pipe (os.read on a pipe the
helper writes), lock (a threading.Lock the helper releases), rename (an
Event the helper sets, after renaming its comm to "renamed-waker"; the main
thread's comm is "model-main" then).

Each call's reply also carries "sched": the main thread's
/proc/thread-self/schedstat (run_time_ns, run_delay_ns, then the
perf_counter_ns of the read) read before t0 and after t1, each after a 1 ms
sleep so that the running thread's figures are current, and "workers": [tid, run_time_ns, run_delay_ns] that the threads
started by threads/pipe/lock/rename read last thing in their function, and
"released": [r0, r1], lock's helper's clock around its lock.release(), and
"renamed": [r0, r1], rename's helper's clock around its prctl(PR_SET_NAME).
"""

from __future__ import annotations

import argparse
import ctypes
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
            return 2.0**0.5

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

        def _resource(self):
            # A call to the resource "llm": a block that names it (docs/capture.md,
            # "Resources"), which the endpoint rate-limits: an instant ("Instants").
            from mlflow_profiler import profile_block, rate_limit_hit

            with profile_block("ask llm", resource="llm"):
                time.sleep(0.005)
                rate_limit_hit("llm", 0.5)

        def _spin(self):
            x = 0
            for i in range(self.spin_iterations):
                x += i * i
            return x

        def _mixed(self):
            # Asleep 5 ms, then on the CPU: run-queue waits where a hog shares it.
            time.sleep(0.005)
            x = 0
            for i in range(60_000):
                x += i * i
            return x

        def _busy(self):
            return sum(i * i for i in range(20_000))

        def _compute(self):
            x = 0
            for i in range(20_000):
                x ^= i
            return x

        def _work(self):
            time.sleep(0.005)
            self.note_worker()

        def note_worker(self):
            """A started thread records its schedstat as the last thing it does
            (on the instance: the loaded model's class is a pickled copy, with
            globals of its own)."""
            self.workers.append([threading.get_native_id(), *schedstat()])

        def _helper(self, finish, comm=None):
            """Started by pipe/lock/rename: renames itself (comm), then ends the
            caller's wait after 10 ms."""

            def run():
                if comm:
                    r0 = time.perf_counter_ns()
                    set_comm(comm)
                    self.renamed.append([r0, time.perf_counter_ns()])
                time.sleep(0.010)
                finish()
                self.note_worker()

            t = threading.Thread(target=run, name="helper")
            t.start()
            return t

        def _pipe(self):
            r, w = os.pipe()
            try:
                t = self._helper(lambda: os.write(w, b"x"))
                t0 = time.perf_counter_ns()
                os.read(r, 1)
                self.waits.append(
                    [t0, time.perf_counter_ns()]
                )  # the target's own clock around the read
                t.join()
            finally:
                os.close(r)
                os.close(w)

        def _lock(self):
            lock = threading.Lock()
            lock.acquire()

            def release():  # the helper's clock around its release: when the wait ended
                r0 = time.perf_counter_ns()
                lock.release()
                self.released.append([r0, time.perf_counter_ns()])

            t = self._helper(release)
            t0 = time.perf_counter_ns()
            lock.acquire()
            self.waits.append(
                [t0, time.perf_counter_ns()]
            )  # the target's own clock around the wait
            t.join()

        def _gil(self):
            # A thread that never releases the GIL (pure Python) against this
            # one's pure-Python loop: each waits for the GIL in turn.
            stop = threading.Event()

            def spin():
                while not stop.is_set():
                    for _ in range(1000):
                        pass

            t = threading.Thread(target=spin, name="spinner")
            t.start()
            end = time.perf_counter() + 0.030
            x = 0
            while time.perf_counter() < end:
                x += 1
            stop.set()
            t.join()
            return x

        def _fsync(self):
            # A write forced to the disk: an uninterruptible wait the I/O completion ends.
            with tempfile.NamedTemporaryFile(dir=os.environ.get("MLPROF_E2E_DISK_DIR")) as f:
                f.write(os.urandom(1 << 20))
                f.flush()
                os.fsync(f.fileno())

        def _rename(self):
            set_comm("model-main")
            done = threading.Event()
            t = self._helper(done.set, comm="renamed-waker")
            done.wait()
            t.join()

        def _spawn(self):
            workers = [threading.Thread(target=self._work, name=f"worker-{i}") for i in range(2)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()

        def _threads(self):
            self._spawn()

        def _linger(self):
            # The workers' exits (scheduled after join() returned) fall inside the session.
            self._spawn()
            time.sleep(0.1)

        def _hang(self):
            time.sleep(60)


def schedstat_fields():
    """This thread's /proc/thread-self/schedstat: (run_time_ns, run_delay_ns, switch-ins)."""
    with open("/proc/thread-self/schedstat") as f:
        run, delay, count = f.read().split()
    return int(run), int(delay), int(count)


def schedstat():
    """This thread's (run_time_ns, run_delay_ns)."""
    return schedstat_fields()[:2]


def switches():
    """This thread's (run_delay_ns, switch-ins)."""
    return schedstat_fields()[1:]


def set_comm(name):
    """Sets this thread's comm (prctl PR_SET_NAME), as a worker renaming itself does."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, name.encode()[:15], 0, 0, 0)


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
    ap.add_argument(
        "--brackets", action="store_true", help="loop mode: print each call's schedstat bracket"
    )
    ap.add_argument(
        "--late-import",
        action="store_true",
        help="import mlflow_profiler only on the 'import' command (the agent is already waiting)",
    )
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
            ta = time.monotonic_ns()
            d0, n0 = switches() if args.brackets else (0, 0)
            tb = time.monotonic_ns()
            model.predict([0])
            tc = time.monotonic_ns()
            d1, n1 = switches() if args.brackets else (0, 0)
            td = time.monotonic_ns()
            if args.brackets:
                print(json.dumps({"bracket": [ta, tb, tc, td, d1 - d0, n1 - n0]}), flush=True)
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
                impl.workers = []  # [tid, run_time_ns, run_delay_ns] of the threads this call starts
                impl.waits = []  # [t0, t1] (CLOCK_MONOTONIC ns) the call measured itself waiting (lock, pipe)
                impl.released = []  # [r0, r1]: the lock's helper around its release()
                impl.renamed = []  # [r0, r1]: rename's helper around its prctl
                time.sleep(0.001)
                s0 = (*schedstat(), time.perf_counter_ns())
                t0 = time.perf_counter_ns()
                model.predict([0])
                t1 = time.perf_counter_ns()
                time.sleep(0.001)
                s1 = (*schedstat(), time.perf_counter_ns())
                session = mp.last_profile() if mp is not None else None
                # A call that ran unprofiled leaves the previous session there: null.
                # Every span (the agent's document holds them all): a depth
                # past the capture's also opens MLflow's grouped calls below it.
                tree = (
                    shape(session.to_tree(depth=1_000))
                    if session is not None and session is not previous
                    else None
                )
                previous = session
                traced = mp.statistics()["traced"] if mp is not None else 0
                calls.append(
                    {
                        "t0": t0,
                        "t1": t1,
                        "tree": tree,
                        "traced": traced,
                        "sched": [*s0, *s1],
                        "workers": list(impl.workers),
                        "waits": list(impl.waits),
                        "released": list(impl.released),
                        "renamed": list(impl.renamed),
                    }
                )
            reply = {"calls": calls}
        else:
            reply = {"error": f"unknown command {words[0]!r}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
