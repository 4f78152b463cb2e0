"""End-to-end tests of mlprof-ebpf: the real agent against real processes
and a real Podman container, on this kernel. They need root, BPF with BTF,
and the built binaries:

  MLPROF_AGENT         the mlprof-ebpf binary (required)
  MLPROF_USDT_TARGET   tests/cpp's usdt_target (a native process with the probes)
  MLPROF_E2E_PYTHON    the interpreter of the Python targets (default: this one);
                       it needs MLflow, and mlflow_profiler importable with the
                       PYTHONPATH the tests run under (scripts/devpath.sh or an
                       installed package)

Without root, BPF or a binary these tests skip, and fail under
MLPROF_REQUIRE_BPF=1 (CI runs them as root): a privileged test that cannot
run is a failure there, not a pass.
"""

from __future__ import annotations

import gzip
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET_PY = os.path.join(HERE, "_target.py")


def require(ok: bool, why: str) -> None:
    """Skip, or fail under MLPROF_REQUIRE_BPF=1, when `ok` is false."""
    if ok:
        return
    if os.environ.get("MLPROF_REQUIRE_BPF") == "1":
        pytest.fail(f"{why}; required here (MLPROF_REQUIRE_BPF=1)")
    pytest.skip(why)


def overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    """The ns that [a0, a1) and [b0, b1) share."""
    return max(0, min(a1, b1) - max(a0, b0))


def bpf_misses(proc: subprocess.Popen) -> int:
    """How many runs of the BPF programs that process `proc` holds open the
    kernel skipped (their fdinfo's recursion_misses); -1 once it exited. A
    classic tracepoint or kprobe program is skipped, and counted so, when it
    fires inside another such program on that CPU: a wakeup in an interrupt
    that came during a uprobe's program. An oracle that missed events cannot
    judge a sum. 0 also where the kernel keeps no such count (5.10's guest
    skipped runs and said 0: vmtests/guest_smoke.py's oracle finds its own)."""
    if proc.poll() is not None:
        return -1
    total = 0
    fds = f"/proc/{proc.pid}/fdinfo"
    try:
        names = os.listdir(fds)
    except OSError:  # it exited: its count went with it
        return -1
    for fd in names:
        try:
            with open(os.path.join(fds, fd)) as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # closed meanwhile
            continue
        if "prog_id" in info:
            total += int(info.get("recursion_misses", "0"))
    return total


class Bpftrace:
    """A bpftrace program run until stop(); the lines it printed, and
    `missed`: the events its programs were skipped for (bpf_misses)."""

    def __init__(self, program: str):
        exe = shutil.which("bpftrace")
        require(exe is not None, "bpftrace is needed for the oracle (apt-get install bpftrace)")
        # stderr to a file: a pipe nobody reads fills with bpftrace's warnings
        # (lost events under load) and blocks it.
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [exe, "-e", program], stdout=subprocess.PIPE, stderr=self.err, text=True
        )
        self.lines: List[str] = []
        self.missed = 0
        first = self.proc.stdout.readline()  # "Attaching N probes..."
        assert "Attaching" in first, (first, self.proc.wait(), self.err.seek(0), self.err.read())
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(self.proc.stdout), daemon=True
        )
        self._reader.start()
        time.sleep(0.5)  # attached once it printed that; a margin for the last probe

    def stop(self, maps: str = "", kill: bool = False) -> List[str]:
        """The lines printed so far; with `maps` (the start of a map's lines,
        "@runq["), after bpftrace printed its maps on SIGUSR1 (for a program
        whose END prints nothing). The oracle's
        data is those lines, not bpftrace's exit: twice in CI it did not exit
        within 60 s of SIGINT, and is then killed with its lines kept. `kill`:
        the caller has seen the lines it needs, and bpftrace is killed at once
        (in a TCG guest it never exited within 60 s of SIGINT)."""
        if kill:
            self.missed = bpf_misses(self.proc)
            self.proc.kill()
        if maps:
            self.proc.send_signal(signal.SIGUSR1)
            deadline, seen = time.monotonic() + 30, -1
            while time.monotonic() < deadline:  # printed once no line came for 0.5 s
                time.sleep(0.5)
                if len(self.lines) == seen and any(l.startswith(maps) for l in self.lines):
                    break
                seen = len(self.lines)
        elif not kill:
            time.sleep(0.3)
        printed = list(self.lines)
        if not kill:  # its maps printed meanwhile: the count as of now
            self.missed = bpf_misses(self.proc)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            print("bpftrace did not exit within 60 s of SIGINT: killed, its lines kept")
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(10)
            self.proc.stdout.close()
            self.err.close()
        return printed if maps else self.lines


@pytest.fixture(scope="session")
def agent_path() -> str:
    path = os.environ.get("MLPROF_AGENT", "")
    require(
        bool(path) and os.access(path, os.X_OK),
        "set MLPROF_AGENT to the built mlprof-ebpf (cmake -DMLPROF_BUILD_AGENT=ON)",
    )
    require(os.geteuid() == 0, "the agent needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)")
    require(
        os.path.exists("/sys/kernel/btf/vmlinux"), "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    )
    return path


def built_program(variable: str, what: str) -> str:
    """The executable $variable names: required (a skip, or a failure under MLPROF_REQUIRE_BPF=1)."""
    path = os.environ.get(variable, "")
    require(bool(path) and os.access(path, os.X_OK), f"set {variable} to the built {what}")
    return path


@pytest.fixture(scope="session")
def usdt_target_path() -> str:
    return built_program("MLPROF_USDT_TARGET", "tests/cpp/usdt_target")


@pytest.fixture(scope="session")
def usdt_storm_path() -> str:
    return built_program("MLPROF_USDT_STORM", "bench/mlprof-usdt-storm")


@pytest.fixture(scope="session")
def python_exe() -> str:
    exe = os.environ.get("MLPROF_E2E_PYTHON", sys.executable)
    probe = subprocess.run(
        [exe, "-c", "import mlflow, mlflow_profiler._core as c; c.usdt_attached"],
        capture_output=True,
        text=True,
    )
    require(
        probe.returncode == 0,
        f"{exe} cannot import mlflow and mlflow_profiler with usdt_attached: {probe.stderr.strip()[-300:]}",
    )
    return exe


# -- processes ---------------------------------------------------------------------


def words_reply(line: str) -> dict:
    """usdt_target's replies ("done storm session=3 tid=7"): the first word
    as "reply", each key=value as an int (or text)."""
    words = line.split()
    out: dict = {"reply": words[0] if words else ""}
    for w in words[1:]:
        k, eq, v = w.partition("=")
        if eq:
            try:
                out[k] = int(v, 0)
            except ValueError:
                out[k] = v
    return out


class LineProcess:
    """A child answering each command with one line on stdout: JSON
    (_target.py) or words (usdt_target)."""

    def __init__(
        self,
        argv: List[str],
        env: Optional[Dict[str, str]] = None,
        preexec_fn=None,
        ready_timeout: float = 60.0,
        json_lines: bool = True,
    ):
        self.json_lines = json_lines
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=preexec_fn,
        )
        self.stderr: List[str] = []
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()
        self.ready = self.read(ready_timeout)
        self.pid = self.proc.pid

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def read(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    break
                line = line.strip()
                if not self.json_lines and line:
                    return words_reply(line)
                if line.startswith("{"):
                    return json.loads(line)
            elif self.proc.poll() is not None:
                break
        raise AssertionError(
            f"{self.proc.args[:3]} gave no answer; stderr: {''.join(self.stderr)[-2000:]}"
        )

    def ask(self, command: str, timeout: float = 60.0) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._drain.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


@pytest.fixture
def python_target(python_exe):
    """Starts _target.py processes (scripted), closed at the end of the test."""
    started: List[LineProcess] = []

    def start(*extra: str, preexec_fn=None) -> LineProcess:
        p = LineProcess(
            [python_exe, TARGET_PY, *extra], env=dict(os.environ), preexec_fn=preexec_fn
        )
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


@pytest.fixture
def native_target(usdt_target_path):
    started: List[LineProcess] = []

    def start() -> LineProcess:
        p = LineProcess([usdt_target_path], json_lines=False)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


@dataclass
class AgentResult:
    returncode: int
    stdout: str
    stderr: str


class AgentRun:
    """mlprof-ebpf running in the background; its stderr lines are collected
    so a test can wait for "attached to pid N"."""

    def __init__(self, argv: List[str], env: Optional[Dict[str, str]] = None):
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: List[str] = []
        self._out: List[str] = []
        self._cv = threading.Condition()
        self._drains = [
            threading.Thread(target=self._drain, args=(self.proc.stderr, True), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stdout, False), daemon=True),
        ]
        for t in self._drains:
            t.start()

    def _drain(self, stream, is_err: bool) -> None:
        for line in stream:
            with self._cv:
                (self.lines if is_err else self._out).append(line)
                self._cv.notify_all()

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (
                    self.proc.poll() is not None and not any(text in line for line in self.lines)
                ):
                    if self.proc.poll() is not None:
                        time.sleep(0.2)  # let the drains finish
                    raise AssertionError(
                        f"agent never said {text!r}; stderr so far:\n{''.join(self.lines)}"
                    )
                self._cv.wait(min(left, 0.2))

    def wait_attached(self, pid: int, timeout: float = 30.0) -> None:
        self.wait_for(f"attached to pid {pid} ", timeout)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> AgentResult:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 60.0) -> AgentResult:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"agent did not end in {timeout}s; stderr:\n{''.join(self.lines)}"
            ) from None
        self.close()
        with self._cv:
            return AgentResult(self.proc.returncode, "".join(self._out), "".join(self.lines))

    def close(self) -> None:
        """After the process ended: the drains reach EOF, the pipes are closed."""
        for t in self._drains:
            t.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def agent(agent_path):
    """agent(*args) starts mlprof-ebpf; every agent still running at the end is killed."""
    runs: List[AgentRun] = []

    def start(
        *args: str, env: Optional[Dict[str, str]] = None, wrapper: Optional[List[str]] = None
    ) -> AgentRun:
        run = AgentRun([*(wrapper or []), agent_path, *args], env=env)
        runs.append(run)
        return run

    yield start
    for r in runs:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()
        r.close()


def run_agent(
    agent_path: str,
    *args: str,
    timeout: float = 60.0,
    wrapper: Optional[List[str]] = None,
    env: Optional[Dict[str, str]] = None,
) -> AgentResult:
    """Runs the agent to its end (errors, --duration)."""
    p = subprocess.run(
        [*(wrapper or []), agent_path, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return AgentResult(p.returncode, p.stdout, p.stderr)


# -- the profile document ---------------------------------------------------------

SPAN_OPEN_AT_END = 2
SPAN_TRUNCATED = 512


@dataclass
class Span:
    index: int
    parent: int
    name: str
    lane: int
    depth: int
    flags: int
    start_ns: int
    end_ns: int
    values: Dict[str, int] = field(default_factory=dict)  # the kernel figures (span_values)
    active_ns: int = 0
    waiting_ns: int = 0  # running vs waiting (docs/format.md): suspended + the kernel's own off-CPU
    children: List[Span] = field(default_factory=list)

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    def shape(self) -> list:
        return [self.name, [c.shape() for c in self.children]]

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


class Document:
    """The agent's profile document (docs/format.md), read column by column
    through the *_fields headers, as a reader outside the project would."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":  # a .json.gz (the continuous agent's items)
            raw = gzip.decompress(raw)
        self.doc = json.loads(raw)
        d = self.doc
        strings = d["strings"]
        ff = {n: i for i, n in enumerate(d["function_fields"])}
        functions = [strings[row[ff["name"]]] for row in d["functions"]]
        sf = {n: i for i, n in enumerate(d["span_fields"])}
        self.lanes = d["lanes"]
        self.meta = d["meta"]
        self.spans: List[Span] = []
        for i, row in enumerate(d["spans"]):
            label = row[sf["label"]]
            name = strings[label] if label else functions[row[sf["function"]]]
            self.spans.append(
                Span(
                    i,
                    row[sf["parent"]],
                    name,
                    row[sf["lane"]],
                    row[sf["depth"]],
                    row[sf["flags"]],
                    row[sf["start_ns"]],
                    row[sf["end_ns"]],
                    active_ns=row[sf["active_ns"]],
                    waiting_ns=row[sf["waiting_ns"]],
                )
            )
        if "span_values" in d:
            vf = {n: i for i, n in enumerate(d["span_value_fields"])}
            for row in d["span_values"]:
                self.spans[row[vf["span"]]].values[row[vf["type"]]] = row[vf["value"]]
        for s in self.spans:
            if s.parent >= 0:
                self.spans[s.parent].children.append(s)
        for s in self.spans:
            s.children.sort(key=lambda c: (c.start_ns, c.index))
        self.roots = sorted(
            (s for s in self.spans if s.parent < 0), key=lambda s: (s.start_ns, s.index)
        )
        kernel = d.get("kernel") or {}
        self.lost_events = kernel.get("lost_events", 0)
        self.threads = [
            dict(zip(kernel["thread_fields"], row)) for row in kernel.get("threads", [])
        ]
        self.off_cpu = [
            dict(zip(kernel["off_cpu_fields"], row)) for row in kernel.get("off_cpu", [])
        ]

    def lane_pid(self, span: Span) -> int:
        lane = self.lanes[span.lane]
        return int(lane.get("pid") or self.meta.get("pid") or 0)

    def roots_of(self, pid: int) -> List[Span]:
        return [r for r in self.roots if self.lane_pid(r) == pid]

    def find(self, name: str, pid: Optional[int] = None) -> List[Span]:
        return [
            s for s in self.spans if s.name == name and (pid is None or self.lane_pid(s) == pid)
        ]


@pytest.fixture
def tmp_out(tmp_path):
    return tmp_path


def qualname(name: str) -> str:
    """The span name of a method of _target.E2EModel, as the profiler shows it."""
    return f"E2EModel.{name}" if sys.version_info >= (3, 11) else name


def pin(cpu: int):
    """preexec_fn: runs the child on one CPU (what taskset does)."""

    def _pin() -> None:
        os.sched_setaffinity(0, {cpu})

    return _pin


@pytest.fixture
def cpu_hog():
    """A busy process pinned to one CPU (taskset), killed at the end."""
    procs: List[subprocess.Popen] = []

    def start(cpu: int) -> subprocess.Popen:
        taskset = shutil.which("taskset")
        require(taskset is not None, "taskset (util-linux) is needed to pin the hog")
        p = subprocess.Popen([taskset, "-c", str(cpu), sys.executable, "-c", "while True: pass"])
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def cgroup_dir():
    """A fresh cgroup v2 directory, removed at the end (its processes moved out)."""
    mount = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.startswith("cgroup2 "):
                mount = left.split()[4]
                break
    require(mount is not None, "no cgroup v2 mount")
    path = os.path.join(mount, f"mlprof-e2e-{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(path)
    yield path
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.05)
    except FileNotFoundError:
        pass
