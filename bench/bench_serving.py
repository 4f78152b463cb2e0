"""Latency of the real MLflow scoring server, unprofiled vs profiled through
the environment (sample_rate 0.1, depth 2), under a bounded load from wrk.

    python bench/bench_serving.py [--instances 3] [--blocks 6] [--seconds 3] [--connections 1] [--pin]

Two instances of the same unprofiled server differ by up to 10% in latency
for their whole life (measured here: where the kernel puts their threads,
their address layout), which hides a 2% effect. So each server is measured
both ways: it starts with profiling on from the environment, and
serving_toggle/sitecustomize.py switches autoprofile off (the exact original
predict is back) and on again by signal. Each block of four phases is
A1 P P A2 (--seconds each, wrk's latencies recorded); the blocks repeat
--blocks times per server and --instances fresh servers are used. Latencies
are pooled per label over everything: P / mean(A1, A2) at p50 and p99 is the
figure, A1 / A2 the noise floor (A1 runs before and A2 after the profiled
phases, so a residue of profiling would show there too). Server CPU per
request is printed beside them.

--interval-ms N paces each connection to one request per N ms (wrk's delay()
hook): a bounded load below the server's capacity. 0 is wrk's closed loop,
which keeps the single worker saturated, so any added CPU becomes queueing.
--export none keeps the profiles in memory (separates capture from export).

Needs the installed package (its .pth starts autoprofile in the server) and
wrk (Debian: apt install wrk). Figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[%s]==]

-- Every latency wrk recorded (microseconds, count): the rounds are pooled
-- into one distribution per server.
function done(summary, latency, requests)
   for i = 1, #latency do
      local value, count = latency(i)
      io.write(string.format("H %%d %%d\\n", value, count))
   end
end
"""
PACE = """
function delay()
   return %d
end
"""


def run_wrk(port, seconds, connections, lua_path, cpus=None):
    pin = ["taskset", "-c", cpus] if cpus else []
    out = subprocess.run(pin + ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", lua_path,
                          f"http://127.0.0.1:{port}/invocations"], capture_output=True, text=True, check=True).stdout
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    hist = collections.Counter()
    for value, count in re.findall(r"^H (\d+) (\d+)$", out, re.M):
        hist[int(value)] += int(count)
    return {"p50_ms": to_ms(lat["50"]), "p99_ms": to_ms(lat["99"]), "requests": requests, "hist": hist,
            "non_2xx": int(errors.group(1)) if errors else 0, "socket_errors": socket_errors.group(1) if socket_errors else ""}


def group_pids(pgid):
    """The processes of the server's process group (mlflow's CLI starts
    uvicorn as a child)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:  # pgrp
                    out.append(int(pid))
        except OSError:
            continue
    return out


def group_cpu_s(pgid):
    """User + system CPU seconds of every process in the server's group."""
    total = 0
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def percentile_ms(hist, q):
    """The q-th percentile (0-100) of a pooled {microseconds: count} histogram."""
    total = sum(hist.values())
    rank = q / 100 * total
    seen = 0
    for value in sorted(hist):
        seen += hist[value]
        if seen >= rank:
            return value / 1e3
    return max(hist) / 1e3


def pin_group(pgid, cpus):
    """Pins every thread of every process in the server's process group."""
    for pid in group_pids(pgid):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), cpus)
        except OSError:
            continue


def to_ms(text):
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def uvicorn_pid(pgid):
    """The scoring process: mlflow's CLI runs uvicorn as a child."""
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"uvicorn" in f.read():
                    return pid
        except OSError:
            continue
    raise RuntimeError("no uvicorn process in the server's process group")


def switch(pid, state_file, on):
    """Profiling on (SIGUSR2) or off (SIGUSR1) in the server; waits until done."""
    os.kill(pid, signal.SIGUSR2 if on else signal.SIGUSR1)
    want = "on" if on else "off"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(state_file) as f:
                if f.read() == want:
                    time.sleep(0.3)  # the exporter finishes what was queued
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"the server did not switch profiling {want}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=3, help="fresh servers, one after the other")
    ap.add_argument("--blocks", type=int, default=6, help="A1 P P A2 blocks per server")
    ap.add_argument("--seconds", type=int, default=3, help="per phase")
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--interval-ms", type=int, default=0, help="pace each connection (0: closed loop)")
    ap.add_argument("--export", choices=["files", "none"], default="files",
                    help="none: P captures but exports nothing (separates capture from export)")
    ap.add_argument("--pin", action="store_true", help="the server on CPU 0, wrk on CPU 1")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("needs wrk: apt install wrk")
    import _mlflow_models
    from test_serving import Server

    d = tempfile.mkdtemp()
    store, churn_uri, _, _ = _mlflow_models.log_models_in_new_store(d)
    df = _mlflow_models.frame(64)
    body = json.dumps({"dataframe_split": json.loads(df.to_json(orient="split", index=False))})
    lua_path = os.path.join(d, "post.lua")
    with open(lua_path, "w") as f:
        f.write(LUA % body)
        if args.interval_ms:
            f.write(PACE % args.interval_ms)
    out_dir = os.path.join(d, "profiles")
    state_file = os.path.join(d, "profiling-state")
    env = {"MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_SAMPLE_RATE": "0.1",
           "MLFLOW_PROFILER_DEPTH": "2", "PYTHONHASHSEED": "0", "MLPROF_BENCH_TOGGLE": state_file,
           "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "serving_toggle")] +
                                         [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    if args.export == "files":
        env["MLFLOW_PROFILER_OUTPUT_DIR"] = out_dir
    wrk_cpus = "1" if args.pin else None
    names = ["A1", "P", "A2"]
    runs = {name: [] for name in names}
    p_requests = 0
    for i in range(args.instances):
        server = Server(store, churn_uri, env, os.path.join(d, f"server-{i}.log"))
        try:
            if args.pin:
                pin_group(server.proc.pid, {0})
            pid = uvicorn_pid(server.proc.pid)
            switch(pid, state_file, False)
            run_wrk(server.port, 3, args.connections, lua_path, wrk_cpus)  # warm-up, unprofiled
            switch(pid, state_file, True)
            run_wrk(server.port, 3, args.connections, lua_path, wrk_cpus)  # warm-up, profiled
            before = len(os.listdir(out_dir)) if os.path.isdir(out_dir) else 0
            for _ in range(args.blocks):
                for name in ("A1", "P", "P", "A2"):
                    switch(pid, state_file, name == "P")
                    cpu0 = group_cpu_s(server.proc.pid)
                    run = run_wrk(server.port, args.seconds, args.connections, lua_path, wrk_cpus)
                    run["cpu_s"] = group_cpu_s(server.proc.pid) - cpu0
                    runs[name].append(run)
                    p_requests += run["requests"] if name == "P" else 0
            after = len(os.listdir(out_dir)) if os.path.isdir(out_dir) else 0
        finally:
            server.stop()
        print(f"server {i + 1}: " + "  ".join(
            f"{n} p50 {percentile_ms(sum((x['hist'] for x in runs[n][-args.blocks * (2 if n == 'P' else 1):]), collections.Counter()), 50):.2f}"
            for n in names) + f"  ({after - before} profiles)", flush=True)
    pooled = {n: sum((x["hist"] for x in runs[n]), collections.Counter()) for n in names}
    # per block: its A1, its two P phases pooled, its A2
    blocks = [{"A1": runs["A1"][b]["hist"], "A2": runs["A2"][b]["hist"],
               "P": runs["P"][2 * b]["hist"] + runs["P"][2 * b + 1]["hist"]} for b in range(len(runs["A1"]))]
    for q in (50, 99):
        pool = {n: percentile_ms(pooled[n], q) for n in names}
        per = [{n: percentile_ms(b[n], q) for n in names} for b in blocks]
        p_ratio = [x["P"] / ((x["A1"] + x["A2"]) / 2) for x in per]
        noise = [x["A1"] / x["A2"] for x in per]
        print(f"p{q}: pooled A1 {pool['A1']:.3f} ms, P {pool['P']:.3f}, A2 {pool['A2']:.3f} -> "
              f"P/mean(A1,A2) {pool['P'] / ((pool['A1'] + pool['A2']) / 2):.3f}, A1/A2 {pool['A1'] / pool['A2']:.3f} | "
              f"per block: P/mean median {statistics.median(p_ratio):.3f} ({min(p_ratio):.3f}-{max(p_ratio):.3f}), "
              f"A1/A2 median {statistics.median(noise):.3f} ({min(noise):.3f}-{max(noise):.3f})")
    requests = {n: sum(x["requests"] for x in runs[n]) for n in names}
    cpu_ms = {n: 1e3 * sum(x["cpu_s"] for x in runs[n]) / requests[n] for n in names}
    print("server CPU per request (ms): " + "  ".join(f"{n} {cpu_ms[n]:.3f}" for n in names) +
          f"  | P/mean(A1,A2) {cpu_ms['P'] / ((cpu_ms['A1'] + cpu_ms['A2']) / 2):.3f}")
    non_2xx = sum(x["non_2xx"] for n in names for x in runs[n])
    socket_errors = [x["socket_errors"] for n in names for x in runs[n] if x["socket_errors"]]
    profiles = len(os.listdir(out_dir)) if os.path.isdir(out_dir) else 0
    print(f"requests measured: {requests}; {profiles} profiles written for {p_requests} profiled requests "
          f"+ warm-up (expected about 10%); non-2xx {non_2xx}; socket errors {socket_errors or 'none'}")


if __name__ == "__main__":
    main()
