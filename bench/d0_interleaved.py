"""Depth 0 on the tabular predict, interleaved in one process: each round
times a bare predict, one inside `profiling(depth=0)`, and an empty depth-0
session followed by a bare predict (the session's own cost), 400 rounds;
prints each median over the bare one. run.sh times contenders in separate
blocks; interleaving takes the machine's drift out of a 1-2% figure.

    PYTHONPATH=<mlflow_profiler> python bench/d0_interleaved.py
"""
import statistics
import sys
import time
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import bench_overhead, mlflow_profiler as mp
work = bench_overhead.make_tabular(200)
for _ in range(20): work()
def bare():
    t = time.perf_counter_ns(); work(); return time.perf_counter_ns() - t
def d0():
    t = time.perf_counter_ns()
    with mp.profiling(depth=0): work()
    return time.perf_counter_ns() - t
def d0_nowork():
    t = time.perf_counter_ns()
    with mp.profiling(depth=0): pass
    work()
    return time.perf_counter_ns() - t
r = {"bare": [], "d0": [], "d0_then_work": []}
for i in range(400):
    r["bare"].append(bare()); r["d0"].append(d0()); r["d0_then_work"].append(d0_nowork())
b = statistics.median(r["bare"])
for k, v in r.items(): print(k, round(statistics.median(v) / b, 4), round(statistics.median(v)/1000, 1), "us")
