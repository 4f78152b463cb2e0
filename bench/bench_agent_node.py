"""The node agent's CPU and memory under a steady load, for the DaemonSet's
resource requests and limits (deploy/daemonset.yaml, bench/RESULTS.md).

N autoprofiled Python targets (tests/e2e/_target.py --loop MODE) predict at a
steady rate while one mlprof-ebpf runs with the DaemonSet's arguments. Every
--every seconds the agent's /proc/PID/stat utime+stime and /proc/PID/status
VmRSS/VmHWM are read; at the end the CPU is printed as a share of one core
(per interval and overall) and the memory as first/last/peak.

  PYTHONPATH=... python bench/bench_agent_node.py --agent build/userspace/agent/mlprof-ebpf \
      --targets 4 --interval 0.05 --seconds 300 -- --all --stream --depth 2 -o /tmp/x/p.json.gz

Root (the agent needs CAP_BPF etc.). The targets are this script's children;
nothing else is touched. Other autoprofiled processes on the host are
attached by --all too and count in the agent's figures (say so if any).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(os.path.dirname(HERE), "tests", "e2e", "_target.py")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid`, in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def memory_kib(pid: int) -> dict:
    """VmRSS and VmHWM of `pid`, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def start_targets(python: str, n: int, mode: str, interval: float) -> list:
    """N targets in loop mode; waits until each printed its ready line."""
    procs = []
    for _ in range(n):
        p = subprocess.Popen(
            [python, TARGET, "--loop", mode, "--interval", str(interval)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(p)
    for p in procs:
        line = p.stdout.readline()
        if '"ready"' not in line:
            raise SystemExit(f"a target did not start: {line!r}")
    return procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--mode", default="nested")
    ap.add_argument(
        "--interval", type=float, default=0.05, help="seconds between a target's predicts"
    )
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("agent_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = a.agent_args[1:] if a.agent_args[:1] == ["--"] else a.agent_args

    targets = start_targets(a.python, a.targets, a.mode, a.interval)
    log = tempfile.NamedTemporaryFile(prefix="mlprof-bench-node-", suffix=".log", delete=False)
    out = tempfile.NamedTemporaryFile(prefix="mlprof-bench-node-", suffix=".out", delete=False)
    agent = subprocess.Popen([a.agent, *args], stdout=out, stderr=log)
    rows = []
    try:
        t0 = time.monotonic()
        c0 = cpu_seconds(agent.pid)
        rows.append((0.0, c0, memory_kib(agent.pid)))
        while time.monotonic() - t0 < a.seconds:
            time.sleep(a.every)
            if agent.poll() is not None:
                raise SystemExit(f"the agent exited ({agent.returncode}); see {log.name}")
            rows.append((time.monotonic() - t0, cpu_seconds(agent.pid), memory_kib(agent.pid)))
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            t_term = time.monotonic()
            try:
                agent.wait(timeout=120)
            except subprocess.TimeoutExpired:
                agent.kill()  # -o of a long capture: said below
                agent.wait()
            print(
                f"SIGTERM to exit: {time.monotonic() - t_term:.1f} s (killed after 120 s: "
                f"{agent.returncode == -signal.SIGKILL})"
            )
        for p in targets:
            p.kill()
            p.wait()
    attached = sum(1 for line in open(log.name) if "attached to pid" in line)
    own = {str(p.pid) for p in targets}
    sessions = {"own": 0, "other": 0, "continuous": 0}
    with open(out.name, errors="replace") as f:
        for line in f:
            m = re.match(r"pid (\d+) session ", line)  # --stream
            if m:
                sessions["own" if m.group(1) in own else "other"] += 1
            m = re.match(r"mlprof-ebpf: period .*?, (\d+) sessions?, ", line)  # --continuous
            if m:
                sessions["continuous"] += int(m.group(1))
    log_bytes = os.path.getsize(out.name)
    os.unlink(out.name)
    print(f"agent {a.agent} {' '.join(args)}")
    print(
        f"targets {a.targets} x {a.mode} every {a.interval} s ({a.targets / a.interval:.0f} predicts/s); "
        f"{attached} processes attached (log {log.name}); sessions printed: {sessions['own']} of "
        f"these targets', {sessions['other']} of other processes; {sessions['continuous']} in the "
        f"continuous agent's period lines (all processes)"
    )
    print(f"{'t_s':>7} {'cpu_share':>9} {'rss_mib':>8} {'hwm_mib':>8}")
    for (t_prev, c_prev, _), (t, c, m) in zip(rows, rows[1:]):
        print(
            f"{t:7.1f} {(c - c_prev) / (t - t_prev):9.4f} {m['VmRSS'] / 1024:8.1f} {m['VmHWM'] / 1024:8.1f}"
        )
    t_end, c_end, m_end = rows[-1]
    summary = {
        "cpu_share_overall": (c_end - rows[0][1]) / t_end,
        "cpu_share_max_interval": max(
            (c - cp) / (t - tp) for (tp, cp, _), (t, c, _) in zip(rows, rows[1:])
        ),
        "rss_mib_first": rows[1][2]["VmRSS"] / 1024,
        "rss_mib_last": m_end["VmRSS"] / 1024,
        "hwm_mib": m_end["VmHWM"] / 1024,
        "sessions_per_s": (sessions["own"] + sessions["other"] + sessions["continuous"]) / t_end,
        "stdout_kib_per_s": log_bytes / 1024 / t_end,
        "exit": agent.returncode,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
