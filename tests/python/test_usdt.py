"""The extension's USDT probes (bpf/mlprof_usdt.h, docs/usdt.md), checked
with real tracers: binutils' readelf reads the probe notes, and bpftrace
(Debian 12: 0.17) attaches to a real Python process by pid, which raises the
probes' semaphores. From bpftrace's output alone the test rebuilds every
lane's events and builds a Profile; it must equal the tree the process
recorded in-process. Then an autoprofiled process with sample_rate=0 is
switched on by attaching the tracer and off by detaching it.

bpftrace needs root. Without root or bpftrace these tests skip, and fail
under MLPROF_REQUIRE_BPF=1 (CI runs them as root).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from _helpers import require_bpf, require_tool

from mlflow_profiler import _core

CORE_SO = os.path.realpath(_core.__file__)

# The contract: probe -> arguments as (size, signed). Every value is passed
# as a 64-bit integer or pointer; ceiling and line are signed.
CONTRACT: Dict[str, List[Tuple[int, bool]]] = {
    "session_begin": [
        (8, False),
        (8, True),
        (8, False),
        (8, False),
        (8, False),
    ],  # + gil, gil_bytes
    "session_end": [(8, False)] * 2,
    "lane_begin": [(8, False)] * 5,
    "span_enter": [(8, False)] * 7 + [(8, True), (8, False)],
    "span_exit": [(8, False)] * 3,
    "span_suspend": [(8, False)] * 2,
    "span_resume": [(8, False)] * 2,
    "span_io": [(8, False)] * 5,
    # v2: the session's spans in one hit (docs/usdt.md, "Version 2").
    "session_spans": [(8, False)] * 6,
}
V1_PROBES = (
    "session_begin",
    "session_end",
    "lane_begin",
    "span_enter",
    "span_exit",
    "span_suspend",
    "span_resume",
    "span_io",
)
SPAN_EXCEPTION, SPAN_C_FUNCTION, SPAN_BLOCK, SPAN_CONTINUED = 0x1, 0x2, 0x4, 0x8
SESSION_CAPTURE_IO, SESSION_ALL_THREADS, SESSION_AUTOPROFILE = 0x1, 0x2, 0x4
NO_PARENT_LANE = 0xFFFFFFFF
K_CALL, K_RETURN, K_SUSPEND, K_RESUME, K_LABEL = 1, 2, 3, 4, 5  # model/event.h
FN_PYTHON, FN_C, FN_BLOCK = 0, 1, 2  # model/functions.h


def hi(v: int) -> int:
    return v >> 32


def lo(v: int) -> int:
    return v & 0xFFFFFFFF


# -- the probe notes (readelf) ----------------------------------------------------


def probe_notes(path: str) -> Dict[str, dict]:
    """{probe name: {provider, semaphore, args: [spec, ...]}} from readelf -n."""
    readelf = require_tool(shutil.which("readelf"), "readelf", "apt-get install binutils")
    out = subprocess.run(
        [readelf, "-n", "--wide", path], capture_output=True, text=True, check=True
    ).stdout
    notes: Dict[str, dict] = {}
    for block in out.split("stapsdt")[1:]:
        provider = re.search(r"Provider: (\S+)", block)
        name = re.search(r"Name: (\S+)", block)
        sem = re.search(r"Semaphore: (0x[0-9a-f]+)", block)
        args = re.search(r"Arguments: ?(.*)", block)
        if provider and name:
            notes[name.group(1)] = {
                "provider": provider.group(1),
                "semaphore": int(sem.group(1), 16) if sem else 0,
                "args": args.group(1).split() if args and args.group(1).strip() else [],
            }
    return notes


def section(path: str, name: str) -> Tuple[int, int]:
    """(address, size) of an ELF section."""
    out = subprocess.run(
        ["readelf", "-S", "--wide", path], capture_output=True, text=True, check=True
    ).stdout
    m = re.search(
        r"\]\s+" + re.escape(name) + r"\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", out
    )
    assert m, f"no section {name} in {path}"
    return int(m.group(1), 16), int(m.group(2), 16)


def test_every_probe_is_in_the_notes_with_a_semaphore_and_the_contracts_arguments():
    notes = probe_notes(CORE_SO)
    assert set(notes) == set(CONTRACT), f"probes in {CORE_SO}: {sorted(notes)}"
    start, size = section(CORE_SO, ".probes")
    semaphores = set()
    for name, note in notes.items():
        assert note["provider"] == "mlprof"
        # A semaphore in .probes: the tracer raises it, the site reads it.
        assert start <= note["semaphore"] < start + size, (name, hex(note["semaphore"]))
        semaphores.add(note["semaphore"])
        specs = [a.split("@")[0] for a in note["args"]]
        want = [f"{'-' if signed else ''}{n}" for n, signed in CONTRACT[name]]
        assert specs == want, (name, note["args"])
    assert len(semaphores) == len(CONTRACT), "each probe has its own semaphore"


def test_no_tracer_attached_means_usdt_attached_is_false():
    # Nothing traces the test process: the semaphore is 0.
    assert _core.usdt_attached() is False


# -- bpftrace ------------------------------------------------------------------------


_REGS = {
    "rax": "ax",
    "rbx": "bx",
    "rcx": "cx",
    "rdx": "dx",
    "rsi": "si",
    "rdi": "di",
    "rbp": "bp",
    "rsp": "sp",
    "rip": "ip",
    **{f"r{i}": f"r{i}" for i in range(8, 16)},
}


def operand(spec: str) -> str:
    """A bpftrace expression for one USDT argument spec of the note
    ("8@%rdi", "-8@16(%rsp)", "8@$0"). bpftrace 0.17 reads arg0..arg5 only
    on x86_64 ("x86_64 doesn't support arg6"), so span_enter's file, line
    and label are read as its own argN would be: through reg() by the note's
    operand, what any USDT tracer does."""
    size, _, op = spec.partition("@")
    signed = size.startswith("-")
    m_imm = re.fullmatch(r"\$(-?\d+)", op)
    m_reg = re.fullmatch(r"%(\w+)", op)
    m_mem = re.fullmatch(r"(-?\d*)\(%(\w+)\)", op)
    if m_imm:
        expr = m_imm.group(1)
    elif m_reg and m_reg.group(1) in _REGS:
        expr = f'reg("{_REGS[m_reg.group(1)]}")'
    elif m_mem and m_mem.group(2) in _REGS:
        off = m_mem.group(1) or "0"
        expr = f'*(uint64 *)(reg("{_REGS[m_mem.group(2)]}") + {off})'
    else:
        pytest.fail(f"USDT operand {spec!r}: not a form this test translates")
    return f"(int64)({expr})" if signed else f"(uint64)({expr})"


def bpftrace_program(so: str) -> str:
    """Prints one '|'-separated line per probe hit, stamped with nsecs
    (CLOCK_MONOTONIC, the clock of the in-process profile)."""
    enter = probe_notes(so)["span_enter"]["args"]
    file_, line, label = (operand(s) for s in enter[6:9])
    u = f"usdt:{so}:mlprof"
    return textwrap.dedent(f"""
        BEGIN {{ printf("READY\\n"); }}
        {u}:session_begin {{ printf("B|%llu|%d|%llu|%lld|%llu\\n", nsecs, tid, arg0, arg1, arg2); }}
        {u}:session_end {{ printf("Z|%llu|%d|%llu|%llu\\n", nsecs, tid, arg0, arg1); }}
        {u}:lane_begin {{
          printf("L|%llu|%d|%llu|%llu|%llu|%llu|%s\\n", nsecs, tid, arg0, arg1, arg2, arg3, str(arg4));
        }}
        {u}:span_enter {{
          $t = nsecs;
          printf("E|%llu|%d|%llu|%llu|%llu|%llu|%lld\\n", $t, tid, arg0, arg1, arg2, arg3, {line});
          printf("N|%llu|%d|%s\\n", $t, tid, str(arg4));
          printf("M|%llu|%d|%s\\n", $t, tid, str(arg5));
          printf("F|%llu|%d|%s\\n", $t, tid, str({file_}));
          if ({label} != 0) {{ printf("G|%llu|%d|%s\\n", $t, tid, str({label})); }}
          else {{ printf("G|%llu|%d|\\n", $t, tid); }}
        }}
        {u}:span_exit {{ printf("X|%llu|%d|%llu|%llu|%llu\\n", nsecs, tid, arg0, arg1, arg2); }}
        {u}:span_suspend {{ printf("S|%llu|%d|%llu|%llu\\n", nsecs, tid, arg0, arg1); }}
        {u}:span_resume {{ printf("R|%llu|%d|%llu|%llu\\n", nsecs, tid, arg0, arg1); }}
        {u}:span_io {{
          $t = nsecs;
          printf("I|%llu|%d|%llu|%llu|%llu|%s\\n", $t, tid, arg0, arg1, arg2, str(arg3));
          printf("J|%llu|%d|%s\\n", $t, tid, str(arg4));
        }}
    """)


class Tracer:
    """bpftrace attached to one pid. A thread collects its output as it
    comes: bpftrace does not drain its buffers when it is stopped, so a test
    waits for the lines it needs (wait_for) before stop()."""

    def __init__(self, pid: int, program: Optional[str] = None) -> None:
        # 1024 pages a CPU (bpftrace: 64): under CI's load a 64-page buffer lost
        # 317 events of a session at depth 6 on 3.13.
        env = dict(os.environ, BPFTRACE_STRLEN="160", BPFTRACE_PERF_RB_PAGES="1024")
        program = program or bpftrace_program(CORE_SO)
        self.proc = subprocess.Popen(
            [require_bpf(), "-p", str(pid), "-e", program],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: List[str] = []
        self.errors: List[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # stderr is drained too: a full pipe would block bpftrace.
        self._err_reader = threading.Thread(target=self._read_errors, daemon=True)
        self._err_reader.start()
        # BEGIN runs once every probe is attached; bpftrace compiles with LLVM first.
        if not self.wait_for(lambda lines: "READY" in lines, 60):
            self.proc.kill()
            self.close()
            pytest.fail("bpftrace did not attach: " + "\n".join(self.errors))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line.rstrip("\n"))

    def wait_for(self, pred, timeout: float) -> bool:
        """Waits until pred(lines) holds; False on timeout or if bpftrace ended."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    return pred(self.lines)
                self._cond.wait(min(left, 0.5))
            return True

    def stop(self) -> List[str]:
        """Detaches: SIGINT, and bpftrace lowers the semaphores as it exits.

        bpftrace 0.17 now and then stays alive after SIGINT under a loaded
        test run (4 times in full-suite runs, never in 52 runs alone): the
        lines are complete by then (callers wait for the ones they need), so
        it is killed after 20 s, which also takes its uprobes and their
        semaphore counts out (the kernel owns both), and where it stood is
        written to the test artifacts."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._record_hang()
        finally:
            self.close()
        return self.lines

    def _record_hang(self) -> None:
        pid = self.proc.pid
        parts = [f"bpftrace {pid} still running 20 s after SIGINT"]
        for name in ("wchan", "stack", "syscall", "status"):
            try:
                parts.append(f"--- /proc/{pid}/{name}\n" + Path(f"/proc/{pid}/{name}").read_text())
            except OSError as e:
                parts.append(f"--- /proc/{pid}/{name}: {e}")
        for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
            try:
                parts.append(
                    f"--- task {task.name}: {(task / 'wchan').read_text()} {(task / 'stat').read_text()}"
                )
            except OSError:
                pass
        parts.append("--- stderr\n" + "\n".join(self.errors))
        text = "\n".join(parts)
        print(text, file=sys.stderr)
        artifacts = os.environ.get("MLPROF_TEST_ARTIFACTS")
        if artifacts:
            Path(artifacts).mkdir(parents=True, exist_ok=True)
            (Path(artifacts) / f"bpftrace-hang-{pid}.txt").write_text(text)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        self._err_reader.join(timeout=10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def records(lines: List[str]) -> List[List[str]]:
    """The probe lines in time order. bpftrace reads per-CPU buffers, so lines
    of threads on different CPUs can come out of order; the lines of one hit
    share its stamp and keep their order (a stable sort)."""
    rows = [ln.split("|") for ln in lines if re.match(r"^[BZLENMFGXSRIJ]\|", ln)]
    return sorted(rows, key=lambda r: int(r[1]))


# -- rebuilding the profile from the probes -------------------------------------------


class Rebuilt:
    """One session rebuilt from its probe hits as the agent's joiner does:
    span_enter is [kLabel,] kCall, span_exit kReturn, span_suspend/resume
    kSuspend/kResume. Every index is checked against the replay."""

    def __init__(self, rows: List[List[str]]) -> None:
        self.begin: Optional[List[str]] = None
        self.end: Optional[List[str]] = None
        self.lanes: Dict[int, dict] = {}
        self.stacks: Dict[int, List[int]] = {}
        self.detached: Dict[Tuple[int, int], List[int]] = {}
        self.functions: List[tuple] = []
        self.fmap: Dict[int, int] = {}
        self.labels: List[str] = []
        self.lmap: Dict[int, int] = {}
        self.enters: List[dict] = []
        self.exits: List[dict] = []
        self.io: List[dict] = []
        self.suspended: List[Tuple[int, int]] = []  # (lane, index) of each span_suspend
        self.resumed: List[Tuple[int, int]] = []
        self.tids: Dict[int, int] = {}
        i = 0
        while i < len(rows):
            r = rows[i]
            kind, ts, tid = r[0], int(r[1]), int(r[2])
            if kind == "B":
                assert self.begin is None, "one session per trace in this test"
                self.begin = r
            elif kind == "Z":
                self.end = r
            elif kind == "L":
                self._lane(ts, tid, r)
            elif kind == "E":
                parts = rows[i + 1 : i + 5]  # name, module, file, label: same hit, same stamp
                assert [p[0] for p in parts] == ["N", "M", "F", "G"] and {p[1] for p in parts} == {
                    r[1]
                }, parts
                self._enter(ts, tid, r, [p[3] for p in parts])
                i += 4
            elif kind == "X":
                self._exit(ts, tid, r)
            elif kind in "SR":
                self._suspend_resume(ts, kind, r)
            elif kind == "I":
                j = rows[i + 1]  # the summary: same hit, same stamp
                assert j[0] == "J" and j[1] == r[1], (r, j)
                lane, index = hi(int(r[4])), lo(int(r[4]))
                self.io.append(
                    {"lane": lane, "index": index, "role": int(r[5]), "name": r[6], "text": j[3]}
                )
                i += 1
            i += 1

    def _lane(self, ts: int, tid: int, r: List[str]) -> None:
        lane, parent = hi(int(r[4])), lo(int(r[4]))
        parent_call, task = hi(int(r[5])), lo(int(r[5]))
        assert lane == len(self.lanes), "lanes begin in index order"
        self.lanes[lane] = {
            "thread_id": int(r[6]),
            "native_tid": tid,
            "thread_name": r[7],
            "task": task,
            "parent_lane": -1 if parent == NO_PARENT_LANE else parent,
            "parent_call": parent_call,
            "dropped": 0,
            "truncated": False,
            "events": [],
        }
        self.stacks[lane] = []
        self.tids[lane] = tid

    def _enter(self, ts: int, tid: int, r: List[str], texts: List[str]) -> None:
        lane, index = hi(int(r[4])), lo(int(r[4]))
        function, label = hi(int(r[5])), lo(int(r[5]))
        depth, flags = hi(int(r[6])), lo(int(r[6]))
        line = int(r[7])
        name, module, file_, label_text = texts
        assert tid == self.tids[lane], "a lane's probes fire in its thread"
        events = self.lanes[lane]["events"]
        assert (label != 0) == (label_text != ""), (name, label, label_text)
        if label:
            if label not in self.lmap:
                self.lmap[label] = len(self.labels)
                self.labels.append(label_text)
            events.append((ts, K_LABEL, self.lmap[label], 0))
        assert index == len(
            events
        ), f"span_enter index {index} is not the kCall's position {len(events)}"
        if function not in self.fmap:
            kind = (
                FN_C if flags & SPAN_C_FUNCTION else FN_BLOCK if flags & SPAN_BLOCK else FN_PYTHON
            )
            self.fmap[function] = len(self.functions)
            self.functions.append((name, module, file_, line, kind, True))
        else:
            assert self.functions[self.fmap[function]][:4] == (
                name,
                module,
                file_,
                line,
            ), "ids are stable"
        events.append((ts, K_CALL, self.fmap[function], flags))
        assert depth == len(
            self.stacks[lane]
        ), f"{name}: depth {depth}, open spans {len(self.stacks[lane])}"
        self.stacks[lane].append(index)
        self.enters.append(
            {
                "lane": lane,
                "index": index,
                "name": name,
                "module": module,
                "file": file_,
                "line": line,
                "label": label_text,
                "depth": depth,
                "flags": flags,
            }
        )

    def _exit(self, ts: int, tid: int, r: List[str]) -> None:
        lane, index, flags = hi(int(r[4])), lo(int(r[4])), int(r[5])
        assert tid == self.tids[lane]
        assert (
            self.stacks[lane] and self.stacks[lane][-1] == index
        ), "span_exit closes the innermost span"
        self.stacks[lane].pop()
        self.lanes[lane]["events"].append((ts, K_RETURN, 0, flags))
        self.exits.append({"lane": lane, "index": index, "flags": flags})

    def _suspend_resume(self, ts: int, kind: str, r: List[str]) -> None:
        lane, index = hi(int(r[4])), lo(int(r[4]))
        stack = self.stacks[lane]
        if kind == "S":  # the span and every span opened above it are detached
            assert index in stack, "span_suspend names an open span"
            at = stack.index(index)
            self.detached[(lane, index)] = stack[at:]
            del stack[at:]
            self.lanes[lane]["events"].append((ts, K_SUSPEND, index, 0))
            self.suspended.append((lane, index))
        else:
            assert (lane, index) in self.detached, "span_resume names a suspended span"
            stack.extend(self.detached.pop((lane, index)))
            self.lanes[lane]["events"].append((ts, K_RESUME, index, 0))
            self.resumed.append((lane, index))

    def profile(self):
        assert self.begin is not None and self.end is not None
        lanes = [self.lanes[i] for i in sorted(self.lanes)]
        return _core.build_profile(
            lanes,
            self.functions,
            self.labels,
            int(self.begin[4]),
            int(self.begin[1]),
            int(self.end[1]),
            0,
            {},
        )


def comparable(nodes: List[dict]) -> List[dict]:
    """A tree without times and the fields a tracer cannot know (user code
    classification happens in-process). Siblings of different threads or
    tasks are put in lane order, each lane's own order kept: between lanes
    the order is by start time, and in process the profiler's own work
    (I/O summaries) is cut from each thread's times, which a tracer does not
    see (docs/decisions/0006-profilers-own-cost-is-cut-out.md)."""
    keep = (
        "label",
        "function",
        "module",
        "file",
        "line",
        "depth",
        "flags",
        "thread_name",
        "task",
        "call_path",
    )
    lanes = sorted(
        nodes, key=lambda n: (n["thread_name"], n["task"])
    )  # stable: a lane's order stays
    return [{**{k: n[k] for k in keep}, "children": comparable(n["children"])} for n in lanes]


# -- the traced process ------------------------------------------------------------

WORKLOAD = """
import asyncio
import threading

import numpy as np

import mlflow_profiler as mp


def leaf(x):
    return x + 1


@mp.profile_span("labelled-step")
def step(x):
    return leaf(x)


def gen(n):
    for i in range(n):
        yield leaf(i)


def failing():
    raise KeyError("boom")


class Pause:
    def __await__(self):
        yield  # suspends the coroutine that awaits it, and this generator above it


async def child(i):
    await asyncio.sleep(0)
    return leaf(i)


async def paused(i):
    await Pause()
    return leaf(i)


async def gather():
    return await asyncio.gather(child(1), child(2))


def worker():
    leaf(1)


def root(data):
    with mp.profile_block("block-a"):
        step(1)
    total = sum(gen(2))
    try:
        failing()
    except KeyError:
        pass
    t = threading.Thread(target=worker, name="side-worker")
    t.start()
    t.join()
    asyncio.run(gather())
    coro = paused(3)  # driven by hand: one suspend and resume at depth 1
    coro.send(None)
    try:
        coro.send(None)
    except StopIteration:
        pass
    return data.sum(axis=0)


def many(n):
    for i in range(n):
        leaf(i)
"""

MAIN = """
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import mlflow_profiler as mp
from mlflow_profiler import _core
import usdt_workload

data = np.zeros((64, 12))
usdt_workload.root(data)  # warm: imports and first calls happen before the trace
print(os.getpid(), flush=True)
sys.stdin.readline()  # the tracer is attached
assert _core.usdt_attached()
with mp.profiling(**json.loads(sys.argv[1])) as s:
    usdt_workload.{call}
print(json.dumps({{"tree": s.to_tree(), "text": s.format_tree(show_io=True, show_c_calls=True),
                  "threads": s.statistics()["threads"],
                  "start_ns": s._engine.start_ns, "end_ns": s._engine.end_ns}}), flush=True)
sys.stdin.readline()
"""


def readline(proc: subprocess.Popen, timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        pytest.fail(f"the traced process said nothing in {timeout} s")
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"the traced process ended: {err}")
    return line


def say(proc: subprocess.Popen, line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


@contextlib.contextmanager
def python_child(*args: str, stdin: int = subprocess.PIPE) -> Iterator[subprocess.Popen]:
    """This interpreter running args, with text pipes; killed if the test
    leaves before it ends."""
    with subprocess.Popen(
        [sys.executable, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def trace_session(tmp_path, call: str, **options) -> Tuple[dict, List[str]]:
    """Runs usdt_workload.<call> in a session of a child process with
    bpftrace attached: (the in-process result, bpftrace's lines)."""
    require_bpf()
    (tmp_path / "usdt_workload.py").write_text(WORKLOAD)
    (tmp_path / "main.py").write_text(MAIN.format(call=call))
    with python_child(str(tmp_path / "main.py"), json.dumps(options)) as proc:
        pid = int(readline(proc, 60))
        with Tracer(pid) as tracer:
            say(proc, "go")
            inproc = json.loads(readline(proc, 60))
            assert tracer.wait_for(lambda lines: any(ln.startswith("Z|") for ln in lines), 30)
            lines = tracer.stop()
        say(proc, "quit")
        assert proc.wait(timeout=30) == 0
    assert not [ln for ln in lines if "Lost" in ln], "bpftrace lost events"
    return inproc, lines


def test_a_tracer_rebuilds_the_in_process_tree_from_the_probes_alone(tmp_path):
    # Depth 6: the asyncio tasks' coroutines run inside the ceiling, so their
    # lanes record spans (a task lane that records nothing is left out).
    inproc, lines = trace_session(
        tmp_path, "root(data)", depth=6, capture_io=True, all_threads=True, capture_c_calls=True
    )
    rebuilt = Rebuilt(records(lines))
    assert rebuilt.begin is not None and rebuilt.end is not None, "\n".join(lines[:20])
    # session_begin(session, ceiling, flags) and session_end(session, dropped)
    assert int(rebuilt.begin[4]) == 6
    assert int(rebuilt.begin[5]) == SESSION_CAPTURE_IO | SESSION_ALL_THREADS
    assert rebuilt.begin[3] == rebuilt.end[3], "begin and end name the same session"
    assert int(rebuilt.end[4]) == 0, "nothing dropped"
    assert all(not s for s in rebuilt.stacks.values()), "every span closed"
    # Every probe fired inside the session, on the clock of the in-process
    # profile; session_end (Z) fires at the end of stop(), after the end is
    # read and the hook taken out: only after the end (CI's loaded 3.13 run
    # had the process descheduled 12 ms in between).
    stamps = [int(r[1]) for r in records(lines) if r[0] != "Z"]
    (end_stamp,) = [int(r[1]) for r in records(lines) if r[0] == "Z"]
    assert (
        inproc["start_ns"] - 1_000_000 <= min(stamps)
        and max(stamps) <= inproc["end_ns"] + 1_000_000
    )
    assert end_stamp >= inproc["end_ns"] - 1_000_000

    # The arguments, one by one.
    by_name = {e["name"]: e for e in rebuilt.enters}
    assert by_name["root"]["depth"] == 0 and by_name["root"]["module"] == "usdt_workload"
    assert (
        by_name["root"]["file"] == str(tmp_path / "usdt_workload.py")
        and by_name["root"]["line"] > 0
    )
    assert by_name["step"]["label"] == "labelled-step" and by_name["step"]["depth"] == 2
    assert by_name["block-a"]["flags"] == SPAN_BLOCK and by_name["block-a"]["label"] == ""
    assert by_name["block-a"]["module"] == "" and by_name["block-a"]["depth"] == 1
    assert any(e["flags"] & SPAN_C_FUNCTION for e in rebuilt.enters), "C calls fire too"
    failing = [e for e in rebuilt.enters if e["name"] == "failing"]
    assert len(failing) == 1
    exit_flags = {x["index"]: x["flags"] for x in rebuilt.exits if x["lane"] == failing[0]["lane"]}
    assert exit_flags[failing[0]["index"]] & SPAN_EXCEPTION, "exception exit flagged"
    assert exit_flags[by_name["root"]["index"]] == 0
    # The generator's two yields, and the await: the coroutine is suspended
    # with Pause.__await__ open above it (they travel together).
    gen, paused = (0, by_name["gen"]["index"]), (0, by_name["paused"]["index"])
    assert rebuilt.suspended.count(gen) == rebuilt.resumed.count(gen) == 2
    assert rebuilt.suspended.count(paused) == rebuilt.resumed.count(paused) == 1
    assert by_name["Pause.__await__"]["depth"] == by_name["paused"]["depth"] + 1
    # Lanes: the worker thread (its own thread, under root's Thread.start)
    # and the asyncio tasks (tasks 1 and 2 of the main thread).
    lanes = rebuilt.lanes
    assert lanes[0]["parent_lane"] == -1 and lanes[0]["task"] == 0
    worker = [lane for lane in lanes.values() if lane["thread_name"] == "side-worker"]
    assert (
        len(worker) == 1
        and worker[0]["parent_lane"] == 0
        and worker[0]["native_tid"] != lanes[0]["native_tid"]
    )
    tasks = sorted(
        lane["task"] for lane in lanes.values() if lane["native_tid"] == lanes[0]["native_tid"]
    )
    assert tasks[:2] == [0, 1] and len(tasks) >= 3
    # I/O: the compact text of core format_io, after the span's enter/exit.
    root_io = [
        (io["role"], io["name"], io["text"])
        for io in rebuilt.io
        if io["lane"] == 0 and io["index"] == by_name["root"]["index"]
    ]
    assert (0, "data", "(ndarray, shape=(64, 12), dtype=float64, 6.0KB)") in root_io
    assert (1, "", "(ndarray, shape=(12,), dtype=float64, 96B)") in root_io
    for io in rebuilt.io:
        assert io["text"] in inproc["text"], io

    # The whole tree, rebuilt from the probes alone, is the in-process tree.
    assert comparable(rebuilt.profile().to_tree()) == comparable(inproc["tree"])


def test_calls_dropped_or_below_the_ceiling_fire_nothing_and_session_end_counts_the_drops(tmp_path):
    # 300 calls of leaf at depth 1, 60 events room: most are dropped; leaf's
    # own callees (depth 2) are below the ceiling.
    inproc, lines = trace_session(tmp_path, "many(300)", depth=1, max_events=60)
    rebuilt = Rebuilt(records(lines))
    dropped = sum(t["dropped"] for t in inproc["threads"].values())
    assert dropped > 200 and int(rebuilt.end[4]) == dropped
    assert int(rebuilt.begin[5]) == 0 and int(rebuilt.begin[4]) == 1
    recorded = sum(t["events"] for t in inproc["threads"].values())
    assert sum(len(lane["events"]) for lane in rebuilt.lanes.values()) == recorded
    assert all(e["depth"] <= 1 for e in rebuilt.enters)
    # The span whose children were dropped says so at its exit.
    many = [e for e in rebuilt.enters if e["name"] == "many"][0]
    assert [x["flags"] for x in rebuilt.exits if x["index"] == many["index"]] == [0x10]
    rebuilt.lanes[0]["dropped"] = dropped
    assert comparable(rebuilt.profile().to_tree()) == comparable(inproc["tree"])


# -- switched on from outside ----------------------------------------------------------

AUTOPROFILED = """
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
import mlflow.pyfunc
import mlflow_profiler as mp
from mlflow_profiler import _core


class Model(mlflow.pyfunc.PythonModel):
    def _prep(self, x):
        return [v * 2 for v in x]

    def predict(self, context, model_input, params=None):
        return self._prep(model_input)


work = sys.argv[1]
mlflow.pyfunc.save_model(os.path.join(work, "model"), python_model=Model())
model = mlflow.pyfunc.load_model(os.path.join(work, "model"))
mp.autoprofile(depth=2, sample_rate=0.0, output_dir=os.path.join(work, "out"))
model.predict([1, 2, 3])
print(os.getpid(), flush=True)
while not os.path.exists(os.path.join(work, "stop")):
    model.predict([1, 2, 3])
    last = mp.last_profile()
    stats = mp.statistics()
    print(json.dumps({
        "attached": _core.usdt_attached(),
        "last": None if last is None else last.to_tree()[0]["start_ns"],
        "children": None if last is None else [n["label"] for n in last.to_tree()[0]["children"]],
        "sampled": stats["sampled"], "traced": stats["traced"], "submitted": stats["export"]["submitted"],
    }), flush=True)
    time.sleep(0.01)
"""


def statuses(proc: subprocess.Popen, until, limit: int = 3000) -> List[dict]:
    """Status lines of the autoprofiled process up to the first that satisfies `until`."""
    out = []
    for _ in range(limit):
        out.append(json.loads(readline(proc, 60)))
        if until(out[-1]):
            return out
    pytest.fail(f"the process never reached the state; last: {out[-1]}")


def test_attaching_a_tracer_switches_autoprofile_on_and_detaching_switches_it_off(tmp_path):
    require_bpf()
    require_tool(shutil.which("readelf"), "readelf", "apt-get install binutils")
    pytest.importorskip("mlflow")
    (tmp_path / "main.py").write_text(AUTOPROFILED)
    with python_child(str(tmp_path / "main.py"), str(tmp_path), stdin=subprocess.DEVNULL) as proc:
        pid = int(readline(proc, 120))
        before = [json.loads(readline(proc, 60)) for _ in range(5)]
        with Tracer(pid) as tracer:
            # Attached: every predict is captured, each a new session.
            on = statuses(proc, lambda s: s["attached"])
            on += [json.loads(readline(proc, 60)) for _ in range(10)]
            assert tracer.wait_for(lambda lines: sum(ln.startswith("Z|") for ln in lines) >= 10, 30)
            lines = tracer.stop()
        # Detached: the semaphore is 0 again and capture stops.
        statuses(proc, lambda s: not s["attached"])  # predicts until bpftrace is gone
        off = [json.loads(readline(proc, 60)) for _ in range(10)]
        (tmp_path / "stop").touch()
        assert proc.wait(timeout=60) == 0

    assert all(not s["attached"] and s["last"] is None and s["traced"] == 0 for s in before), before
    captured = [s for s in on if s["attached"]][-10:]
    starts = [s["last"] for s in captured]
    assert None not in starts and starts == sorted(set(starts)), "a new session for every predict"
    assert "Model._prep" in captured[-1]["children"], "the profile is the model's tree"
    assert [s["last"] for s in off] == [off[0]["last"]] * len(off), "no capture once detached"
    assert all(
        s["sampled"] == 0 and s["submitted"] == 0 for s in before + on + off
    ), "nothing exported"
    assert off[-1]["traced"] >= 10
    assert not (tmp_path / "out").exists() or not any(
        (tmp_path / "out").iterdir()
    ), "no profile written"
    # What the tracer saw: autoprofile's sessions at the configured depth.
    begins = [r for r in records(lines) if r[0] == "B"]
    assert len(begins) >= 10
    assert all(int(r[4]) == 2 and int(r[5]) == SESSION_AUTOPROFILE for r in begins), begins[:3]
    names = {r[3] for r in records(lines) if r[0] == "N"}
    assert {"PyFuncModel.predict", "Model._prep"} <= names, names


CHECKPOINTED = """
import os, sys, time
import mlflow_profiler as mp
from mlflow_profiler import _core

def step():
    time.sleep(0.25)

print(os.getpid(), flush=True)
sys.stdin.readline()  # the tracer is attached
assert _core.usdt_attached()
with mp.profiling(depth=2):
    for _ in range(3):
        step()
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_long_session_sends_checkpoints_while_session_spans_is_traced(tmp_path):
    """USDT contract v2 (docs/usdt.md): while session_spans is traced, a
    session open past MLPROF_CHECKPOINT_AFTER_NS (200 ms) is sent as it
    stands (final 0) by the extension's checkpoint thread, which takes the
    GIL from outside the interpreter's own threads; then whole at its end
    (final 1). Run on every interpreter the suite runs on."""
    require_bpf()
    (tmp_path / "main.py").write_text(CHECKPOINTED)
    u = f"usdt:{CORE_SO}:mlprof"
    program = textwrap.dedent(f"""
        BEGIN {{ printf("READY\\n"); }}
        {u}:session_begin {{ printf("B|%llu|%llu\\n", nsecs, arg0); }}
        {u}:session_spans {{ printf("P|%llu|%llu|%llu|%llu|%lld\\n", nsecs, arg0, arg2, arg5,
                                    *(int64*)uptr(arg1 + 24)); }}
    """)
    with python_child(str(tmp_path / "main.py")) as proc:
        pid = int(readline(proc, 60))
        with Tracer(pid, program) as tracer:
            say(proc, "go")
            assert readline(proc, 60).strip() == "done"
            assert tracer.wait_for(
                lambda lines: any(ln.startswith("P|") and ln.split("|")[4] == "1" for ln in lines),
                30,
            ), tracer.lines
            lines = tracer.stop()
        say(proc, "quit")
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    begins = [ln.split("|") for ln in lines if ln.startswith("B|")]
    bodies = [ln.split("|") for ln in lines if ln.startswith("P|")]
    assert len(begins) == 1, lines
    session, started = begins[0][2], int(begins[0][1])
    assert all(b[2] == session for b in bodies), lines
    checkpoints = [b for b in bodies if b[4] == "0"]
    finals = [b for b in bodies if b[4] == "1"]
    # The session's own start (the body head's start_ns, offset 24, the clock
    # bpftrace's nsecs reads): the checkpoint thread's clock. session_begin
    # fires after it, 2.4 ms after once on a loaded CI machine.
    start_ns = int(bodies[0][5])
    assert start_ns <= started and all(int(b[5]) == start_ns for b in bodies), lines
    assert len(finals) == 1 and bodies[-1] is finals[0], lines
    # Open 750 ms: the first checkpoint past 200 ms, the next after an
    # interval as long as the session's age then (so at about 400 ms).
    assert len(checkpoints) >= 2, lines
    # A body is sent after its decision (the GIL first), so each is measured
    # from the start: the decisions came at 200 ms and at twice the age then.
    assert int(checkpoints[0][1]) - start_ns >= 200_000_000, (start_ns, checkpoints[0])
    assert int(checkpoints[1][1]) - start_ns >= 400_000_000, (start_ns, checkpoints)
    sizes = [int(b[3]) for b in bodies]
    assert all(x > 0 for x in sizes) and sizes == sorted(sizes), sizes  # the body only grows


# -- the synthetic source --------------------------------------------------------------


def storm_binary() -> str:
    """mlprof-usdt-storm of the same CMake build as the extension (or $MLPROF_USDT_STORM)."""
    path = os.environ.get("MLPROF_USDT_STORM") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(CORE_SO))), "bench", "mlprof-usdt-storm"
    )
    return require_tool(
        path if os.access(path, os.X_OK) else None,
        "mlprof-usdt-storm",
        "build it: cmake --build <build> --target mlprof-usdt-storm (MLPROF_BUILD_BENCH or "
        "MLPROF_BUILD_AGENT), or set MLPROF_USDT_STORM",
    )


def test_the_storm_fires_the_contracts_probes_and_counts_what_fired():
    storm = storm_binary()
    notes = probe_notes(storm)
    assert {n: [a.split("@")[0] for a in v["args"]] for n, v in notes.items()} == {
        n: [f"{'-' if signed else ''}{size}" for size, signed in args]
        for n, args in CONTRACT.items()
    }  # all nine: v1's eight (a v1 tracer) and session_spans
    assert all(v["semaphore"] for v in notes.values())
    # No tracer: every site runs, nothing fires.
    out = subprocess.run(
        [storm, "--sessions", "50", "--spans-per-session", "10", "--threads", "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = dict(kv.split("=") for kv in out.splitlines()[-1].split())
    assert (
        figures["sessions"] == "100"
        and figures["sites"] == str(100 * 23)
        and figures["hits"] == "0"
    )
    # bpftrace attached: every site fires, and bpftrace counts the same hits.
    bpftrace = require_bpf()
    with subprocess.Popen(
        [
            storm,
            "--sessions",
            "300",
            "--spans-per-session",
            "10",
            "--threads",
            "2",
            "--wait-attached",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline().split()[1])
        # The per-span probes by name: attaching session_spans too would make
        # the storm a v2 source (one session_spans a session, no span probes).
        # Each attached once (bpftrace 0.17 fails to load a probe that is both
        # in a comma list and in a block of its own).
        v1 = ", ".join(f"usdt:{storm}:mlprof:{p}" for p in V1_PROBES if p != "span_enter")
        program = (
            f"{v1} {{ @[probe] = count(); @arg[probe] = max(arg0); }}"
            f" usdt:{storm}:mlprof:span_enter {{ @[probe] = count(); @arg[probe] = max(arg0);"
            f" @depth = max(arg3 >> 32); @name[str(arg4)] = count(); }}"
        )
        # The storm's own wait ends when the last semaphore is set, which is
        # before bpftrace links that probe's program: sessions in between
        # fire nothing (591 of 600 session_begin, once in CI). So the storm
        # is held stopped until bpftrace says every probe is attached.
        os.kill(pid, signal.SIGSTOP)
        with subprocess.Popen(
            [bpftrace, "-p", str(pid), "-e", program],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "__BPFTRACE_NOTIFY_PROBES_ATTACHED": "1"},
        ) as tracer:
            assert tracer.stderr is not None
            early = []
            for line in tracer.stderr:
                if line.startswith("__BPFTRACE_NOTIFY_PROBES_ATTACHED"):
                    break
                early.append(line)
            os.kill(pid, signal.SIGCONT)
            out, err = tracer.communicate(timeout=120)
        traced = subprocess.CompletedProcess(
            tracer.args, tracer.returncode, out, "".join(early) + err
        )
        figures = dict(kv.split("=") for kv in proc.stdout.read().splitlines()[-1].split())
    counts = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"@\[usdt:.*:mlprof:(\w+)\]: (\d+)", traced.stdout)
    }
    assert counts == {
        "session_begin": 600,
        "lane_begin": 600,
        "span_enter": 6000,
        "span_exit": 6000,
        "session_end": 600,
    }, traced.stdout + traced.stderr
    assert figures["hits"] == str(sum(counts.values())) == figures["sites"]
    assert "@name[storm_span]: 6000" in traced.stdout and "@depth: 0" in traced.stdout


GIL_MAIN = """
import os, sys, threading
import mlflow_profiler as mp
from mlflow_profiler import _core

def spin(seconds):
    import time
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

print(os.getpid(), flush=True)
sys.stdin.readline()  # the tracer is attached
assert _core.usdt_attached()
sys.setswitchinterval(0.001)
with mp.profiling(depth=1, all_threads=True):
    other = threading.Thread(target=spin, args=(0.4,))
    other.start()
    spin(0.4)  # two threads want the GIL: each waits for it in turn
    other.join()
print("done", flush=True)
sys.stdin.readline()
"""


def test_session_begin_gives_the_gil_that_contending_threads_sleep_on(tmp_path):
    """session_begin's gil and gil_bytes (docs/usdt.md) against the kernel:
    while two threads take turns on the GIL, the futexes they sleep on are
    the GIL's condition variable and mutex, inside that range. A wrong
    offset, a wrong interpreter or a wrong size on any CPython fails here."""
    require_bpf()
    (tmp_path / "main.py").write_text(GIL_MAIN)
    with python_child(str(tmp_path / "main.py")) as proc:
        pid = int(readline(proc, 60))
        # FUTEX_WAIT (0) and FUTEX_WAIT_BITSET (9), private or not: each sleep's
        # address, as a line (a map printed at exit is lost when bpftrace
        # hangs on SIGINT and is killed; see Tracer.stop).
        program = textwrap.dedent(f"""
            BEGIN {{ printf("READY\\n"); }}
            usdt:{CORE_SO}:mlprof:session_begin {{ printf("B|%llu|%llu\\n", arg3, arg4); }}
            usdt:{CORE_SO}:mlprof:session_end {{ printf("Z|\\n"); }}
            tracepoint:syscalls:sys_enter_futex /pid == {pid} && ((args->op & 0x7f) == 0 ||
                (args->op & 0x7f) == 9)/ {{ printf("W|%llu\\n", args->uaddr); }}
        """)
        with Tracer(pid, program) as tracer:
            say(proc, "go")
            assert readline(proc, 60).strip() == "done"
            assert tracer.wait_for(lambda lines: "Z|" in lines, 30)
            seen = -1
            while seen != len(tracer.lines):  # until a second passes with no new line
                seen = len(tracer.lines)
                tracer.wait_for(lambda lines: len(lines) > seen, 1)
            lines = tracer.stop()
        say(proc, "quit")
        assert proc.wait(timeout=30) == 0
    begin = [ln.split("|") for ln in lines if ln.startswith("B|")]
    assert len(begin) == 1, lines
    gil, size = int(begin[0][1]), int(begin[0][2])
    assert gil != 0 and 64 <= size <= 4096, (
        hex(gil),
        size,
    )  # a struct of two mutexes and two conditions
    waits: Dict[int, int] = {}
    for ln in lines:
        if ln.startswith("W|"):
            waits[int(ln[2:])] = waits.get(int(ln[2:]), 0) + 1
    inside = sum(n for addr, n in waits.items() if gil <= addr < gil + size)
    assert inside >= 20, (hex(gil), size, {hex(a): n for a, n in waits.items()})
    # The rest: a thread's start and join, each a lock of its own.
    assert inside >= 0.8 * sum(waits.values()), (
        hex(gil),
        size,
        {hex(a): n for a, n in waits.items()},
    )


def test_a_traced_session_out_of_memory_ends_with_the_programs_result():
    """A tracer on session_spans starts the checkpoint thread, which sends a
    session open 200 ms as it stands (pyext/session_spans.cpp). Out of
    memory, that thread's first bad_alloc reached libstdc++'s exception
    globals, which glibc allocates on a thread's first throw in a dlopen'ed
    library, and the process ended: rc 127, "cannot allocate memory for
    thread-local data" (CI, c24e08c; 3 of 24 runs at 960-1,152 KB above the
    process then). Here every checkpoint of the session runs with no memory
    left: an address-space limit at what the process has, set as the session
    that starts the thread begins, filled, for half a second. The program ends with its result, and the
    session with everything it recorded, every run."""
    from test_capture_faults import UNDER_A_LIMIT

    require_bpf()
    program = UNDER_A_LIMIT + textwrap.dedent(
        """
        import json, sys, time
        from mlflow_profiler import profiling
        def deep(n):
            return 0 if n == 0 else 1 + deep(n - 1)
        print("ready", flush=True)
        sys.stdin.readline()
        # Traced: this session's start starts the checkpoint thread, and the
        # limit comes at once. The thread's state is made before start()
        # returns: made later, 3.11's PyThreadState_New crashed on its own
        # failed allocation (SIGSEGV; CI of 6947ca1 under load).
        with profiling(depth=-1) as s:
            result = deep(900)
            limit_above_now(0)
            hog = []
            for size in (1 << 20, 1 << 12, 1 << 8):  # no room left, down to small blocks
                try:
                    while True:
                        hog.append(bytearray(size))
                except MemoryError:
                    pass
            time.sleep(0.5)  # checkpoints, each out of memory
            del hog
            unlimit()
        st = s.statistics()
        print(json.dumps({"result": result, "failures": st["failures"], "spans": st["span_count"]}))
        """
    )
    probe = (
        f"usdt:{CORE_SO}:mlprof:session_spans {{ @fired[arg5] = count(); }} "
        'BEGIN { printf("READY\\n"); }'
    )
    for run in range(6):
        with python_child("-c", program) as proc:
            assert readline(proc, 60).strip() == "ready"
            with Tracer(proc.pid, probe) as tracer:
                say(proc, "go")
                out, err = proc.communicate(timeout=120)
                lines = tracer.stop()
        assert proc.returncode == 0, (run, proc.returncode, err[-2000:])
        got = json.loads(out.strip().splitlines()[-1])
        # deep(900) and the calls made in the session after it (time.sleep is a C call)
        assert got["result"] == 900 and got["failures"] == [] and got["spans"] >= 901, got
        # The session arrived whole at its end (final 1), whatever the checkpoints did.
        assert [ln for ln in lines if ln.startswith("@fired[1]:")] == ["@fired[1]: 1"], lines
