"""The agent's end-to-end smoke inside a guest (vmtests/run.sh), on the
guest's kernel: a Python target profiled through its USDT probes by
mlprof-ebpf --pid, with the off-CPU join and thread start and exit checked.

    python vmtests/guest_smoke.py --agent MLPROF_EBPF --out DIR

The target is this file with --target: no MLflow (its import takes minutes
under QEMU's software emulation); once the agent has attached, each call is
one `profiling(depth=3)` session
with three steps: _sleep (a 50 ms sleep), _spin (a CPU-bound loop) and
_threads (two threads that sleep 10 ms, joined, and waited for until the
kernel has them gone).

Writes DIR/smoke.json (the checks, the agent's -v lines) and prints one line:
"smoke: ok ..." or "smoke: FAILED: ...". Exit status 0 only if every check
passed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = 4
MS = 1_000_000
SLEEP_NS = 50 * MS  # _sleep's time.sleep, which the check bounds blocked by


# -- the target ----------------------------------------------------------------------------------


SLEEPS = []  # per _sleep: what its time.sleep took by the thread's own clocks


def _schedstat() -> tuple:
    """The thread's time on a CPU and waiting on a run queue, ns (schedstat)."""
    with open("/proc/thread-self/schedstat") as f:
        on_cpu, run_queue, _ = (int(x) for x in f.read().split())
    return on_cpu, run_queue


def _sleep():
    t, (cpu, queue) = time.monotonic_ns(), _schedstat()
    time.sleep(SLEEP_NS / 1e9)
    cpu2, queue2 = _schedstat()
    SLEEPS.append([time.monotonic_ns() - t, cpu2 - cpu, queue2 - queue])


def _spin():
    # About 50 ms of CPU here; under emulation longer, which the checks allow.
    end = time.thread_time() + 0.05
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def _worker():
    time.sleep(0.01)


def _threads():
    workers = [threading.Thread(target=_worker, name=f"smoke-worker-{i}") for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    # join() returns before the OS thread exits; under a loaded emulator its
    # exit came past the agent's 50 ms hold (CI, stop 59). Inside the
    # session until the kernel has let them go, so their exits are in it.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        os.path.exists(f"/proc/self/task/{w.native_id}") for w in workers
    ):
        time.sleep(0.001)


def predict():
    _sleep()
    _spin()
    _threads()


def target() -> int:
    """Prints "ready PID", waits for "go" on stdin (the agent has attached
    every probe), makes CALLS sessions, prints "done SLEEPS" (JSON), then
    waits for EOF."""
    import mlflow_profiler

    print(f"ready {os.getpid()}", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    for _ in range(CALLS):
        with mlflow_profiler.profiling(depth=3):
            predict()
    print("done " + json.dumps(SLEEPS), flush=True)
    sys.stdin.read()  # until the smoke closes it: the agent must not see the process exit first
    return 0


# -- the smoke -----------------------------------------------------------------------------------


def read_line(proc, want: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{proc.args[1:3]} exited ({proc.wait()}) before '{want}'")
        if line.startswith(want):
            return line.strip()
    raise RuntimeError(f"no '{want}' from {proc.args[1:3]} in {timeout:.0f} s")


def check(doc, pid: int, sleeps: list) -> list:
    """The failed checks ([] when all passed), as one string each. `sleeps`:
    the target's own figures for each time.sleep, [wall, on CPU, waiting on
    a run queue] in ns: the CPU time bounds the _sleep spans' blocked time,
    and all three are in the message when a check fails."""
    failed = []

    def expect(ok: bool, what: str):
        if not ok:
            failed.append(what)

    roots = doc.roots_of(pid)
    expect(len(roots) == CALLS, f"{len(roots)} sessions, not {CALLS}")
    for name in ("_sleep", "_spin", "_threads"):
        expect(
            len([s for s in doc.spans if s.name.endswith(name)]) == CALLS, f"{CALLS} {name} spans"
        )
    # The sleep's timer is armed for 50 ms before the thread leaves the CPU,
    # so it is blocked at least 50 ms less its time on the CPU in the call
    # (schedstat; 1 ms tolerance). Not a fixed 45 ms: under emulation the
    # thread ran 4-15 ms of a sleep call (44.5 ms blocked seen). A tighter
    # oracle, off_cpu within 1 ms of the call's wall less its CPU and
    # run-queue time, holds on the host's kernel but not in a TCG guest,
    # whose schedstat and CLOCK_MONOTONIC disagree by up to 11 ms a sleep.
    spans = sorted((s for s in doc.spans if s.name.endswith("_sleep")), key=lambda s: s.start_ns)
    for s, (wall, cpu, queue) in zip(spans, sleeps):
        blocked, off = s.values.get("blocked", 0), s.values.get("off_cpu", 0)
        expect(
            SLEEP_NS - cpu - MS <= blocked <= off <= s.wall_ns,
            f"_sleep blocked {blocked} off {off} wall {s.wall_ns}; the sleep by its own"
            f" clocks: wall {wall}, on CPU {cpu}, run queue {queue}",
        )
    for s in (s for s in doc.spans if s.name.endswith("_spin")):
        # On the CPU for most of its wall time. Not all: under emulation a
        # page of it read over 9p can block it for a few ms (6 of 57 seen).
        cpu, blocked = s.values.get("cpu", 0), s.values.get("blocked", 0)
        expect(
            cpu >= 0.6 * s.wall_ns and blocked < 0.25 * s.wall_ns,
            f"_spin {s.values} wall {s.wall_ns}",
        )
    started = [t for t in doc.threads if t["pid"] == pid and t.get("start_ns")]
    workers = [t for t in started if t.get("end_ns")]
    expect(
        len(workers) >= 2 * CALLS,
        f"{len(workers)} worker threads with start and exit, not {2 * CALLS} ({len(started)} started)",
    )
    for t in workers:
        expect(t["start_ns"] < t["end_ns"], f"thread {t}")
    expect(doc.lost_events == 0, f"{doc.lost_events} records lost")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", action="store_true")
    ap.add_argument("--agent")
    ap.add_argument("--out", default=".")
    ap.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        help="an extra mlprof-ebpf argument (repeatable)",
    )
    args = ap.parse_args()
    if args.target:
        return target()

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))
    from conftest import Document  # the e2e tests' reader of the agent's document

    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "smoke-profile.json")
    result = {"kernel": os.uname().release, "ok": False, "failed": [], "agent_lines": []}
    t0 = time.monotonic()
    tgt = subprocess.Popen(
        [sys.executable, __file__, "--target"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    agent = None
    try:
        pid = int(read_line(tgt, "ready", 300).split()[1])
        agent = subprocess.Popen(
            [args.agent, "--pid", str(pid), "-v", "-o", out, *args.agent_arg],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # "attached to pid": every probe is in; then the sessions, and the
        # target's "done". Unless the agent exits first (it could not load or attach).
        lines = []
        while not any(f"attached to pid {pid}" in l for l in lines):
            line = agent.stderr.readline()
            if not line:
                raise RuntimeError(
                    f"mlprof-ebpf exited {agent.wait()} before attaching: " + "".join(lines)[-600:]
                )
            lines.append(line)
        tgt.stdin.write("go\n")
        tgt.stdin.flush()
        sleeps = json.loads(read_line(tgt, "done", 300).split(" ", 1)[1])
        agent.send_signal(signal.SIGINT)
        # Through the same buffered readers as above (communicate() would skip what they hold).
        stderr = agent.stderr.read()
        stdout = agent.stdout.read()
        agent.wait(timeout=300)
        result["agent_rc"] = agent.returncode
        result["agent_lines"] = [l.strip() for l in lines + stderr.splitlines(True) if l.strip()]
        result["summary"] = stdout.splitlines()[:3]
        if agent.returncode != 0:
            result["failed"].append(
                f"mlprof-ebpf exited {agent.returncode}: {stderr.strip()[-400:]}"
            )
        else:
            result["failed"] = check(Document(out), pid, sleeps)
    except Exception as e:  # one line, whatever went wrong
        result["failed"].append(f"{type(e).__name__}: {e}")
        if agent and agent.poll() is None:
            agent.kill()
            result["agent_lines"] = [l for l in agent.communicate()[1].splitlines() if l.strip()]
    finally:
        tgt.stdin.close()
        tgt.wait(timeout=60)
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["ok"] = not result["failed"]
    with open(os.path.join(args.out, "smoke.json"), "w") as f:
        json.dump(result, f, indent=1)
    if result["ok"]:
        print(
            f"smoke: ok ({CALLS} sessions; sleep, spin and threads checked; {result['seconds']} s)"
        )
    else:
        print("smoke: FAILED: " + "; ".join(result["failed"]))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
