"""Latency of the real MLflow scoring server, unprofiled vs profiled through
the environment (sample_rate 0.1, depth 2), under a bounded load from wrk.

    python bench/bench_serving.py [--seconds 20] [--connections 2] [--interval-ms 0]

--interval-ms N paces each connection to one request per N ms (wrk's delay()
hook): a bounded load below the server's capacity. 0 is wrk's closed loop,
which keeps the single worker saturated, so any added CPU becomes queueing.

Runs, in one session: unprofiled (A), profiled (P), unprofiled again (B).
A vs B is the noise floor of this machine; P is reported against the mean
of A and B. Needs the installed package (its .pth starts autoprofile in the
server) and wrk (Debian: apt install wrk). Figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[%s]==]
"""
PACE = """
function delay()
   return %d
end
"""


def run_wrk(port, seconds, connections, lua_path):
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", lua_path,
                          f"http://127.0.0.1:{port}/invocations"], capture_output=True, text=True, check=True).stdout
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {"p50_ms": to_ms(lat["50"]), "p99_ms": to_ms(lat["99"]), "requests": requests,
            "non_2xx": int(errors.group(1)) if errors else 0, "socket_errors": socket_errors.group(1) if socket_errors else ""}


def to_ms(text):
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--interval-ms", type=int, default=0, help="pace each connection (0: closed loop)")
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
    profiled_env = {"MLFLOW_PROFILER_AUTOPROFILE": "1", "MLFLOW_PROFILER_SAMPLE_RATE": "0.1",
                    "MLFLOW_PROFILER_DEPTH": "2", "MLFLOW_PROFILER_OUTPUT_DIR": out_dir}
    results = {}
    for name, env in (("A unprofiled", {}), ("P profiled 0.1", profiled_env), ("B unprofiled", {})):
        server = Server(store, churn_uri, env, os.path.join(d, name.split()[0] + ".log"))
        try:
            run_wrk(server.port, 3, args.connections, lua_path)  # warm-up
            results[name] = run_wrk(server.port, args.seconds, args.connections, lua_path)
        finally:
            server.stop()
        print(name, results[name], flush=True)
    a, p, b = results["A unprofiled"], results["P profiled 0.1"], results["B unprofiled"]
    profiles = len(os.listdir(out_dir)) if os.path.isdir(out_dir) else 0
    for q in ("p50_ms", "p99_ms"):
        ref = (a[q] + b[q]) / 2
        print(f"{q}: A {a[q]:.2f}  B {b[q]:.2f}  (A/B {a[q] / b[q]:.3f})   P {p[q]:.2f}  (P/mean(A,B) {p[q] / ref:.3f})")
    print(f"profiled run: {p['requests'] + 0} requests measured (+ warm-up), {profiles} profiles written "
          f"(expected about 10%), non-2xx {p['non_2xx']}, socket errors {p['socket_errors'] or 'none'}")


if __name__ == "__main__":
    main()
