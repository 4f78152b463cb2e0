"""A Kubernetes node as the kubelet lays it out, for the agent's pod tests:
cgroups named as both cgroup drivers name them, the kubelet's pod log
directories, and containerd's and CRI-O's state files, under a host root
(--host-root). Made by tests/e2e/test_agent_pods.py and
test_agent_namespaces.py; tests/fixtures/k8s/README.md says where each
format comes from."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from typing import List

from conftest import require


def _mounts():
    """(v2 mount, v1 pids mount or None) from /proc/self/mountinfo."""
    v2 = v1_pids = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = right.split()
            if not fields:
                continue
            if fields[0] == "cgroup2" and v2 is None:
                v2 = left.split()[4]
            elif fields[0] == "cgroup" and "pids" in fields[-1].split(","):
                v1_pids = left.split()[4]
    return v2, v1_pids


class KubeNode:
    """Pods as the kubelet makes them: cgroups, log directories, runtime state."""

    def __init__(self, root: str):
        self.root = root
        self.v2, self.v1_pids = _mounts()
        require(self.v2 is not None, "no cgroup v2 mount")
        self.created: List[str] = []  # cgroup directories, in creation order

    # -- state files ------------------------------------------------------------

    def _write(self, rel: str, text: str) -> str:
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def logs(
        self,
        ns: str,
        pod: str,
        uid: str,
        container: str,
        cid: str,
        restart: int = 0,
        link: bool = True,
    ) -> None:
        """The kubelet's var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log and,
        with `link`, its var/log/containers/<pod>_<ns>_<container>-<id>.log."""
        log = self._write(f"var/log/pods/{ns}_{pod}_{uid}/{container}/{restart}.log", "")
        if link:
            os.makedirs(os.path.join(self.root, "var/log/containers"), exist_ok=True)
            os.symlink(
                log,
                os.path.join(self.root, "var/log/containers", f"{pod}_{ns}_{container}-{cid}.log"),
            )

    def containerd_bundle(self, ns: str, pod: str, uid: str, container: str, cid: str) -> None:
        """containerd's task bundle with the CRI plugin's annotations."""
        spec = {
            "ociVersion": "1.1.0",
            "process": {"args": ["python"]},
            "annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.container-name": container,
                "io.kubernetes.cri.sandbox-id": secrets.token_hex(32),
                "io.kubernetes.cri.sandbox-name": pod,
                "io.kubernetes.cri.sandbox-namespace": ns,
                "io.kubernetes.cri.sandbox-uid": uid,
            },
        }
        self._write(
            f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json",
            json.dumps(spec),
        )

    def crio_state(self, ns: str, pod: str, uid: str, container: str, cid: str) -> None:
        """CRI-O's saved spec, with the kubelet's labels as annotations."""
        spec = {
            "ociVersion": "1.0.2-dev",
            "annotations": {
                "io.kubernetes.cri-o.ContainerType": "container",
                "io.kubernetes.container.name": container,
                "io.kubernetes.pod.name": pod,
                "io.kubernetes.pod.namespace": ns,
                "io.kubernetes.pod.uid": uid,
            },
        }
        self._write(
            f"run/containers/storage/overlay-containers/{cid}/userdata/config.json",
            json.dumps(spec),
        )

    # -- cgroups ------------------------------------------------------------------

    def cgroup(self, driver: str, uid: str, cid: str, v1: bool = False) -> str:
        """Creates the container's cgroup (and its parents) as the kubelet's
        driver names it; returns its directory."""
        if driver == "systemd":
            u = uid.replace("-", "_")
            rel = (
                "kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{u}.slice/cri-containerd-{cid}.scope"
            )
        else:
            rel = f"kubepods/besteffort/pod{uid}/{cid}"
        base = self.v1_pids if v1 else self.v2
        path = base
        for part in rel.split("/"):
            path = os.path.join(path, part)
            if not os.path.isdir(path):
                os.mkdir(path)
                self.created.append(path)
        return path

    @staticmethod
    def place(pid: int, cgroup: str) -> None:
        """Moves process `pid` into `cgroup` (what the runtime does at start)."""
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self, cgroup: str) -> None:
        """Removes one container cgroup (its processes already gone), as the runtime does."""
        self._rmdir(cgroup)
        if cgroup in self.created:
            self.created.remove(cgroup)

    @staticmethod
    def _rmdir(path: str) -> None:
        """rmdir, retried while the kernel still holds the cgroup (its last process exiting)."""
        deadline = time.monotonic() + 5
        while True:
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def cleanup(self) -> None:
        """Kills what is left in our cgroups (only our processes are put
        there) and removes them, deepest first."""
        for path in reversed(self.created):
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            except FileNotFoundError:
                continue
        for path in reversed(self.created):
            try:
                self._rmdir(path)
            except OSError:
                pass  # a parent another run still uses (kubepods.slice): left as it is
