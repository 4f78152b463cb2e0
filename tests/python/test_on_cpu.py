"""Running vs waiting without a system call a reading (pyext/on_cpu.h): a
thread that has not left the CPU since it last read its CPU clock knows it
from glibc's rseq area, whose critical-section pointer the kernel clears
when it switches the thread out. bpftrace counts the
clock_gettime(CLOCK_THREAD_CPUTIME_ID) calls the kernel gets from the
profiled process; the waits are checked against the program's own clocks
and schedstat, with glibc's rseq area on and off (GLIBC_TUNABLES), and in
a forked child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Dict, List

import pytest
from _helpers import require_bpf

SLEEPS, SLEEP_S = 20, 0.002

CHILD = textwrap.dedent(f"""
    import json, os, sys, threading, time
    from mlflow_profiler import _core, profiling

    def schedstat():
        with open(f"/proc/self/task/{{threading.get_native_id()}}/schedstat") as f:
            run, wait, slices = f.read().split()
        return int(wait), int(slices)

    def spin(n):
        s = 0
        for i in range(n):
            s += i
        return s

    def busy():
        for _ in range(50):
            spin(300)

    def sleeps():
        time.sleep({SLEEP_S})

    def work():
        for _ in range({SLEEPS}):
            busy()
            sleeps()

    def measure():
        q0, n0 = schedstat()
        with profiling(depth=2) as session:
            work()
        q1, n1 = schedstat()
        steps = {{}}
        for n in session.to_tree()[0]["children"]:
            steps[n["label"]] = steps.get(n["label"], 0) + n["waiting_ns"]
        # slices: the times the kernel put the thread on a CPU (schedstat).
        return {{"steps": steps, "runq_ns": q1 - q0, "slices": n1 - n0}}

    work()  # warm
    print("watched", int(_core.on_cpu_watched()), flush=True)
    sys.stdin.readline()  # the tracer is attached
    out = {{"parent": measure()}}
    if sys.argv[1] == "fork":
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, json.dumps(measure()).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        out["child"] = json.loads(os.read(r, 1 << 16))
    print(json.dumps(out), flush=True)
""")


def _run(tmp_path, env_extra: Dict[str, str], mode: str = "plain"):
    """Runs CHILD with bpftrace counting its thread-CPU-clock system calls
    from after its warm-up to its end: (watched, reads, measurements)."""
    bpftrace = require_bpf()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, **env_extra)
    child = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        watched = child.stdout.readline().split()
        assert watched[0] == "watched", watched
        # Its forked child too (a pid of the same name under the same parent).
        program = (
            'BEGIN { @ready = 1; printf("READY\\n"); } '
            "tracepoint:syscalls:sys_enter_clock_gettime "
            f"/(pid == {child.pid} || curtask->real_parent->tgid == {child.pid}) "
            "&& args->which_clock == 3/ { @reads = count(); }"
        )
        tracer = subprocess.Popen(
            [bpftrace, "-e", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert tracer.stdout is not None
        lines: List[str] = []
        ready = threading.Event()

        def read() -> None:
            assert tracer.stdout is not None
            for line in tracer.stdout:
                lines.append(line.strip())
                if line.startswith("READY"):
                    ready.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert ready.wait(60), tracer.stderr.read() if tracer.poll() is not None else "no READY"
        child.stdin.write("go\n")
        child.stdin.flush()
        result = json.loads(child.stdout.readline())
        # The maps on SIGUSR1 first: bpftrace 0.17 now and then stays alive
        # after SIGINT under a loaded run (test_usdt.py's Tracer.stop), and
        # printed nothing then. @ready is printed with them, whatever the count.
        tracer.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not any(line.startswith("@ready:") for line in lines):
            assert tracer.poll() is None and time.monotonic() < deadline, "bpftrace printed no maps"
            time.sleep(0.05)
        time.sleep(0.5)  # the rest of the maps, printed in the same go
        printed = list(lines)
        tracer.send_signal(signal.SIGINT)
        try:
            tracer.wait(timeout=20)
        except subprocess.TimeoutExpired:
            print("bpftrace did not exit within 20 s of SIGINT: killed, its maps kept")
            tracer.kill()
            tracer.wait()
        reader.join(timeout=10)
        assert tracer.stderr is not None
        tracer.stderr.close()
        tracer.stdout.close()
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()
    # The count as of SIGUSR1 (no event, no @reads line: 0).
    reads = [int(line.split()[1]) for line in printed if line.startswith("@reads:")]
    return watched[1] == "1", (reads or [0])[-1], result


def _glibc_registers_rseq() -> bool:
    """glibc 2.35 and later register an rseq area for every thread (unless
    GLIBC_TUNABLES turns it off), on kernels since 4.18."""
    name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    if name != "glibc" or "GLIBC_TUNABLES" in os.environ:
        return False
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) >= (2, 35)


def _watched_or_skip(watched: bool) -> None:
    """Where glibc registers rseq the watch must be on; elsewhere a skip."""
    if _glibc_registers_rseq():
        assert watched, "glibc registers rseq here, yet _core.on_cpu_watched() is False"
    elif not watched:
        pytest.skip("no rseq area from glibc here (glibc < 2.35, or turned off)")


def _check_waits(m: dict) -> None:
    """The sleeps' waiting is what they slept; the busy steps' at most what
    the run queue kept the thread (schedstat), with a clock read's slack."""
    slept = SLEEPS * SLEEP_S * 1e9
    runq = m["runq_ns"]
    assert slept * 0.95 <= m["steps"]["sleeps"] <= slept * 1.5 + runq + 1e6, m
    assert m["steps"]["busy"] <= runq + 1e6, m


def test_a_thread_that_stays_on_the_cpu_reads_its_clock_without_a_system_call(tmp_path):
    """With glibc's rseq area (glibc 2.35+), the session reads its thread's
    CPU clock by system call only after the thread left the CPU: about once
    per sleep. Without it (glibc.pthread.rseq=0), once per 50 us of a busy
    stretch, as before. The waits come out the same either way."""
    watched, reads, result = _run(tmp_path, {})
    _watched_or_skip(watched)
    _check_waits(result["parent"])
    off_watched, off_reads, off_result = _run(tmp_path, {"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert not off_watched
    _check_waits(off_result["parent"])
    # A read by system call only after the thread was put back on a CPU:
    # after each of the 20 sleeps, and each preemption on a busy machine
    # (schedstat counts both), plus the first and a few of other threads.
    slices = result["parent"]["slices"]
    assert SLEEPS <= slices and reads <= slices + 5, (reads, slices, off_reads)
    print(
        f"thread CPU clock system calls: {reads} with rseq ({slices} slices), {off_reads} without"
    )
    # 20 busy stretches of about 0.5 ms, with a recorded call each 10 us:
    # a read each 50 us of them.
    assert off_reads >= 5 * SLEEPS, (reads, off_reads)


def test_a_forked_child_reads_its_own_clock(tmp_path):
    """A child forked right after a session reads its own thread's CPU clock
    (it starts again at 0), not the parent's last read: its waits are right."""
    watched, _, result = _run(tmp_path, {}, mode="fork")
    _watched_or_skip(watched)
    _check_waits(result["parent"])
    _check_waits(result["child"])
