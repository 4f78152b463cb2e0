"""Other tools' profiles into the store (issue 18, docs/store.md "Imports"),
from real runs of the tools: py-spy (speedscope and raw) against a real
process, viztracer's Chrome trace, a Go program's CPU profile and our own
pprof export; and every format cut off or corrupt refused whole."""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from _helpers import require_tool
from test_store import _encode, _walk

import mlflow_profiler
from mlflow_profiler import profiling
from mlflow_profiler._files import ProfileLoadError
from mlflow_profiler.store import open_store

BIN = os.path.dirname(sys.executable)
GO = shutil.which("go") or (
    "/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None
)

TARGET = textwrap.dedent("""
    def leaf(n):
        t = 0
        for i in range(n):
            t += i
        return t

    def work():
        for _ in range(200):
            leaf(20000)

    if __name__ == "__main__":
        import sys, time
        work()
        # py-spy starved on a busy machine took no sample of the short run
        # (and wrote an empty file): given seconds, run on for that CPU time.
        while time.process_time() < float(sys.argv[1] if len(sys.argv) > 1 else 0):
            work()
""")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("target") / "spy_target.py"
    path.write_text(TARGET)
    return path


def _tool(name):
    return require_tool(
        shutil.which(name, path=BIN) or shutil.which(name), name, f"pip install {name}"
    )


def test_py_spy_speedscope_and_raw_of_a_real_process(target, tmp_path):
    py_spy = _tool("py-spy")
    out = {}
    for fmt, name in (("speedscope", "spy.speedscope.json"), ("raw", "spy.txt")):
        path = tmp_path / name
        run = subprocess.run(
            [
                py_spy,
                "record",
                "-o",
                str(path),
                "-f",
                fmt,
                "-r",
                "400",
                "--",
                sys.executable,
                str(target),
                "1.5",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        out[fmt] = path
    doc = json.loads(out["speedscope"].read_text())
    expected = sum(len(p["samples"]) for p in doc["profiles"])
    raw_total = sum(
        int(line.rsplit(" ", 1)[1]) for line in out["raw"].read_text().splitlines() if line.strip()
    )
    with open_store(tmp_path / "spy.db") as store:
        first = store.add(out["speedscope"])
        second = store.add(out["raw"])
        rows = {s["source_id"]: s for s in store.sources()}
        assert (rows[first]["source_type"], rows[first]["kind"]) == ("speedscope", "stacks")
        assert (rows[second]["source_type"], rows[second]["kind"]) == ("folded", "stacks")
        # The tool, where the file names it (speedscope's "exporter"; raw names nothing); neither has a time.
        version = subprocess.run(
            [py_spy, "--version"], capture_output=True, text=True
        ).stdout.split()[-1]
        assert (rows[first]["tool"], rows[second]["tool"]) == (f"py-spy@{version}", None)
        assert rows[first]["captured_unix_ns"] is None and rows[second]["captured_unix_ns"] is None
        sampled = store.load_stacks(first)
        assert sampled.sample_count == expected
        assert sampled.value_types == [("samples", "count"), ("wall", "nanoseconds")]
        stacks = sampled.stacks()
        # py-spy saw the target's frames, root first.
        assert any(frames[-2:] == ["work", "leaf"] for _, frames, _ in stacks), stacks[:3]
        folded = store.load_stacks(second)
        # A line is one row whose value is its count (not one row per count).
        lines = [line for line in out["raw"].read_text().splitlines() if line.strip()]
        assert folded.sample_count == raw_total
        assert len(folded.stacks()) == len(lines)
        assert sorted(v for _, _, (v,) in folded.stacks()) == sorted(
            int(line.rsplit(" ", 1)[1]) for line in lines
        )
        with pytest.raises(Exception, match="sampled stacks, not spans"):
            store.load(first)


def test_viztracer_chrome_trace(target, tmp_path):
    viztracer = _tool("viztracer")
    trace = tmp_path / "viz.json"
    run = subprocess.run(
        [viztracer, "-o", str(trace), str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    with open_store(tmp_path / "viz.db") as store:
        source = store.add(trace)
        assert store.sources()[0]["source_type"] == "chrome-trace"
        version = subprocess.run(
            [viztracer, "--version"], capture_output=True, text=True
        ).stdout.strip()
        assert store.sources()[0]["tool"] == f"viztracer@{version}"  # viztracer_metadata.version
        tree = store.load(source).to_tree()
    works = [n for n in _walk(tree) if n["label"] == "work"]
    assert len(works) == 1
    leaves = [c for c in works[0]["children"] if c["label"] == "leaf"]
    assert len(leaves) == 200 and all(c["file"].endswith("spy_target.py") for c in leaves)
    assert all(
        works[0]["start_ns"] <= c["start_ns"] <= c["end_ns"] <= works[0]["end_ns"] for c in leaves
    )


# A Go program that spends its CPU in main.spin, profiled by runtime/pprof
# (the export tests reuse it).
GO_PROGRAM = textwrap.dedent("""
    package main

    import (
        "os"
        "runtime/pprof"
    )

    func spin(n int) int {
        s := 0
        for i := 0; i < n; i++ {
            s += i * i % 7
        }
        return s
    }

    func main() {
        f, _ := os.Create(os.Args[1])
        pprof.StartCPUProfile(f)
        t := 0
        for i := 0; i < 200; i++ {
            t += spin(1_000_000)
        }
        pprof.StopCPUProfile()
        f.Close()
        println(t)
    }
""")


def test_a_go_cpu_profile_keeps_its_types_and_its_counts(tmp_path):
    go = require_tool(GO, "the Go toolchain", "Go at /usr/local/go or on PATH")
    (tmp_path / "main.go").write_text(GO_PROGRAM)
    # A GOCACHE set by the caller (CI sets one for the whole run) is kept: the
    # runtime and pprof are built once per machine, not once per run (~60 s).
    env = {
        **os.environ,
        "GOCACHE": os.environ.get("GOCACHE") or str(tmp_path / "gocache"),
        "GOPATH": str(tmp_path / "gopath"),
        "GOFLAGS": "-mod=mod",
    }
    profile = tmp_path / "cpu.pprof"
    run = subprocess.run(
        [go, "run", "main.go", str(profile)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    raw = subprocess.run(
        [go, "tool", "pprof", "-raw", str(profile)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    ).stdout
    counts = [
        (int(m.group(1)), int(m.group(2))) for m in re.finditer(r"^\s+(\d+)\s+(\d+):", raw, re.M)
    ]
    assert counts, raw
    # The capture time, as go tool pprof reads it ("Time: 2026-11-29 15:54:11.496409216 +0000 UTC").
    when = re.search(r"^Time: (\d+-\d+-\d+ \d+:\d+:\d+)\.(\d+) \+0000 UTC$", raw, re.M)
    assert when, raw[:300]
    unix_ns = calendar.timegm(time.strptime(when.group(1), "%Y-%m-%d %H:%M:%S")) * 10**9 + int(
        when.group(2).ljust(9, "0")
    )
    with open_store(tmp_path / "go.db") as store:
        source = store.add(profile)
        row = store.sources()[0]
        assert row["source_type"] == "pprof"
        assert (row["tool"], row["captured_unix_ns"]) == (
            "go",
            unix_ns,
        )  # time_nanos; Go's runtime named it
        samples = store.load_stacks(source)
    assert samples.value_types == [("samples", "count"), ("cpu", "nanoseconds")]
    stacks = samples.stacks()
    # Each pprof sample one row, its count and cpu time as go tool pprof reads them.
    assert sorted(tuple(v) for _, _, v in stacks) == sorted(counts)
    assert samples.sample_count == sum(c for c, _ in counts)
    assert any("main.spin" in frames for _, frames, _ in stacks)


def test_our_pprof_export_read_back(tmp_path):
    with profiling(depth=-1) as session:
        _encode([3, 4])
    path = session.save(tmp_path / "p.pb.gz")
    with open_store(tmp_path / "pb.db") as store:
        samples = store.load_stacks(store.add(path))
        row = store.sources()[0]
    # The tool and time it names (its comments, time_nanos): the capture's.
    assert row["tool"] == f"mlflow-profiler@{mlflow_profiler.__version__}"
    assert row["captured_unix_ns"] == int(session._built().meta["start_unix_ns"])
    nodes = list(_walk(session.to_tree()))
    assert samples.sample_count == len(nodes)  # one sample per span, as the export writes
    types = [t for t, _ in samples.value_types]
    assert types[:2] == ["calls", "wall"]
    self_total = sum(n["active_ns"] - sum(c["active_ns"] for c in n["children"]) for n in nodes)
    assert sum(v[1] for _, _, v in samples.stacks()) == self_total


def test_evented_speedscope_and_begin_end_trace_become_trees(tmp_path):
    speedscope = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": "predict", "file": "m.py", "line": 3}, {"name": "encode"}]},
        "profiles": [
            {
                "type": "evented",
                "name": "main",
                "unit": "microseconds",
                "startValue": 0,
                "endValue": 10,
                "events": [
                    {"type": "O", "frame": 0, "at": 0},
                    {"type": "O", "frame": 1, "at": 2},
                    {"type": "C", "frame": 1, "at": 5},
                    {"type": "C", "frame": 0, "at": 10},
                ],
            }
        ],
    }
    trace = [
        {"ph": "B", "pid": 1, "tid": 7, "ts": 100, "name": "outer (a.py:1)"},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 101, "dur": 3, "name": "inner (a.py:9)"},
        {"ph": "E", "pid": 1, "tid": 7, "ts": 110},
        {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "worker"}},
    ]
    (tmp_path / "e.speedscope.json").write_text(json.dumps(speedscope))
    (tmp_path / "t.json").write_text(json.dumps(trace))
    with open_store(tmp_path / "e.db") as store:
        s1 = store.load(store.add(tmp_path / "e.speedscope.json")).to_tree()
        s2 = store.load(store.add(tmp_path / "t.json")).to_tree()
    assert [(n["label"], n["depth"], n["end_ns"] - n["start_ns"]) for n in _walk(s1)] == [
        ("predict", 0, 10_000),
        ("encode", 1, 3_000),
    ]
    assert [
        (n["label"], n["file"], n["line"], n["thread_name"], n["end_ns"] - n["start_ns"])
        for n in _walk(s2)
    ] == [("outer", "a.py", 1, "worker", 10_000), ("inner", "a.py", 9, "worker", 3_000)]


@pytest.mark.parametrize(
    "name,content",
    [
        ("cut.trace.json", b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "na'),
        ("bad.trace.json", b'{"traceEvents": 7}'),
        (
            "cut.speedscope.json",
            b'{"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"fr',
        ),
        (
            "bad.speedscope.json",
            b'{"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {}, '
            b'"profiles": []}',
        ),
        ("cut.pprof", b"\x0a\x04\x08\x01\x10\x02\x12\x40\x08"),
        ("bad.folded", b"a;b;c 3\nd;e notanumber\n"),
        # Mutants (issue 44) that got past as Python exceptions: text that
        # is not UTF-8 (UnicodeDecodeError), times that go back or overflow
        # (sqlite3.IntegrityError: end_ns >= start_ns).
        ("latin1.folded", b"main;caf\xe9 3\n"),
        (
            "latin1.trace.json",
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "name": "caf\xe9"}]}',
        ),
        (
            "latin1.speedscope.json",
            b'{"$schema": "https://www.speedscope.app/file-format-schema.json", '
            b'"shared": {"frames": [{"name": "caf\xe9"}]}, "profiles": [{"type": "sampled", '
            b'"unit": "none", "samples": [[0]], "weights": [1]}]}',
        ),
        # A pprof whose string table's last entry is "f\xa2".
        (
            "latin1.pprof",
            b"\x0a\x04\x08\x01\x10\x02\x32\x00\x32\x07samples\x32\x05count\x32\x02f\xa2",
        ),
        (
            "backwards.speedscope.json",
            b'{"$schema": "https://www.speedscope.app/file-format-schema.json", '
            b'"shared": {"frames": [{"name": "f"}]}, "profiles": [{"type": "evented", '
            b'"name": "t", "unit": "milliseconds", "startValue": 0, "endValue": 10, "events": '
            b'[{"type": "O", "frame": 0, "at": 5}, {"type": "C", "frame": 0, "at": 2}]}]}',
        ),
        ("huge.trace.json", b'{"traceEvents": [{"ph": "X", "ts": 1e300, "dur": 2, "name": "f"}]}'),
        (
            "overflow.trace.json",
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1e16, "name": "f"}]}',
        ),
        ("past-2-62.folded", b"a 4611686018427387903\nb 2\n"),
        ("deep.folded", b"f;" * 100_000 + b"g 1\n"),
    ],
)
def test_a_cut_off_or_corrupt_import_names_the_file_and_adds_nothing(tmp_path, name, content):
    db = tmp_path / "x.db"
    with open_store(db) as store:
        store.add(session_file(tmp_path))
    path = tmp_path / name
    path.write_bytes(content)
    with open_store(db) as store:
        with pytest.raises(ProfileLoadError) as err:
            store.add(path)
        assert str(path) in str(err.value) and err.value.kind in ("truncated", "corrupt"), str(
            err.value
        )
        assert len(store.sources()) == 1


def session_file(tmp_path):
    with profiling(depth=1) as session:
        _encode([3])
    return session.save(tmp_path / "ok.json")


def test_counts_of_millions_add_a_row_a_line_and_sum_exactly(tmp_path):
    """Issue 44's mutant: 122 bytes of folded stacks counted about 5 million
    a line grew a store to 2.17 GB in 60 s. A line is one sample now."""
    from test_store import _mlprof

    lines = [
        ("predict;featurize;tokenize", 5_123_456),
        ("predict;featurize", 4_987_001),
        ("predict;score;matmul", 5_000_003),
        ("predict", 4_999_990),
    ]
    folded = tmp_path / "m.folded"
    folded.write_text("".join(f"{stack} {n}\n" for stack, n in lines))
    assert folded.stat().st_size < 130
    db = tmp_path / "m.db"
    added = _mlprof("add", db, folded)
    assert added.returncode == 0, added.stderr
    assert db.stat().st_size < 200_000  # an empty store is about 150 KB
    with open_store(db) as store:
        (source,) = store.sources()
        sampled = store.load_stacks(source["source_id"])
    assert sampled.sample_count == sum(n for _, n in lines)
    assert sorted((";".join(f), v) for _, f, (v,) in sampled.stacks()) == sorted(lines)
    top = _mlprof("top", db, "--format", "json")
    assert top.returncode == 0, top.stderr
    sampled = json.loads(top.stdout)["sampled"]
    assert sampled["samples"] == sum(n for _, n in lines)
    assert {"/".join(r["path"]): r["self_values"] for r in sampled["rows"]} == {
        "predict/featurize/tokenize": [5_123_456],
        "predict/featurize": [4_987_001],
        "predict/score/matmul": [5_000_003],
        "predict": [4_999_990],
        "predict/score": [0],
    }
    shown = _mlprof("show", db, "1")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("20,110,450 samples of 1 thread"), shown.stdout
    assert "  25.5%  predict > featurize > tokenize" in shown.stdout, shown.stdout


def test_a_gzip_bomb_is_refused_in_one_line(tmp_path):
    """deflate inflates up to 1032x: 80 MiB of one byte is a 80 KB file. A
    compressed input may inflate to 100 times its size, at least 64 MiB."""
    import gzip

    from test_store import _mlprof

    bomb = tmp_path / "bomb.folded.gz"
    bomb.write_bytes(gzip.compress(b" " * (80 << 20), compresslevel=9))
    assert bomb.stat().st_size < 100_000
    refused = _mlprof("add", tmp_path / "b.db", bomb)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert str(bomb) in line and "inflate to more than 67108864 bytes" in line and "gunzip" in line
    with open_store(tmp_path / "b.db") as store:
        assert store.sources() == []
