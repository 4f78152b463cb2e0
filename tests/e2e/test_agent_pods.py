"""mlprof-ebpf --pod NAMESPACE/NAME[/CONTAINER] and the pod labels of --all,
end to end: real autoprofiled Python processes placed (as root) into real
cgroups laid out exactly as the kubelet lays them out, for both cgroup
drivers, on the cgroup v2 mount and on a v1 hierarchy of this hybrid host:

  systemd:  kubepods.slice/kubepods-burstable.slice/
            kubepods-burstable-pod<uid with '_'>.slice/cri-containerd-<64 hex>.scope
  cgroupfs: kubepods/besteffort/pod<uid>/<64 hex>   (v2, and v1 under pids/)

beside the node state the agent reads for names, under a temporary host
root (--host-root): containerd's task bundles
(run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json),
CRI-O's (run/containers/storage/overlay-containers/<id>/userdata/config.json),
the kubelet's pod log directories (var/log/pods/<ns>_<pod>_<uid>/<container>/)
and its /var/log/containers links.

No kubelet and no CRI runtime run here: the tests create the cgroups and
write the state files themselves, in the formats containerd, CRI-O and the
kubelet use (tests/fixtures/k8s/README.md says where each comes from). What
this proves is the agent's side: from /proc/PID/cgroup and those files to
the right processes and labels. The cgroups are removed at the end, also
when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import uuid

import pytest
from _kube import KubeNode
from conftest import Document, run_agent

NS = "mlprof-e2e"
NODE = "e2e-node-1"


@pytest.fixture
def node(tmp_path, agent_path):
    """A KubeNode under a temporary host root; its cgroups removed at the end."""
    n = KubeNode(str(tmp_path / "host"))
    os.makedirs(n.root)
    yield n
    n.cleanup()


def new_pod(prefix: str):
    """A pod name unique to this run, and a pod uid."""
    return f"{prefix}-{secrets.token_hex(3)}", str(uuid.uuid4())


def agent_env() -> dict:
    """The agent's environment, with the node name the DaemonSet's downward API gives."""
    env = dict(os.environ)
    env["NODE_NAME"] = NODE
    return env


def sleeper(cgroup: str) -> subprocess.Popen:
    """A `sleep` placed in `cgroup`: a process of a pod that is not Python."""
    p = subprocess.Popen(["sleep", "300"])
    KubeNode.place(p.pid, cgroup)
    return p


def test_pods_by_name_both_drivers_and_all_labels_each_process(agent, python_target, node, tmp_out):
    # P1: systemd driver on v2, containerd state, two containers.
    p1, uid1 = new_pod("scorer")
    model_id, side_id = secrets.token_hex(32), secrets.token_hex(32)
    for name, cid in (("model", model_id), ("sidecar", side_id)):
        node.containerd_bundle(NS, p1, uid1, name, cid)
        node.logs(NS, p1, uid1, name, cid)
    # P2: cgroupfs driver on v2, names only from the pod's log directory.
    p2, uid2 = new_pod("ranker")
    b_id = secrets.token_hex(32)
    node.logs(NS, p2, uid2, "main", b_id, link=False)

    a, s, b = (python_target() for _ in range(3))
    node.place(a.pid, node.cgroup("systemd", uid1, model_id))
    node.place(s.pid, node.cgroup("systemd", uid1, side_id))
    node.place(b.pid, node.cgroup("cgroupfs", uid2, b_id))

    # The pod: both of its containers, nothing else.
    out = tmp_out / "p1.json"
    run = agent("--pod", f"{NS}/{p1}", "--host-root", node.root, "-o", str(out), env=agent_env())
    run.wait_attached(a.pid)
    run.wait_attached(s.pid)
    a.ask("run nested 2")
    s.ask("run nested 1")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert f"attached to pid {b.pid} " not in result.stderr
    doc = Document(str(out))
    assert len(doc.roots_of(a.pid)) == 2 and len(doc.roots_of(s.pid)) == 1
    assert doc.roots_of(b.pid) == []
    assert (doc.meta["namespace"], doc.meta["pod"], doc.meta["node"]) == (NS, p1, NODE)
    assert doc.meta["pod_uid"] == uid1
    assert "container" not in doc.meta  # two containers: the document keeps what they share
    assert doc.meta["pods"] == f"{NS}/{p1}/model={a.pid} {NS}/{p1}/sidecar={s.pid}"
    assert (
        result.stdout.splitlines()[0]
        == f"pods {NS}/{p1}/model (pid {a.pid}), {NS}/{p1}/sidecar (pid {s.pid}), node {NODE}"
    )

    # One container of it, its sessions' text headers naming it.
    run = agent(
        "--pod", f"{NS}/{p1}/sidecar", "--host-root", node.root, "--stream", env=agent_env()
    )
    run.wait_attached(s.pid)
    s.ask("run nested 1")
    result = run.stop()
    assert f"attached to pid {a.pid} " not in result.stderr
    assert re.search(
        rf"^pid {s.pid} session \d+ in pod {NS}/{p1}/sidecar: ", result.stdout, re.M
    ), result.stdout

    # cgroupfs on v2, with names from /var/log/pods only.
    out = tmp_out / f"{p2}.json"
    run = agent("--pod", f"{NS}/{p2}", "--host-root", node.root, "-o", str(out), env=agent_env())
    run.wait_attached(b.pid)
    b.ask("run nested 1")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    meta = Document(str(out)).meta
    assert (meta["namespace"], meta["pod"], meta["container"]) == (NS, p2, "main")
    assert meta["container_id"] == b_id and meta["node"] == NODE

    # --all: every process its own pod (other processes on this host are
    # not looked at: only ours are asserted on).
    out = tmp_out / "all.json"
    run = agent("--all", "--host-root", node.root, "--stream", "-o", str(out), env=agent_env())
    for t in (a, s, b):
        run.wait_attached(t.pid)
    for t in (a, s, b):
        t.ask("run nested 1")
    result = run.stop()
    for t, path in ((a, f"{NS}/{p1}/model"), (s, f"{NS}/{p1}/sidecar"), (b, f"{NS}/{p2}/main")):
        assert re.search(
            rf"^pid {t.pid} session \d+ in pod {path}: ", result.stdout, re.M
        ), result.stdout
        assert f"{path}={t.pid}" in Document(str(out)).meta["pods"].split()


def test_a_pod_on_a_v1_hierarchy_with_crio_state(agent, python_target, node, tmp_out):
    """A kubelet driving the v1 hierarchies of a hybrid host: the pod is on
    a v1 line of /proc/PID/cgroup only (cgroupfs layout under pids/), its
    names in CRI-O's saved spec. A host with cgroup v2 alone has no v1
    hierarchy to lay it out in: the test skips there, saying so."""
    if node.v1_pids is None:
        pytest.skip(
            "this host has no cgroup v1 pids hierarchy (cgroup v2 only): no v1 layout to test"
        )
    pod, uid = new_pod("worker")
    cid = secrets.token_hex(32)
    node.crio_state(NS, pod, uid, "worker", cid)
    node.logs(NS, pod, uid, "worker", cid)
    target = python_target()
    node.place(target.pid, node.cgroup("cgroupfs", uid, cid, v1=True))
    with open(f"/proc/{target.pid}/cgroup") as f:
        lines = f.read().splitlines()
    assert any(f"pod{uid}/{cid}" in line for line in lines if not line.startswith("0::"))
    assert not any(uid in line for line in lines if line.startswith("0::"))

    out = tmp_out / "v1.json"
    run = agent(
        "--pod", f"{NS}/{pod}/worker", "--host-root", node.root, "-o", str(out), env=agent_env()
    )
    run.wait_attached(target.pid)
    target.ask("run nested 1")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    meta = Document(str(out)).meta
    assert (meta["namespace"], meta["pod"], meta["container"]) == (NS, pod, "worker")
    assert (meta["pod_uid"], meta["container_id"], meta["node"]) == (uid, cid, NODE)


def test_a_name_matching_nothing_or_several_lists_the_candidates(agent_path, node):
    dup, uid_old = new_pod("trainer")
    uid_new = str(uuid.uuid4())
    procs = []
    try:
        for uid in (uid_old, uid_new):  # the pod recreated while the old one still runs
            cid = secrets.token_hex(32)
            node.logs(NS, dup, uid, "train", cid)
            procs.append(sleeper(node.cgroup("cgroupfs", uid, cid)))
        env = agent_env()
        r = run_agent(agent_path, "--pod", f"{NS}/nothing-here", "--host-root", node.root, env=env)
        assert r.returncode == 4, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert (
            f"pod '{NS}/nothing-here' not found on this node; pods with processes here: "
            in r.stderr
        )
        assert f"{NS}/{dup} (train)" in r.stderr

        r = run_agent(agent_path, "--pod", f"{NS}/{dup}", "--host-root", node.root, env=env)
        assert r.returncode == 4, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"pod '{NS}/{dup}' matches 2 pods on this node" in r.stderr
        assert f"uid {uid_old} (cgroup /kubepods/besteffort/pod{uid_old})" in r.stderr
        assert f"uid {uid_new}" in r.stderr

        gone = procs.pop()  # one of the two pods ends: one pod left, but no such container
        gone.kill()
        gone.wait()
        r = run_agent(agent_path, "--pod", f"{NS}/{dup}/serve", "--host-root", node.root, env=env)
        assert r.returncode == 4, r.stderr
        assert (
            f"pod {NS}/{dup} has no container 'serve' with processes on this node; its containers: train"
            in r.stderr
        )
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_runtime_state_missing_or_unreadable_names_from_pod_logs(
    agent, python_target, node, tmp_out, tmp_path
):
    pod, uid = new_pod("scorer")
    cid, side = secrets.token_hex(32), secrets.token_hex(32)
    target = python_target()
    node.place(target.pid, node.cgroup("systemd", uid, cid))
    # The pod has two containers: only the kubelet's link says which one this is.
    node.logs(NS, pod, uid, "model", cid)
    node.logs(NS, pod, uid, "sidecar", side)

    # No runtime state at all under the host root.
    out = tmp_out / "missing.json"
    run = agent(
        "--pod", f"{NS}/{pod}/model", "--host-root", node.root, "-o", str(out), env=agent_env()
    )
    run.wait_attached(target.pid)
    target.ask("run nested 1")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert f"no containerd or CRI-O state under {node.root}/run" in result.stderr
    assert f"pod names come from {node.root}/var/log/pods" in result.stderr
    meta = Document(str(out)).meta
    assert (meta["pod"], meta["container"]) == (pod, "model")

    # Unreadable: root reads through mode bits, so containerd's config.json
    # is cut off mid-write and CRI-O's is a directory (read() fails).
    full = json.dumps({"annotations": {"io.kubernetes.cri.sandbox-name": "wrong"}})
    node._write(f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json", full[:25])
    os.makedirs(
        os.path.join(
            node.root, f"run/containers/storage/overlay-containers/{cid}/userdata/config.json"
        )
    )
    out = tmp_out / "unreadable.json"
    run = agent("--pod", f"{NS}/{pod}", "--host-root", node.root, "-o", str(out), env=agent_env())
    run.wait_attached(target.pid)
    target.ask("run nested 1")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    assert "cannot read the container runtime's state" in result.stderr
    assert "Is a directory" in result.stderr
    meta = Document(str(out)).meta
    assert (meta["pod"], meta["container"]) == (pod, "model")


def test_a_restarted_container_is_followed(agent, python_target, node, tmp_out):
    pod, uid = new_pod("scorer")
    first = secrets.token_hex(32)
    node.containerd_bundle(NS, pod, uid, "model", first)
    node.logs(NS, pod, uid, "model", first)
    old = python_target()
    old_cgroup = node.cgroup("systemd", uid, first)
    node.place(old.pid, old_cgroup)

    out = tmp_out / "restart.json"
    run = agent("--pod", f"{NS}/{pod}", "--host-root", node.root, "-o", str(out), env=agent_env())
    run.wait_attached(old.pid)
    old.ask("run nested 1")
    old.close()  # the container's process exits ...
    run.wait_for(f"pid {old.pid} exited")
    node.remove(old_cgroup)
    # ... and the kubelet starts the container again: a new id and cgroup in the same pod.
    second = secrets.token_hex(32)
    node.containerd_bundle(NS, pod, uid, "model", second)
    node.logs(NS, pod, uid, "model", second, restart=1)
    new = python_target()
    node.place(new.pid, node.cgroup("systemd", uid, second))
    run.wait_attached(new.pid)
    new.ask("run nested 2")
    result = run.stop()
    assert result.returncode == 0, result.stderr
    doc = Document(str(out))
    assert len(doc.roots_of(old.pid)) == 1 and len(doc.roots_of(new.pid)) == 2
    assert (doc.meta["pod"], doc.meta["container"], doc.meta["pod_uid"]) == (pod, "model", uid)
    assert "container_id" not in doc.meta  # two container ids: the document keeps what they share
