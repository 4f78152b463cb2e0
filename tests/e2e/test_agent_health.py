"""The agent's health signal for a kubelet's probes (docs/ebpf.md, "Health"),
on the real agent: `mlprof-ebpf --health FILE` against the file the agent
keeps with --health-file. A running agent is live and ready; an agent
frozen with SIGSTOP (its main loop stops draining the ring, as a deadlock
would) fails liveness once the loop's limit passes, and is live again after
SIGCONT; an agent whose PostgreSQL sink's server is stopped with SIGSTOP
during a delivery (the call hangs: libpq has no query timeout) fails
liveness once the call passes the sink limit, and is live again when the
server resumes and the item lands; a sink that refuses (server down) keeps
the agent live, the line saying it retries. The limits are cut to seconds
here (--max-loop-gap, --max-sink-call) so the test does not wait minutes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Callable, List, Optional, Tuple

from conftest import require

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))

from _postgres import PostgresServer  # noqa: E402


def probe(agent_path: str, health: str, *extra: str) -> subprocess.CompletedProcess:
    """One run of the probe, as the kubelet's exec runs it."""
    return subprocess.run(
        [agent_path, "--health", health, *extra], capture_output=True, text=True, timeout=10
    )


def wait_probe(
    agent_path: str,
    health: str,
    *extra: str,
    status: int,
    text: str = "",
    timeout: float = 30.0,
    until: Optional[Callable[[subprocess.CompletedProcess], bool]] = None,
) -> subprocess.CompletedProcess:
    """Probes every 0.2 s until the status is `status` with `text` in its
    line (and `until` holds for the result, where given)."""
    deadline = time.monotonic() + timeout
    while True:
        r = probe(agent_path, health, *extra)
        if r.returncode == status and text in r.stdout + r.stderr and (until is None or until(r)):
            return r
        assert time.monotonic() < deadline, (status, text, r.returncode, r.stdout, r.stderr)
        time.sleep(0.2)


def deliveries(line: str) -> Tuple[int, int]:
    """(delivered, waiting) from a probe's line ("...: 3 delivered, ..., 0 waiting")."""
    m = re.search(r": (\d+) delivered, .*?(\d+) waiting", line)
    assert m, line
    return int(m.group(1)), int(m.group(2))


def wait_delivered(agent_path: str, health: str, *extra: str, more_than: int) -> int:
    """Waits until more than `more_than` items are delivered and none waits.

    A command to the target may straddle a rotation (--rotate 1s) and make
    two items, so the count is read, not assumed."""

    def done(r: subprocess.CompletedProcess) -> bool:
        delivered, waiting = deliveries(r.stdout)
        return delivered > more_than and waiting == 0

    r = wait_probe(agent_path, health, *extra, status=0, until=done)
    return deliveries(r.stdout)[0]


def items_in(server: PostgresServer) -> List[str]:
    """The agent items the sink's database holds, one key per delivered item."""
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute("SELECT value FROM source_labels WHERE key = 'label.agent_item'")
        ]


def server_processes(server: PostgresServer) -> List[int]:
    """The cluster's postmaster and its children (the backends)."""
    with open(os.path.join(server.data, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry))
    return pids


def test_live_and_ready_not_when_frozen_or_wedged_yes_when_refused(
    agent, agent_path, python_target, tmp_path
):
    """One agent, one PostgreSQL sink: each state in turn (module docstring)."""
    require(os.geteuid() == 0, "root: the PostgreSQL server is stopped with SIGSTOP")
    server = PostgresServer()
    stopped: List[int] = []
    try:
        health = str(tmp_path / "health")
        target = python_target()
        run = agent(
            "--pid",
            str(target.pid),
            "--continuous",
            "--rotate",
            "1s",
            "--retry-max",
            "2s",
            "--sink",
            server.url,
            "--spool",
            str(tmp_path / "spool"),
            "--health-file",
            health,
        )
        run.wait_attached(target.pid)
        ready = wait_probe(agent_path, health, "--ready", status=0)
        assert ready.stdout.startswith("mlprof-ebpf: ready: the ring drained "), ready.stdout
        assert ready.stderr == ""
        live = probe(agent_path, health)
        assert live.returncode == 0 and live.stdout.startswith("mlprof-ebpf: live: "), (
            live.stdout,
            live.stderr,
        )
        assert ": 0 delivered, 0 waiting" in live.stdout, live.stdout

        # Frozen: the main loop stops draining the ring.
        run.proc.send_signal(signal.SIGSTOP)
        try:
            stuck = wait_probe(
                agent_path,
                health,
                "--max-loop-gap",
                "2s",
                status=1,
                text="stuck: the main loop last drained the ring buffer",
            )
            assert stuck.stdout == "" and len(stuck.stderr.splitlines()) == 1, stuck.stderr
            assert f"(pid {run.proc.pid};" in stuck.stderr
            # The default limit (60 s) is not past yet: still live.
            assert probe(agent_path, health).returncode == 0
            assert probe(agent_path, health, "--ready", "--max-loop-gap", "2s").returncode == 1
        finally:
            run.proc.send_signal(signal.SIGCONT)
        wait_probe(agent_path, health, "--max-loop-gap", "2s", status=0, timeout=10)

        # A first item delivered: the sink holds its connection open.
        target.ask("run nested 2")
        delivered = wait_delivered(agent_path, health, more_than=0)

        stopped = server_processes(server)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        target.ask("run nested 2")  # the next period's item: its call to the server hangs
        wedged = wait_probe(
            agent_path,
            health,
            "--max-sink-call",
            "3s",
            status=1,
            text="stuck: a call to the sink postgresql://postgres@127.0.0.1:",
        )
        assert (
            "the sink is wedged" in wedged.stderr and len(wedged.stderr.splitlines()) == 1
        ), wedged.stderr
        # Under the default limit (300 s) the same agent is live, the call in flight said.
        live = probe(agent_path, health)
        assert live.returncode == 0 and "a call in flight for " in live.stdout, (
            live.stdout,
            live.stderr,
        )
        assert probe(agent_path, health, "--ready").returncode == 0  # the loop itself runs on

        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        delivered = wait_delivered(agent_path, health, "--max-sink-call", "3s", more_than=delivered)

        # Refused (the server down): a retry, not a hang; live, saying why.
        server.stop()
        target.ask("run nested 2")
        refused = wait_probe(
            agent_path, health, "--max-sink-call", "3s", status=0, text="retrying: "
        )
        assert "1 waiting" in refused.stdout or "2 waiting" in refused.stdout, refused.stdout
        server.start()  # back: delivered, so SIGTERM's flush does not wait out its 10 s
        delivered = wait_delivered(agent_path, health, more_than=delivered)
        result = run.stop(signal.SIGTERM)
        assert result.returncode == 0, result.stderr
        # Each item the agent counts delivered (the file's last word, after
        # the flush) is in the database once: none lost, none twice.
        final, waiting = deliveries(probe(agent_path, health).stdout)
        keys = items_in(server)
        assert waiting == 0 and final >= delivered >= 3, (final, waiting, delivered)
        assert len(keys) == len(set(keys)) == final, (final, keys)
        # The file says stopping (not ready) from before the flush on.
        after = probe(agent_path, health, "--ready")
        assert after.returncode == 1 and "not ready: stopping" in after.stderr, (
            after.stdout,
            after.stderr,
        )
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        server.close()
