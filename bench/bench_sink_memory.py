"""The continuous agent's resident memory per sink, over a long run at a fixed
session rate (issue 40, item 2: at most 1 MB/hour of RSS growth after the
warm-up, per sink). Root, BPF.

mlprof-usdt-storm (bench/usdt_storm.cpp) fires --rate sessions per second of
--spans spans each; one `mlprof-ebpf --pid STORM --continuous` delivers them
to one real sink, started here on 127.0.0.1 where it is a server:

  dir       a directory (with --sink-max-mb / --sink-max-age if given after --)
  sqlite    a SQLite profile store (a file)
  postgres  a PostgreSQL cluster made in a temporary directory (tests/python/_postgres.py)
  mlflow    `mlflow server` with a SQLite backend, serving artifacts (tests/python/_mlflow_fixtures.py)

Every --every seconds VmRSS, RssAnon and RssFile of the agent are read from
/proc/PID/status. At the end: start and end RSS, the least-squares slopes of
VmRSS after --warmup (MB/hour): of every sample, and of each minute's lowest
and highest sample (the agent's RSS is a sawtooth of its period cuts, tens of
MB high; a slope of all samples has a standard error of MB/hour, the floor's
and the peak's are what grows when something is kept), the sessions the
period lines counted, and the items the final line says were delivered and
dropped.

  sudo PYTHONPATH=... python bench/bench_sink_memory.py --agent BUILD/userspace/agent/mlprof-ebpf \\
      --storm BUILD/bench/mlprof-usdt-storm --sink sqlite --seconds 1800 --warmup 300 \\
      --json /tmp/sqlite.json [-- EXTRA AGENT ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "python"))


def status_kb(pid: int) -> dict:
    """VmRSS, RssAnon, RssFile and VmHWM of `pid` in KiB ({} once it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def cpu_s(pid: int) -> float:
    """utime + stime of `pid` in seconds (/proc/PID/stat fields 14 and 15); -1 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return -1.0


def slope(points):
    """Least-squares slope of (x, y) points and its standard error ((0, 0) with fewer than three)."""
    n = len(points)
    if n < 3:
        return 0.0, 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    if not den:
        return 0.0, 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / den
    resid = sum((y - my - b * (x - mx)) ** 2 for x, y in points)
    return b, (resid / (n - 2) / den) ** 0.5


def analyze(samples, warmup: float, every: float) -> dict:
    """The RSS figures of (t, /proc status) samples: start, end, max, and the
    slopes (MB/hour, with standard errors) after `warmup` of every sample and
    of each whole minute's lowest and highest."""
    rss = [(t, s["VmRSS"] / 1024) for t, s in samples if "VmRSS" in s]
    fit = [(t, mb) for t, mb in rss if t >= warmup]
    minutes = {}
    for t, mb in fit:
        minutes.setdefault(int((t - warmup) // 60), []).append(mb)
    whole = [
        (k * 60 + 30 + warmup, v) for k, v in sorted(minutes.items()) if len(v) >= 0.8 * 60 / every
    ]
    out = {
        "rss_start_mb": round(rss[0][1], 1) if rss else None,
        "rss_at_warmup_mb": round(fit[0][1], 1) if fit else None,
        "rss_end_mb": round(rss[-1][1], 1) if rss else None,
        "rss_max_mb": round(max(mb for _, mb in rss), 1) if rss else None,
        "minute_floors_mb": [round(min(v), 1) for _, v in whole],
        "minute_peaks_mb": [round(max(v), 1) for _, v in whole],
    }
    for name, points in (
        ("slope", fit),
        ("floor_slope", [(t, min(v)) for t, v in whole]),
        ("peak_slope", [(t, max(v)) for t, v in whole]),
    ):
        b, se = slope(points)
        out[name + "_mb_per_hour"] = round(b * 3600, 2)
        out[name + "_se_mb_per_hour"] = round(se * 3600, 2)
    return out


def print_rss(r: dict, warmup: float) -> None:
    print(
        f"RSS start {r['rss_start_mb']} MB, at {warmup:.0f} s {r['rss_at_warmup_mb']} MB, end {r['rss_end_mb']} MB, "
        f"max {r['rss_max_mb']} MB; slopes after {warmup:.0f} s (MB/hour, +- standard error): "
        f"{r['slope_mb_per_hour']} +- {r['slope_se_mb_per_hour']} (every sample), "
        f"{r['floor_slope_mb_per_hour']} +- {r['floor_slope_se_mb_per_hour']} (each minute's lowest), "
        f"{r['peak_slope_mb_per_hour']} +- {r['peak_slope_se_mb_per_hour']} (each minute's highest)"
    )
    if r["minute_floors_mb"]:
        print(
            f"each minute's lowest: {min(r['minute_floors_mb'])}-{max(r['minute_floors_mb'])} MB, "
            f"highest: {min(r['minute_peaks_mb'])}-{max(r['minute_peaks_mb'])} MB"
        )


def dir_bytes(path: str) -> int:
    """The apparent size of the regular files directly in `path`."""
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


class SinkServer:
    """The sink's URL, and the server behind it when there is one."""

    def __init__(self, kind: str, root: str):
        self.kind, self.root, self._close = kind, root, None
        if kind == "dir":
            self.path = os.path.join(root, "sink")
            os.makedirs(self.path)
            self.url = self.path
        elif kind == "sqlite":
            self.path = os.path.join(root, "profiles.db")
            self.url = "sqlite:///" + self.path
        elif kind == "postgres":
            from _postgres import PostgresServer

            server = PostgresServer()
            self._close = server.close
            self.url = server.url
        elif kind == "mlflow":
            from pathlib import Path

            from _mlflow_fixtures import _stop, start_server

            server = start_server(Path(root) / "mlflow")
            self._close = lambda: _stop(server.process)
            self.url = server.uri + "/?experiment=bench"
        else:
            raise SystemExit(f"--sink {kind}: dir, sqlite, postgres or mlflow")

    def close(self) -> None:
        if self._close:
            self._close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent")
    ap.add_argument("--storm", help="mlprof-usdt-storm")
    ap.add_argument("--sink", choices=["dir", "sqlite", "postgres", "mlflow"])
    ap.add_argument(
        "--reanalyze", metavar="JSON", help="print the figures of a run's --json again, and exit"
    )
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--every", type=float, default=1)
    ap.add_argument(
        "--warmup", type=float, default=300, help="samples before this are left out of the fit"
    )
    ap.add_argument("--rate", type=float, default=1000, help="sessions per second")
    ap.add_argument("--spans", type=int, default=37, help="spans per session")
    ap.add_argument("--rotate", default="60s")
    ap.add_argument("--json", help="write the figures and samples here")
    ap.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (its path is printed)"
    )
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="in the agent's environment (e.g. MALLOC_ARENA_MAX=1), repeatable",
    )
    ap.add_argument("agent_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    extra = args.agent_args[1:] if args.agent_args[:1] == ["--"] else args.agent_args
    if args.reanalyze:
        with open(args.reanalyze) as f:
            saved = json.load(f)
        r = analyze(saved["samples"], saved["warmup_s"], args.every)
        print(
            f"{saved['sink']}: {saved['sessions']} sessions in {saved['seconds']} s; items delivered "
            f"{saved['items_delivered']}, dropped {saved['items_dropped']}; agent CPU {saved.get('cpu_s')} s"
        )
        print_rss(r, saved["warmup_s"])
        return 0
    if not (args.agent and args.storm and args.sink):
        ap.error("--agent, --storm and --sink are needed (or --reanalyze JSON)")

    root = tempfile.mkdtemp(prefix=f"mlprof-sinkmem-{args.sink}-", dir="/tmp")
    os.chmod(root, 0o755)
    sink = SinkServer(args.sink, root)
    storm = agent = None
    out_path, err_path = os.path.join(root, "agent.out"), os.path.join(root, "agent.err")
    samples, dir_max = [], 0
    try:
        storm = subprocess.Popen(
            [
                args.storm,
                "--sessions",
                "0",
                "--seconds",
                str(args.seconds + 120),
                "--spans-per-session",
                str(args.spans),
                "--rate",
                str(args.rate),
                "--wait-attached",
                "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        pid = int(storm.stdout.readline().split()[1])
        cmd = [
            args.agent,
            "--pid",
            str(pid),
            "--continuous",
            "--rotate",
            args.rotate,
            "--sink",
            sink.url,
            "--spool",
            os.path.join(root, "spool"),
            *extra,
        ]
        with open(out_path, "w") as out_f, open(err_path, "w") as err_f:
            env = dict(os.environ, **dict(e.split("=", 1) for e in args.env))
            agent = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env)
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.seconds and agent.poll() is None:
            st = status_kb(agent.pid)
            cpu = cpu_s(agent.pid)
            if st and cpu >= 0:
                st["cpu_s"] = cpu
                samples.append((time.monotonic() - t0, st))
            if args.sink == "dir":
                dir_max = max(dir_max, dir_bytes(sink.path))
            time.sleep(args.every)
    finally:
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=120)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        if storm is not None:
            storm.kill()
            storm.wait()
        sink.close()

    out = open(out_path).read()
    err = open(err_path).read()
    sessions = periods = 0
    for line in out.splitlines():
        m = re.match(r"mlprof-ebpf: period \S+ \S+: \d+ workloads?, (\d+) sessions?", line)
        if m:
            sessions += int(m.group(1))
            periods += 1
    final = next(
        (ln for ln in reversed(out.splitlines()) if ln.startswith("mlprof-ebpf: stopped:")), ""
    )
    m = re.search(r"delivered (\d+), spooled (\d+), dropped (\d+)", final)
    delivered, spooled, dropped = (int(x) for x in m.groups()) if m else (0, 0, 0)
    figures = analyze(samples, args.warmup, args.every)
    elapsed = samples[-1][0] if samples else 0
    result = {
        "sink": args.sink,
        "agent_args": cmd[1:],
        "rate": args.rate,
        "spans": args.spans,
        "seconds": round(elapsed),
        "warmup_s": args.warmup,
        **figures,
        "sessions": sessions,
        "sessions_per_s": round(sessions / max(elapsed, 1)),
        "periods": periods,
        "env": args.env,
        "cpu_s": round(samples[-1][1].get("cpu_s", 0), 1) if samples else None,
        "cpu_us_per_session": round(1e6 * samples[-1][1].get("cpu_s", 0) / sessions, 2)
        if samples and sessions
        else None,
        "items_delivered": delivered,
        "items_spooled_at_end": spooled,
        "items_dropped": dropped,
        "exit": agent.returncode if agent else None,
        "final_line": final,
        "stderr_tail": err.strip().splitlines()[-3:],
        "samples": [(round(t, 1), s) for t, s in samples],
    }
    if args.sink == "dir":
        result["dir_max_bytes"] = dir_max
    print(f"sink {args.sink} ({sink.url}); agent {' '.join(cmd[1:])}")
    print(
        f"ran {elapsed:.0f} s: {sessions} sessions ({sessions / max(elapsed, 1):.0f}/s) in {periods} period lines; "
        f"items delivered {delivered}, spooled at the end {spooled}, dropped {dropped}; exit {result['exit']}"
    )
    print("t_s  VmRSS_MB  RssAnon_MB  RssFile_MB")
    for t, s in samples[:: max(1, len(samples) // 20)]:
        print(
            f"{t:5.0f}  {s.get('VmRSS', 0) / 1024:8.1f}  {s.get('RssAnon', 0) / 1024:10.1f}  "
            f"{s.get('RssFile', 0) / 1024:10.1f}"
        )
    print(
        f"agent CPU {result['cpu_s']} s ({result['cpu_us_per_session']} us per session); env {args.env}"
    )
    print_rss(result, args.warmup)
    if args.sink == "dir":
        print(f"sink directory: at most {dir_max / 2**20:.1f} MiB seen")
    print("final:", final)
    print("stderr tail:", result["stderr_tail"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.keep:
        print("kept", root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
