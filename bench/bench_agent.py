"""What mlprof-ebpf costs, next to in-process profiling and py-spy, in one run.

    sudo python bench/bench_agent.py [--smoke] [--build build-all]   # figures: bench/RESULTS.md

Needs root (the agent and py-spy attach to other processes), a CMake build
with the agent, the storm and bench_probes (-DMLPROF_BUILD_AGENT=ON
-DMLPROF_BUILD_PYEXT=ON), MLflow, pandas, and py-spy from PyPI on PATH or next
to this Python (pip install py-spy).

1. Predict overhead at depth 2: the real pandas ChurnModel, logged with MLflow
   and loaded back with pyfunc.load_model, on a 64-row frame. Each mode is its
   own target process running the same predict loop; rounds are interleaved
   (the order rotates each round), median per mode:
     A   no profiler
     B   in process: autoprofile(depth=2, sample_rate=1)
     C   autoprofile(depth=2, sample_rate=0) with mlprof-ebpf --pid attached
         (summary output, no -o: see 2b): capture switched on from outside,
         every predict fires the probes
     D   in process (sample_rate=1) and mlprof-ebpf attached
     E*  py-spy record attached to a process with no profiler, at 100 Hz and
         1000 Hz, blocking (py-spy's default) and --nonblocking; attached
         anew for each of its rounds (it samples an idle target too: 14-22%
         of a CPU at 1000 Hz, which would load the other modes' rounds)
     A'  no profiler again, in another process: A vs A' is the noise floor
   Ratios are to the mean of A and A'.
2. CPU of the agent (C, D) and of py-spy (E*): utime+stime from
   /proc/PID/stat read before and after each of that mode's rounds (the
   agent's after it has gone idle again), summed, as % of one CPU over
   those rounds and per predict. 2b: the agent with -o, its CPU per predict
   in successive blocks of predicts (the profile it keeps for -o grows).
3. Events per second the agent handles without loss: mlprof-usdt-storm with
   the agent attached (--pid, default ring), at full speed with 1 to 8
   threads, then with the agent starved (nice 19 on CPU 0, the storm's
   threads on every CPU). The storm has all eight probe sites (the
   agent refuses a binary without them).
4. Probe-site cost: bench_probes (no tracer), and the storm's ns per site
   with no tracer and with the agent attached (every site a uprobe hit).
5. What py-spy shows of the same workload: its speedscope output of the
   blocking runs (which of predict's steps appear, in how many samples) next to the
   agent's per-call figures for the same steps; one py-spy dump --locals
   taken in the middle of a predict loop.

--smoke: every part once with tiny counts (under a minute); figures meaningless.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings

warnings.filterwarnings("ignore")
# MLflow shows its type-hint advice under its own simplefilter("once"), past
# the filter above, once per process: nine targets would print it nine times.
warnings.showwarning = lambda *args, **kwargs: None
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")
PROBES = {
    "session_begin",
    "session_end",
    "lane_begin",
    "span_enter",
    "span_exit",
    "span_suspend",
    "span_resume",
    "span_io",
}
STEPS = ("_clean", "_features", "_score")  # ChurnModel.predict's own steps (depth 1)


def quiet_mlflow() -> None:
    """MLflow's INFO and WARNING lines (store creation, pickling advice) out of the figures."""
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)


# -- the target: one mode's predict loop ------------------------------------------------------------


def worker(args) -> int:
    """A target process: loads ChurnModel, sets its mode up, then answers
    `round N` (N predicts, timed) and `stats` on stdin, one JSON line each."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import _mlflow_models
    import mlflow.pyfunc

    quiet_mlflow()
    with _mlflow_models.tracking_uri(args.store):
        model = mlflow.pyfunc.load_model(args.model)
    df = _mlflow_models.frame(64)
    mp = None
    if args.worker in ("inproc", "gated"):
        import mlflow_profiler as mp

        mp.autoprofile(depth=2, sample_rate=1.0 if args.worker == "inproc" else 0.0)
    for _ in range(50):
        model.predict(df)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "round":
            n = int(words[1])
            c0, t0 = time.process_time_ns(), time.perf_counter_ns()
            for _ in range(n):
                model.predict(df)
            t1, c1 = time.perf_counter_ns(), time.process_time_ns()
            reply = {"n": n, "wall_ns": t1 - t0, "cpu_ns": c1 - c0}
        elif words[0] == "stats":
            reply = mp.statistics() if mp is not None else {}
            reply = {k: v for k, v in reply.items() if k in ("sampled", "traced")}
        else:
            reply = {"error": words[0]}
        print(json.dumps(reply), flush=True)
    return 0


class Target:
    """A worker process of one mode, driven over its stdin/stdout."""

    def __init__(self, mode: str, kind: str, store: str, model: str, env: dict):
        self.mode = mode
        self.proc = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--worker",
                kind,
                "--store",
                store,
                "--model",
                model,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.pid = self.proc.pid

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(
                f"target {self.mode} (pid {self.pid}) ended: exit {self.proc.wait()}"
            )
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def cpu_ns(pid: int) -> int:
    """utime + stime of a process (all its threads), from /proc/PID/stat (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // TICK


def exact_cpu_ns(pid: int) -> int:
    """The same in ns, from the scheduler's own sum per thread (/proc/PID/task/*/schedstat):
    a check on the tick-rounded figure over short rounds."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError):
            pass  # a thread that just exited
    return total


class Watcher:
    """A process attached to a target (the agent, py-spy): started by argv,
    its messages kept (stderr; stdout too when stdout_path is None), stopped
    with SIGINT so that it writes its outputs."""

    def __init__(self, argv, ready_text=None, stdout_path=None):
        self.stdout = open(stdout_path, "w") if stdout_path else None
        self.proc = subprocess.Popen(
            argv,
            stdout=self.stdout or subprocess.PIPE,
            stderr=subprocess.PIPE if self.stdout else subprocess.STDOUT,
            text=True,
        )
        self.pid = self.proc.pid
        self.lines = []
        self._seen = threading.Event()
        self._ready_text = ready_text
        self._drain = threading.Thread(target=self._read, daemon=True)
        self._drain.start()

    def _read(self):
        for line in self.proc.stderr if self.stdout else self.proc.stdout:
            self.lines.append(line)
            if self._ready_text and self._ready_text in line:
                self._seen.set()

    def wait_ready(self, timeout=60.0):
        if self._ready_text and not self._seen.wait(timeout):
            raise RuntimeError(
                f"{self.proc.args[0]} never said {self._ready_text!r}:\n{''.join(self.lines)}"
            )

    def wait_idle(self, timeout=10.0):
        """Until its CPU time stops growing (under 1% over 50 ms): the records
        of the round just measured are handled, none spill into the next."""
        deadline = time.monotonic() + timeout
        before = exact_cpu_ns(self.pid)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = exact_cpu_ns(self.pid)
            if now - before < 500_000:
                return
            before = now

    def stop(self, timeout=60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._drain.join(5)
        if self.stdout:
            self.stdout.close()
        return rc

    def text(self) -> str:
        return "".join(self.lines)


def agent_counts(stderr: str) -> dict:
    """The agent's -v closing line: records, lost, shed, sessions, truncated, unmatched (shed is 0 for an
    agent from before session shedding, which did not print it)."""
    m = re.search(
        r"records (\d+), lost (\d+)(?:, shed (\d+))?, sessions (\d+) \(truncated (\d+)\), unmatched (\d+)",
        stderr,
    )
    if not m:
        return {}
    keys = ("records", "lost", "shed", "sessions", "truncated", "unmatched")
    return {k: int(v or 0) for k, v in zip(keys, m.groups())}


def summary_rows(text: str) -> dict:
    """The agent's summary table (its first): function -> (calls, mean, p50, p99, on-CPU, off-CPU,
    runq) as printed, and the number of call paths (rows)."""
    rows, count = {}, 0
    for line in text.splitlines():
        if line.startswith("(mean"):
            break
        parts = line.split()
        if len(parts) >= 8 and parts[-7].isdigit():
            rows[" ".join(parts[:-7])] = parts[-7:]
            count += 1
    return rows, count


# -- part 1, 2 and 5: predict overhead, CPU of the watchers, what py-spy shows -------------------


def predict_overhead(args, tools, tmp, env):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import _mlflow_models

    quiet_mlflow()
    store, churn_uri, _, _ = _mlflow_models.log_models_in_new_store(tmp)
    rates = [int(r) for r in args.pyspy_rates.split(",") if r]
    modes = [("A", "none"), ("B", "inproc"), ("C", "gated"), ("D", "inproc")]
    for r in rates:
        modes += [(f"E{r}", "none"), (f"E{r}nb", "none")]
    modes.append(("A'", "none"))
    names = [m for m, _ in modes]
    targets = {m: Target(m, kind, store, churn_uri, env) for m, kind in modes}
    agents, ends = {}, {}
    wall = {m: [] for m in names}
    cpu = {m: [] for m in names}
    watch_cpu, watch_exact, watch_wall = {}, {}, {}
    pyspy_counts = {
        m: [0, 0, set()] for m in names if m.startswith("E")
    }  # samples, errors, exit statuses

    def pyspy(m, rnd):
        """py-spy record attached for this round only: at 1000 Hz it takes 14-22% of a CPU
        even while its target idles, which would load every other mode's rounds."""
        rate = m[1:].replace("nb", "")
        argv = [
            tools["py-spy"],
            "record",
            "--pid",
            str(targets[m].pid),
            "--rate",
            rate,
            "--format",
            "speedscope",
            "-o",
            os.path.join(tmp, f"pyspy-{m}-{rnd}.speedscope.json"),
        ]
        w = Watcher(
            argv + (["--nonblocking"] if m.endswith("nb") else []), ready_text="Sampling process"
        )
        w.wait_ready()
        return w

    try:
        for t in targets.values():
            t.read()  # ready: model loaded, 50 predicts done
        for m in ("C", "D"):
            # The summary only (no -o): with -o the agent's CPU grows with the sessions it has
            # captured (part 2b measures that apart).
            pid = targets[m].pid
            w = Watcher(
                [tools["agent"], "--pid", str(pid), "-v"],
                ready_text=f"attached to pid {pid} ",
                stdout_path=os.path.join(tmp, f"agent-{m}.txt"),
            )
            w.wait_ready()
            agents[m] = w
        for t in targets.values():  # one unmeasured round each
            t.ask(f"round {args.calls // 4 or 1}")
        for w in agents.values():
            w.wait_idle()
        for rnd in range(args.rounds):
            k = rnd % len(names)
            for m in names[k:] + names[:k]:
                w = agents.get(m) or (pyspy(m, rnd) if m.startswith("E") else None)
                c0, e0 = (cpu_ns(w.pid), exact_cpu_ns(w.pid)) if w else (0, 0)
                t0 = time.perf_counter_ns()
                reply = targets[m].ask(f"round {args.calls}")
                if w:
                    watch_wall[m] = watch_wall.get(m, 0) + time.perf_counter_ns() - t0
                    if m in agents:
                        w.wait_idle()
                    watch_cpu[m] = watch_cpu.get(m, 0) + cpu_ns(w.pid) - c0
                    watch_exact[m] = watch_exact.get(m, 0) + exact_cpu_ns(w.pid) - e0
                    if m.startswith("E"):
                        counts = pyspy_counts[m]
                        counts[2].add(w.stop())
                        found = re.search(r"Samples: (\d+) Errors: (\d+)", w.text())
                        if found:
                            counts[0] += int(found.group(1))
                            counts[1] += int(found.group(2))
                wall[m].append(reply["wall_ns"] / reply["n"])
                cpu[m].append(reply["cpu_ns"] / reply["n"])
        stats = {m: targets[m].ask("stats") for m in ("B", "C", "D")}
        ends = {m: (w.stop(), w.text()) for m, w in agents.items()}
        growth = agent_growth(args, tools, tmp, targets["C"])
        dump = pyspy_dump(tools, targets["A"], args)
    finally:
        for w in agents.values():
            w.stop()
        for t in targets.values():
            t.close()

    predicts = args.rounds * args.calls
    ref = (statistics.median(wall["A"]) + statistics.median(wall["A'"])) / 2
    print(
        f"\n1. predict at depth 2, ChurnModel on 64 rows: {args.rounds} interleaved rounds x {args.calls} "
        f"predicts per mode, median; ratio to mean(A, A') = {ref / 1000:.1f} us"
    )
    print("| mode | us per predict | ratio | added us | round spread | target CPU us per predict |")
    print("|---|---|---|---|---|---|")
    label = {
        "A": "A none",
        "B": "B in-process, sample_rate=1",
        "C": "C sample_rate=0 + mlprof-ebpf",
        "D": "D in-process + mlprof-ebpf",
        "A'": "A' none (again)",
    }
    for m in names:
        med = statistics.median(wall[m])
        spread = (max(wall[m]) - min(wall[m])) / med * 100
        text = (
            label.get(m)
            or f"{m} py-spy {m[1:].replace('nb', '')} Hz{', --nonblocking' if m.endswith('nb') else ''}"
        )
        cpu_us = statistics.median(cpu[m]) / 1000
        print(
            f"| {text} | {med / 1000:.1f} | {med / ref:.3f} | {(med - ref) / 1000:+.0f} | {spread:.1f}% | "
            f"{cpu_us:.1f} |"
        )
    a, a2 = statistics.median(wall["A"]), statistics.median(wall["A'"])
    print(f"noise floor A/A' = {a / a2:.3f}")
    print("in-process counters: " + ", ".join(f"{m} {stats[m]}" for m in stats))

    print(
        f"\n2. CPU of the watcher over its target's measured rounds ({predicts} predicts each; the agent's "
        f"until it is idle after each round, py-spy's from its first sample to the round's end)"
    )
    print(
        "| watcher | % of one CPU | us CPU per predict | (schedstat: %, us) | exit | "
        "agent: records / lost / sessions; py-spy: samples / errors |"
    )
    print("|---|---|---|---|---|---|")
    for m in watch_wall:
        pct = watch_cpu[m] / watch_wall[m] * 100
        exact = (
            f"{watch_exact[m] / watch_wall[m] * 100:.1f}%, {watch_exact[m] / predicts / 1000:.2f}"
        )
        if m in agents:
            rc, err = ends[m]
            c = agent_counts(err)
            what, detail = (
                f"mlprof-ebpf on {m}",
                f"{c['records']} / {c['lost']} / {c['sessions']}" if c else "",
            )
        else:
            samples, errors, statuses = pyspy_counts[m]
            rc = ",".join(str(x) for x in sorted(statuses))
            what = (
                f"py-spy {m[1:].replace('nb', '')} Hz{' nonblocking' if m.endswith('nb') else ''}"
            )
            detail = f"{samples} / {errors}"
        print(
            f"| {what} | {pct:.1f}% | {watch_cpu[m] / predicts / 1000:.2f} | {exact} | {rc} | {detail} |"
        )
    for m in agents:
        c = agent_counts(ends[m][1])
        if c.get("sessions"):
            print(f"agent on {m}: {c['records'] / c['sessions']:.0f} records per predict")

    print(
        f"\n2b. agent CPU per predict with -o FILE.json, blocks of {growth['block']} predicts on C "
        f"(the combined profile grows by a session per predict)"
    )
    print("| sessions captured before the block | agent us CPU per predict |")
    print("|---|---|")
    for before, us in growth["rows"]:
        print(f"| {before} | {us:.0f} |")
    print(f"agent exit {growth['rc']}; {growth['tail']}")
    show_pyspy(args, tmp, rates, dump)


def agent_growth(args, tools, tmp, target):
    """The agent with -o on one target, its CPU per predict in successive blocks."""
    w = Watcher(
        [
            tools["agent"],
            "--pid",
            str(target.pid),
            "-v",
            "-o",
            os.path.join(tmp, "agent-C-growth.json"),
        ],
        ready_text=f"attached to pid {target.pid} ",
        stdout_path=os.path.join(tmp, "agent-C-growth.txt"),
    )
    rows = []
    try:
        w.wait_ready()
        done = 0
        for _ in range(args.growth_blocks):
            c0 = exact_cpu_ns(w.pid)
            target.ask(f"round {args.growth_block}")
            w.wait_idle()
            rows.append((done, (exact_cpu_ns(w.pid) - c0) / args.growth_block / 1000))
            done += args.growth_block
    finally:
        rc = w.stop(timeout=300)
    tail = next((line.strip() for line in w.lines if "records" in line and "lost" in line), "")
    return {"rows": rows, "rc": rc, "tail": tail, "block": args.growth_block}


def pyspy_dump(tools, target, args) -> str:
    """py-spy dump --locals of a process in the middle of a predict loop."""
    box = {}
    t = threading.Thread(
        target=lambda: box.setdefault("r", target.ask(f"round {max(args.calls, 400)}"))
    )
    t.start()
    time.sleep(0.15)
    out = subprocess.run(
        [tools["py-spy"], "dump", "--locals", "--pid", str(target.pid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    t.join()
    return out.stdout + out.stderr


def show_pyspy(args, tmp, rates, dump):
    """Part 5: what py-spy's own output holds, next to the agent's summary of C."""
    print(
        "\n5. py-spy's output of the same workload (its blocking runs, all rounds), next to the agent's"
    )
    ours, paths = summary_rows(open(os.path.join(tmp, "agent-C.txt")).read())
    for r in rates:
        samples, threads = [], 0
        for rnd in range(args.rounds):
            path = os.path.join(tmp, f"pyspy-E{r}-{rnd}.speedscope.json")
            if not os.path.exists(path):
                continue
            doc = json.load(open(path))
            frames = doc["shared"]["frames"]
            threads = max(threads, len(doc["profiles"]))
            samples += [
                {frames[i]["name"] for i in s} for p in doc["profiles"] for s in p["samples"]
            ]
        in_predict = sum(1 for n in samples if "PyFuncModel.predict" in n)
        line = (
            f"py-spy {r} Hz (speedscope): {len(samples)} samples over {args.rounds * args.calls} predicts, "
            f"at most {threads} thread profile(s), {in_predict} inside PyFuncModel.predict"
        )
        for step in STEPS:
            line += f"; ChurnModel.{step} in {sum(1 for n in samples if 'ChurnModel.' + step in n)}"
        print(line)
    for step in STEPS:
        key = f"ChurnModel.{step}"
        if key in ours:
            calls, mean, p50, p99, on, off, runq = ours[key]
            print(
                f"mlprof-ebpf on C, {key}: {calls} calls, mean {mean} (p99 {p99}), on-CPU {on}, off-CPU {off}, "
                f"runq {runq}"
            )
    print(
        f"mlprof-ebpf on C: {paths} call paths in its summary (depth 2 under PyFuncModel.predict)"
    )
    print("py-spy dump --locals during a predict loop (first lines):")
    for line in dump.splitlines()[:14]:
        print("    " + line[:150])


# -- part 3 and 4: the storm -------------------------------------------------------------------------


def storm_once(tools, argv, agent_prefix=()):
    """The storm with the agent attached; returns the storm's figures and the agent's."""
    storm = subprocess.Popen(
        [tools["storm"], *argv, "--wait-attached", "30"], stdout=subprocess.PIPE, text=True
    )
    pid = int(storm.stdout.readline().split()[1])
    agent = subprocess.Popen(
        [*agent_prefix, tools["agent"], "--pid", str(pid), "-v"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err_box = []
    drain = threading.Thread(target=lambda: err_box.append(agent.stderr.read()), daemon=True)
    drain.start()
    _, status, usage = os.wait4(agent.pid, 0)  # rusage of the agent itself
    agent.returncode = os.waitstatus_to_exitcode(status)
    drain.join(10)
    out = storm.communicate(timeout=60)[0]
    figures = dict(re.findall(r"(\w+)=([\d.]+)", out))
    return (
        figures,
        agent.returncode,
        agent_counts(err_box[0] if err_box else ""),
        usage.ru_utime + usage.ru_stime,
    )


def storm(args, tools):
    secs = "1" if args.smoke else str(args.storm_seconds)
    print(
        f"\n3. events per second through the agent (mlprof-usdt-storm --seconds {secs}, 100 spans per session; "
        f"default 32 MiB ring)"
    )
    print(
        "| storm | events/s fired | agent records/s | lost | agent exit | agent CPU % | agent ns per record |"
    )
    print("|---|---|---|---|---|---|---|")
    runs = [
        (f"{t} thread{'s' if t > 1 else ''}", ["--threads", str(t)], ()) for t in args.storm_threads
    ]
    ncpu = os.cpu_count() or 1
    # Starved: the agent at nice 19 on CPU 0, the storm's threads on every CPU at nice 0.
    runs.append(
        (
            f"{ncpu} threads, agent nice 19 on CPU 0",
            ["--threads", str(ncpu)],
            ("taskset", "-c", "0", "nice", "-n", "19"),
        )
    )
    first_loss, best = None, None
    one_thread_ns = None
    for label, extra, prefix in runs:
        fig, rc, counts, cpu_s = storm_once(
            tools, ["--sessions", "0", "--seconds", secs, *extra], prefix
        )
        seconds = float(fig.get("seconds", 0)) or 1
        rate = float(fig.get("hits_per_second", 0))
        lost = counts.get("lost", -1)
        records = counts.get("records", 0)
        print(
            f"| {label} | {rate / 1000:.0f}k | {records / seconds / 1000:.0f}k | {lost} | {rc} | "
            f"{cpu_s / seconds * 100:.0f}% | {cpu_s * 1e9 / records if records else 0:.0f} |"
        )
        if lost == 0 and (best is None or rate > best[1]):
            best = (label, rate)
        if lost and first_loss is None:
            first_loss = (label, rate)
        if extra == ["--threads", "1"] and not prefix:
            one_thread_ns = float(fig.get("ns_per_site", 0))
    print(
        f"highest rate with lost = 0: {best[1] / 1000:.0f}k events/s ({best[0]})"
        if best
        else "no run without loss"
    )
    print(
        f"first loss: {first_loss[1] / 1000:.0f}k events/s ({first_loss[0]})"
        if first_loss
        else "no loss in any run"
    )

    print("\n4. cost of a probe site")
    n = "2000000" if args.smoke else "50000000"
    out = subprocess.run(
        [tools["bench_probes"], "--iterations", n, "--rounds", "3" if args.smoke else "11"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines()[1:]:
        print("    " + line)
    sessions = "2000" if args.smoke else "50000"
    free = subprocess.run(
        [tools["storm"], "--sessions", sessions], capture_output=True, text=True, check=True
    ).stdout
    free_ns = float(re.search(r"ns_per_site=([\d.]+)", free).group(1))
    print(
        f"storm, no tracer ({sessions} sessions): {free_ns:.1f} ns per site (semaphore load + branch + the loop)"
    )
    if one_thread_ns is not None:
        print(
            f"storm, mlprof-ebpf attached (1 thread above): {one_thread_ns:.0f} ns per site, every site a hit "
            f"(uprobe trap + BPF handler + ring-buffer record): +{one_thread_ns - free_ns:.0f} ns per hit"
        )


# -- setup -------------------------------------------------------------------------------------------


def find_tools(args, tmp):
    """The built binaries; a storm without all eight probe sites is rebuilt here with them."""
    build = os.path.join(ROOT, args.build)
    tools = {
        "agent": os.path.join(build, "userspace", "agent", "mlprof-ebpf"),
        "storm": os.path.join(build, "bench", "mlprof-usdt-storm"),
        "bench_probes": os.path.join(build, "bench", "bench_probes"),
        "py-spy": shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy"),
    }
    for name, path in tools.items():
        if not os.access(path, os.X_OK):
            sys.exit(
                f"bench_agent: {name} not found at {path} "
                "(build with -DMLPROF_BUILD_AGENT=ON; pip install py-spy)"
            )
    notes = subprocess.run(["readelf", "-n", tools["storm"]], capture_output=True, text=True).stdout
    missing = PROBES - set(re.findall(r"Name: (\w+)", notes))
    if missing:  # the agent attaches all eight probes and refuses a binary that lacks one
        sys.exit(
            f"bench_agent: {tools['storm']} has no site for {', '.join(sorted(missing))}; rebuild it"
        )
    return tools


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="every part once, tiny counts (< 60 s)")
    ap.add_argument(
        "--build", default="build-all", help="CMake build directory, relative to the repository"
    )
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=300, help="predicts per round")
    ap.add_argument("--pyspy-rates", default="100,1000")
    ap.add_argument("--growth-blocks", type=int, default=6)
    ap.add_argument("--growth-block", type=int, default=500, help="predicts per block of part 2b")
    ap.add_argument("--storm-seconds", type=float, default=5.0)
    ap.add_argument("--storm-threads", default="1,2,4,8")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.smoke:
        args.rounds, args.calls, args.pyspy_rates, args.growth_blocks, args.growth_block = (
            2,
            20,
            "100",
            2,
            20,
        )
    args.storm_threads = [int(t) for t in str(args.storm_threads).split(",") if t]
    if os.geteuid() != 0:
        sys.exit(
            "bench_agent: run as root (the agent loads BPF programs; py-spy attaches with ptrace)"
        )
    tmp = tempfile.mkdtemp(prefix="bench-agent-")
    tools = find_tools(args, tmp)
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    pp = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "devpath.sh"), args.build, os.path.join(tmp, "pp")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env["PYTHONPATH"] = pp.strip().split("=", 1)[1]
    load = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.2f} at start; "
        f"build {args.build}; raw outputs in {tmp}"
    )
    predict_overhead(args, tools, tmp, env)
    storm(args, tools)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
