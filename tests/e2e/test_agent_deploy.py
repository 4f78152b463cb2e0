"""deploy/daemonset.yaml played for real by `podman kube play` (podman >= 4.7
plays a DaemonSet as one pod from its template; .ci/run builds podman 4.9.5
from its Go module, since Debian 12's 4.3.1 refuses the kind and ignores
hostPID): deploy/build-image.sh's image, beside an autoprofiled Python
target on this host. Checked: the continuous agent's profiles in the
hostPath directory hold the target's predict() sessions, the pod's log
(what `kubectl logs` shows) has the rotation's summary line counting them,
the agent runs with exactly CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE and no
seccomp filter (enough to write the hostPaths), on a read-only root
filesystem whose only writable directories are the manifest's volumes, and
its liveness and readiness commands pass; the liveness probe (podman's
healthcheck) fails for a frozen agent and passes once it runs again; a manifest without
hostPID, a capability or the seccomp setting gets one line naming the
field, and its exit status.

No kubelet, API server or scheduler runs here: deploy/README.md says what
this proves and what it does not. One field is changed for the runner
(asserted): NODE_NAME's fieldRef spec.nodeName becomes this host's name
(podman implements no spec.nodeName; the kubelet would set the node's
name), and every hostPath becomes a temporary directory (not this host's
/var/lib/mlprof and /var/log: no kubelet here, so no pod logs either)."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest
import yaml
from conftest import Document, require

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(REPO, "deploy", "daemonset.yaml")
POD = "mlprof-ebpf-pod"  # podman names a DaemonSet's pod <name>-pod
CONTAINER = "mlprof-ebpf-pod-agent"  # and its containers <pod>-<container>
# The runner's own storage, so that it never touches the host podman's.
STORAGE = [
    "--root",
    "/var/lib/mlprof-kube/storage",
    "--runroot",
    "/run/mlprof-kube/storage",
    "--tmpdir",
    "/run/mlprof-kube/libpod",
]
CAPS = (1 << 39) | (1 << 38) | (1 << 19)  # CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE


def podman_version(exe: str) -> Optional[tuple]:
    """(major, minor) of `exe --version`, or None."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    """The runner: $MLPROF_KUBE_PODMAN, .ci/run's /opt/mlprof-kube/bin/podman,
    or a podman on PATH, whichever is >= 4.7; with runc and this VM's ulimits
    (crun refuses the hybrid cgroups here; docs/ebpf.md, troubleshooting)."""
    candidates = [
        os.environ.get("MLPROF_KUBE_PODMAN", ""),
        "/opt/mlprof-kube/bin/podman",
        shutil.which("podman") or "",
    ]
    exe = next((c for c in candidates if c and (podman_version(c) or (0, 0)) >= (4, 7)), None)
    require(
        exe is not None,
        "a podman >= 4.7 is needed to play a DaemonSet (.ci/run builds 4.9.5; "
        "set MLPROF_KUBE_PODMAN)",
    )
    conf = tmp_path_factory.mktemp("kube") / "containers.conf"
    conf.write_text(
        '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        '[engine]\nruntime = "runc"\n'
    )
    env = dict(os.environ, CONTAINERS_CONF_OVERRIDE=str(conf))

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [exe, *STORAGE, *args], capture_output=True, text=True, env=env, timeout=timeout
        )
        if check:
            assert r.returncode == 0, f"podman {' '.join(args)}: {r.stderr[-2000:]}"
        return r

    run.exe = exe
    run.env = env
    return run


@pytest.fixture(scope="module")
def image(kube, agent_path):
    """build-image.sh's image, under the manifest's image reference."""
    ref = re.search(r"^\s*image:\s*(\S+)", Path(MANIFEST).read_text(), re.M).group(1)
    build = subprocess.run(
        [os.path.join(REPO, "deploy", "build-image.sh"), agent_path, ref],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(kube.env, PODMAN=" ".join([kube.exe, *STORAGE])),
    )
    assert build.returncode == 0, build.stderr
    yield ref
    kube("rmi", "-f", ref, check=False)


def manifest(host_dir: str, edits: List[tuple] = ()) -> str:
    """The DaemonSet with the runner's changes (module docstring), the
    hostPaths under `host_dir`, plus a test's `edits` (old, new); each
    must apply exactly once."""
    text = Path(MANIFEST).read_text()
    changes = [
        ("valueFrom: {fieldRef: {fieldPath: spec.nodeName}}", f'value: "{socket.gethostname()}"'),
        ("{path: /var/lib/mlprof/profiles,", f"{{path: {host_dir}/profiles,"),
        ("{path: /var/lib/mlprof/spool,", f"{{path: {host_dir}/spool,"),
        ("{path: /var/log/pods,", f"{{path: {host_dir}/log/pods,"),
        ("{path: /var/log/containers,", f"{{path: {host_dir}/log/containers,"),
        *edits,
    ]
    for old, new in changes:
        assert text.count(old) == 1, f"the manifest changed: {old!r} is not in it once"
        text = text.replace(old, new)
    return text


class Played:
    """A manifest played; `kube down` at the end."""

    def __init__(self, kube, path):
        self.kube, self.path = kube, path

    def logs(self) -> str:
        r = self.kube("logs", CONTAINER, check=False)
        return r.stdout + r.stderr

    def wait_log(self, pattern: str, count: int = 1, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.logs()
            if len(re.findall(pattern, text, re.M)) >= count:
                return text
            time.sleep(0.3)
        raise AssertionError(
            f"{count} x {pattern!r} never in the agent's log:\n{self.logs()[-3000:]}"
        )

    def inspect(self, fmt: str) -> str:
        return self.kube("inspect", "-f", fmt, CONTAINER).stdout.strip()


@pytest.fixture
def play(kube, image, tmp_path):
    played = []

    def start(text: str) -> Played:
        path = tmp_path / f"daemonset-{len(played)}.yaml"
        path.write_text(text)
        kube("kube", "down", str(path), check=False)
        kube("pod", "rm", "-f", POD, check=False)
        kube("kube", "play", str(path))
        p = Played(kube, path)
        played.append(p)
        return p

    yield start
    for p in played:
        kube("kube", "down", str(p.path), check=False)


def mounts_of(pid: int) -> dict:
    """Mount point -> its options (per mount and per superblock), as the
    kernel reports them for `pid`'s mount namespace."""
    out = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, super_fields = left.split(), right.split()
        out[fields[4]] = set(fields[5].split(",")) | set(super_fields[2].split(","))
    return out


def test_the_manifest_fields_an_sre_checks():
    """What podman cannot play (it ignores them), read from the manifest as
    the API server would: no token, a priority class of its own that never
    preempts, no NoExecute toleration, the control plane left out, every
    writable path a volume, both probes the health command."""
    docs = list(yaml.safe_load_all(Path(MANIFEST).read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"PriorityClass", "DaemonSet"}
    pc, ds = kinds["PriorityClass"], kinds["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["priorityClassName"] == pc["metadata"]["name"]
    assert pc["preemptionPolicy"] == "Never" and 0 < pc["value"] < 1_000_000_000  # below system-*
    assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoSchedule"}]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"} in terms[0][
        "matchExpressions"
    ]
    (agent,) = spec["containers"]
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    args = agent["args"]
    health = args[args.index("--health-file") + 1]
    writable = {args[args.index("--spool") + 1], os.path.dirname(health)}
    if args[args.index("--sink") + 1].startswith("/"):
        writable.add(args[args.index("--sink") + 1])
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    for path in writable:
        assert path in mounts and not mounts[path].get("readOnly"), path
    assert all(m.get("readOnly") for p, m in mounts.items() if p not in writable), mounts
    probe = ["/usr/local/bin/mlprof-ebpf", "--health", health]
    assert agent["livenessProbe"]["exec"]["command"] == probe
    assert agent["readinessProbe"]["exec"]["command"] == probe + ["--ready"]


def test_the_manifest_is_made_of_kubernetes_api_objects(tmp_path):
    """deploy/check-manifest.py: every field of both documents is a field of
    its API type, with a value of the right kind, and the required fields are
    there, as the Kubernetes Python client's models (generated from the API's
    OpenAPI schema) say; so the fields podman ignores are checked against the
    API itself. A typo is named. The client runs in its own interpreter
    (MLPROF_K8S_PYTHON; CI's venv-tools), away from MLflow's pins."""
    python = os.environ.get("MLPROF_K8S_PYTHON", sys.executable)
    has = subprocess.run([python, "-c", "import kubernetes, yaml"], capture_output=True)
    require(
        has.returncode == 0,
        "the Kubernetes Python client is needed (pip install kubernetes pyyaml; "
        "MLPROF_K8S_PYTHON=the python that has it)",
    )
    script = os.path.join(REPO, "deploy", "check-manifest.py")
    ok = subprocess.run([python, script, MANIFEST], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        Path(MANIFEST)
        .read_text()
        .replace("automountServiceAccountToken", "automountServiceAcountToken")
    )
    bad = subprocess.run([python, script, str(typo)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        f"{typo}: document 2 (DaemonSet): DaemonSet.spec.template.spec.automountServiceAcountToken: "
        "not a field of V1PodSpec"
    ], bad.stderr


def test_daemonset_captures_the_targets_sessions(play, python_target, tmp_path):
    target = python_target()
    pod = play(manifest(str(tmp_path)))
    pod.wait_log(rf"attached to pid {target.pid} \(python")
    # Only these capabilities, no seccomp filter, the host's pids (read from the process itself).
    pid = int(pod.inspect("{{.State.Pid}}"))
    status = dict(
        line.split(":\t", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":\t" in line
    )
    assert int(status["CapEff"], 16) == CAPS, status["CapEff"]
    assert int(status["CapBnd"], 16) == CAPS, status["CapBnd"]
    assert int(status["CapPrm"], 16) == CAPS, status["CapPrm"]
    assert status["Seccomp"].strip() == "0"
    assert status["NoNewPrivs"].strip() == "1"  # allowPrivilegeEscalation: false
    assert os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")  # hostPID
    assert pod.inspect("{{.HostConfig.CpuQuota}}") != "0"  # the CPU limit is applied
    assert pod.inspect("{{.Config.Env}}").count(f"NODE_NAME={socket.gethostname()}") == 1
    # The hostPaths, created by the runtime (DirectoryOrCreate).
    assert (tmp_path / "profiles").is_dir() and (tmp_path / "spool").is_dir()
    # readOnlyRootFilesystem, as the kernel has it: / read-only, the
    # directories the agent writes are the manifest's volumes.
    mounts = mounts_of(pid)
    assert "ro" in mounts["/"], mounts["/"]
    for path in ("/var/lib/mlprof/profiles", "/var/lib/mlprof/spool", "/run/mlprof"):
        assert "rw" in mounts[path], (path, mounts.get(path))
    assert "/var/lib/mlprof" not in mounts, sorted(mounts)
    # The probes' commands, run in the container as the kubelet runs them
    # (podman plays the liveness probe as its healthcheck, and no readiness probe).
    assert "--health" in pod.inspect("{{.Config.Healthcheck.Test}}")
    # What the agent wrote outside its volumes, in the tmpfs mounts podman adds
    # (/tmp, /var/tmp, /run) that a kubelet would not: nothing.
    root = Path(f"/proc/{pid}/root")
    calls = target.ask("run nested 5")["calls"]  # sessions first, so the agent works meanwhile
    assert len(calls) == 5
    time.sleep(1.5)  # a health write or two
    leftovers = [
        str(p.relative_to(root))
        for d in ("tmp", "var/tmp", "run")
        if (root / d).is_dir()
        for p in (root / d).rglob("*")
        if not str(p.relative_to(root)).startswith(
            ("run/mlprof", "run/.containerenv", "run/secrets")
        )
    ]
    assert leftovers == [], leftovers
    live = pod.kube("healthcheck", "run", CONTAINER, check=False)
    assert live.returncode == 0, (live.stdout, live.stderr)
    ready = pod.kube(
        "exec",
        CONTAINER,
        "/usr/local/bin/mlprof-ebpf",
        "--health",
        "/run/mlprof/health",
        "--ready",
        check=False,
    )
    assert ready.returncode == 0 and ready.stdout.startswith("mlprof-ebpf: ready: "), (
        ready.stdout,
        ready.stderr,
    )

    # SIGTERM (a pod's end): the partial period goes through the spool to the
    # profiles directory, the log says so, and the agent exits 0.
    pod.kube("pod", "stop", "-t", "60", POD)
    log = pod.logs()
    assert pod.inspect("{{.State.ExitCode}}") == "0", log[-3000:]
    periods = [
        int(n) for n in re.findall(r"^mlprof-ebpf: period .*?, (\d+) sessions?, ", log, re.M)
    ]
    assert sum(periods) >= 5, log[-3000:]  # the target's 5, and any other process's
    assert re.search(
        r"^mlprof-ebpf: stopped: delivered [1-9]\d*, spooled 0, dropped 0", log, re.M
    ), log[-3000:]
    roots = 0
    for item in sorted((tmp_path / "profiles").glob("*.json.gz")):
        plain = tmp_path / (item.name[:-3])  # conftest's Document reads plain JSON
        plain.write_bytes(gzip.decompress(item.read_bytes()))
        roots += len(Document(str(plain)).roots_of(target.pid))
    assert roots == 5, sorted(p.name for p in (tmp_path / "profiles").iterdir())


def test_daemonset_liveness_probe_fails_for_a_frozen_agent(play, tmp_path):
    """The manifest's liveness probe, as podman plays it (its healthcheck),
    fails once the agent's main loop stops draining the ring (SIGSTOP
    freezes it, as a deadlock would) and passes again after SIGCONT. Cut for
    the test: the probe's limit, from 60 s to 3 s. The healthcheck is run by
    hand (podman's timer needs systemd); podman 4.9.5 does not restart the
    container on it (kube play gives the container no restart policy, so its
    on-failure action is none), which the kubelet does."""
    pod = play(
        manifest(
            str(tmp_path),
            [
                (
                    'exec: {command: ["/usr/local/bin/mlprof-ebpf", "--health", "/run/mlprof/health"]}',
                    'exec: {command: ["/usr/local/bin/mlprof-ebpf", "--health", "/run/mlprof/health", "--max-loop-gap", "3s"]}',
                )
            ],
        )
    )
    pod.wait_log(r"^mlprof-ebpf: watching ")
    pid = int(pod.inspect("{{.State.Pid}}"))
    ok = pod.kube("healthcheck", "run", CONTAINER, check=False)
    assert ok.returncode == 0 and ok.stdout.strip() == "", (ok.stdout, ok.stderr)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(4)
        # failureThreshold (3) failures in a row: the container is unhealthy.
        runs = [pod.kube("healthcheck", "run", CONTAINER, check=False) for _ in range(3)]
        assert [(r.returncode, r.stdout.strip()) for r in runs] == [(1, "unhealthy")] * 3, runs
        assert pod.inspect("{{.State.Health.Status}}") == "unhealthy"
        log = pod.inspect("{{json .State.Health.Log}}")
        assert "stuck: the main loop last drained the ring buffer" in log, log
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while (again := pod.kube("healthcheck", "run", CONTAINER, check=False)).returncode != 0:
        assert time.monotonic() < deadline, (again.stdout, again.stderr)
        time.sleep(0.5)
    assert pod.inspect("{{.State.Health.Status}}") == "healthy"


@pytest.mark.parametrize(
    "edit, line, status",
    [
        # No hostPID: the agent sees only its own container; exit 8.
        (("hostPID: true", "hostPID: false"), "run the pod with hostPID: true", "8"),
        # A capability short: exit 3, naming the field that grants it.
        (
            ('add: ["BPF", "PERFMON", "SYS_PTRACE"]', 'add: ["BPF", "PERFMON"]'),
            "missing CAP_SYS_PTRACE",
            "3",
        ),
        # The runtime's default seccomp profile: exit 3, naming seccompProfile.
        (
            (
                "container.seccomp.security.alpha.kubernetes.io/agent: unconfined",
                "container.seccomp.security.alpha.kubernetes.io/agent: runtime/default",
            ),
            "securityContext.seccompProfile: {type: Unconfined}",
            "3",
        ),
    ],
    ids=["no-hostPID", "no-SYS_PTRACE", "default-seccomp"],
)
def test_daemonset_missing_a_setting_says_which(play, tmp_path, edit, line, status):
    pod = play(manifest(str(tmp_path), [edit]))
    text = pod.wait_log(re.escape(line))
    first = next(l for l in text.splitlines() if line in l)
    assert first.startswith("mlprof-ebpf: ")
    if status == "3" and "CAP_" in line:
        assert "securityContext.capabilities.add" in first
    # The pod restarts it (restartPolicy Always); every run ends with the same
    # status, which `podman wait` gives for the next exit (inspect can catch
    # the container already restarted, with its exit code reset to 0). `wait`
    # polls: at its default 250 ms it can miss every exit of an agent that
    # exits at once and is restarted within the interval (it hung 60 s in CI,
    # the default-seccomp case); at 10 ms the exited state is seen.
    waited = pod.kube("wait", "--interval", "10ms", CONTAINER, timeout=60)
    assert waited.stdout.strip() == status, (waited.stdout, text[-2000:])
