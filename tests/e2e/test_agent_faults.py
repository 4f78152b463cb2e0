"""What a user gets when something is wrong: lost events (in the output and
the exit status), a container name that matches nothing, no privileges, the
minimal capabilities, no BTF, a bad command line. Each is one clear line and
its own exit status (docs/ebpf.md)."""

from __future__ import annotations

import os
import shutil

from conftest import Document, require, run_agent

EXIT_OK, EXIT_USAGE, EXIT_PRIVILEGE, EXIT_NO_TARGET, EXIT_LOST = 0, 2, 3, 4, 5


def one_line(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mlprof-ebpf: ")
    return lines[0]


def test_lost_events_are_in_the_output_and_the_exit_status(agent, native_target, tmp_out):
    # A 4 KiB ring buffer and a storm of 200k spans: the kernel must drop records.
    target = native_target()
    out = tmp_out / "lost.json"
    run = agent("--pid", str(target.pid), "--ring-kb", "4", "-o", str(out))
    run.wait_attached(target.pid)
    target.ask("run storm 200000", timeout=120)
    result = run.stop()
    assert result.returncode == EXIT_LOST, result.stderr
    assert "events were lost (the ring buffer was full)" in result.stderr
    doc = Document(str(out))
    assert doc.lost_events > 0
    assert "lost" in result.stdout  # the summary says it too


def test_no_lost_events_with_the_default_ring_exit_zero(agent, native_target, tmp_out):
    target = native_target()
    out = tmp_out / "fine.json"
    run = agent("--pid", str(target.pid), "-o", str(out))
    run.wait_attached(target.pid)
    target.ask("run storm 2000")
    result = run.stop()
    assert result.returncode == EXIT_OK, result.stderr
    assert Document(str(out)).lost_events == 0


def test_a_container_name_matching_nothing_is_one_line_and_exit_4(agent_path):
    r = run_agent(agent_path, "--container", "no-such-container-mlprof-e2e")
    assert r.returncode == EXIT_NO_TARGET
    line = one_line(r.stderr)
    assert "container 'no-such-container-mlprof-e2e' not found" in line


def test_no_such_pid_is_one_line_and_exit_4(agent_path):
    r = run_agent(agent_path, "--pid", "1073741808")
    assert r.returncode == EXIT_NO_TARGET
    assert "no process 1073741808" in one_line(r.stderr)


def test_not_root_is_one_line_and_exit_3(agent_path):
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) runs the agent as nobody")
    r = run_agent(
        agent_path,
        "--pid",
        str(os.getpid()),
        wrapper=[setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"],
    )
    assert r.returncode == EXIT_PRIVILEGE
    line = one_line(r.stderr)
    assert "not privileged (missing CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)" in line
    assert "sudo" in line and "setcap" in line


def test_the_documented_minimal_capabilities_are_enough(agent, native_target, tmp_out):
    # Root's capabilities cut to CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE
    # (docs/ebpf.md): the agent loads, attaches and captures.
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) cuts the capabilities")
    target = native_target()
    out = tmp_out / "caps.json"
    run = agent(
        "--pid",
        str(target.pid),
        "-o",
        str(out),
        wrapper=[setpriv, "--bounding-set=-all,+bpf,+perfmon,+sys_ptrace", "--inh-caps=-all"],
    )
    run.wait_attached(target.pid)
    target.ask("run sleep")
    result = run.stop()
    assert result.returncode == EXIT_OK, result.stderr
    assert len(Document(str(out)).roots_of(target.pid)) == 1


def test_without_cap_sys_ptrace_the_line_names_it(agent_path):
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) cuts the capabilities")
    r = run_agent(
        agent_path,
        "--pid",
        str(os.getpid()),
        wrapper=[setpriv, "--bounding-set=-all,+bpf,+perfmon", "--inh-caps=-all"],
    )
    assert r.returncode == EXIT_PRIVILEGE
    assert "missing CAP_SYS_PTRACE" in one_line(r.stderr)


def test_no_btf_is_one_line_and_exit_3(agent_path):
    # This kernel has BTF, so its absence cannot be caused for real here: the
    # agent's check reads MLPROF_VMLINUX_BTF instead of /sys/kernel/btf/vmlinux.
    env = dict(os.environ, MLPROF_VMLINUX_BTF="/nonexistent/vmlinux")
    r = run_agent(agent_path, "--pid", str(os.getpid()), env=env)
    assert r.returncode == EXIT_PRIVILEGE
    assert "no kernel BTF at /nonexistent/vmlinux" in one_line(r.stderr)


def test_usage_errors_are_one_line_and_exit_2(agent_path):
    for args in ([], ["--pid", "abc"], ["--all", "--format", "xml"], ["--all", "--bogus"]):
        r = run_agent(agent_path, *args)
        assert r.returncode == EXIT_USAGE, (args, r.stderr)
        one_line(r.stderr)
