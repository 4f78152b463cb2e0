"""One pprof aggregated from a selection of the store (issue 18, docs/store.md
"Export pprof"): `mlprof convert STORE OUT.pb.gz [--where k=v] [--source ID]`
and Store.export_pprof, read back by `go tool pprof` (the Go toolchain's own
reader). Identical call paths of several sources are one sample with the
summed values; the totals are the sums over the spans read back from the
store; sampled stacks bring their own sample types."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from _helpers import require_tool
from test_export_pprof import GO, go_env, pprof, top  # noqa: F401 (go_env is a fixture)
from test_store_imports import GO_PROGRAM

from mlflow_profiler import _core, profiling
from mlflow_profiler.store import StoreError, open_store


@pytest.fixture(autouse=True)
def _go_installed():
    require_tool(GO, "the Go toolchain (go tool pprof)", "Go at /usr/local/go or on PATH")


def _leaf(n):
    t = 0
    for i in range(n):
        t += i * i
    return t


def _encode(n):
    return _leaf(n)


def _predict(n):
    out = [_encode(n)]
    for _ in range(3):  # a loop, not a comprehension: a frame of its own before 3.12
        out.append(_leaf(n // 2))
    return out


def _capture(n):
    with profiling(depth=-1) as session:
        _predict(n)
    return session


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    """Three span sources of one program (the same call paths): model fraud
    versions 1 and 2, and model other."""
    path = tmp_path_factory.mktemp("export") / "profiles.db"
    with open_store(path) as store:
        for model, version, n in (
            ("fraud", "1", 20_000),
            ("fraud", "2", 30_000),
            ("other", "1", 10_000),
        ):
            store.add(_capture(n), labels={"model": model, "version": version})
    return path


def mlprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlflow_profiler._cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def raw(
    text: str,
) -> Tuple[List[Tuple[str, str]], List[Tuple[List[int], Tuple[str, ...], Dict[str, str]]]]:
    """`pprof -raw`: the sample types, and per sample its values, its call
    path (function names, root first) and its labels."""
    lines = text.splitlines()
    at = lines.index("Samples:")
    types = [tuple(t.replace("[dflt]", "").split("/")) for t in lines[at + 1].split()]
    names: Dict[str, str] = {}
    for line in lines[lines.index("Locations") + 1 :]:
        m = re.match(r"\s+(\d+): 0x\w+ (?:M=\d+ )?(\S+)", line)
        if m:
            names[m.group(1)] = m.group(2)
    samples = []
    i = at + 2
    while i < len(lines) and lines[i].startswith(" "):
        values, _, locations = lines[i].partition(":")
        path = tuple(reversed([names[loc] for loc in locations.split()]))
        samples.append(([int(v) for v in values.split()], path, {}))
        i += 1
        while i < len(lines) and lines[i].startswith(" ") and ":[" in lines[i]:
            samples[-1][2].update(re.findall(r"(\w+):\[(.*?)\]", lines[i]))
            i += 1
    return types, samples


def from_store(store_path: Path, source_ids) -> Dict[Tuple[str, ...], List[int]]:
    """Per call path, from the spans read back from the store: [calls, self
    time] (active time less the children's; one thread here)."""
    out: Dict[Tuple[str, ...], List[int]] = defaultdict(lambda: [0, 0])

    def visit(node, prefix):
        path = prefix + (node["label"],)
        out[path][0] += 1
        out[path][1] += max(0, node["active_ns"] - sum(c["active_ns"] for c in node["children"]))
        for c in node["children"]:
            visit(c, path)

    with open_store(store_path) as store:
        for source_id in source_ids:
            for root in store.load(source_id).to_tree():
                visit(root, ())
    return dict(out)


def test_sources_with_the_same_paths_give_one_sample_per_path_with_summed_values(
    store_path, tmp_path, go_env
):
    out = tmp_path / "fraud.pb.gz"
    run = mlprof("convert", store_path, out, "--where", "model=fraud")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"{out}: 2 sources aggregated into ")
    types, samples = raw(pprof(go_env, out, "-raw"))
    assert types == [("calls", "count"), ("wall", "nanoseconds")]
    want = from_store(store_path, [1, 2])
    got = {path: values for values, path, _ in samples}
    assert len(got) == len(samples), "a call path in two samples"
    assert got == want
    # Each source has each path; _predict calls _leaf 3 times in each.
    assert got[("_predict", "_leaf")][0] == 2 * 3
    # pprof's own total: the self time of every span of both sources.
    total, _ = top(pprof(go_env, out, "-top", "-unit=ns", "-nodefraction=0"))
    assert total == sum(v[1] for v in want.values())


def test_every_source_by_default_and_the_python_api_says_what_it_wrote(
    store_path, tmp_path, go_env
):
    with open_store(store_path) as store:
        written = store.export_pprof(tmp_path / "all.pb.gz")
    want = from_store(store_path, [1, 2, 3])
    assert written["sources"] == 3
    assert written["samples"] == len(want)
    assert written["sample_types"] == [("calls", "count"), ("wall", "nanoseconds")]
    assert written["totals"] == {
        "calls/count": sum(v[0] for v in want.values()),
        "wall/nanoseconds": sum(v[1] for v in want.values()),
    }
    _, samples = raw(pprof(go_env, tmp_path / "all.pb.gz", "-raw"))
    assert {path: values for values, path, _ in samples} == want
    comments = pprof(go_env, tmp_path / "all.pb.gz", "-comments")
    assert "source 1: in-process" in comments and "source 3: in-process" in comments


def test_where_and_source_select_and_label_by_keeps_sources_apart(store_path, tmp_path, go_env):
    run = mlprof(
        "convert",
        store_path,
        tmp_path / "v.pb.gz",
        "--where",
        "model=fraud",
        "--label-by",
        "version",
    )
    assert run.returncode == 0, run.stderr
    _, samples = raw(pprof(go_env, tmp_path / "v.pb.gz", "-raw"))
    for version, source in (("1", 1), ("2", 2)):
        mine = {path: values for values, path, labels in samples if labels == {"version": version}}
        assert mine == from_store(store_path, [source])
    assert len(samples) == 2 * len(from_store(store_path, [1]))

    # --source ids (more than one: aggregated), and with --where only those that match.
    run = mlprof("convert", store_path, tmp_path / "s.pb.gz", "--source", "2", "--source", "3")
    assert run.returncode == 0, run.stderr
    _, samples = raw(pprof(go_env, tmp_path / "s.pb.gz", "-raw"))
    assert {path: values for values, path, _ in samples} == from_store(store_path, [2, 3])
    with open_store(store_path) as store:
        written = store.export_pprof(tmp_path / "w.pb.gz", [2, 3], where={"model": "other"})
    assert written["sources"] == 1
    assert written["totals"]["wall/nanoseconds"] == sum(
        v[1] for v in from_store(store_path, [3]).values()
    )


def test_an_empty_selection_or_an_unknown_source_is_a_clear_error(store_path, tmp_path):
    run = mlprof("convert", store_path, tmp_path / "none.pb.gz", "--where", "model=nope")
    assert run.returncode == 2
    assert "no source matches model=nope" in run.stderr and "mlprof show" in run.stderr
    assert not (tmp_path / "none.pb.gz").exists()
    run = mlprof("convert", store_path, tmp_path / "none.pb.gz", "--source", "1", "--source", "99")
    assert run.returncode == 2 and "no source 99 in the store" in run.stderr
    with open_store(tmp_path / "empty.db") as empty, pytest.raises(StoreError) as err:
        empty.export_pprof(tmp_path / "none.pb.gz")
    assert err.value.kind == "missing" and "the selection is empty" in str(err.value)
    # Several sources into a format that does not aggregate: a usage error that says so.
    run = mlprof("convert", store_path, tmp_path / "x.json", "--where", "model=fraud")
    assert run.returncode == 2 and "only a .pb.gz output aggregates several sources" in run.stderr


def test_one_source_converts_as_before(store_path, tmp_path):
    out = tmp_path / "one.pb.gz"
    run = mlprof("convert", store_path, out, "--source", "1")
    assert run.returncode == 0, run.stderr
    with open_store(store_path) as store:
        assert out.read_bytes() == _core.export_bytes(
            store.load(1)._built(), "pprof"
        )  # a sample per span


def test_a_span_source_and_a_go_cpu_profile_give_the_union_of_sample_types(
    store_path, tmp_path, go_env
):
    (tmp_path / "main.go").write_text(GO_PROGRAM)
    cpu = tmp_path / "cpu.pprof"
    run = subprocess.run(
        [GO, "run", "main.go", str(cpu)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=go_env,
    )
    assert run.returncode == 0, run.stderr
    go_types, go_samples = raw(pprof(go_env, cpu, "-raw"))
    assert go_types == [("samples", "count"), ("cpu", "nanoseconds")]
    mixed = tmp_path / "mixed.db"
    with open_store(mixed) as store, open_store(store_path) as spans:
        store.add(spans.load(1), labels={"model": "fraud"})
        store.add(cpu, labels={"model": "go"})
    out = tmp_path / "mixed.pb.gz"
    run = mlprof("convert", mixed, out, "--label-by", "model")
    assert run.returncode == 0, run.stderr
    assert (
        "sample types calls/count, wall/nanoseconds, samples/count, cpu/nanoseconds" in run.stdout
    )
    types, samples = raw(pprof(go_env, out, "-raw"))
    assert types == [
        ("calls", "count"),
        ("wall", "nanoseconds"),
        ("samples", "count"),
        ("cpu", "nanoseconds"),
    ]
    # Each source's samples carry 0 for the other's types, and their own values in full.
    spans_part = [v for v, _, labels in samples if labels == {"model": "fraud"}]
    go_part = [v for v, _, labels in samples if labels == {"model": "go"}]
    assert spans_part and go_part and len(spans_part) + len(go_part) == len(samples)
    assert all(v[2:] == [0, 0] for v in spans_part) and all(v[:2] == [0, 0] for v in go_part)
    assert sum(v[1] for v in spans_part) == sum(v[1] for v in from_store(store_path, [1]).values())
    assert sum(v[2] for v in go_part) == sum(v[0][0] for v in go_samples)
    assert sum(v[3] for v in go_part) == sum(v[0][1] for v in go_samples)
    # pprof's own totals per sample type.
    cpu_total, rows = top(
        pprof(go_env, out, "-top", "-unit=ns", "-sample_index=cpu", "-nodefraction=0")
    )
    assert cpu_total == sum(v[0][1] for v in go_samples)
    assert any(name.startswith("main.spin") for name in rows)
