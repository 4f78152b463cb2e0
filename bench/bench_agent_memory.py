"""The agent's resident memory over a long run against one busy autoprofiled
process (tests/e2e/_target.py --loop, predict() back to back): VmRSS of
mlprof-ebpf sampled every --every seconds, and its growth after a warm-up
as a least-squares slope (MB/s) and per 1000 sessions. Root, BPF.

  sudo PYTHONPATH=... python bench/bench_agent_memory.py --agent build/userspace/agent/mlprof-ebpf \\
      --seconds 600 -- --continuous --rotate 60s --sink /tmp/sink --spool /tmp/spool

Everything after -- is passed to the agent after `--pid TARGET`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "..", "tests", "e2e", "_target.py")


def vm_rss_kb(pid: int) -> int:
    """VmRSS of a process in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def slope(points):
    """Least-squares slope of (x, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--every", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument(
        "--mode", default="nested", help="the target's predict() (tests/e2e/_target.py modes)"
    )
    ap.add_argument(
        "--interval", type=float, default=0.0, help="seconds between the target's predict() calls"
    )
    ap.add_argument("agent_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    extra = args.agent_args[1:] if args.agent_args[:1] == ["--"] else args.agent_args

    target = subprocess.Popen(
        [sys.executable, TARGET, "--loop", args.mode, "--interval", str(args.interval)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready = json.loads(target.stdout.readline())
    # Files, not pipes: a --stream agent must never block on a full pipe.
    out_f, err_f = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    agent = subprocess.Popen(
        [args.agent, "--pid", str(ready["ready"]), *extra], stdout=out_f, stderr=err_f, text=True
    )
    samples = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < args.seconds and agent.poll() is None:
            samples.append((time.monotonic() - t0, vm_rss_kb(agent.pid)))
            time.sleep(args.every)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=300)
        target.kill()
        target.wait()
    out_f.seek(0)
    err_f.seek(0)
    out, err = out_f.read(), err_f.read()
    sessions = 0
    for line in out.splitlines():  # continuous mode's summary lines
        if line.startswith("mlprof-ebpf: period "):
            sessions += int(line.split(": ")[2].split(", ")[1].split()[0])
    if not sessions:  # a single capture's summary: "N sessions of 1 process"
        for line in out.splitlines():
            words = line.split()
            if "sessions" in words and words.index("sessions") > 0:
                try:
                    sessions = int(words[words.index("sessions") - 1])
                    break
                except ValueError:
                    pass
    after = [(t, kb / 1024) for t, kb in samples if t >= args.warmup]
    rate = slope(after)
    elapsed = samples[-1][0] if samples else 0
    print(f"agent args: --pid TARGET {' '.join(extra)}")
    print(
        f"target: _target.py --loop {args.mode} --interval {args.interval}; ran {elapsed:.0f} s, "
        f"{sessions} sessions ({sessions / max(elapsed, 1):.0f}/s)"
    )
    print("t_s  VmRSS_MB")
    for t, kb in samples[:: max(1, len(samples) // 24)]:
        print(f"{t:5.0f}  {kb / 1024:7.1f}")
    if samples:
        print(
            f"last {samples[-1][1] / 1024:.1f} MB, max {max(kb for _, kb in samples) / 1024:.1f} MB"
        )
    print(
        f"growth after {args.warmup:.0f} s: {rate:.4f} MB/s"
        + (
            f", {rate * 1000 / (sessions / max(elapsed, 1)):.3f} MB per 1000 sessions"
            if sessions
            else ""
        )
    )
    print("agent stderr tail:", err.strip().splitlines()[-3:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
