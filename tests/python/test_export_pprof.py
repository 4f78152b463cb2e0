"""pprof export of real captures, read by `go tool pprof` (the Go toolchain's
own reader): the totals and the per-function flat/cum values it reports are
the profile's, and the thread/task/label labels are on the samples."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from _helpers import require_tool

from mlflow_profiler import _core, profile_span, profiling

GO = shutil.which("go") or (
    "/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None
)


@pytest.fixture(autouse=True)
def _go_installed():
    require_tool(GO, "the Go toolchain (go tool pprof)", "Go at /usr/local/go or on PATH")


@pytest.fixture(scope="module")
def go_env(tmp_path_factory) -> Dict[str, str]:
    """pprof's files in a temporary directory, shared by the tests of this
    file. `go tool pprof` is built into GOCACHE on first use (about 50 s):
    a GOCACHE set by the caller (CI sets one for the whole run) is kept, so
    it is built once per machine, not once per test run; otherwise Go's
    caches go in the temporary directory too."""
    tmp = tmp_path_factory.mktemp("go")
    return dict(
        os.environ,
        GOFLAGS="",
        GOCACHE=os.environ.get("GOCACHE") or str(tmp / "cache"),
        GOPATH=str(tmp / "path"),
        PPROF_TMPDIR=str(tmp / "pprof"),
        HOME=str(tmp),
    )


def pprof(go_env: Dict[str, str], path: Path, *args: str) -> str:
    """Runs `go tool pprof ARGS path` and returns what it prints."""
    out = subprocess.run(
        [GO, "tool", "pprof", *args, str(path)],
        env=go_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def save_pprof(session, tmp_path: Path) -> Path:
    path = tmp_path / "profile.pb.gz"
    path.write_bytes(_core.export_bytes(session._built(), "pprof"))
    return path


def top(text: str) -> Tuple[int, Dict[str, Tuple[int, int]]]:
    """What `pprof -top -unit=ns` shows: the value of the samples it kept
    ("Showing nodes accounting for N") and {function: (flat, cum)}."""
    total = None
    rows: Dict[str, Tuple[int, int]] = {}
    in_table = False
    for line in text.splitlines():
        if line.startswith("Showing nodes accounting for"):
            total = int(line.split()[4].rstrip("ns,"))
        elif line.split() == ["flat", "flat%", "sum%", "cum", "cum%"]:
            in_table = True
        elif in_table and line.strip():
            flat, _, _, cum, _, name = line.split(None, 5)
            rows[name] = (int(flat.rstrip("ns") or 0), int(cum.rstrip("ns") or 0))
    assert total is not None, text
    return total, rows


def expected(session) -> Tuple[int, Dict[str, Tuple[int, int]], Dict[str, int]]:
    """From the profile document: the total self time, {name: (flat, cum)} and
    {name: calls}, with the exporter's definition of self time (active time
    minus the active time of same-lane children, never negative)."""
    doc = json.loads(session.to_json())
    strings = doc["strings"]
    spans = [dict(zip(doc["span_fields"], row)) for row in doc["spans"]]
    names = [
        strings[s["label"]] if s["label"] else strings[doc["functions"][s["function"]][0]]
        for s in spans
    ]
    self_ns = [s["active_ns"] for s in spans]
    for s in spans:
        if s["parent"] >= 0 and spans[s["parent"]]["lane"] == s["lane"]:
            self_ns[s["parent"]] -= s["active_ns"]
    self_ns = [max(v, 0) for v in self_ns]
    flat: Dict[str, int] = defaultdict(int)
    cum: Dict[str, int] = defaultdict(int)
    calls: Dict[str, int] = defaultdict(int)
    for i, s in enumerate(spans):
        flat[names[i]] += self_ns[i]
        calls[names[i]] += 1
        on_stack = set()
        j = i
        while j >= 0:
            on_stack.add(names[j])
            j = spans[j]["parent"]
        for name in on_stack:
            cum[name] += self_ns[i]
    return sum(self_ns), {n: (flat[n], cum[n]) for n in cum}, dict(calls)


def raw_samples(text: str) -> List[Tuple[int, int, Dict[str, str]]]:
    """(calls, wall, labels) of each sample in `pprof -raw`."""
    samples: List[Tuple[int, int, Dict[str, str]]] = []
    lines = text.splitlines()
    i = lines.index("Samples:") + 2  # past the "calls/count wall/nanoseconds[dflt]" header
    while i < len(lines) and lines[i].startswith(" "):
        values = lines[i].split(":")[0].split()
        samples.append((int(values[0]), int(values[1]), {}))
        i += 1
        while i < len(lines) and lines[i].startswith(" ") and ":[" in lines[i]:
            samples[-1][2].update(re.findall(r"(\w+):\[(.*?)\]", lines[i]))
            i += 1
    return samples


def load_model():
    time.sleep(0.03)


def transform():
    time.sleep(0.01)


@profile_span("postprocess step")
def postprocess():
    time.sleep(0.005)


def predict():
    load_model()
    for _ in range(3):
        transform()
    postprocess()


def test_top_reports_the_profile_totals(engine, tmp_path, go_env):
    with profiling(depth=-1, engine=engine) as session:
        predict()
    path = save_pprof(session, tmp_path)
    total, rows = top(pprof(go_env, path, "-top", "-unit=ns", "-nodecount=1000"))
    want_total, want_rows, want_calls = expected(session)
    assert total == want_total
    assert rows == want_rows
    # The sleeps are where the time went, and a user would see them there.
    assert rows["load_model"][0] >= 30_000_000
    assert rows["transform"][0] >= 30_000_000
    assert rows["postprocess step"][0] >= 5_000_000
    assert rows["predict"][1] == total

    _, calls = top(pprof(go_env, path, "-top", "-sample_index=calls", "-nodecount=1000"))
    assert {name: flat for name, (flat, _) in calls.items()} == want_calls
    assert want_calls["transform"] == 3


def test_header_has_type_duration_and_provenance(engine, tmp_path, go_env):
    with profiling(depth=-1, engine=engine) as session:
        predict()
    out = pprof(go_env, save_pprof(session, tmp_path), "-top", "-unit=ns")
    assert "Type: wall" in out
    stats = session.statistics()
    duration_ms = stats["duration_ns"] / 1e6
    line = next(l for l in out.splitlines() if l.startswith("Duration:"))
    # pprof prints the duration rounded: "Duration: 63.64ms"
    assert abs(float(line.split()[1].rstrip("ms,")) - duration_ms) < 0.01
    assert f"engine={session._built().meta['engine']}" in out  # meta as comments
    assert "mlflow-profiler" in out


def work(ms):
    time.sleep(ms / 1000)


def run_workers():
    threads = [threading.Thread(target=work, args=(5,), name=f"worker-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


async def fetch(ms):
    await asyncio.sleep(ms / 1000)
    return ms


async def fetch_both():
    return await asyncio.gather(fetch(2), fetch(3))


def test_labels_name_threads_tasks_and_profile_span_labels(engine, tmp_path, go_env):
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        run_workers()
        asyncio.run(fetch_both())
        postprocess()
    path = save_pprof(session, tmp_path)
    samples = raw_samples(pprof(go_env, path, "-raw"))
    assert len(samples) == session._built().span_count
    assert all(calls == 1 for calls, _, _ in samples)
    threads = {labels["thread"] for _, _, labels in samples}
    assert {"worker-0", "worker-1", "MainThread"} <= threads
    tasks = [labels for _, _, labels in samples if "task" in labels]
    assert tasks, "the asyncio tasks' spans carry a task label"
    assert all(labels["thread"] == "MainThread" for labels in tasks)
    labelled = [labels for _, _, labels in samples if "label" in labels]
    assert [l["label"] for l in labelled] == ["postprocess step"]

    # pprof's own filter on the labels: a worker's samples are its own calls.
    for name in ("worker-0", "worker-1"):
        total, rows = top(pprof(go_env, path, "-top", "-unit=ns", f"-tagfocus=thread={name}"))
        assert rows["work"][0] == total >= 5_000_000, rows
    total, rows = top(pprof(go_env, path, "-top", "-unit=ns", "-tagfocus=task=.+"))
    assert rows["fetch"][0] > 0 and rows["fetch"][1] <= total


def fails():
    raise ValueError("no")


def predict_fails():
    try:
        fails()
    except ValueError:
        pass


def test_exception_flag_is_a_label(engine, tmp_path, go_env):
    with profiling(depth=-1, engine=engine) as session:
        predict_fails()
    out = pprof(
        go_env, save_pprof(session, tmp_path), "-top", "-unit=ns", "-tagfocus=flags=exception"
    )
    _, rows = top(out)
    # Only the span that raised has the flag; its caller is there as its stack.
    assert rows["fails"][0] > 0
    assert rows["predict_fails"] == (0, rows["fails"][0])
