"""`mlprof-ebpf --help` and docs/ebpf.md, "Privileges", name the same
capabilities, and the same condition for CAP_DAC_READ_SEARCH (not uid 0,
--container by name), and that condition holds for real: as uid nobody
with the three capabilities, --container NAME is refused in one line naming
CAP_DAC_READ_SEARCH, the same container by id is not, and NAME is found
once CAP_DAC_READ_SEARCH is added."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from conftest import require

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def privileges_table() -> dict:
    """capability -> its 'for' cell, from docs/ebpf.md's Privileges table."""
    with open(os.path.join(REPO, "docs", "ebpf.md")) as f:
        text = f.read()
    section = text[text.index("\n## Privileges\n") :]
    section = section[: section.index("\n## ", 1)]
    return dict(re.findall(r"^\| `(CAP_[A-Z_]+)` \| (.*) \|$", section, re.M))


def test_help_and_docs_name_the_same_capabilities(agent_path):
    help_text = " ".join(
        subprocess.run(
            [agent_path, "--help"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    m = re.search(
        r"Needs root, or (.*?); not as uid 0, --container by name also needs (CAP_[A-Z_]+)",
        help_text,
    )
    assert m, help_text[:600]
    always = set(re.findall(r"CAP_[A-Z_]+", m.group(1)))
    table = privileges_table()
    conditional = {cap for cap, why in table.items() if why.startswith("only when")}
    assert always == set(table) - conditional == {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"}, (
        always,
        table,
    )
    assert conditional == {m.group(2)} == {"CAP_DAC_READ_SEARCH"}
    why = table["CAP_DAC_READ_SEARCH"]
    assert "not uid 0" in why and "`--container` names a container by name" in why, why


def test_dac_read_search_only_for_a_container_by_name_when_not_root(agent_path):
    """As uid nobody with CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (ambient):
    --container NAME cannot read Podman's state (exit 4, the line names
    CAP_DAC_READ_SEARCH); by id it finds the container; with
    CAP_DAC_READ_SEARCH added, by name too. The container runs no Python, so
    a found container ends with no session (exit 6)."""
    require(shutil.which("podman") is not None, "podman is needed (apt-get install podman)")
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) sets the uid and capabilities")
    name = "mlprof-docs-caps"
    subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
    run = subprocess.run(
        [
            "podman",
            "run",
            "-d",
            "--name",
            name,
            "--runtime",
            "runc",
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--rootfs",
            "/:O",
            "sleep",
            "300",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    require(run.returncode == 0, f"podman run failed: {run.stderr.strip()[-500:]}")
    cid = run.stdout.strip()
    home = tempfile.mkdtemp(prefix="mlprof-docs-", dir="/tmp")  # nobody can reach and run it here
    try:
        os.chmod(home, 0o755)
        agent = os.path.join(home, "mlprof-ebpf")
        shutil.copy(agent_path, agent)
        os.chmod(agent, 0o755)

        def as_nobody(caps: str, target: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [
                    setpriv,
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    f"--inh-caps={caps}",
                    f"--ambient-caps={caps}",
                    agent,
                    "--container",
                    target,
                    "--duration",
                    "1",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )

        three = "+bpf,+perfmon,+sys_ptrace"
        by_name = as_nobody(three, name)
        assert by_name.returncode == 4, by_name.stderr
        line = by_name.stderr.strip().splitlines()[-1]
        assert (
            line.startswith(f"mlprof-ebpf: container '{name}' not found")
            and "CAP_DAC_READ_SEARCH" in line
        ), line
        by_id = as_nobody(three, cid[:12])
        assert by_id.returncode == 6 and "CAP_DAC_READ_SEARCH" not in by_id.stderr, by_id.stderr
        with_dac = as_nobody(three + ",+dac_read_search", name)
        assert with_dac.returncode == 6, with_dac.stderr
    finally:
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
