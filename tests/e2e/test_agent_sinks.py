"""The continuous agent's PostgreSQL and MLflow sinks (--sink
postgresql://..., --sink http://...), each against a real server on
127.0.0.1: a PostgreSQL cluster (tests/python/_postgres.py) and `mlflow
server` serving artifacts (tests/python/_mlflow_fixtures.py). The document
delivered is a real agent capture of a Python target; tests/cpp's
sink_deliver drives one sink from stdin, as the spool would, so a
connection lives across deliveries. Checked with the readers users have:
Python's store and `mlprof top` (the same rows as `mlprof add` of the same
document), MLflow's client and mlflow_profiler.load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import TARGET_PY, AgentRun, LineProcess, require

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))

from _mlflow_fixtures import _stop, mlflow_warning_filters, start_server  # noqa: E402
from _postgres import PostgresServer  # noqa: E402

pytestmark = mlflow_warning_filters()

START_NS, END_NS = 1_764_300_000_000_000_000, 1_764_300_060_000_000_000
LABELS = {
    "namespace": "fraud",
    "pod": "scorer-7d9f",
    "container": "model",
    "node": "node-a",
    "pid": "812",
}


@pytest.fixture(scope="module")
def sink_deliver(agent_path) -> str:
    """tests/cpp's sink_deliver, beside the agent's build (or MLPROF_SINK_DELIVER)."""
    build = os.path.dirname(os.path.dirname(os.path.dirname(agent_path)))
    path = os.environ.get(
        "MLPROF_SINK_DELIVER", os.path.join(build, "tests", "cpp", "sink_deliver")
    )
    require(
        os.access(path, os.X_OK),
        f"no sink_deliver at {path} (build tests/cpp with -DMLPROF_BUILD_AGENT=ON)",
    )
    return path


@pytest.fixture(scope="module")
def document(agent_path, python_exe, tmp_path_factory) -> str:
    """A real agent capture: three sessions of a Python target that sleeps
    20 ms in each (so it has kernel figures), as the spool holds it."""
    out = tmp_path_factory.mktemp("capture") / "item.json.gz"
    target = LineProcess([python_exe, TARGET_PY], env=dict(os.environ))
    run = None
    try:
        run = AgentRun([agent_path, "--pid", str(target.pid), "-o", str(out)])
        run.wait_attached(target.pid)
        target.ask("run sleep 3")
        result = run.stop()
    finally:
        if run is not None and run.proc.poll() is None:
            run.proc.kill()
        if run is not None and not run.proc.stdout.closed:
            run.proc.wait()
            run.close()
        target.close()
    assert result.returncode == 0, result.stderr
    return str(out)


class Deliverer:
    """One sink in a sink_deliver process: deliver() sends one item."""

    def __init__(self, tool: str, url: str):
        self.proc = subprocess.Popen(
            [tool, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.opened = self.proc.stdout.readline().rstrip("\n").split("\t", 1)

    def deliver(self, path: str, key: str, labels=LABELS, sessions: int = 3):
        words = ["deliver", path, key, str(START_NS), str(END_NS), str(sessions)]
        self.proc.stdin.write(" ".join(words + [f"{k}={v}" for k, v in labels.items()]) + "\n")
        self.proc.stdin.flush()
        status, _, detail = self.proc.stdout.readline().rstrip("\n").partition("\t")
        return status, detail

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


def _mlprof(python_exe, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python_exe, "-m", "mlflow_profiler._cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- PostgreSQL ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres():
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


def _database(server, name) -> str:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + "/" + name


def test_postgres_an_item_is_one_ebpf_source_the_rows_of_mlprof_add(
    postgres, sink_deliver, document, python_exe
):
    from mlflow_profiler import load
    from mlflow_profiler.store import open_store

    url, added = _database(postgres, "sink"), _database(postgres, "added")
    sink = Deliverer(sink_deliver, url)
    try:
        assert sink.opened == ["open", url], sink.opened
        assert sink.deliver(document, "node-a/fraud/scorer-7d9f/model/1") == (
            "delivered",
            "source 1",
        )
        # Re-sent (a crash between delivery and acknowledgement): not added twice.
        assert sink.deliver(document, "node-a/fraud/scorer-7d9f/model/1") == (
            "delivered",
            "source 1 (already there)",
        )
    finally:
        sink.close()
    label_args = [a for k, v in LABELS.items() for a in ("--label", f"{k}={v}")]
    run = _mlprof(python_exe, "add", added, document, *label_args)
    assert run.returncode == 0, run.stderr

    with open_store(url) as store, open_store(added) as reference:
        (source,) = store.sources()
        (want,) = reference.sources()
        assert source["source_type"] == want["source_type"] == "ebpf", (source, want)
        assert source["sessions"] == want["sessions"] == 3 and source["spans"] == want["spans"] > 0
        labels = store.labels(source["source_id"])
        assert labels.pop("label.agent_item") == "node-a/fraud/scorer-7d9f/model/1"
        assert labels == reference.labels(want["source_id"])
        assert store.source_ids(where={"pod": "scorer-7d9f"}) == [source["source_id"]]
        got, expected = store.load(source["source_id"]), reference.load(want["source_id"])
    assert got.to_tree() == expected.to_tree() == load(document).to_tree()
    got_doc, want_doc = json.loads(got.to_json()), json.loads(expected.to_json())
    assert (
        got_doc["span_values"] == want_doc["span_values"]
        and got_doc["kernel"] == want_doc["kernel"]
    )
    assert any(row[1] == "off_cpu" for row in want_doc["span_values"])
    # What a user reads: the same top, to the figure.
    tops = [_mlprof(python_exe, "top", u, "--format", "json") for u in (url, added)]
    assert all(t.returncode == 0 for t in tops), [t.stderr for t in tops]
    assert json.loads(tops[0].stdout) == json.loads(tops[1].stdout)
    assert json.loads(tops[0].stdout)["paths"], tops[0].stdout


def test_postgres_a_server_down_is_a_retry_and_the_item_lands_once_it_is_back(
    postgres, sink_deliver, document
):
    from mlflow_profiler.store import open_store

    url = _database(postgres, "down")
    sink = Deliverer(sink_deliver, url)
    try:
        assert sink.deliver(document, "k/1") == ("delivered", "source 1")
        postgres.stop()  # the connection the sink holds is cut
        try:
            for _ in range(2):  # the add fails, and connecting again is refused
                status, detail = sink.deliver(document, "k/2")
                assert status == "retry" and "refused" in detail, detail
        finally:
            postgres.start()
        assert sink.deliver(document, "k/2") == ("delivered", "source 2")
        # Restarted while the sink was idle: its connection is dead, and a
        # new one is made at once (no retry).
        postgres.stop()
        postgres.start()
        assert sink.deliver(document, "k/3") == ("delivered", "source 3")
    finally:
        sink.close()
    with open_store(url) as store:
        ids = {store.labels(s["source_id"])["label.agent_item"] for s in store.sources()}
    assert ids == {"k/1", "k/2", "k/3"}


def test_postgres_a_store_of_another_version_is_an_error_at_open(postgres, sink_deliver):
    import psycopg

    from mlflow_profiler.store import open_store

    url = _database(postgres, "newer")
    open_store(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '99.0' WHERE key = 'version'")
    run = subprocess.run([sink_deliver, url], capture_output=True, text=True, input="", timeout=60)
    assert run.returncode == 1, run.stdout
    assert (
        run.stdout.startswith("error\t") and "99.0" in run.stdout and "newer" in run.stdout
    ), run.stdout


# -- MLflow -------------------------------------------------------------------------


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _runs(uri, experiment, key=None):
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    flt = f"tags.`mlprof.key` = '{key}'" if key else ""
    return client.search_runs([exp.experiment_id], filter_string=flt)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server
    finally:
        _stop(server.process)


def test_mlflow_an_item_is_one_finished_run_with_tags_metrics_and_the_profile(
    sink_deliver, document, mlflow_server, tmp_path
):
    import mlflow

    from mlflow_profiler import load

    server = mlflow_server
    url = server.uri + "/?experiment=fleet%20profiles"
    sink = Deliverer(sink_deliver, url)
    try:
        assert sink.opened == ["open", f"{server.uri} (experiment fleet profiles)"], sink.opened
        status, detail = sink.deliver(document, "node-a/fraud/scorer-7d9f/model/1")
        assert status == "delivered" and detail.startswith("run "), detail
        run_id = detail.split()[1]
        # Delivered again: the run with that key is found, none is made.
        assert sink.deliver(document, "node-a/fraud/scorer-7d9f/model/1") == (
            "delivered",
            f"run {run_id} (already there)",
        )
    finally:
        sink.close()

    (run,) = _runs(server.uri, "fleet profiles")
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert run.info.run_name == "fraud/scorer-7d9f/model 2025-11-28 03:20:00Z"
    assert (run.info.start_time, run.info.end_time) == (START_NS // 10**6, END_NS // 10**6)
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/")
    tags = run.data.tags
    assert tags["mlprof.key"] == "node-a/fraud/scorer-7d9f/model/1"
    assert {k: tags[k] for k in LABELS} == LABELS

    path = mlflow.artifacts.download_artifacts(
        run_id=run_id,
        artifact_path="profile/profile.json",
        dst_path=str(tmp_path / "dl"),
        tracking_uri=server.uri,
    )
    got, want = load(path), load(document)
    assert got.to_tree() == want.to_tree()
    assert json.loads(got.to_json()) == json.loads(want.to_json())

    # The metrics: the document's own figures, computed here independently.
    m = run.data.metrics
    roots = sorted(s.duration_ns for s in want.spans if s.parent_index is None)
    assert roots and None not in roots
    assert m["profile/sessions"] == 3 and m["profile/spans"] == len(want.spans)
    assert m["profile/roots/count"] == len(roots)
    assert m["profile/roots/max_ms"] == pytest.approx(roots[-1] / 1e6)
    assert m["profile/roots/mean_ms"] == pytest.approx(sum(roots) / len(roots) / 1e6)
    assert m["profile/roots/p50_ms"] == pytest.approx(roots[int(0.5 * (len(roots) - 1))] / 1e6)
    # The kernel's totals over the roots: each of the 3 predicts slept 20 ms.
    assert m["profile/off_cpu_ms"] >= 3 * 20 * 0.9, m
    assert m["profile/on_cpu_ms"] > 0 and m["profile/runq_ms"] >= 0, m


def test_mlflow_a_server_down_is_a_retry_and_the_run_is_made_once_it_is_back(
    sink_deliver, document, mlflow_server
):
    # The module's server, stopped and started again on its port and store
    # (the fixture then stops the new process).
    port = int(mlflow_server.uri.rsplit(":", 1)[1])
    sink = Deliverer(sink_deliver, mlflow_server.uri + "/?experiment=down")
    try:
        assert sink.deliver(document, "k/1")[0] == "delivered"
        _stop(mlflow_server.process)
        status, detail = sink.deliver(document, "k/2")
        assert status == "retry" and "did not answer" in detail, detail
        mlflow_server.process = start_server(mlflow_server.artifacts_dir.parent, port=port).process
        status, detail = sink.deliver(document, "k/2")
        assert status == "delivered", detail
        assert sink.deliver(document, "k/2")[1].endswith("(already there)")
    finally:
        sink.close()
    runs = _runs(mlflow_server.uri, "down")
    assert sorted(r.data.tags["mlprof.key"] for r in runs) == ["k/1", "k/2"]
    assert all(r.info.status == "FINISHED" for r in runs)


# -- the agent itself ----------------------------------------------------------------


def test_the_continuous_agent_delivers_to_postgres_and_mlflow(
    agent, python_target, postgres, mlflow_server, tmp_path
):
    """mlprof-ebpf --continuous --sink URL, the real agent: its SIGTERM flush
    delivers the period's sessions, which the store and the server then hold."""
    from mlflow.tracking import MlflowClient

    from mlflow_profiler.store import open_store

    urls = {
        "postgres": _database(postgres, "agent"),
        "mlflow": mlflow_server.uri + "/?experiment=agent",
    }
    pids = {}
    for name, url in urls.items():
        target = python_target()
        pids[name] = target.pid
        run = agent(
            "--pid", str(target.pid), "--continuous", "--sink", url, "--spool", str(tmp_path / name)
        )
        run.wait_attached(target.pid)
        target.ask("run sleep 3")
        result = run.stop(signal.SIGTERM)
        assert result.returncode == 0, result.stderr
        assert "spooled 0, dropped 0" in result.stdout.splitlines()[-1], result.stdout

    with open_store(urls["postgres"]) as store:
        sources = store.sources()
        assert sources and all(s["source_type"] == "ebpf" for s in sources)
        assert sum(s["sessions"] for s in sources) == 3, sources
        for s in sources:
            labels = store.labels(s["source_id"])
            assert (
                labels["label.pid"] == str(pids["postgres"]) and labels["label.agent_item"]
            ), labels

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    runs = client.search_runs([client.get_experiment_by_name("agent").experiment_id])
    assert runs and all(r.info.status == "FINISHED" for r in runs)
    assert sum(r.data.metrics["profile/sessions"] for r in runs) == 3, [
        r.data.metrics for r in runs
    ]
    for r in runs:
        assert r.data.tags["pid"] == str(pids["mlflow"]) and r.data.tags["mlprof.key"], r.data.tags
        assert [f.path for f in client.list_artifacts(r.info.run_id, "profile")] == [
            "profile/profile.json"
        ]
