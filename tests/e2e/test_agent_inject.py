"""mlprof-ebpf --pid P --inject against live CPython 3.14 servers that never
imported mlflow_profiler (PEP 768; docs/ebpf.md, "Injecting into a running
Python"): the agent loads it, then profiles the server's predict() calls as
for any autoprofiled process; the refusals are one line each with their exit
status, and a refused or failed injection leaves the server as it was.

  MLPROF_INJECT_PYTHON  a CPython 3.14+ with MLflow, without mlflow_profiler
                        (.ci/run: a venv of scripts/python.sh 3.14)
  MLPROF_INJECT_PATH    a directory holding mlflow_profiler built for it (a
                        cp314 wheel installed with --target), given to the
                        agent with --inject-path
  MLPROF_INJECT_PYTHON315  a CPython 3.15 (scripts/python.sh 3.15): its
                        debug offsets' own layout, with a stand-in package
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from typing import List, Optional

import pytest
from conftest import HERE, Document, LineProcess, require, run_agent

SERVER_PY = os.path.join(HERE, "_inject_server.py")
MS = 1_000_000


def clean_env(**extra: str) -> dict:
    """The servers' environment: nothing of this test run's PYTHONPATH (which
    holds a mlflow_profiler) or of autoprofile's variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("MLFLOW_PROFILER_", "PYTHON_DISABLE_REMOTE"))
    }
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def inject_python() -> str:
    exe = os.environ.get("MLPROF_INJECT_PYTHON", "")
    require(
        bool(exe) and os.access(exe, os.X_OK),
        "set MLPROF_INJECT_PYTHON to a CPython 3.14+ with MLflow and without mlflow_profiler",
    )
    probe = subprocess.run(
        [
            exe,
            "-c",
            "import sys, importlib.util as u; print(sys.version_info >= (3, 14), "
            "u.find_spec('mlflow') is not None, u.find_spec('mlflow_profiler') is None)",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    require(
        probe.stdout.split() == ["True", "True", "True"],
        f"MLPROF_INJECT_PYTHON={exe} must be 3.14+, have mlflow and not mlflow_profiler: "
        f"{probe.stdout.strip()} {probe.stderr.strip()[-300:]}",
    )
    return exe


@pytest.fixture(scope="module")
def inject_path(inject_python) -> str:
    path = os.environ.get("MLPROF_INJECT_PATH", "")
    require(
        bool(path) and os.path.isdir(os.path.join(path, "mlflow_profiler")),
        "set MLPROF_INJECT_PATH to a directory holding mlflow_profiler built for MLPROF_INJECT_PYTHON",
    )
    probe = subprocess.run(
        [inject_python, "-c", "import mlflow_profiler"],
        capture_output=True,
        text=True,
        env=clean_env(PYTHONPATH=path),
    )
    require(
        probe.returncode == 0,
        f"{path}'s mlflow_profiler does not import: {probe.stderr.strip()[-300:]}",
    )
    return path


@pytest.fixture
def server():
    started: List[LineProcess] = []

    def start(
        python: str, *args: str, env: Optional[dict] = None, wrapper: List[str] = ()
    ) -> LineProcess:
        p = LineProcess(
            [
                *wrapper,
                *(
                    [python, *args, SERVER_PY]
                    if args and args[0].startswith("-X")
                    else [python, SERVER_PY, *args]
                ),
            ],
            env=env or clean_env(),
            ready_timeout=120,
        )
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def post(port: int) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
        return json.loads(r.read())


class Client(threading.Thread):
    """Requests every 20 ms, as a serving node gets them; records each reply."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.replies: List[dict] = []
        self.errors: List[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.replies.append(post(self.port))
            except Exception as exc:  # any failure is the server broken by the injection
                self.errors.append(repr(exc))
            time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.join(15)


def leftovers(pid: int) -> List[str]:
    """The injection's directories in the target's /tmp and /dev/shm."""
    return [
        p
        for d in ("tmp", "dev/shm", "var/tmp")
        for p in glob.glob(f"/proc/{pid}/root/{d}/mlprof-inject-*")
    ]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mlprof-ebpf: "), lines
    return lines[0]


def test_injected_into_a_live_314_model_server_the_first_session_is_captured_within_2s(
    agent, server, inject_python, inject_path, tmp_out
):
    srv = server(inject_python, "--model")
    pid = srv.ready["pid"]
    assert srv.ready["imported"] is False and srv.ready["python"] >= "3.14"
    client = Client(srv.ready["port"])
    client.start()
    deadline = time.monotonic() + 30
    while len(client.replies) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(client.replies) >= 5 and not any(
        r["profiler"] for r in client.replies
    ), client.errors

    out = tmp_out / "inject.json"
    said_before = len(srv.stderr)  # MLflow's warnings while the model loaded
    t_cmd = time.monotonic_ns()  # CLOCK_MONOTONIC, as the spans' start_ns
    run = agent(
        "--pid", str(pid), "--inject", "--inject-path", inject_path, "--stream", "-o", str(out)
    )
    # The first session's tree on stdout (--stream): when the test sees it captured.
    t_seen = None
    while time.monotonic_ns() - t_cmd < 15_000 * MS and run.proc.poll() is None:
        if run._out:
            t_seen = time.monotonic_ns()
            break
        time.sleep(0.005)
    run.wait_attached(pid, 5)
    time.sleep(0.5)
    result = run.stop()
    client.stop()
    assert result.returncode == 0, result.stderr
    injected = [line for line in result.stderr.splitlines() if "loaded mlflow_profiler" in line]
    assert len(injected) == 1, result.stderr
    assert f"pid {pid} (Python {srv.ready['python']}" in injected[0]
    assert f"from {inject_path}/mlflow_profiler/__init__.py (PEP 768)" in injected[0]

    doc = Document(str(out))
    roots = doc.roots_of(pid)
    assert roots, result.stderr
    first = roots[0]
    assert first.name.startswith("predict [pyfunc InjectModel]"), first.name
    first_s = (first.start_ns - t_cmd) / 1e9
    seen_s = (t_seen - t_cmd) / 1e9 if t_seen else None
    print(
        f"first session: began {first_s:.3f} s, on stdout {seen_s} s after the command; {injected[0]}"
    )
    assert t_seen is not None, result.stderr
    # The target: the first session began, and was captured, within 2 s of the command.
    assert 0 < first.start_ns - t_cmd <= 2_000 * MS, (first_s, result.stderr)
    assert t_seen - t_cmd <= 2_000 * MS, (seen_s, result.stderr)
    # Each session is the model's predict with its steps, and the 5 ms sleep
    # is off the CPU (asleep, then waiting for a CPU: on this loaded VM the run
    # queue took from 0.04 to 11 ms of it; test_agent_python.py checks the split).
    names = {s.name for s in doc.spans}
    assert {"InjectModel._features", "InjectModel._wait"} <= names, names
    for wait in doc.find("InjectModel._wait", pid):
        off, blocked, runq = (wait.values.get(k, 0) for k in ("off_cpu", "blocked", "runq"))
        assert 4 * MS <= off == blocked + runq <= wait.wall_ns, (wait.wall_ns, wait.values)
    # The first session above all: it begins while the agent attaches, and
    # its thread once had no scheduler record at all (its wait then counted
    # as on the CPU). Its sleep is the kernel's: a blocked interval of its
    # thread inside the span (the target's clock), in clock_nanosleep.
    wait = min(
        (w for w in doc.find("InjectModel._wait", pid) if first.start_ns <= w.start_ns),
        key=lambda w: w.start_ns,
    )
    assert first.start_ns <= wait.start_ns < wait.end_ns <= first.end_ns, (first, wait)
    tid = doc.lanes[first.lane]["native_tid"]
    slept = [
        iv
        for iv in doc.off_cpu
        if iv["tid"] == tid
        and iv["blocked"]
        and wait.start_ns <= iv["start_ns"] < iv["end_ns"] <= wait.end_ns
    ]
    asleep = sum(iv["wake_ns"] - iv["start_ns"] for iv in slept)
    # time.sleep's deadline is absolute (clock_nanosleep, TIMER_ABSTIME): a
    # thread kept on the run queue before the call (seen: 1.5 ms, while the
    # agent attached) sleeps that much less. Together they are the 5 ms.
    runq = wait.values.get("runq", 0)
    assert 0 < asleep <= wait.values.get("blocked", 0) <= wait.wall_ns, (wait.values, slept)
    assert asleep + runq >= 4 * MS, (wait.values, slept)
    sleeps = [
        r
        for r in doc.doc["kernel"].get("waits", [])
        if dict(zip(doc.doc["kernel"]["wait_fields"], r))["span"] == wait.index
    ]
    assert any("clock_nanosleep" in r for r in sleeps), sleeps
    # Each session is one of the client's requests (inside its predict call).
    calls = [(r["t0"], r["t1"]) for r in client.replies]
    for root in roots:
        assert any(t0 <= root.start_ns <= root.end_ns <= t1 for t0, t1 in calls), root.start_ns

    # The server never failed a request nor printed anything, and kept
    # mlflow_profiler after the agent left; the script's directory is gone.
    assert client.errors == []
    assert client.replies[-1]["profiler"] is True
    assert post(srv.ready["port"])["profiler"] is True
    assert leftovers(pid) == []
    assert srv.alive() and srv.stderr[said_before:] == []

    # A second agent attaches with no injection.
    again = run_agent(run.proc.args[0], "--pid", str(pid), "--inject", "--duration", "1")
    assert f"pid {pid} has loaded mlflow_profiler already: nothing to inject" in again.stderr
    assert f"attached to pid {pid} " in again.stderr


def test_a_target_whose_sys_path_lacks_the_package_is_refused_naming_the_paths_tried(
    agent_path, server, inject_python
):
    srv = server(inject_python)
    pid = srv.ready["pid"]
    result = run_agent(agent_path, "--pid", str(pid), "--inject", timeout=60)
    assert result.returncode == 7, result.stderr
    line = one_line(result.stderr)
    prefix = subprocess.run(
        [inject_python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True
    ).stdout.strip()
    assert (
        f"pid {pid} (Python 3.1" in line
        and "cannot import mlflow_profiler: ModuleNotFoundError: "
        "No module named 'mlflow_profiler'; tried its sys.path ("
        in line
    ), line
    assert f"{prefix}/lib/python3." in line and "--inject-path DIR" in line, line
    # The server is as it was: serving, without the package, nothing left behind.
    assert post(srv.ready["port"])["profiler"] is False
    assert leftovers(pid) == [] and "".join(srv.stderr) == ""


def test_an_inject_path_whose_package_does_not_import_is_refused_naming_it(
    agent_path, server, inject_python, python_exe
):
    # The e2e interpreter's own mlflow_profiler: built for another Python.
    other = subprocess.run(
        [
            python_exe,
            "-c",
            "import os, mlflow_profiler as m; "
            "print(os.path.dirname(os.path.dirname(m.__file__)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    srv = server(inject_python)
    pid = srv.ready["pid"]
    result = run_agent(
        agent_path, "--pid", str(pid), "--inject", "--inject-path", other, timeout=60
    )
    assert result.returncode == 7, result.stderr
    line = one_line(result.stderr)
    assert (
        f"pid {pid} (Python 3.1" in line and "cannot import mlflow_profiler: ImportError: " in line
    ), line
    assert f"tried --inject-path {other} (as the target sees it)" in line, line
    # No half-imported module is left in the server.
    assert post(srv.ready["port"])["profiler"] is False
    assert leftovers(pid) == [] and "".join(srv.stderr) == ""


@pytest.mark.parametrize("how", ["PYTHON_DISABLE_REMOTE_DEBUG=1", "-X disable-remote-debug"])
def test_an_interpreter_that_forbids_remote_code_is_refused_saying_why(
    agent_path, server, inject_python, how
):
    if how.startswith("-X"):
        srv = server(inject_python, "-X", "disable-remote-debug")
        why = "-X disable-remote-debug is on its command line"
    else:
        srv = server(inject_python, env=clean_env(PYTHON_DISABLE_REMOTE_DEBUG="1"))
        why = "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment"
    pid = srv.ready["pid"]
    result = run_agent(agent_path, "--pid", str(pid), "--inject", timeout=60)
    assert result.returncode == 7, result.stderr
    line = one_line(result.stderr)
    assert (
        f"pid {pid} (Python 3.1" in line
        and "does not allow code sent from outside (PEP 768)" in line
    ), line
    assert why in line and "MLFLOW_PROFILER_AUTOPROFILE=1" in line, line
    assert post(srv.ready["port"])["profiler"] is False
    assert leftovers(pid) == []


def test_an_older_interpreter_gets_one_line_saying_what_to_do_instead(
    agent_path, server, python_exe
):
    srv = server(python_exe)
    pid = srv.ready["pid"]
    version = srv.ready["python"]
    result = run_agent(agent_path, "--pid", str(pid), "--inject", timeout=60)
    assert result.returncode == 7, result.stderr
    line = one_line(result.stderr)
    assert (
        f"pid {pid} runs Python {version}" in line and "PEP 768 came in Python 3.14" in line
    ), line
    assert "MLFLOW_PROFILER_AUTOPROFILE=1" in line and "--pid without --inject" in line, line
    assert leftovers(pid) == []


def test_inject_needs_pid(agent_path):
    result = run_agent(agent_path, "--all", "--inject")
    assert result.returncode == 2
    assert "--inject loads mlflow_profiler into the processes --pid names" in one_line(
        result.stderr
    )


def test_agent_and_target_of_different_uids_exchange_the_script_and_its_result(
    agent_path, server, inject_python
):
    """The script's directory is the agent's, 0733 when the target runs as
    another uid: the target can create its result there, and the agent
    trusts a result its uid owns. Both ways, each ending in the import's
    failure read back (no --inject-path): a server as uid nobody (with
    CAP_DAC_READ_SEARCH only to reach the interpreter under /root, which
    does not let it write) and a root agent; a root server and an agent as
    nobody with CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (ambient)."""
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) sets the uid and capabilities")

    def as_nobody(caps: str) -> List[str]:
        return [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            f"--inh-caps={caps}",
            f"--ambient-caps={caps}",
        ]

    srv = server(inject_python, wrapper=as_nobody("+dac_read_search"))
    pid = srv.ready["pid"]
    assert os.stat(f"/proc/{pid}").st_uid == 65534
    result = run_agent(agent_path, "--pid", str(pid), "--inject", timeout=60)
    assert result.returncode == 7, result.stderr
    assert "cannot import mlflow_profiler: ModuleNotFoundError" in one_line(result.stderr)
    assert leftovers(pid) == [] and post(srv.ready["port"])["profiler"] is False

    srv = server(inject_python)
    pid = srv.ready["pid"]
    home = tempfile.mkdtemp(prefix="mlprof-inject-agent-", dir="/tmp")  # nobody can run it here
    try:
        os.chmod(home, 0o755)
        agent = os.path.join(home, "mlprof-ebpf")
        shutil.copy(agent_path, agent)
        os.chmod(agent, 0o755)
        result = subprocess.run(
            [*as_nobody("+bpf,+perfmon,+sys_ptrace"), agent, "--pid", str(pid), "--inject"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert result.returncode == 7, result.stderr
    assert "cannot import mlflow_profiler: ModuleNotFoundError" in one_line(result.stderr)
    assert leftovers(pid) == [] and post(srv.ready["port"])["profiler"] is False


def test_a_container_gets_the_script_in_its_own_tmp(agent_path, inject_python):
    """A Podman container with a /tmp of its own (a tmpfs): the script and its
    result go through /proc/PID/root/tmp, the container's, and the import's
    failure comes back from there (its sys.path named), nothing left."""
    require(shutil.which("podman") is not None, "podman is needed (apt-get install podman)")
    name = "mlprof-inject-314"
    podman = ["podman"]
    subprocess.run([*podman, "rm", "-f", "-t", "0", name], capture_output=True)
    # The container's /tmp is its own: a checkout or venv under the host's
    # /tmp (a clone in `mktemp -d`) is bound over it, read-only, at its path.
    needed = {HERE, os.path.dirname(os.path.dirname(inject_python))}
    needed.add(os.path.dirname(os.path.realpath(inject_python)))
    binds = [
        arg
        for d in sorted(needed)
        if d == "/tmp" or d.startswith("/tmp/")
        for arg in ("-v", f"{d}:{d}:ro")
    ]
    # -i: the server runs until its stdin closes.
    run = subprocess.run(
        [
            *podman,
            "run",
            "-d",
            "-i",
            "--name",
            name,
            "--runtime",
            "runc",
            "--network",
            "host",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--tmpfs",
            "/tmp:notmpcopyup",
            *binds,
            "--rootfs",
            "/:O",
            inject_python,
            SERVER_PY,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    require(run.returncode == 0, f"podman run failed: {run.stderr.strip()[-500:]}")
    try:
        ready = None
        deadline = time.monotonic() + 60
        while ready is None and time.monotonic() < deadline:
            logs = subprocess.run([*podman, "logs", name], capture_output=True, text=True).stdout
            ready = next(
                (json.loads(line) for line in logs.splitlines() if line.startswith("{")), None
            )
            time.sleep(0.2)
        assert ready is not None, "the container's server never got ready"
        pid = int(
            subprocess.run(
                [*podman, "inspect", "-f", "{{.State.Pid}}", name],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        assert pid != ready["pid"]  # its own pid namespace
        assert os.stat(f"/proc/{pid}/root/tmp").st_dev != os.stat("/tmp").st_dev  # its own /tmp
        result = run_agent(agent_path, "--pid", str(pid), "--inject", timeout=60)
        assert result.returncode == 7, result.stderr
        line = one_line(result.stderr)
        assert (
            f"pid {pid} (Python 3.1" in line
            and "cannot import mlflow_profiler: ModuleNotFoundError" in line
        ), line
        assert leftovers(pid) == [] and post(ready["port"])["profiler"] is False
    finally:
        subprocess.run([*podman, "rm", "-f", "-t", "0", name], capture_output=True)


def test_a_main_thread_blocked_in_c_is_given_up_and_the_script_taken_back(
    agent_path, server, inject_python, inject_path
):
    """The main thread waits on a lock with no timeout: it never checks its
    eval breaker, so the script cannot run. After the timeout (1 s here,
    MLPROF_INJECT_TIMEOUT_S; 10 s by default) the agent clears the pending
    flag and says so; woken later, the thread runs Python again and the
    script does not run (nothing imported, nothing on its stderr)."""
    srv = server(inject_python, "--block")
    pid = srv.ready["pid"]
    t0 = time.monotonic()
    result = run_agent(
        agent_path,
        "--pid",
        str(pid),
        "--inject",
        "--inject-path",
        inject_path,
        timeout=60,
        env=dict(os.environ, MLPROF_INJECT_TIMEOUT_S="1"),
    )
    assert result.returncode == 7, result.stderr
    assert time.monotonic() - t0 < 10
    line = one_line(result.stderr)
    assert (
        f"pid {pid}: its main thread ran no Python code in 1 s, so the injected script did not run "
        "(it was taken back: nothing changed in the process)" in line
    ), line
    assert leftovers(pid) == []
    said_before = len(srv.stderr)
    assert srv.ask("wake") == {"woken": True}
    time.sleep(1.0)  # the main thread's loop checks its eval breaker many times meanwhile
    assert post(srv.ready["port"])["profiler"] is False
    assert srv.stderr[said_before:] == []


def test_a_315_interpreter_runs_the_script_through_its_own_offsets_layout(
    agent_path, server, tmp_path
):
    """3.15 lays _Py_DebugOffsets out differently (888 bytes, the debugger
    block at 840 against 3.14's 760 and 712): a stand-in mlflow_profiler in
    --inject-path (no cp315 build needed) is imported and its autoprofile()
    called with sample_rate=0; -X disable-remote-debug is read there too."""
    exe = os.environ.get("MLPROF_INJECT_PYTHON315", "")
    require(
        bool(exe) and os.access(exe, os.X_OK),
        "set MLPROF_INJECT_PYTHON315 to a CPython 3.15 (scripts/python.sh 3.15)",
    )
    pkg = tmp_path / "pkg"
    (pkg / "mlflow_profiler").mkdir(parents=True)
    called = tmp_path / "called"
    (pkg / "mlflow_profiler" / "__init__.py").write_text(
        "__version__ = 'stand-in'\nfrom . import _autoprofile\n"
        f"def autoprofile(**kw):\n    open({str(called)!r}, 'w').write(repr(kw))\n"
    )
    (pkg / "mlflow_profiler" / "_autoprofile.py").write_text(
        "def is_enabled():\n    return False\n"
    )
    srv = server(exe)
    pid = srv.ready["pid"]
    assert srv.ready["python"] == "3.15"
    result = run_agent(
        agent_path,
        "--pid",
        str(pid),
        "--inject",
        "--inject-path",
        str(pkg),
        "--duration",
        "0.5",
        timeout=60,
    )
    assert (
        f"pid {pid} (Python 3.15." in result.stderr
        and "loaded mlflow_profiler stand-in from " in result.stderr
    ), result.stderr
    assert called.read_text() == "{'sample_rate': 0}"
    # The stand-in has no extension: the agent then waits for one, in vain (exit 7).
    assert result.returncode == 7, result.stderr
    assert leftovers(pid) == [] and srv.stderr == []

    off = server(exe, "-X", "disable-remote-debug")
    result = run_agent(agent_path, "--pid", str(off.ready["pid"]), "--inject", timeout=60)
    assert result.returncode == 7 and "-X disable-remote-debug is on its command line" in one_line(
        result.stderr
    )
